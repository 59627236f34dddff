"""Launching: every config composes, sweeps run through submitit, SLURM launchers compose and
produce a valid sbatch script, and a misspelt launcher key fails at composition.

Commands run as real `python run.py` subprocesses (the `slow` lane); the rest uses Hydra's compose
API on `conf/` (``helpers.compose_cfg``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from helpers import CONFIG_DIR, REPO_ROOT, compose_cfg, newest_entry, run_py
from vldocir import store
from vldocir.config_checks import check_config
from vldocir.construction.synthetic import SyntheticSpec, generate

LAUNCHER_FILES = sorted((CONFIG_DIR / "hydra" / "launcher").glob("*.yaml"))
EXPERIMENT_FILES = sorted((CONFIG_DIR / "experiment").glob("*.yaml"))
SLURM_LAUNCHERS = sorted(p.stem for p in LAUNCHER_FILES if p.stem.startswith("slurm_"))
STORE_FILES = (store.RUN_FILE, store.PER_QUERY_FILE, store.METRICS_FILE, store.MANIFEST_FILE)


def exception_chain(error: BaseException) -> list[BaseException]:
    chain = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


# --- retriever=colqwen25 setting=ctx ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("resolve", [False, True], ids=["unresolved", "resolved"])
def test_ctx_command_composes_with_n_ctx(isolated_paths, resolve):
    args = ["--cfg", "job", *(["--resolve"] if resolve else []), "retriever=colqwen25", "setting=ctx", "n_ctx=256"]
    done = run_py(*args)
    assert done.returncode == 0, done.stderr
    cfg = OmegaConf.create(done.stdout)
    assert cfg.retriever.id == "colqwen25"
    assert cfg.n_ctx == 256
    # document-context scoring is an option of the embedding retriever's search
    assert cfg.retriever.model.context._target_ == "vldocir.retrieval.context.DocumentContext"
    if resolve:
        assert cfg.retriever.model.context.n_ctx == 256
        assert cfg.setting.id == "ctx-n256"
    else:
        assert OmegaConf.to_container(cfg.retriever)["model"]["context"]["n_ctx"] == "${n_ctx}"
        assert cfg.retriever.model.context.n_ctx == 256  # the interpolation resolves to the top-level knob


def test_ctx_setting_instantiates_with_n_ctx(isolated_paths):
    cfg = compose_cfg("retriever=colqwen25", "setting=ctx", "n_ctx=128")
    assert cfg.retriever.model.context.n_ctx == 128 and cfg.setting.id == "ctx-n128"
    assert instantiate(cfg.retriever.model).cache_params()["context"]["n_ctx"] == 128


# --- sweeps through submitit -------------------------------------------------------------------


def test_sweep_subdirs_are_named_by_overrides(isolated_paths):
    cfg = compose_cfg("dataset.name=x", keep_hydra=True)
    raw = OmegaConf.to_container(cfg.hydra.sweep)
    assert raw["subdir"] == "${hydra.job.override_dirname}"
    assert raw["dir"].startswith("${paths.log_dir}/multirun/")
    assert cfg.hydra.sweep.dir.startswith(str(isolated_paths / "logs" / "multirun"))


@pytest.mark.slow
def test_submitit_local_sweep_fills_the_store(isolated_paths):
    data_dir = isolated_paths / "data"
    names = ("sweep-a", "sweep-b")
    for seed, name in enumerate(names, start=1):
        generate(SyntheticSpec(name=name, seed=seed), data_dir / name)

    done = run_py(
        "-m",
        "hydra/launcher=submitit_local",
        "dataset=synthetic_text",
        f"dataset.name={','.join(names)}",
        "dataset.build=null",
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    for name in names:
        run_dir = newest_entry(isolated_paths / "results", name, "dom_bm25", "base")
        for file in STORE_FILES:
            assert (run_dir / file).is_file(), f"{run_dir / file} is missing"
        manifest = json.loads((run_dir / store.MANIFEST_FILE).read_text())
        assert f"dataset.name={name}" in manifest["overrides"]
        assert manifest["benchmark"]["name"] == name
    assert len(store.list_runs(isolated_paths / "results")) == 2

    # One Hydra output directory per sweep point, named by its overrides.
    sweep_dirs = list((isolated_paths / "logs" / "multirun").glob("*/*"))
    assert len(sweep_dirs) == 1, sweep_dirs
    job_dirs = {p.parent.name for p in sweep_dirs[0].glob("*/.hydra")}
    assert job_dirs == {f"dataset.build=null,dataset.name={name},dataset=synthetic_text" for name in names}
    assert (sweep_dirs[0] / "multirun.yaml").is_file()
    assert list((sweep_dirs[0] / ".submitit").glob("*/*_log.out")), "submitit job logs are missing"


# --- launcher configs --------------------------------------------------------------------------


@pytest.mark.parametrize("launcher", [p.stem for p in LAUNCHER_FILES] + ["submitit_local"])
def test_every_launcher_config_composes_and_instantiates(isolated_paths, launcher):
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    cfg = compose_cfg(f"hydra/launcher={launcher}", keep_hydra=True)
    launcher_cfg = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert issubclass(get_class(launcher_cfg["_target_"]), Launcher)
    # What Hydra does at the start of a multirun (Plugins.instantiate_launcher): resolves every value.
    assert isinstance(Plugins.instance()._instantiate(cfg.hydra.launcher), Launcher)


def test_launcher_files_do_not_shadow_plugin_configs():
    """A file named like a plugin's config (submitit_local, submitit_slurm) would extend itself."""
    assert not {p.stem for p in LAUNCHER_FILES} & {"submitit_local", "submitit_slurm", "basic"}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", SLURM_LAUNCHERS)
def test_slurm_launcher_composes_from_the_command_line(isolated_paths, launcher):
    env = {"SLURM_PARTITION": "gpu-test", "SLURM_ACCOUNT": "proj-42", "SLURM_QOS": "normal"}
    done = run_py("-m", f"hydra/launcher={launcher}", "--cfg", "hydra", env=env)
    assert done.returncode == 0, done.stderr
    printed = OmegaConf.create(done.stdout)
    assert printed.hydra.mode == "MULTIRUN"
    launcher_cfg = OmegaConf.to_container(printed.hydra.launcher)
    assert launcher_cfg["_target_"] == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher_cfg["partition"].startswith("${oc.env:SLURM_")  # (slurm_cpu: SLURM_CPU_PARTITION first)
    assert launcher_cfg["gpus_per_node"] == {"slurm_node": 4, "slurm_cpu": None}.get(launcher, 1)

    done = run_py(f"hydra/launcher={launcher}", "--cfg", "all", "--resolve", env=env)
    assert done.returncode == 0, done.stderr
    resolved = OmegaConf.create(done.stdout).hydra.launcher
    assert (resolved.partition, resolved.account, resolved.qos) == ("gpu-test", "proj-42", "normal")
    assert resolved.tasks_per_node == (resolved.gpus_per_node or 1)  # one task per GPU (slurm_cpu: no GPU)
    assert resolved.setup == [f"source {REPO_ROOT}/slurm/env.sh"]
    assert resolved.submitit_folder.startswith(str(isolated_paths / "logs" / "multirun"))


def test_slurm_cluster_values_default_to_unset(isolated_paths, monkeypatch, tmp_path):
    for var in ("SLURM_PARTITION", "SLURM_ACCOUNT", "SLURM_QOS"):
        monkeypatch.delenv(var, raising=False)
    config_dir = tmp_path / "conf"
    shutil.copytree(CONFIG_DIR, config_dir)
    (config_dir / "local" / "default.yaml").unlink(missing_ok=True)  # a developer's own cluster values
    cfg = compose_cfg("hydra/launcher=slurm_h100", config_dir=config_dir, keep_hydra=True)
    assert (cfg.hydra.launcher.partition, cfg.hydra.launcher.account, cfg.hydra.launcher.qos) == (None, None, None)


def test_local_config_example_sets_cluster_values_without_breaking_local_runs(isolated_paths, monkeypatch, tmp_path):
    """The example of conf/local/README.md, as conf/local/default.yaml: merged into every run."""
    readme = (CONFIG_DIR / "local" / "README.md").read_text()
    example = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    config_dir = tmp_path / "conf"
    shutil.copytree(CONFIG_DIR, config_dir)
    (config_dir / "local" / "default.yaml").write_text(example)
    monkeypatch.setenv("USER", "tester")
    for var in ("SLURM_PARTITION", "SLURM_ACCOUNT", "SLURM_QOS"):
        monkeypatch.delenv(var, raising=False)

    local = compose_cfg(config_dir=config_dir)
    assert local.paths.data_dir == "/scratch/tester/vldocir/data"
    slurm = compose_cfg("hydra/launcher=slurm_h100", config_dir=config_dir, keep_hydra=True)
    assert (slurm.hydra.launcher.partition, slurm.hydra.launcher.account) == ("gpu-h100", "my-project")
    monkeypatch.setenv("SLURM_PARTITION", "from-env")
    assert (
        compose_cfg("hydra/launcher=slurm_a100", config_dir=config_dir, keep_hydra=True).hydra.launcher.partition
        == "from-env"
    )


@pytest.mark.parametrize("launcher", SLURM_LAUNCHERS)
def test_slurm_launcher_makes_a_valid_sbatch_script(isolated_paths, monkeypatch, launcher, tmp_path):
    """The launcher's values go through submitit's own sbatch writer, as SlurmLauncher.launch passes them."""
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from submitit.slurm.slurm import SlurmExecutor, _convert_mem, _make_sbatch_string

    monkeypatch.setenv("SLURM_PARTITION", "gpu-test")
    cfg = compose_cfg(f"hydra/launcher={launcher}", keep_hydra=True)
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    params.pop("_target_")
    params.pop("submitit_folder")
    assert params.pop("max_num_timeout") >= 1, "timed-out jobs should be requeued (they resume from the cache)"
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    renames = SlurmExecutor._equivalence_dict()
    sbatch_params = {(renames[k] if k in base and k in renames else k): v for k, v in params.items()}
    sbatch_params["mem"] = _convert_mem(sbatch_params["mem"])
    script = _make_sbatch_string(command="python -u -m submitit.core._submit", folder=tmp_path, **sbatch_params)
    assert "#SBATCH --partition=gpu-test" in script
    gpus = f"#SBATCH --gpus-per-node={params['gpus_per_node']}"
    assert gpus in script if params["gpus_per_node"] else "--gpus-per-node" not in script
    assert f"#SBATCH --mem={params['mem_gb']}GB" in script
    assert f"source {REPO_ROOT}/slurm/env.sh" in script


@pytest.mark.slow
def test_misspelt_launcher_override_fails_naming_the_key(isolated_paths):
    done = run_py("-m", "hydra/launcher=slurm_h100", "hydra.launcher.partiton=gpu", "--cfg", "hydra")
    assert done.returncode != 0
    assert "partiton" in done.stderr and "SlurmQueueConf" in done.stderr


def test_misspelt_key_in_a_launcher_file_fails_at_composition(isolated_paths, tmp_path):
    config_dir = tmp_path / "conf"
    shutil.copytree(CONFIG_DIR, config_dir)
    (config_dir / "hydra" / "launcher" / "slurm_typo.yaml").write_text(
        "defaults:\n  - slurm_h100\npartiton: gpu-h100\n"
    )
    with pytest.raises(ConfigCompositionException) as caught:
        compose_cfg("hydra/launcher=slurm_typo", config_dir=config_dir, keep_hydra=True)
    message = "\n".join(str(e) for e in exception_chain(caught.value))
    assert "partiton" in message and "slurm_typo" in message


# --- slurm/env.sh ------------------------------------------------------------------------------


def _source_env_sh(tmp_path, env: dict) -> subprocess.CompletedProcess:
    script = (
        f"source {REPO_ROOT}/slurm/env.sh; status=$?; "
        'echo "status=$status VENV=${VIRTUAL_ENV:-} WANDB_MODE=${WANDB_MODE:-} HF_HOME=${HF_HOME:-} ROOT=$VLDOCIR_ROOT"'
    )
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "WANDB_MODE", "HF_HOME", "VLDOCIR_VENV", "VLDOCIR_HF_HOME")
    }
    return subprocess.run(
        ["bash", "-c", script], env={**base, **env}, capture_output=True, text=True, cwd=tmp_path, timeout=60
    )


@pytest.mark.slow
def test_env_sh_activates_the_venv_and_sets_defaults(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text(f'export VIRTUAL_ENV="{venv}"\nexport PATH="{venv}/bin:$PATH"\n')
    done = _source_env_sh(tmp_path, {"VLDOCIR_VENV": str(venv), "VLDOCIR_HF_HOME": str(tmp_path / "hf")})
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert f"VENV={venv}" in last and "WANDB_MODE=offline" in last and f"HF_HOME={tmp_path / 'hf'}" in last
    assert "status=0" in last and f"ROOT={REPO_ROOT}" in last
    assert os.uname().nodename in done.stdout  # prints the host (and the GPUs, where there are any)


@pytest.mark.slow
def test_env_sh_keeps_user_values_and_warns_without_a_venv(tmp_path):
    done = _source_env_sh(tmp_path, {"VLDOCIR_VENV": str(tmp_path / "missing"), "WANDB_MODE": "online"})
    assert done.returncode == 0
    last = done.stdout.strip().splitlines()[-1]
    assert "status=0" in last and "WANDB_MODE=online" in last and "HF_HOME= " in last
    assert str(tmp_path / "missing") in done.stderr


# --- experiments -------------------------------------------------------------------------------


def _sweep_points(cfg) -> list[list[str]]:
    """The overrides of every job of the sweep ``hydra.sweeper.params`` declares (their cross product)."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = cfg.hydra.sweeper.get("params")
    params = OmegaConf.to_container(params) if params is not None else {}
    overrides = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    axes = [[f"{o.get_key_element()}={value}" for value in o.sweep_string_iterator()] for o in overrides]
    return [list(job) for job in itertools.product(*axes)] if axes else []


@pytest.mark.parametrize("experiment", [None] + [p.stem for p in EXPERIMENT_FILES])
def test_every_experiment_composes(isolated_paths, experiment):
    """Every job of every experiment composes, passes run.py's checks and instantiates its setting,
    its retriever and, recursively, its input runs (what the job does before any work)."""
    from vldocir.pipeline.jobs import check_inputs

    overrides = [] if experiment is None else [f"experiment={experiment}"]
    cfg = compose_cfg(*overrides, keep_hydra=True)
    points = _sweep_points(cfg)
    if experiment is not None:
        assert points, f"experiment={experiment} sweeps nothing (hydra.sweeper.params is empty)"
    for point in points or [[]]:
        job_cfg = compose_cfg(*overrides, *point)
        job = OmegaConf.to_container(job_cfg, resolve=True)
        assert job["retriever"]["id"] and job["setting"]["id"] and job["dataset"]["name"]
        check_config(OmegaConf.create(job))  # depth, ks, optimized_metric, ids: what run.py checks first
        check_inputs(job_cfg, [*overrides, *point])


def test_multirun_with_cfg_composes_instead_of_launching():
    """Hydra refuses `-m` with `--cfg`; run.py turns `-m` into hydra.mode=MULTIRUN for that case only."""
    from vldocir.launch import multirun_cfg_argv

    assert multirun_cfg_argv(["run.py", "-m", "a=1,2", "--cfg", "hydra"]) == [
        "run.py",
        "hydra.mode=MULTIRUN",
        "a=1,2",
        "--cfg",
        "hydra",
    ]
    assert multirun_cfg_argv(["run.py", "-m", "a=1,2"]) == ["run.py", "-m", "a=1,2"]
    assert multirun_cfg_argv(["run.py", "--cfg", "job"]) == ["run.py", "--cfg", "job"]

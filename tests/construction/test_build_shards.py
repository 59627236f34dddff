"""The build's stages over shards (construction/shards.py, ``build.shards=N``).

Fast: the shard of a document is stable and the shards balanced; the composed ``hydra.launcher``
maps to a submitit executor that accepts its parameters; a shard of one PDF is built in process,
its done marker verifies (and stops verifying once an artifact it lists is gone); a failing task is
one line naming its shard. Slow (the acceptance test): a 4-shard build of ``../shared/real-html``
through ``submitit_local`` has the 1-shard build's fingerprint; one task killed mid-OCR fails the
build in one line, and the rerun redoes only that shard, reusing its OCRed pages.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers import CONFIG_DIR, PATH_ROOTS, REPO_ROOT, make_pdf
from vldocir.construction.ocr import OcrConfig
from vldocir.construction.pdf import PdfConfig
from vldocir.construction.render import RenderConfig
from vldocir.construction.shards import ShardedStages, ShardError, executor_settings, shard_of
from vldocir.errors import ConfigError

TESSERACT = shutil.which("tesseract")
needs_tesseract = pytest.mark.skipif(
    TESSERACT is None, reason="needs the tesseract binary (apt-get install tesseract-ocr)"
)


# -- the shard of a document ------------------------------------------------------------------------------


def test_the_shard_of_a_document_is_stable_and_the_shards_balanced():
    # from the id alone (BLAKE2b): these values hold on every machine and Python, whatever else is built
    assert [shard_of(d, 4) for d in ("wikipedia-a", "wikipedia-b", "arxiv-1708.00137", "sec-def14a-893739")] == [
        3,
        0,
        2,
        0,
    ]
    ids = [f"doc-{i:06d}" for i in range(20_000)]
    for n in (2, 7, 64):
        counts = Counter(shard_of(d, n) for d in ids)
        assert set(counts) == set(range(n))
        assert max(counts.values()) < 1.15 * len(ids) / n and min(counts.values()) > 0.85 * len(ids) / n, (n, counts)
    assert {shard_of(d, 1) for d in ids[:100]} == {0}


# -- the launcher -----------------------------------------------------------------------------------------


def _composed_launcher(tmp_path, *overrides: str) -> ShardedStages:
    """The job array the build app makes for ``overrides`` (its config composed as Hydra would)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from vldocir.apps.build import shard_stages

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="build", overrides=list(overrides), return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return shard_stages(cfg)


def test_the_composed_launcher_maps_to_an_executor_that_takes_its_parameters(tmp_path, monkeypatch):
    import submitit

    monkeypatch.setenv("SLURM_PARTITION", "cpu-long")
    bin_dir = tmp_path / "bin"  # submitit's SLURM executor is made only where `srun` is found; nothing runs it
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert _composed_launcher(tmp_path) is None  # build.shards=1: one process, as always
    inline = _composed_launcher(tmp_path, "build.shards=3")
    assert inline.cluster == "inline" and inline.folder == tmp_path / "shards"

    local = _composed_launcher(
        tmp_path, "build.shards=4", "hydra/launcher=submitit_local", "hydra.launcher.cpus_per_task=2"
    )
    assert local.cluster == "local" and local.parameters["cpus_per_task"] == 2
    slurm = _composed_launcher(tmp_path, "build.shards=64", "hydra/launcher=slurm_cpu")
    node = _composed_launcher(tmp_path, "build.shards=8", "hydra/launcher=slurm_node")
    assert slurm.cluster == node.cluster == "slurm"
    assert slurm.init == {"slurm_max_num_timeout": 3} and slurm.parameters["slurm_partition"] == "cpu-long"
    assert slurm.parameters["gpus_per_node"] is None and slurm.parameters["slurm_array_parallelism"] >= 64
    assert any(str(REPO_ROOT) in line for line in slurm.parameters["slurm_setup"])  # ${paths.root_dir} resolved
    assert node.parameters["tasks_per_node"] == 1 and node.parameters["nodes"] == 1  # a shard is one process
    for stages in (local, slurm, node):  # submitit itself took every name (it raises on an unknown one)
        assert isinstance(stages.executor, submitit.AutoExecutor)
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))  # no srun: one line, before any work
    with pytest.raises(ConfigError, match=r"^build\.shards: the slurm launcher cannot run the shards: ") as refused:
        _composed_launcher(tmp_path, "build.shards=64", "hydra/launcher=slurm_cpu")
    assert "\n" not in str(refused.value)

    with pytest.raises(ConfigError, match=r"build\.shards must be a positive integer"):
        _composed_launcher(tmp_path, "build.shards=0")
    with pytest.raises(ConfigError, match=r"runs its tasks through hydra/launcher=basic"):
        executor_settings({"_target_": "hydra_plugins.hydra_joblib_launcher.JoblibLauncher"})


# -- one shard, in process --------------------------------------------------------------------------------


@needs_tesseract
def test_a_shard_is_built_once_and_its_done_marker_verifies(tmp_path):
    pdf = make_pdf(tmp_path / "memo.pdf", [["Quarterly memo", "Revenue rose by four percent."]])
    cache, work_dir = tmp_path / "cache", tmp_path / "cache" / "build" / "input-test"
    stages = ShardedStages(2, {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, tmp_path)
    ocr = OcrConfig(scale=0.25)
    args = (cache, work_dir, [], [("memo", pdf)], RenderConfig(), PdfConfig(width=600), ocr)
    first = stages(*args)
    shard = shard_of("memo", 2)
    entry = first["shards"][shard]
    assert entry["state"] == "computed" and entry["pages"] == 1 and entry["ocred"] == 1
    assert first["shards"][1 - shard]["state"] == "empty"
    status = json.loads((work_dir / "shards" / f"shard-{shard}-of-2.json").read_text())
    assert status["stage"] == "done" and status["pid"] == os.getpid() and status["pages"]["ocred"] == 1
    assert stages(*args)["shards"][shard]["state"] == "done earlier"  # verified: not run again

    marker = work_dir / "shards" / f"shard-{shard}-of-2.done.json"
    record = json.loads(marker.read_text())
    entries = [cache / p for p in record["body"]["artifacts"] if p.startswith("ocr/")]
    assert len(entries) == 1
    entries[0].unlink()  # an artifact it lists is gone: the shard runs again and OCRs that page alone
    again = stages(*args)["shards"][shard]
    assert again["state"] == "computed" and again["ocred"] == 1
    marker.write_text(marker.read_text().replace('"pages": 1', '"pages": 2'))  # a changed marker does not verify
    assert stages(*args)["shards"][shard]["state"] == "computed"
    other = ShardedStages(2, stages.launcher, tmp_path)(*args[:-1], OcrConfig(scale=0.3))  # other OCR settings
    assert other["shards"][shard]["state"] == "computed" and other["shards"][shard]["ocred"] == 1
    no_ocr = ShardedStages(2, stages.launcher, tmp_path)(*args[:-1], None)["shards"][shard]  # spec.ocr=false
    assert no_ocr["state"] == "computed" and (no_ocr["pages"], no_ocr["to_ocr"], no_ocr["ocred"]) == (1, 0, 0)
    text_layer = ShardedStages(2, stages.launcher, tmp_path)(*args[:-2], PdfConfig(width=600, ocr=False), ocr)
    assert (text_layer["shards"][shard]["pages"], text_layer["shards"][shard]["to_ocr"]) == (1, 0)  # pdf.ocr=false


def test_a_query_stage_the_tasks_cannot_use_is_refused_before_any_work(tmp_path):
    """With build.shards>1 the tasks get the LLM clients pickled and the driver reads their answers from
    the LLM cache: a credential in a URL, or no cache, is one line before anything runs."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    stages = ShardedStages(2, {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, tmp_path)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for override, message in (
            ("queries.llm.base_url=http://user:pw@127.0.0.1:9/v1", "hold credentials"),
            ("queries.llm.cache_dir=null", "set queries.llm.cache_dir"),
        ):
            roots = [f"paths.root_dir={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}"]
            cfg = compose("build", overrides=[*roots, "queries.recorded=null", "queries.llm.model=m", override])
            with pytest.raises(ConfigError, match=message) as refused:
                stages.check_queries(instantiate(cfg.queries))
            assert "\n" not in str(refused.value) and "pw" not in str(refused.value)


@needs_tesseract
def test_a_failing_task_is_one_line_naming_its_shard(tmp_path):
    broken = tmp_path / "tesseract"
    broken.write_text(f'#!/bin/sh\n[ "$1" = --version ] && exec {TESSERACT} --version\necho "no model" >&2\nexit 3\n')
    broken.chmod(0o755)
    pdf = make_pdf(tmp_path / "memo.pdf", [["Quarterly memo"]])
    stages = ShardedStages(3, {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, tmp_path)
    with pytest.raises(ShardError) as raised:
        stages(
            tmp_path / "cache",
            tmp_path / "work",
            [],
            [("memo", pdf)],
            RenderConfig(),
            PdfConfig(width=400),
            OcrConfig(tesseract_cmd=str(broken)),
        )
    message = str(raised.value)
    assert "\n" not in message and f"shard-{shard_of('memo', 3)}-of-3 failed" in message
    assert "no model" in message and "rerun the same command to resume" in message


# -- the acceptance test ----------------------------------------------------------------------------------

REAL = Path(os.environ.get("VLDOCIR_REAL_HTML") or REPO_ROOT.parent / "shared" / "real-html")
REAL_SOURCES = {"wikipedia": "wikipedia", "arxiv": "arxiv", "sec": "sec", "pubmed": "pubmed"}  # folder prefix


def _real_index(tmp_path: Path) -> Path:
    """A document index of every document of the real pages' folder (source from its name)."""
    rows = []
    for folder in sorted(p for p in REAL.iterdir() if (p / "index.html").is_file()):
        source = REAL_SOURCES.get(folder.name.split("-")[0])
        if source is not None:
            rows.append({"doc_id": folder.name, "source": source, "path": str(folder)})
    index = tmp_path / "index.jsonl"
    index.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return index


def _start_build(args: list[str], root: Path) -> subprocess.Popen:
    roots = [f"paths.{key}_dir={root / folder}" for key, folder in PATH_ROOTS.items()]
    return subprocess.Popen(
        [sys.executable, "-m", "vldocir.apps.build", *roots, *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen, timeout: float = 900) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def _statuses(root: Path) -> dict[int, dict]:
    found = {}
    for path in (root / "cache" / "build").glob("*/shards/shard-*-of-4.json"):
        try:
            status = json.loads(path.read_text())
        except ValueError:  # (written atomically: never half a file)
            continue
        found[status["shard"]] = status
    return found


def _skip_reason() -> str | None:
    from helpers import no_build_tools

    if not REAL.is_dir():
        return f"the real pages are absent ({REAL}; set $VLDOCIR_REAL_HTML to a copy of ../shared/real-html)"
    return no_build_tools()


@pytest.mark.slow
def test_four_shards_build_the_one_shard_benchmark_and_a_killed_shard_resumes(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    index = _real_index(tmp_path)
    # (the default render settings: a page rendered after others in a reused browser context is the page
    # rendered alone, tests/construction/test_render_reuse.py, so the shards' batches change nothing)
    common = [f"input={index}", "spec.name=real", "queries=none", "ocr.scale=0.25"]
    slow = tmp_path / "slow-tesseract"  # OCR slowed down, so that a task can be killed in the middle of it
    slow.write_text(f'#!/bin/sh\n[ "$1" = --version ] || sleep 3\nexec {TESSERACT} "$@"\n')
    slow.chmod(0o755)
    sharded = [*common, "build.shards=4", "hydra/launcher=submitit_local", "hydra.launcher.cpus_per_task=1"]

    one = _start_build(common, tmp_path / "one")
    four = _start_build([*sharded, f"++ocr.tesseract_cmd={slow}"], tmp_path / "four")
    # the shard with the most pages to OCR is killed once some of its pages are OCRed, not all
    deadline, victim = time.monotonic() + 600, None
    while victim is None and four.poll() is None and time.monotonic() < deadline:
        for status in _statuses(tmp_path / "four").values():
            pages = status["pages"]
            if status["stage"] == "ocr" and pages["ocred"] > 0 and pages["ocred"] + 8 <= pages["total"]:
                victim = status
                os.kill(status["pid"], signal.SIGKILL)
                break
        time.sleep(0.2)
    code, out, err = _finish(four)
    assert victim is not None, f"no task was seen in the middle of its OCR: {err[-2000:]}"
    lines = [line for line in err.splitlines() if line.startswith("build error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert f"shard-{victim['shard']}-of-4" in lines[0] and "_log.err" in lines[0]
    assert "rerun the same command to resume" in lines[0]
    assert not (tmp_path / "four" / "data" / "real").exists()
    killed = victim["pages"]["ocred"]

    code, out, err = _finish(_start_build(sharded, tmp_path / "four"))  # the same command, resumed
    assert code == 0, err[-3000:]
    code_one, _, err_one = _finish(one)
    assert code_one == 0, err_one[-3000:]

    from vldocir.data.benchmark import load_benchmark

    built, reference = (
        load_benchmark(tmp_path / "four" / "data" / "real"),
        load_benchmark(tmp_path / "one" / "data" / "real"),
    )
    assert built.fingerprint == reference.fingerprint
    assert len(built.documents) == len(list(index.read_text().splitlines()))
    shards = built.info["built_by"]["shards"]
    assert shards["n"] == 4 and shards["launcher"] == "local" and "shards" not in reference.info["built_by"]
    states = {e["shard"]: e for e in shards["shards"]}
    again = states[victim["shard"]]
    assert again["state"] == "computed" and again["render_reused"] == victim["documents"]["total"]
    assert (
        again["rendered"] == 0
        and again["ocr_from_cache"] >= killed
        and again["ocred"] == again["to_ocr"] - again["ocr_from_cache"]
        and again["to_ocr"] == again["pages"]  # (no PDF: every page is OCRed)
    )
    assert again["ocred"] > 0
    others = [e for shard, e in states.items() if shard != victim["shard"] and e["documents"]]
    assert others and all(e["state"] == "done earlier" for e in others)
    assert sum(e["pages"] for e in shards["shards"]) == len(built.pages)
    status = _statuses(tmp_path / "four")[victim["shard"]]
    assert status["stage"] == "done" and status["pid"] != victim["pid"] and status["pages"]["from_cache"] >= killed
    assert f"shards: 4 (local): 1 built, {len(others)} done earlier" in out

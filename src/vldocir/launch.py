"""Command-line guards and Hydra hooks for the apps (``run.py`` and ``vldocir.apps.*``).

Secrets: Hydra writes the command line verbatim (``.hydra/overrides.yaml``, ``multirun.yaml``, the
job directory name, submitit's pickles) before any of our code runs, so a secret passed as an
override cannot be redacted afterwards. :func:`refuse_secret_overrides` stops the app before
Hydra starts (every app calls it through :func:`vldocir.apps.app.hydra_app`); secrets come from
the environment only.

Multiruns (``python run.py -m ...``):

``paths.root_dir`` falls back to ``${hydra:runtime.cwd}``, and the sweep directory and the submitit
folder are under ``paths.log_dir``. The ``hydra:`` resolver reads Hydra's global config, which Hydra
sets only when a job starts; in a multirun the sweeper and the launcher resolve the sweep directory
before that. :class:`SetHydraConfigForSweep` sets it from the composed multirun config first.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from typing import Any, TextIO

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from vldocir.config_checks import CONF_DIR
from vldocir.manifest import (
    ENV_REFERENCE,
    carries_a_literal,
    config_secrets,
    declare_secrets,
    environment_secrets,
    inline_secret_names,
    is_carrier_key,
    is_secret_key,
    is_secret_value,
    known_secrets,
    override_key,
)


class SetHydraConfigForSweep(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)


class SecretsFromEnvironment(Callback):
    """Before a sweep launches, :func:`secrets_to_environment` on its config: the sweep's
    ``multirun.yaml`` and the launcher's pickles (submitit's ``.submitit/*/*_submitted.pkl``,
    which hold the sweep config) carry references, the values travel in the environment."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        secrets_to_environment(config)


SECRET_ENV_PREFIX = "VLDOCIR_SECRET_"


def secrets_to_environment(cfg: DictConfig, skip: tuple[str, ...] = ("hydra",)) -> list[str]:
    """Declare the secrets ``cfg`` sends (vldocir.manifest.config_secrets: values under a
    secret-looking key or a header/query mapping, URL user-info and query values, token shapes,
    secret environment values) and move each literal that holds one into an environment variable of
    this process, the config keeping ``${oc.env:VLDOCIR_SECRET_<hash of the key path>}`` in its place
    (resolved to the same value). Whatever is written or pickled of ``cfg`` afterwards (Hydra's job
    return in submitit's ``*_result.pkl``, the sweep config in ``*_submitted.pkl``, ``multirun.yaml``)
    holds a reference; jobs resolve it from the environment they inherit (submitit's local jobs;
    ``sbatch`` exports the submitting environment by default). Returns the key paths moved. Top-level
    nodes named in ``skip`` are left alone (Hydra's own)."""
    from omegaconf import ListConfig, OmegaConf, open_dict, read_write

    leaves = []  # (parent, key, path, under a secret/carrier key, resolved value or None)

    def walk(node: Any, path: str, secret: bool) -> None:
        keys = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
        for key in keys:
            if not path and key in skip:
                continue
            child_path = f"{path}.{key}" if path else str(key)
            under = secret or is_secret_key(key) or is_carrier_key(key)
            child = node._get_node(key)
            if isinstance(child, (DictConfig, ListConfig)) and not child._is_interpolation() and not child._is_none():
                walk(child, child_path, under)
                continue
            try:
                value = node[key]
            except Exception:  # a mandatory value left unset, a reference that does not resolve: not ours to judge here
                value = None
            leaves.append((node, key, child_path, under, value))

    walk(cfg, "", False)
    found = []
    for _, _, _, under, value in leaves:
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
        found += config_secrets({"secret" if under else "value": value}) if value is not None else []
    declare_secrets(found)
    secrets = known_secrets()
    moved = []
    with read_write(cfg), open_dict(cfg):
        for node, key, path, under, _ in leaves:
            raw = node._get_node(key)._value()
            if raw is None or raw == "" or OmegaConf.is_interpolation(node, key) or isinstance(raw, bool):
                continue
            if not (under or (isinstance(raw, str) and is_secret_value(raw, secrets))):
                continue
            name = SECRET_ENV_PREFIX + hashlib.sha256(path.encode()).hexdigest()[:16].upper()
            os.environ[name] = str(raw)
            node[key] = f"${{oc.env:{name}}}" if isinstance(raw, str) else f"${{oc.decode:${{oc.env:{name}}}}}"
            moved.append(path)
    return moved


CFG_FLAGS = ("--cfg", "-c")
MULTIRUN_FLAGS = ("--multirun", "-m")


def multirun_cfg_argv(argv: list[str]) -> list[str]:
    """Let ``run.py -m <sweep> --cfg hydra`` show the config a multirun would use.

    Hydra refuses ``--multirun`` together with ``--cfg``; checking a sweep's launcher before
    submitting it is exactly what users want, so the flag becomes ``hydra.mode=MULTIRUN``, which
    composes the same config (sweep dir, launcher) without launching anything.
    """
    if not any(a in CFG_FLAGS or a.startswith("--cfg=") for a in argv):
        return argv
    if not any(a in MULTIRUN_FLAGS for a in argv):
        return argv
    rest = [a for a in argv[1:] if a not in MULTIRUN_FLAGS]
    return [argv[0], "hydra.mode=MULTIRUN", *rest]


# Where the secrets this project uses are read from; named in the refusal message.
SECRET_ENV_VARS = ("WANDB_API_KEY", "HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY")
REFUSED_STATUS = 2  # as for any command-line usage error
# Hydra's flags whose next argument is a path or a name, never an override (a path may hold "=").
PATH_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun")


def secret_overrides(argv: list[str]) -> list[str]:
    """The key paths of the overrides in ``argv`` that pass a secret (vldocir.manifest's rule).

    Refused: an override whose key looks like a secret (``+aws_access_key_id=x``, ``logger.api_key=x``,
    ``++hf_auth=x``, ``+token=a,b``); one whose value looks like a secret under any key (a token of
    a known shape: ``+retriever.note=hf_...``; URL user-info: ``...base_url=http://user:pass@host/v1``;
    ``Bearer ...``; the value of a secret environment variable, e.g. ``$HF_TOKEN`` expanded by the
    shell); and a dict value that gives a secret-named entry a literal
    (``...params.extra_headers={Authorization:'Bearer x'}``, ``...params={api_key:x}``); and any
    literal header or query value, whatever its name (``...params.extra_headers.X-Db-Pass=x``,
    ``...params.extra_query={key:x}``: vldocir.manifest.carries_a_literal).

    Flags (``-m``, ``--cfg job``, ``--config-dir=...``) and their arguments are not overrides: only
    arguments with a ``=`` that do not start with ``-`` are. Two forms carry no secret and pass: a
    deletion without a value (``~foo.password``) and a reference to an environment variable
    (``+retriever.hub_token=${oc.env:HF_TOKEN}``, ``...extra_headers={Authorization:${oc.env:AUTH}}``:
    Hydra records the reference, the job resolves it, and every sink redacts it). In a multirun, a
    reference to a secret inside Hydra quotes (``{api_key:'${oc.env:KEY}'}``) is refused: Hydra
    escapes a bare reference in the job directory's name but resolves a quoted one into it.
    """
    args = argv[1:]
    overrides = [arg for i, arg in enumerate(args) if i == 0 or args[i - 1] not in PATH_FLAGS]
    multirun = any(a in MULTIRUN_FLAGS for a in args) or "hydra.mode=MULTIRUN" in args
    secrets = environment_secrets()
    return [override_key(arg) for arg in overrides if _passes_a_secret(arg, secrets, multirun)]


# A reference inside Hydra quotes: '...${oc.env:NAME}...' (the name captured).
QUOTED_ENV_REFERENCE = re.compile(r"""(['"])[^'"]*?\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)[^'"]*\1""")


def _passes_a_secret(arg: str, secrets: list[str], multirun: bool = False) -> bool:
    if "=" not in arg or arg.startswith("-"):
        return False
    value = arg.partition("=")[2].strip()
    if is_secret_value(value, secrets) or inline_secret_names(value) or carries_a_literal(arg):
        return True
    quoted = [m.group(2) for m in QUOTED_ENV_REFERENCE.finditer(value)] if multirun else []
    if quoted and (
        is_secret_key(override_key(arg))
        or inline_secret_names(value, literals_only=False)
        or any(_holds_a_secret(variable, secrets) for variable in quoted)
    ):
        return True
    return bool(value) and not ENV_REFERENCE.match(value) and is_secret_key(override_key(arg))


def _holds_a_secret(variable: str, secrets: list[str]) -> bool:
    """Whether environment variable ``variable`` is secret-named or holds a secret-looking value."""
    return is_secret_key(variable) or is_secret_value(os.environ.get(variable, ""), secrets)


def refuse_secret_overrides(argv: list[str], stream: TextIO | None = None) -> None:
    """Exit with status 2 and a one-line message (the key, never the value) if ``argv`` passes a
    secret-looking override; return quietly otherwise. Call it before Hydra parses ``argv``."""
    keys = secret_overrides(argv)
    if not keys:
        return
    names = ", ".join(f"'{key}'" for key in keys)
    message = (
        f"{argv[0]}: secrets are read from the environment only: export {' / '.join(SECRET_ENV_VARS)} ... "
        f"(or reference one: key='${{oc.env:VAR}}'); "
        f"refusing {'override' if len(keys) == 1 else 'overrides'} {names}: Hydra would write it verbatim to its logs "
        "(in a sweep also a quoted reference, resolved into the job directory's name: write it unquoted)"
    )
    print(message, file=stream or sys.stderr)
    raise SystemExit(REFUSED_STATUS)


# -- input runs of a setting ----------------------------------------------------------------------


def _override_root(override: str) -> str:
    """The config node an override sets: ``retriever.model.x=1`` / ``+setting@foo=x`` -> ``retriever`` / ``setting``."""
    return re.split(r"[.@/]", override_key(override), maxsplit=1)[0]


def input_overrides(parent: list[str], spec) -> list[str]:
    """The overrides that make input run ``spec`` (a :class:`~vldocir.retrieval.settings.RunSpec`)
    of a job run with ``parent``: the job's overrides (dataset, paths, depth, n_ctx, ...) minus
    those of its setting, and minus those of its retriever when the input names another retriever;
    then ``retriever=``, ``setting=`` and the input's own overrides. The input is exactly the run
    ``python run.py <these overrides>`` makes, so its run key, and its store entry, are the same."""
    dropped = {"setting"} | ({"retriever"} if spec.retriever is not None else set())
    kept = [o for o in parent if _override_root(o) not in dropped]
    if spec.retriever is not None:
        kept.append(f"retriever={spec.retriever}")
    return [*kept, f"setting={spec.setting}", *spec.overrides]


def compose_job(overrides: list[str]) -> DictConfig:
    """The job config ``python run.py <overrides>`` runs (its ``hydra`` node removed).

    Inside a Hydra app (run.py, a multirun job, a submitit job) the app's own config search path is
    used; otherwise (a library call, a test) ``conf/`` of this checkout.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        name = HydraConfig.get().job.config_name if HydraConfig.initialized() else "config"
        return compose(config_name=name or "config", overrides=overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)

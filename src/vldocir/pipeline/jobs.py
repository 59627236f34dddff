"""What a job is before it runs: its setting and retriever instantiated, its input runs composed and
checked as jobs of their own (:func:`plan_job`, :func:`check_inputs`), the claims it shares with
concurrent jobs (:func:`job_leases`) and the start of its manifest (:func:`start_manifest`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vldocir.config_checks import ConfigError, check_config
from vldocir.leases import LEASES_DIR, Leases
from vldocir.manifest import git_state, hardware, package_versions, redact_overrides, redact_secrets
from vldocir.retrieval.base import Retriever
from vldocir.retrieval.settings import Setting, check_id_names_inputs


def task_overrides() -> list[str]:
    """The command line's task overrides as typed: ``${oc.env:...}`` references stay unresolved
    (iterating the ListConfig would resolve them and put environment values into the manifest)."""
    if not HydraConfig.initialized():
        return []
    return [str(o) for o in OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)]


def start_manifest(cfg: DictConfig, overrides: list[str] | None = None) -> dict[str, Any]:
    """A job's manifest as it starts: the config and the overrides (secrets redacted), the git state,
    the package versions and the hardware; the stages add what they find, compute and reuse."""
    return {
        "config": redact_secrets(OmegaConf.to_container(cfg, resolve=True)),
        "overrides": redact_overrides(task_overrides() if overrides is None else overrides),
        "git": git_state(Path(cfg.paths.root_dir)),
        "packages": package_versions(),
        "hardware": hardware(),
    }


def job_leases(cfg: DictConfig) -> Leases:
    """The claims on units of work this job shares with concurrent ones (``leases`` in the config)."""
    return Leases(
        Path(cfg.paths.cache_dir) / LEASES_DIR,
        float(cfg.leases.duration_s),
        float(cfg.leases.wait_s),
        check_local_pid=bool(cfg.leases.check_local_pid),
    )


def _instantiate(cfg: DictConfig, node: str, label: str):
    """Instantiate ``cfg.<node>``; a parameter check that fails is one line naming the node."""
    try:
        return instantiate(OmegaConf.select(cfg, node))
    except InstantiationException as error:
        cause = error.__cause__ or error
        if isinstance(cause, (ValueError, TypeError)):
            raise ConfigError(f"{node} ({label}): {cause}") from error
        raise


def instantiate_setting(cfg: DictConfig):
    """The setting object; its parameter checks fail here, as one line naming ``setting.method``."""
    return _instantiate(cfg, "setting.method", cfg.setting.id)


def instantiate_retriever(cfg: DictConfig):
    """The retriever object; its parameter checks (document context's n_ctx too) fail as one line."""
    return _instantiate(cfg, "retriever.model", cfg.retriever.id)


@dataclass
class InputJob:
    """An input run of a setting, composed as its own job and checked."""

    label: str  # as the setting names it (RunSpec.label)
    cfg: DictConfig
    overrides: list[str]


@dataclass
class JobPlan:
    """A job's setting and retriever, instantiated, and its input runs, composed and checked."""

    label: str  # <retriever id>/<setting id>
    setting: Setting
    retriever: Retriever
    inputs: list[InputJob]


def plan_job(cfg: DictConfig, overrides: list[str], chain: tuple[str, ...] = ()) -> JobPlan:
    """Instantiate the job's setting and retriever and compose and check each input run it names,
    as the job ``python run.py <job overrides> retriever=.. setting=..``
    (:func:`vldocir.launch.input_overrides`). ``chain``: the jobs this one is an input of. A cycle,
    an input that does not compose or fails its checks, or one on another dataset is a
    :class:`ConfigError` naming the input."""
    from vldocir.launch import compose_job, input_overrides

    label = f"{cfg.retriever.id}/{cfg.setting.id}"
    if label in chain:
        raise ConfigError(f"setting inputs form a cycle: {' -> '.join((*chain, label))}")
    setting, retriever = instantiate_setting(cfg), instantiate_retriever(cfg)
    check_id_names_inputs(setting, str(cfg.setting.id), overrides)
    dataset = OmegaConf.to_container(cfg.dataset, resolve=True)
    inputs = []
    for spec in setting.inputs():
        sub_overrides = input_overrides(overrides, spec)
        try:
            sub_cfg = compose_job(sub_overrides)
        except HydraException as error:
            raise ConfigError(f"input run {spec.label()!r} of {label}: {str(error).splitlines()[0]}") from error
        try:
            check_config(sub_cfg, sub_overrides)
        except ConfigError as error:
            raise ConfigError(f"input run {spec.label()!r} of {label}: {error}") from error
        if OmegaConf.to_container(sub_cfg.dataset, resolve=True) != dataset:
            raise ConfigError(
                f"input run {spec.label()!r} of {label} is on another dataset ({sub_cfg.dataset.name}); "
                "a setting combines runs of one benchmark"
            )
        inputs.append(InputJob(spec.label(), sub_cfg, sub_overrides))
    return JobPlan(label, setting, retriever, inputs)


def check_inputs(cfg: DictConfig, overrides: list[str], chain: tuple[str, ...] = ()) -> None:
    """:func:`plan_job` for the job and, recursively, for every input run, so that a bad input
    fails in a second, before any work, as a :class:`ConfigError` naming it."""
    job = plan_job(cfg, overrides, chain)
    for sub in job.inputs:
        try:
            check_inputs(sub.cfg, sub.overrides, (*chain, job.label))
        except ConfigError as error:
            raise ConfigError(f"input run {sub.label!r} of {job.label}: {error}") from error

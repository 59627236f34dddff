"""Hydra hooks for multirun launches (``python run.py -m ...``).

``paths.root_dir`` falls back to ``${hydra:runtime.cwd}``, and the sweep directory and the submitit
folder are under ``paths.log_dir``. The ``hydra:`` resolver reads Hydra's global config, which Hydra
sets only when a job starts; in a multirun the sweeper and the launcher resolve the sweep directory
before that. :class:`SetHydraConfigForSweep` sets it from the composed multirun config first.
"""

from __future__ import annotations

from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SetHydraConfigForSweep(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)


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

"""The run manifest: everything needed to trust a result and to make it again (STYLE.md #9)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

PACKAGES = (
    "vldocir", "numpy", "pandas", "pyarrow", "hydra-core", "omegaconf", "hydra-submitit-launcher", "submitit",
    "bm25s", "PyStemmer", "torch", "torchvision", "transformers", "colpali-engine", "accelerate", "wandb",
    "playwright", "pytesseract", "scikit-learn", "xgboost",
)
SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|passwd|credential)", re.IGNORECASE)
REDACTED = "<redacted: secrets come from the environment only>"


def redact_secrets(value: Any) -> Any:
    """Copy of a config tree with any value under a secret-looking key replaced."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if SECRET_KEY.search(str(k)) and v not in (None, "") else redact_secrets(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_secrets(v) for v in value]
    return value


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides (``key=value``) with the value of any secret-looking key replaced."""
    redacted = []
    for override in overrides:
        key, sep, value = override.partition("=")
        redacted.append(f"{key}={REDACTED}" if sep and value and SECRET_KEY.search(key) else override)
    return redacted


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(repo: Path) -> dict[str, Any]:
    """Commit and dirty flag of the code that ran (``None`` outside a git checkout)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": [],
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
    }
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10,
            )
            info["gpus"] = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return info

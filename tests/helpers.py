"""Helpers shared by test modules (imported as `helpers`: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_py(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python run.py ARGS` from the repository root, in the current environment (plus ``env``)."""
    return subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "HYDRA_FULL_ERROR": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )

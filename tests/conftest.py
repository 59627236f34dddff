"""Shared fixtures: small real benchmarks built by the synthetic generator, and composed configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vldocir.build.synthetic import SyntheticSpec, generate
from vldocir.data.benchmark import Benchmark

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "conf"


@pytest.fixture(scope="session")
def small_bench_dir(tmp_path_factory) -> Path:
    """A 24-document synthetic benchmark with all six structures (built once per session)."""
    root = tmp_path_factory.mktemp("bench") / "small"
    generate(SyntheticSpec(name="test-small", seed=7), root)
    return root


@pytest.fixture(scope="session")
def small_bench(small_bench_dir) -> Benchmark:
    from vldocir.data.benchmark import load_benchmark

    return load_benchmark(small_bench_dir)


@pytest.fixture
def isolated_paths(tmp_path, monkeypatch) -> Path:
    """Point every configured root (data, cache, results, logs) into the test's temp dir."""
    for var, sub in (
        ("VLDOCIR_DATA_DIR", "data"),
        ("VLDOCIR_CACHE_DIR", "cache"),
        ("VLDOCIR_RESULTS_DIR", "results"),
        ("VLDOCIR_LOG_DIR", "logs"),
    ):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("VLDOCIR_ROOT", str(REPO_ROOT))
    monkeypatch.setenv("WANDB_MODE", os.environ.get("WANDB_MODE", "disabled"))
    return tmp_path


def pytest_collection_modifyitems(config, items):
    """`gpu` tests run only where CUDA is visible; elsewhere they are skipped, saying why."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    try:
        import torch

        available = torch.cuda.is_available()
    except ImportError:
        available = False
    if not available:
        skip = pytest.mark.skip(reason="needs a CUDA device; none is visible (torch.cuda.is_available() is False)")
        for item in gpu_items:
            item.add_marker(skip)

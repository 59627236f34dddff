"""Shared fixtures: small real benchmarks built by the synthetic generator, and composed configs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO_ROOT
from vldocir.construction.synthetic import SyntheticSpec, generate
from vldocir.data.benchmark import Benchmark


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


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """No hub (HF_HUB_OFFLINE=1) and an empty Hugging Face cache under tmp_path, which huggingface_hub
    reads (environment and its already-imported constants); returns the cache directory."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def restored_logging():
    """Hydra configures the root logger for the job an in-process app runs (a console and a file
    handler): undo it, so later tests do not log into a deleted tmp_path."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def pytest_collection_modifyitems(config, items):
    """The `slow` end-to-end tests go first, so parallel workers (`make test` runs pytest-xdist) start
    the long ones early rather than leave one to run alone at the end; `gpu` tests run only where
    CUDA is visible; elsewhere they are skipped, saying why."""
    items.sort(key=lambda item: "slow" not in item.keywords)  # stable: the order within each group stays
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


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Retriever config name -> a tiny random checkpoint of its model family, built offline on first use
    (once per session; tiny_models.RETRIEVERS)."""
    from tiny_models import TinyCheckpoints

    return TinyCheckpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="session")
def subset_dir(tmp_path_factory) -> Path:
    """Three documents of the shipped mini benchmark (helpers.SUBSET_PAGES pages, SUBSET_QUERIES queries),
    images inline."""
    from helpers import SUBSET_DOCS, mini_subset

    return mini_subset(tmp_path_factory.mktemp("subset") / "b", SUBSET_DOCS)


TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _subprocesses_are_slow(request, monkeypatch):
    """A test that starts a subprocess itself (`run_py`, `subprocess.run`, `Popen`: interpreter and
    import start-up, or another program) belongs to the `slow` lane: enforced for the tests not
    marked `slow`. Processes the code under test starts (git for the manifest, wandb's service)
    are not the test's doing and pass."""
    if "slow" in request.keywords:
        return
    real = subprocess.Popen

    class Guarded(real):
        def __init__(self, args, *rest, **kwargs):
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename == subprocess.__file__:
                frame = frame.f_back  # subprocess.run -> Popen
            if frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(TESTS_DIR):
                raise AssertionError(f"{request.node.nodeid} starts a subprocess ({args!r}): mark it @pytest.mark.slow")
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Guarded)


@pytest.fixture(autouse=True)
def _reset_hydra_config():
    """Tests that compose configs set Hydra's global config (as run.py does); clear it after each."""
    yield
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None

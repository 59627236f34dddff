"""Concurrent jobs do each unit of work once (vldocir.leases): the 4-job sweep
``setting=base,ctx n_ctx=32,128`` through ``hydra/launcher=submitit_local``, from an empty cache.

Three of its jobs need the page store at the same time (a base job and both ctx jobs) and the two
base jobs need the same run. Then the same sweep meets a job that is killed with SIGKILL while it
holds claims: the test holds one shard's claim itself, so that the job is known to be waiting for
it, still holding the base run's claim, when it is killed. Claims last 20 s (``leases.duration_s``):
a job's heartbeat renews them every 5 s, and a claim is given up only after 15 s without renewal, which
no load on the machine makes a job miss; pids are not checked (``leases.check_local_pid=false``, as for
a job on another node), so the killed job's claim ends by expiry; the sweep takes it over.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from hydra.utils import instantiate

from helpers import REPO_ROOT, SUBSET_PAGES, compose_cfg, run_py, tiny_overrides
from vldocir.cache import ArtifactCache
from vldocir.leases import LEASES_DIR, Leases
from vldocir.pipeline.datasets import open_benchmark
from vldocir.retrieval.embeddings import shard_unit

SHARD_SIZE = 4
N_SHARDS = -(-SUBSET_PAGES // SHARD_SIZE)
SWEEP = ["setting=base,ctx", "n_ctx=32,128"]


def _roots(monkeypatch, root: Path) -> Path:
    for var, sub in (("VLDOCIR_CACHE_DIR", "cache"), ("VLDOCIR_RESULTS_DIR", "results"), ("VLDOCIR_LOG_DIR", "logs")):
        monkeypatch.setenv(var, str(root / sub))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _job_manifests(root: Path) -> list[dict]:
    # Each job's folder is named by its overrides, and dataset.source=/tmp/... nests it deeper.
    return [json.loads(p.read_text()) for p in sorted((root / "logs" / "multirun").rglob("manifest.json"))]


def _page_events(manifests: list[dict]) -> list[str]:
    return [e["status"] for m in manifests for e in m["cache"] if e["kind"] == "page-embeddings"]


def _shards_encoded(manifests: list[dict]) -> int:
    return sum((m.get("retrieval") or {}).get("encode_pages", {}).get("shards_encoded", 0) for m in manifests)


def _computed_runs(manifests: list[dict]) -> Counter:
    """How many jobs computed each run (by setting id), rather than reusing a stored one."""
    return Counter(m["config"]["setting"]["id"] for m in manifests if not m["run"]["reused"])


def _wait_for(condition, what: str, *processes: subprocess.Popen, timeout: float = 600):
    deadline = time.monotonic() + timeout  # a bound against hanging; the events waited for are certain
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for process in processes:
            assert process.poll() is None, f"{process.args[2:]} ended while waiting for {what}: {_tail(process)}"
        time.sleep(0.1)
    return found


def _tail(process: subprocess.Popen) -> str:
    return Path(process.stderr.name).read_text()[-3000:]


@pytest.mark.slow
def test_a_sweep_encodes_and_computes_each_unit_once_also_past_a_killed_job(
    subset_dir, tiny, isolated_paths, monkeypatch
):
    common = [
        *tiny_overrides("colqwen25", tiny),
        f"dataset.source={subset_dir}",
        f"retriever.model.shard_size={SHARD_SIZE}",
        "leases.duration_s=20",
        "leases.check_local_pid=false",
    ]
    sweep = ["-m", *common, *SWEEP, "hydra/launcher=submitit_local"]

    # 1. Four jobs at once, from an empty cache.
    root = _roots(monkeypatch, isolated_paths / "plain")
    done = run_py(*sweep, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    manifests = _job_manifests(root)
    assert len(manifests) == 4
    events = _page_events(manifests)
    assert events.count("miss") == 1 and set(events) <= {"miss", "shared", "hit"}, events
    assert _shards_encoded(manifests) == N_SHARDS, "every shard encoded once, in one job or another"
    assert _computed_runs(manifests) == {"base": 1, "ctx-n32": 1, "ctx-n128": 1}
    assert len(list((root / "cache" / "doc-context").glob("[!.]*"))) == 2

    # 2. The same, past a job killed while it holds the base run's claim.
    root = _roots(monkeypatch, isolated_paths / "killed")
    cfg = compose_cfg(*common)
    store, _ = instantiate(cfg.retriever.model).page_store(
        open_benchmark(cfg.dataset, cfg.paths.cache_dir), ArtifactCache(Path(cfg.paths.cache_dir))
    )
    leases = Leases(root / "cache" / LEASES_DIR, duration_s=60)  # renewed by this process's heartbeat
    held = leases.claim(shard_unit(store, 1))
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}

    def start(name: str, *args: str) -> subprocess.Popen:  # output to files: a full pipe would stall a job
        with open(root / f"{name}.out", "w") as out, open(root / f"{name}.err", "w") as err:
            return subprocess.Popen([sys.executable, "run.py", *args], cwd=REPO_ROOT, env=env, stdout=out, stderr=err)

    victim = start("victim", *common, "setting=base")
    runs = root / "cache" / LEASES_DIR / "run" / "mini-subset" / "colqwen25"
    (base_claim,) = _wait_for(lambda: list(runs.glob("base/*.0.lease")), "the job's claim on the base run", victim)
    others = {s for s in range(N_SHARDS) if s != 1}
    _wait_for(lambda: {s for s in others if store.has_shard(s)} == others, "the other shards", victim)
    # It now waits for shard 1, holding the claims on the base run and on the store.
    sweeping = start("sweep", *sweep)
    _wait_for(lambda: len(list(runs.glob("ctx-n*/*.lease"))) == 2, "the sweep's ctx jobs", victim, sweeping)
    owner = json.loads(base_claim.read_text())["owner"]
    assert owner["pid"] == victim.pid
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    held.release()
    assert sweeping.wait(timeout=900) == 0, _tail(sweeping)

    manifests = _job_manifests(root)
    assert len(manifests) == 4
    assert base_claim.is_file() and not list(runs.glob("base/*.1.lease")), (
        "the killed job's lapsed claim stays; the job that took it over released its own"
    )
    events = _page_events(manifests)
    assert events.count("miss") <= 1 and set(events) <= {"miss", "shared", "hit"}, events
    assert _shards_encoded(manifests) == 1, f"only shard 1 was left: the killed job encoded the other {len(others)}"
    assert _computed_runs(manifests) == {"base": 1, "ctx-n32": 1, "ctx-n128": 1}

"""One job, several tasks (one per GPU of a node): the ``slurm_node`` launcher composes, each task's
rank selects a disjoint set of encode shards, and a 2-task submitit_local job encodes each shard once."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from helpers import compose_cfg, run_py, tiny_overrides
from vldocir.pipeline.encode_stage import global_encode_task, job_rank


def shards_of(task: int, num_tasks: int, rank: int, ranks: int, n_shards: int) -> list[int]:
    """The shards RetrievalEncoder.encode_pages gives one process (shard s to task s % num_tasks)."""
    task, num_tasks = global_encode_task(task, num_tasks, rank, ranks)
    return [s for s in range(n_shards) if s % num_tasks == task]


def test_ranks_of_an_array_job_split_its_shards_by_hand():
    # A 2-job array, 2 tasks per job, 8 shards: (job, rank) -> shards, worked out by hand.
    assert shards_of(0, 2, 0, 2, 8) == [0, 4]
    assert shards_of(0, 2, 1, 2, 8) == [1, 5]
    assert shards_of(1, 2, 0, 2, 8) == [2, 6]
    assert shards_of(1, 2, 1, 2, 8) == [3, 7]
    assert shards_of(0, 1, 0, 1, 3) == [0, 1, 2]  # one job, one task: everything


@pytest.mark.parametrize(("num_tasks", "ranks", "n_shards"), [(1, 4, 10), (3, 2, 7), (4, 8, 100), (5, 3, 2)])
def test_every_shard_goes_to_exactly_one_process(num_tasks, ranks, n_shards):
    owners = [
        (task, rank)
        for task in range(num_tasks)
        for rank in range(ranks)
        for _ in shards_of(task, num_tasks, rank, ranks, n_shards)
    ]
    assert len(owners) == n_shards
    everything = sorted(
        s
        for task in range(num_tasks)
        for rank in range(ranks)
        for s in shards_of(task, num_tasks, rank, ranks, n_shards)
    )
    assert everything == list(range(n_shards))


def test_rank_comes_from_submitit_and_is_zero_of_one_outside_it(monkeypatch):
    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")  # a plain run inside an allocation is still one task
    assert job_rank() == (0, 1)
    # What submitit's local executor sets for the second of two tasks (submitit/local/local.py).
    for var, value in {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": "123",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_GLOBALID": "1",
        "SUBMITIT_LOCAL_LOCALID": "1",
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
    }.items():
        monkeypatch.setenv(var, value)
    assert job_rank() == (1, 2)


def test_node_launcher_runs_one_task_per_gpu(isolated_paths):
    cfg = compose_cfg("hydra/launcher=slurm_node", "hydra.launcher.gpus_per_node=8", keep_hydra=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert launcher["tasks_per_node"] == launcher["gpus_per_node"] == 8
    assert launcher["nodes"] == 1


@pytest.mark.slow
def test_two_task_submitit_local_job_encodes_each_shard_once(subset_dir, tiny, isolated_paths):
    # --cfg hydra shows the 2-task launcher without launching anything.
    common = [*tiny_overrides("colqwen25", tiny), f"dataset.source={subset_dir}", "retriever.model.shard_size=4"]
    launcher = ["hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2"]
    shown = run_py("-m", "stage=encode", *common, *launcher, "--cfg", "hydra")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert OmegaConf.create(shown.stdout).hydra.launcher.tasks_per_node == 2

    done = run_py("-m", "stage=encode", *common, *launcher, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (store_dir,) = [p for p in (isolated_paths / "cache" / "page-embeddings").iterdir() if not p.name.startswith(".")]
    records = {p.name: json.loads(p.read_text()) for p in sorted((store_dir / "tasks").iterdir())}
    assert sorted(records) == ["task-0000-of-0002.json", "task-0001-of-0002.json"]
    encoded = [r["encode"] for r in records.values()]
    assert [(e["job_task"], e["rank"]) for e in encoded] == [(0, 0), (0, 1)]
    # Shards 0, 2, 4 for rank 0 and 1, 3, 5 for rank 1: each encoded by one process, none twice.
    shards = sorted(p.name for p in (store_dir / "shards").iterdir())
    assert shards == [f"{s:05d}" for s in range(6)], shards
    assert [(e["shards_encoded"], e["shards_reused"]) for e in encoded] == [(3, 0), (3, 0)]
    assert (store_dir / "artifact.json").is_file()  # complete: the last rank to finish published it

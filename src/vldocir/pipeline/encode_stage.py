"""``stage=encode``: one task of a job array filling the page-embedding store, so that the
evaluation run afterwards finds every shard present and goes straight to search."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vldocir.cache import ArtifactCache
from vldocir.io import atomic_write_json
from vldocir.pipeline.datasets import open_benchmark
from vldocir.pipeline.jobs import instantiate_retriever, job_leases, start_manifest


def job_rank() -> tuple[int, int]:
    """This process's rank among its job's tasks and their number: ``(0, 1)`` unless it is one of
    several tasks of a submitit job (``hydra.launcher.tasks_per_node``, e.g. the ``slurm_node``
    launcher: one task per GPU), which is then pinned to its node-local GPU."""
    if "SUBMITIT_EXECUTOR" not in os.environ:  # set by submitit in its jobs only
        return 0, 1
    import submitit
    import torch

    env = submitit.JobEnvironment()
    if env.num_tasks > 1 and torch.cuda.device_count() > 1:  # each task sees the node's GPUs: take one
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
    return env.global_rank, env.num_tasks


def global_encode_task(task: int, num_tasks: int, rank: int, ranks: int) -> tuple[int, int]:
    """Job-array task ``task`` of ``num_tasks``, process ``rank`` of its ``ranks``, as one task of
    ``num_tasks * ranks``: shard ``s`` goes to ``s % (num_tasks * ranks) == task * ranks + rank``, so
    the processes of all the array's jobs share the shards without overlap."""
    return task * ranks + rank, num_tasks * ranks


def encode(cfg: DictConfig, tracker) -> dict[str, Any]:
    """Encode task ``encode.task`` of ``encode.num_tasks``' page shards into the embedding store.

    A Hydra multirun over ``encode.task`` is a SLURM job array (hydra-submitit-launcher); the
    evaluation run afterwards finds every shard present and goes straight to search. A job of
    several tasks (one per GPU of a node) splits its share further by rank (:func:`job_rank`).
    """
    rank, ranks = job_rank()  # first: before anything touches CUDA (the manifest's hardware)
    cache = ArtifactCache(
        Path(cfg.paths.cache_dir), cfg.cache_policy, integrity=cfg.cache_integrity, leases=job_leases(cfg)
    )
    manifest = start_manifest(cfg)
    tracker.start(manifest)
    bench = open_benchmark(cfg.dataset, cfg.paths.cache_dir)
    retriever = instantiate_retriever(cfg)
    from vldocir.retrieval.dense import EmbeddingRetriever

    if not isinstance(retriever, EmbeddingRetriever):
        raise ValueError(
            f"retriever {cfg.retriever.id} keeps no page embeddings: stage=encode applies to embedding retrievers"
        )
    task, num_tasks = global_encode_task(int(cfg.encode.task), int(cfg.encode.num_tasks), rank, ranks)
    store = retriever.encode_pages(bench, cache, task=task, num_tasks=num_tasks)
    # A complete store is a cache hit and encodes nothing: all of this task's shards are reused.
    stats = retriever.stats.get("encode_pages") or {
        "shards_encoded": 0,
        "shards_reused": len(range(task, store.n_shards, num_tasks)),
    }
    manifest.update(
        benchmark=bench.summary(),
        encode={"task": task, "num_tasks": num_tasks, "job_task": int(cfg.encode.task), "rank": rank, **stats},
        encoder=retriever.encoder.describe(),
        cache=cache.events,
    )
    record = store.directory / "tasks" / f"task-{task:04d}-of-{num_tasks:04d}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(manifest, record)
    missing = store.missing_shards()
    print(
        f"encode task {task}/{num_tasks}: {stats['shards_encoded']} shard(s) encoded, "
        f"{stats['shards_reused']} already present; store {store.directory} "
        + ("complete" if not missing else f"still misses {len(missing)} of {store.n_shards} shard(s)"),
        flush=True,
    )
    return {"store": str(store.directory), "complete": not missing, **stats}

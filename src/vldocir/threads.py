"""How many CPU threads torch computes with: the job's cores, set once per job (config ``threads``).

torch's default is the machine's core count, whatever the job was given: a SLURM task with 16 of a
node's 96 cores, or a container limited to 2, would start one OpenMP thread per core of the node.
Threads beyond the cores a job holds wait on each other at every barrier of a parallel matrix
product, and exact MaxSim then fell to a third of the matmul rate. :func:`set_torch_threads` is
called by :func:`vldocir.pipeline.run_stage` at the start of every job, inside a submitit job too.
Jobs that never compute with torch (BM25) do not import it for this: the count goes into
``OMP_NUM_THREADS``, which torch reads when it is first imported (and child processes inherit).
"""

from __future__ import annotations

import logging
import os
import sys

from vldocir.errors import ConfigError

log = logging.getLogger(__name__)


def job_cpus() -> int:
    """The cores this process may use: the CPU affinity mask (what cgroups, ``taskset`` and SLURM's
    task binding allow), capped by ``SLURM_CPUS_PER_TASK`` where SLURM sets it."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        cores = min(cores, int(slurm))
    return max(cores, 1)


def resolve_threads(setting: int | str) -> int:
    """``auto`` -> :func:`job_cpus`; a positive integer -> itself. Raises :class:`ConfigError` otherwise."""
    if setting == "auto":
        return job_cpus()
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
        raise ConfigError(f"threads must be auto or a positive integer, got {setting!r}")
    return setting


_announced: int | None = None


def set_torch_threads(setting: int | str = "auto") -> int:
    """Set torch's intra-op thread count from ``setting`` (see :func:`resolve_threads`) and return it:
    now if torch is imported, else through ``OMP_NUM_THREADS`` for when it is.

    Logged when the count changes (once per process in a sweep that keeps it).
    """
    global _announced
    threads = resolve_threads(setting)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    if threads != _announced:
        log.info(
            "torch uses %d CPU thread(s) (threads=%s; %d core(s) available to this job)", threads, setting, job_cpus()
        )
        _announced = threads
    return threads

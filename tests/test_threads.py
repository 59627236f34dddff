"""vldocir.threads: the job's cores, the ``threads`` setting, and what torch is told."""

from __future__ import annotations

import os

import pytest
import torch

from vldocir.errors import ConfigError
from vldocir.threads import job_cpus, resolve_threads, set_torch_threads


def test_job_cpus_is_the_affinity_mask_capped_by_slurm(monkeypatch):
    affinity = len(os.sched_getaffinity(0))
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert job_cpus() == affinity
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert job_cpus() == 1
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", str(affinity + 5))  # more than this process may use
    assert job_cpus() == affinity
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "")  # set but empty, as some launchers do
    assert job_cpus() == affinity


def test_resolve_threads(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert resolve_threads("auto") == 1
    assert resolve_threads(3) == 3
    for bad in (0, -2, "4", True, 1.5):
        with pytest.raises(ConfigError, match="threads must be auto or a positive integer"):
            resolve_threads(bad)


def test_set_torch_threads_sets_torch_and_the_environment(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # restored afterwards
    try:
        assert set_torch_threads(1) == 1
        assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
        assert set_torch_threads("auto") == min(2, len(os.sched_getaffinity(0))) == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)

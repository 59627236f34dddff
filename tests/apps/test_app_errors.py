"""Every app, run as a user runs it, with one bad input: exactly one stderr line, no traceback, status 2.

``run.py`` and each ``python -m vldocir.apps.<name>`` (every module of vldocir.apps) get an input that
fails before any long work (a malformed benchmark, a missing file, a bad config value), as a
subprocess. Then a full disk, for real: a 32 kB tmpfs when this process may mount one (root), else
a file-size limit of the child (``RLIMIT_FSIZE``: the kernel fails the write with EFBIG).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import REPO_ROOT

pytestmark = pytest.mark.slow

APPS = sorted(
    p.stem for p in (REPO_ROOT / "src" / "vldocir" / "apps").glob("*.py") if p.stem not in ("__init__", "app")
)
"""Every ``python -m vldocir.apps.<name>`` (each module of the package but the wrapper)."""


def broken(small_bench_dir: Path, dest: Path, table: str, column: str, row: int, value, type_: pa.DataType) -> Path:
    """A copy of the small benchmark with one value the column's canonical type cannot hold."""
    shutil.copytree(small_bench_dir, dest)
    data = pq.read_table(dest / f"{table}.parquet")
    values = data.column(column).to_pylist()
    values[row] = value
    index = data.schema.get_field_index(column)
    pq.write_table(data.set_column(index, column, pa.array(values, type_)), dest / f"{table}.parquet")
    return dest


def environment(root: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HYDRA_FULL_ERROR", "VLDOCIR_SEC_USER_AGENT", "VLDOCIR_COLLECT_USER_AGENT")
    }
    env.update(
        VLDOCIR_DATA_DIR=str(root / "data"),
        VLDOCIR_CACHE_DIR=str(root / "cache"),
        VLDOCIR_RESULTS_DIR=str(root / "results"),
        VLDOCIR_LOG_DIR=str(root / "logs"),
        VLDOCIR_ROOT=str(REPO_ROOT),
        WANDB_MODE="disabled",
        HF_HUB_OFFLINE="1",
    )
    return env


def run(command: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *command], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, **kwargs
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    """The process's only stderr line, after checking it ended as a user error should."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    return lines[0]


def test_every_app_turns_a_bad_input_into_one_line(small_bench_dir, tmp_path):
    bbox = broken(small_bench_dir, tmp_path / "bbox3", "elements", "bbox", 5, [1.0, 2.0, 3.0], pa.list_(pa.float64()))
    page_index = broken(small_bench_dir, tmp_path / "page-index", "pages", "page_index", 9, 2**32, pa.int64())
    qrels = tmp_path / "truncated-qrels"
    shutil.copytree(small_bench_dir, qrels)
    (qrels / "qrels.parquet").write_bytes((qrels / "qrels.parquet").read_bytes()[:500])
    env = environment(tmp_path)
    cases = {  # app: (command, what its line says)
        "run": (
            ["run.py", f"dataset.source={bbox}", "dataset.build=null"],
            ("run error: elements[doc_id=", "column 'bbox' holds [1.0, 2.0, 3.0]"),
        ),
        "build": (
            ["-m", "vldocir.apps.build", f"input={tmp_path / 'no-documents'}"],
            ("build error: input=", "no-documents"),
        ),
        "collect": (
            ["-m", "vldocir.apps.collect", "collect=sec", f"collect.out_dir={tmp_path / 'sec'}"],
            ("collect error: collect.http.user_agent: required",),
        ),
        "sample_evidence": (
            ["-m", "vldocir.apps.sample_evidence", f"benchmark={page_index}", f"out_dir={tmp_path / 'ev'}"],
            ("sample_evidence error: pages[", "column 'page_index' holds 4294967296", "int32"),
        ),
        "generate_queries": (
            [
                "-m",
                "vldocir.apps.generate_queries",
                f"benchmark={tmp_path / 'no-bench'}",
                f"out_dir={tmp_path / 'gen'}",
            ],
            ("generate_queries error: benchmark.json: ", "no-bench does not exist"),
        ),
        "cleaning_ablations": (
            ["-m", "vldocir.apps.cleaning_ablations", f"cleaning.labelled={tmp_path / 'none.csv'}"],
            ("cleaning_ablations error: ", "none.csv: no such labelled set"),
        ),
        "report": (
            ["-m", "vldocir.apps.report", "do=[nonsense]"],
            ("report error: do=['nonsense']: each step is one of tables, figures, check",),
        ),
        "audit": (
            ["-m", "vldocir.apps.audit", f"dataset.source={qrels}", "dataset.build=null"],
            ("audit error: qrels: cannot read ", "qrels.parquet"),
        ),
        "import_benchmark": (
            [
                "-m",
                "vldocir.apps.import_benchmark",
                "dataset=beir_dbpedia_entity",
                f"dataset.importer.source={tmp_path / 'no-beir'}",
            ],
            ("import_benchmark error: import source ", "no-beir does not exist"),
        ),
        "export_benchmark": (
            ["-m", "vldocir.apps.export_benchmark", "dataset=mini", f"out={bbox}"],
            ("export_benchmark error: out=", "bbox3 exists and is not empty: choose another folder, or force=true"),
        ),
    }
    assert set(cases) == {"run", *APPS}, "give every app a case here"
    with ThreadPoolExecutor(2) as pool:  # (two cores: each process mostly starts Python and Hydra)
        done = dict(zip(cases, pool.map(lambda c: run(c[0], env), cases.values()), strict=True))
    for app, (_, says) in cases.items():
        line = one_line(done[app])
        for text in says:
            assert text in line, (app, line)


def _can_mount_tmpfs(where: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    mount = ["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(where)]
    return subprocess.run(mount, capture_output=True).returncode == 0


def _limit_file_size() -> None:  # (runs in the child, before exec; an ignored signal stays ignored)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_a_full_disk_is_one_line_naming_the_file_and_the_free_space(small_bench_dir, tmp_path):
    """run.py derives the reduced corpus into the cache first (before any progress bar): the
    cache's filesystem is full (or the file too large) and the line says which file and how much
    space is left there."""
    cache = tmp_path / "small-disk"
    cache.mkdir()
    mounted = _can_mount_tmpfs(cache)
    try:
        env = environment(tmp_path)
        env["VLDOCIR_CACHE_DIR"] = str(cache)
        done = run(
            [
                "run.py",
                "dataset=mini_reduced",
                "dataset@dataset.derive.parent=synthetic_text",
                f"dataset.derive.parent.source={small_bench_dir}",
                "dataset.derive.parent.build=null",
            ],
            env,
            preexec_fn=None if mounted else _limit_file_size,
        )
    finally:
        if mounted:
            subprocess.run(["umount", str(cache)], check=True)
    line = one_line(done)
    written = f"{cache}/reduced/"
    if mounted:  # a real ENOSPC
        assert line.startswith(f"run error: disk full writing {written}") and line.endswith(f" free on {cache})"), line
    else:  # a real EFBIG
        assert line.startswith(f"run error: file too large writing {written}") and " free on " in line, line
    assert ".parquet (" in line

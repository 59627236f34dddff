"""The results store (DESIGN.md §5): one directory per (benchmark, retriever, setting).

``results/runs/<benchmark>/<retriever>/<setting>/`` holds

- ``run.parquet``        the top-N pages per query (the expensive part, reused when its key matches)
- ``per_query.parquet``  every metric at every k for every query, with the query's attributes
- ``metrics.json``       aggregates and breakdowns (``vldocir.evaluation.aggregate.summarise``)
- ``manifest.json``      how it was made: config, overrides, versions, fingerprint, timings, cache

Every file is written atomically. ``make tables`` and the notebooks read only this store.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
import pyarrow as pa

from vldocir.io import atomic_write_json, atomic_write_parquet
from vldocir.retrieval.run import read_run, write_run

log = logging.getLogger(__name__)

RUN_FILE = "run.parquet"
PER_QUERY_FILE = "per_query.parquet"
METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"


def run_directory(results_dir: str | Path, benchmark: str, retriever: str, setting: str) -> Path:
    return Path(results_dir) / "runs" / benchmark / retriever / setting


def read_manifest(run_dir: Path) -> dict | None:
    path = run_dir / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        log.warning("%s is not valid JSON; the run there will be recomputed", path)
        return None


def reusable_run(run_dir: Path, run_key: str, policy: str) -> pa.Table | None:
    """The stored run if it was made from exactly this key and the policy allows reuse."""
    if policy == "overwrite":
        return None
    manifest = read_manifest(run_dir)
    if manifest is None or not (run_dir / RUN_FILE).is_file():
        return None
    stored_key = manifest.get("run", {}).get("key")
    if stored_key != run_key:
        log.warning(
            "%s holds a run with another key (%s, now %s: benchmark, retriever or setting changed); "
            "it will be replaced",
            run_dir,
            stored_key,
            run_key,
        )
        return None
    return read_run(run_dir / RUN_FILE)


def write_results(
    run_dir: Path, run: pa.Table | None, per_query: pd.DataFrame, metrics: dict, manifest: dict
) -> None:
    """Write the store entry. ``run=None`` keeps the stored run (it was reused)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if run is not None:
        write_run(run, run_dir / RUN_FILE)
    atomic_write_parquet(pa.Table.from_pandas(per_query, preserve_index=False), run_dir / PER_QUERY_FILE)
    atomic_write_json(metrics, run_dir / METRICS_FILE)
    # The manifest goes last: a directory whose manifest names a key holds that key's run.
    atomic_write_json(manifest, run_dir / MANIFEST_FILE)


def list_runs(results_dir: str | Path) -> pd.DataFrame:
    """Every complete entry of the store: benchmark, retriever, setting, directory."""
    rows = []
    for manifest_path in sorted(Path(results_dir, "runs").glob(f"*/*/*/{MANIFEST_FILE}")):
        run_dir = manifest_path.parent
        if (run_dir / METRICS_FILE).is_file():
            rows.append(
                {
                    "benchmark": run_dir.parent.parent.name,
                    "retriever": run_dir.parent.name,
                    "setting": run_dir.name,
                    "path": run_dir,
                }
            )
    return pd.DataFrame(rows, columns=["benchmark", "retriever", "setting", "path"])

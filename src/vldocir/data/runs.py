"""Runs: the top-N pages per query (DESIGN.md §1), as an Arrow table with ``RUN_SCHEMA``."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from vldocir.data.schema import RUN_SCHEMA
from vldocir.io import atomic_write_parquet


def make_run(query_ids: Sequence[str], page_ids: Sequence[Sequence[str]], scores: Sequence[Sequence[float]]) -> pa.Table:
    """Build a run from each query's candidate pages and scores (any order, any length).

    Rows are ordered by query (in the given order), then score descending, then page_id ascending,
    and ranked 1..n: the same deterministic tie-breaking the evaluation applies.
    """
    lengths = np.fromiter((len(p) for p in page_ids), dtype=np.int64, count=len(page_ids))
    frame = pd.DataFrame(
        {
            "query_order": np.repeat(np.arange(len(query_ids)), lengths),
            "page_id": np.concatenate([np.asarray(p, dtype=object) for p in page_ids]) if len(page_ids) else [],
            "score": np.concatenate([np.asarray(s, dtype=np.float32) for s in scores]) if len(scores) else [],
        }
    )
    frame = frame.sort_values(["query_order", "score", "page_id"], ascending=[True, False, True], kind="stable")
    order = frame["query_order"].to_numpy()
    starts = np.searchsorted(order, order, side="left")
    return pa.table(
        {
            "query_id": pa.array(np.asarray(query_ids, dtype=object)[order], pa.string()),
            "page_id": pa.array(frame["page_id"].to_numpy(dtype=object), pa.string()),
            "rank": pa.array(np.arange(len(frame)) - starts + 1, pa.int32()),
            "score": pa.array(frame["score"].to_numpy(), pa.float32()),
        },
        schema=RUN_SCHEMA,
    )


def write_run(run: pa.Table, path: str | Path) -> None:
    """Write atomically, ids dictionary-encoded so that readers get codes without re-hashing.

    Row groups of up to 64 Mi rows: a paper-scale run (27 M rows) is one row group, so readers map
    one dictionary of page ids to codes instead of one per row group.
    """
    atomic_write_parquet(
        run,
        path,
        use_dictionary=["query_id", "page_id"],
        dictionary_pagesize_limit=64 << 20,
        row_group_size=64 << 20,
        compression="zstd",
    )


def read_run(path: str | Path) -> pa.Table:
    table = pq.read_table(path, read_dictionary=["query_id", "page_id"])
    missing = {"query_id", "page_id", "score"} - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: not a run, columns {sorted(missing)} are missing")
    return table

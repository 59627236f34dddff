"""Run assembly from integer positions (``run_from_indices``) equals ``make_run``, row for row."""

from __future__ import annotations

import numpy as np
import pytest

from vldocir.data.runs import make_run, run_from_indices


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_make_run_with_ties_pads_and_empty_queries(seed):
    rng = np.random.default_rng(seed)
    page_ids = np.array([f"p{i:05d}" for i in rng.permutation(3000)], dtype=object)  # not in id order
    n_queries, depth = 200, 40
    indices = np.stack([rng.choice(len(page_ids), depth, replace=False) for _ in range(n_queries)])
    scores = rng.integers(0, 4, (n_queries, depth)).astype(np.float32) / 3  # many ties
    indices[rng.random((n_queries, depth)) < 0.2] = -1
    indices[5] = -1  # a query without candidates
    query_ids = [f"q{i:04d}" for i in rng.permutation(n_queries)]
    ours = run_from_indices(query_ids, page_ids, indices, scores)
    hits = [page_ids[row[row >= 0]] for row in indices]
    values = [s[row >= 0] for row, s in zip(indices, scores, strict=True)]
    assert ours.equals(make_run(query_ids, hits, values))
    assert query_ids[5] not in set(ours.column("query_id").to_pylist())


def test_no_queries():
    assert (
        run_from_indices([], np.array(["a"], dtype=object), np.zeros((0, 3), np.int64), np.zeros((0, 3))).num_rows == 0
    )

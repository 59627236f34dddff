"""Significance marks of the paper tables: which reproduced cells differ from the table's baseline.

A table whose entry in ``conf/paper_tables.yaml`` declares ``significance: {baseline: <row or
setting>, ...}`` marks each reproduced cell whose run differs significantly from the baseline's run
on the cell's own aggregate and metric (:func:`mark_significance`); the layouts of
:mod:`vldocir.reporting.tables` say, per cell, what to test (:func:`baseline_label` names the
baseline row), and :mod:`vldocir.reporting.formats` prints the marks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vldocir.evaluation.significance import QuerySetMismatch, correct, paired_tests
from vldocir.reporting import compare
from vldocir.reporting.paper import PaperSpecError, metric_label
from vldocir.reporting.store_view import StoredRun
from vldocir.store import PER_QUERY_FILE, Entry

SIGNIFICANCE_DEFAULTS = {"correction": "holm", "alpha": 0.05, "permutations": 10000, "seed": 0, "metric": None}
CORRECTIONS = {"holm": "Holm", "bh": "Benjamini-Hochberg"}
MARK_HIGHER, MARK_LOWER = "▲", "▼"
# Within one process, keyed by both runs' per-query files (path and modification time) and the test's
# parameters: a table that shares a comparison with another (Tables 3 and 13) reuses it.
_PAIRED: dict[tuple, Any] = {}


def _significance(entry: dict) -> dict | None:
    """The entry's ``significance`` declaration with its defaults, or ``None`` where it declares none."""
    declared = entry.get("significance")
    if not declared:
        return None
    unknown = set(declared) - set(SIGNIFICANCE_DEFAULTS) - {"baseline"}
    if "baseline" not in declared or unknown:
        raise PaperSpecError(
            f"{entry.get('csv')}: significance needs a baseline and takes only {sorted(SIGNIFICANCE_DEFAULTS)}"
            + (f" (unknown: {sorted(unknown)})" if unknown else "")
        )
    found = {**SIGNIFICANCE_DEFAULTS, **declared}
    if found["correction"] not in CORRECTIONS:
        raise PaperSpecError(f"{entry.get('csv')}: significance.correction is one of {sorted(CORRECTIONS)}")
    return found


def baseline_label(entry: dict, labels) -> str | None:
    """The declared baseline row (or setting), checked against the table's ``labels``."""
    found = _significance(entry)
    if found is None:
        return None
    if found["baseline"] not in set(labels):
        raise PaperSpecError(f"{entry.get('csv')}: significance.baseline {found['baseline']!r} is not one of its rows")
    return str(found["baseline"])


def _rows(run: StoredRun, subset: dict | None) -> pd.DataFrame:
    frame = run.per_query
    for column, value in (subset or {}).items():
        frame = frame[frame[column] == value]
    return frame


def _stamp(run: StoredRun) -> tuple[str, int]:
    path = run.path / PER_QUERY_FILE
    return str(path), path.stat().st_mtime_ns


def _paired(run: StoredRun, base: StoredRun, subset: dict | None, metrics: list[str], sig: dict, cache_dir):
    """Per (aggregate, metric): the difference ``run - base`` (points) and its randomization p-value, or
    the error that refused the pair (their query sets differ).

    With ``cache_dir`` and no ``subset``, through the cache of ``do=compare``
    (:func:`vldocir.reporting.compare.cached_compute`, ``<cache_dir>/significance/``), so ``make tables``
    and ``do=compare`` of the same runs and parameters share one result and no rendering recomputes it."""
    key = (_stamp(run), _stamp(base), tuple(sorted((subset or {}).items())), tuple(metrics))
    key += (int(sig["permutations"]), int(sig["seed"]), str(cache_dir))
    if key in _PAIRED:
        return _PAIRED[key]
    try:
        if cache_dir is not None and not subset:
            params = compare.Params(
                metrics=list(metrics),
                correction=str(sig["correction"]),
                alpha=float(sig["alpha"]),
                n_permutations=int(sig["permutations"]),
                level=0.95,
                seed=int(sig["seed"]),
                intersection=False,
            )
            result, *_ = compare.cached_compute(_compared(base), [_compared(run)], params, Path(cache_dir))
            frame = compare.to_frame(result)
        else:
            frame = paired_tests(
                _rows(run, subset),
                _rows(base, subset),
                metrics,
                n_permutations=int(sig["permutations"]),
                seed=int(sig["seed"]),
            )
        _PAIRED[key] = frame.set_index(["aggregate", "metric"])[["difference", "p_randomization"]]
    except (QuerySetMismatch, compare.CompareError) as error:
        _PAIRED[key] = error
    return _PAIRED[key]


def _compared(run: StoredRun) -> compare.StoredRun:
    """A run as ``do=compare`` names it (label ``<retriever>/<setting>``, as :func:`compare.load_run` does)."""
    return compare.StoredRun(
        name=str(run.path), label=run.label, entry=Entry(run.path), how="the entry used", per_query=run.per_query
    )


def mark_significance(entry: dict, cells: pd.DataFrame, cache_dir: Path | None = None) -> tuple[list[str], str]:
    """Per cell, ``MARK_HIGHER`` / ``MARK_LOWER`` where its run differs significantly from the baseline
    run on the cell's aggregate and metric ("" elsewhere), and the table note that says how.

    The test is the paired randomization test of the harness (sign flips of the per-query
    differences, aggregated as the cell's number is), two-sided, corrected with the declared method
    across every comparison the table makes. A cell without a run, whose baseline has no run, or
    whose run covers other queries than the baseline's is not tested (the note counts them).
    ``cache_dir``: where ``do=compare`` caches its results (see :func:`_paired`).
    """
    sig = _significance(entry)
    tests = cells.attrs.get("tests") or [None] * len(cells)
    markers = [""] * len(cells)
    if sig is None:
        return markers, ""
    only = sig["metric"]
    only = None if only is None else {only} if isinstance(only, str) else set(only)
    tests = [t if t is not None and (only is None or t["metric"] in only) else None for t in tests]
    wanted: dict[tuple, set[str]] = {}
    for t in tests:
        if t is not None and t["run"] is not None and t["baseline"] is not None:
            wanted.setdefault((t["run"].path, t["baseline"].path), set()).add(t["metric"])
    tested, p_values, signs = [], [], []
    no_run = no_baseline = mismatched = 0
    for i, t in enumerate(tests):
        if t is None:
            continue
        if t["run"] is None:
            no_run += 1
            continue
        if t["baseline"] is None:
            no_baseline += 1
            continue
        metrics = sorted(wanted[(t["run"].path, t["baseline"].path)])
        result = _paired(t["run"], t["baseline"], t.get("subset"), metrics, sig, cache_dir)
        if isinstance(result, Exception):
            mismatched += 1
            continue
        row = result.loc[(t["aggregate"], t["metric"])]
        tested.append(i)
        p_values.append(float(row["p_randomization"]))
        signs.append(float(row["difference"]))
    if p_values:
        reject, _ = correct(np.asarray(p_values), method=sig["correction"], alpha=float(sig["alpha"]))
        for i, rejected, difference in zip(tested, reject, signs, strict=True):
            if rejected:
                markers[i] = MARK_HIGHER if difference > 0 else MARK_LOWER
    metric_note = "" if only is None else f" on {', '.join(metric_label(m) for m in sorted(only))}"
    note = (
        f"{MARK_HIGHER} / {MARK_LOWER}: higher / lower than the baseline {sig['baseline']} (same aggregate and "
        f"metric{metric_note}), by a two-sided paired randomization test over queries "
        f"({int(sig['permutations']):,} sign-flip permutations, seed {int(sig['seed'])}), "
        f"{CORRECTIONS[sig['correction']]}-corrected across the table's {len(p_values)} comparisons at "
        f"alpha = {float(sig['alpha']):g}; {sum(map(bool, markers))} marked"
    )
    untested = []
    if no_run:
        untested.append(f"{no_run} without a run")
    if no_baseline:
        untested.append(f"{no_baseline} whose baseline has no run here")
    if mismatched:
        untested.append(f"{mismatched} whose run covers other queries than the baseline's")
    if not p_values:
        note = f"No significance markers: no cell could be tested against the baseline {sig['baseline']}"
        return markers, note + (f" ({', '.join(untested)})." if untested else ".")
    if untested:
        note += "; not tested: " + ", ".join(untested)
    return markers, note + "."

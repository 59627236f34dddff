"""Runs in the store that no paper row uses: your own system (``retriever=run_file``), a parameter
or depth variant filed under a paper row's ids, a retriever the paper does not evaluate.

``make tables`` lists them after the paper tables (a section of ``<out_dir>/tables/README.md``
and the console), one row per run and aggregate with the paper's headline metrics at the paper's
ks (``experiments/paper.yaml``: ``ks``), from each entry's ``metrics.json``. A run is one run key
(:meth:`~vldocir.reporting.store_view.ResultsView.distinct_runs`); a paper row uses the entry
:meth:`~vldocir.reporting.store_view.ResultsView.get` picks for it, and every other run is listed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from vldocir.reporting.paper import PaperSpec, metric_label
from vldocir.reporting.store_view import ResultsView, StoredRun

TITLE = "Other runs in the store"
AGGREGATES = {"Macro": "macro", "Micro": "micro"}
METRICS = ("ndcgall", "recallall")


def other_runs(spec: PaperSpec, view: ResultsView) -> list[StoredRun]:
    """The benchmark's runs that no paper row uses, by retriever, setting and entry name."""
    used = {run.path for run in (view.get(ref) for ref in spec.all_runs().values()) if run is not None}
    return [run for run in view.distinct_runs() if run.path not in used]


def other_runs_table(spec: PaperSpec, view: ResultsView) -> pd.DataFrame:
    """One row per (run, aggregate): ``Run`` (retriever/setting), ``Entry`` (the store entry's
    name), ``Aggregate``, then nDCGAll@k and RecallAll@k (percent) for the paper's ks; NaN where
    the entry was evaluated without that k."""
    columns = [f"{metric}@{k}" for metric in METRICS for k in spec.ks]
    records = []
    for run in other_runs(spec, view):
        aggregates = run.aggregates() or {}
        for label, key in AGGREGATES.items():
            values = aggregates.get(key, {})
            records.append({"Run": run.label, "Entry": run.path.name, "Aggregate": label,
                            **{metric_label(c): values.get(c, math.nan) for c in columns}})
    return pd.DataFrame(records, columns=["Run", "Entry", "Aggregate", *(metric_label(c) for c in columns)])


def _caption(view: ResultsView) -> str:
    return (f"Runs of `{view.benchmark}` that no paper row uses, one store entry per run (ks including "
            f"{list(view.ks)}, depth {view.depth} preferred, then the newest); percent, – where the entry "
            "was evaluated without that k.")


def _number(value) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.2f}"


def to_markdown(table: pd.DataFrame, view: ResultsView) -> list[str]:
    """The README section (lines), ``## Other runs in the store``."""
    lines = [f"## {TITLE}", "", _caption(view), ""]
    if table.empty:
        return lines + ["None: every run of this benchmark in the store is a paper row's."]
    lines += ["| " + " | ".join(table.columns) + " |", "|" + "|".join([":--"] * 3 + ["--:"] * (len(table.columns) - 3)) + "|"]
    for record in table.itertuples(index=False):
        run, entry, aggregate, *values = record
        lines.append(f"| {run} | `{entry}` | {aggregate} | " + " | ".join(_number(v) for v in values) + " |")
    return lines


def to_text(table: pd.DataFrame) -> str:
    """The console rendering (the same rows, plain columns)."""
    if table.empty:
        return "  (none)"
    shown = table.assign(**{c: table[c].map(_number) for c in table.columns[3:]})
    return "\n".join("  " + line for line in shown.to_string(index=False).splitlines())


def print_other_runs(table: pd.DataFrame, readme: Path) -> None:
    print(f"\n{TITLE} (no paper row uses them; also in {readme}):")
    print(to_text(table))

"""``make check``: every published cell against its reproduction, like pyserini's two-click
reproductions. One line per cell:

    OK       table13_overall  DOM-BM25 | Macro | RecallAll@5   48.37 vs 48.37  (+0.00, tol 0.05)
    DIFF     ...
    MISSING  ...              no run vl-docir/colnomic7b/base (runnable on a GPU node)

then the commands that would make the missing runs, what else the missing cells need (the
benchmark for Table 1, an imported audit for Table 12, the cleaning stage's files), and a summary.
The exit status is 1 when a cell differs by more than its tolerance (``experiments/paper.yaml``:
``tolerance``, per table or overall; ``tolerance=`` overrides), 0 otherwise; missing cells alone do
not fail the check.

    python -m vldocir.apps.report do=[check] [benchmark=NAME] [tolerance=0.05] [quiet=true]    # make check
"""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from vldocir.reporting.outputs import CELL_COLUMNS, ReportTable
from vldocir.reporting.paper import PaperSpec, RunRef
from vldocir.reporting.store_view import ResultsView

STATUSES = ("OK", "DIFF", "MISSING", "UNPUBLISHED")


def cell_status(published: float, reproduced: float, tolerance: float) -> str:
    """OK / DIFF when both numbers exist; MISSING without a reproduction; UNPUBLISHED for a
    reproduced number the paper does not print (Table 4's Q-Split for ColPali)."""
    if math.isnan(reproduced):
        return "MISSING"
    if math.isnan(published):
        return "UNPUBLISHED"
    return "OK" if abs(reproduced - published) <= tolerance + 1e-9 else "DIFF"


def check_table(table: ReportTable, tolerance: float | None = None) -> pd.DataFrame:
    """The table's cells with ``check`` (one of :data:`STATUSES`) and ``tolerance`` used."""
    cells = table.cells.copy()
    if tolerance is not None:
        cells["tolerance"] = tolerance
    cells["check"] = [
        cell_status(p, r, t) for p, r, t in zip(cells["published"], cells["reproduced"], cells["tolerance"])
    ]
    cells.insert(0, "table", table.name)
    return cells


def check(tables: dict[str, ReportTable], tolerance: float | None = None) -> pd.DataFrame:
    frames = [check_table(table, tolerance) for table in tables.values()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["table", *CELL_COLUMNS, "check"])


def _fmt(value: float, decimals: int) -> str:
    return "-" if math.isnan(value) else f"{value:.{int(decimals)}f}"


def format_line(cell) -> str:
    where = " | ".join(str(k) for k in cell.row if k is not None) + f" | {cell.column}"
    d = cell.decimals
    if cell.check in ("OK", "DIFF"):
        detail = (
            f"{_fmt(cell.reproduced, d)} vs {_fmt(cell.published, d)}  "
            f"({cell.reproduced - cell.published:+.{int(d)}f}, tol {cell.tolerance:g})"
        )
    elif cell.check == "UNPUBLISHED":
        detail = f"{_fmt(cell.reproduced, d)}, not printed in the paper"
    else:
        detail = f"published {_fmt(cell.published, d)}; {cell.status}"
    return f"{cell.check:<8} {cell.table:<36} {where:<60} {detail}"


def _refs(entry: dict) -> list[RunRef]:
    """Every run a table entry maps (rows, Table 4's family x setting rows, Table 5's run)."""
    values = list((entry.get("rows") or {}).values()) + ([entry["run"]] if isinstance(entry.get("run"), dict) else [])
    refs = []
    for value in values:
        nested = value.values() if isinstance(value, dict) and "retriever" not in value else [value]
        refs += [RunRef.from_entry(v) for v in nested if isinstance(v, dict) and "retriever" in v]
    return refs


def missing_commands(spec, view: ResultsView, names) -> list[str]:
    """The run.py commands for the mapped runs that are not in the store, once each."""
    refs: dict[str, RunRef] = {}
    for name in names:
        for ref in _refs(spec.tables[name]):
            refs.setdefault(ref.store_path(view.benchmark), ref)
    return [
        f"{path:<52} {ref.command(spec.dataset)}   # {ref.status}"
        for path, ref in sorted(refs.items())
        if view.get(ref) is None
    ]


def missing_inputs(spec: PaperSpec, cells: pd.DataFrame) -> list[tuple[str, str]]:
    """Why the MISSING cells of the tables made from no run are missing (the benchmark, an imported
    audit, the cleaning stage's files): (table, reason), once each."""
    missing = cells[(cells["check"] == "MISSING") & cells["table"].map(lambda name: not _refs(spec.tables[name]))]
    return list(dict.fromkeys(zip(missing["table"], missing["status"])))


def print_check(
    spec: PaperSpec,
    view: ResultsView,
    tables: dict[str, ReportTable],
    tolerance: float | None = None,
    quiet: bool = False,
) -> int:
    """Print one line per cell (``quiet``: only those not OK), the commands that would make the
    missing runs, and the counts; return the exit status: 1 when a cell differs, else 0."""
    cells = check(tables, tolerance)
    for cell in cells.itertuples():
        if not (quiet and cell.check == "OK"):
            print(format_line(cell))
    commands = missing_commands(spec, view, tables)
    if commands:
        print(f"\nRuns that would fill the MISSING cells ({len(commands)}):")
        for line in commands:
            print(f"  {line}")
    inputs = missing_inputs(spec, cells)
    if inputs:
        print(f"\nOther inputs the MISSING cells need ({len(inputs)}):")
        for name, status in inputs:
            print(f"  {name:<36} {status}")
    counts = Counter(cells["check"])
    print(
        "\nSummary:",
        ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES),
        f"of {len(cells)} cells in {len(tables)} tables",
    )
    for name, group in cells.groupby("table", sort=False):
        c = Counter(group["check"])
        print(f"  {name:<38} " + "  ".join(f"{s} {c.get(s, 0):>4}" for s in STATUSES))
    return 1 if counts.get("DIFF", 0) else 0

"""``make check``: every published cell against its reproduction, like pyserini's two-click
reproductions. One line per cell:

    OK       table13_overall  DOM-BM25 | Macro | RecallAll@5   48.37 vs 48.37  (+0.00, tol 0.05)
    DIFF     ...
    MISSING  ...              no run vl-docir/colnomic7b/base (runnable on a GPU node)

then the commands that would make the missing runs (each on the compared benchmark's own
``conf/dataset`` entry, so that it runs as printed), what else the missing cells need (the
benchmark for Table 1, an imported audit for Table 12, the cleaning stage's files), and a summary
that says per table what its reproduced numbers come from (runs on the compared benchmark, its
documents table, the imported audit, the labelled queries of the cleaning ablations).
The exit status is 1 when a cell differs by more than its tolerance (``conf/paper_tables.yaml``:
``tolerance``, per table or overall; ``tolerance=`` overrides), 0 otherwise; missing cells alone do
not fail the check.

    python -m vldocir.apps.report do=[check] [benchmark=NAME] [tolerance=0.05] [quiet=true]    # make check
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vldocir.config_checks import CONF_DIR
from vldocir.reporting.outputs import CELL_COLUMNS, ReportTable
from vldocir.reporting.paper import PaperSpec, RunRef
from vldocir.reporting.store_view import ResultsView

DATASET_DIR = CONF_DIR / "dataset"

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
        cell_status(p, r, t)
        for p, r, t in zip(cells["published"], cells["reproduced"], cells["tolerance"], strict=True)
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


def compared_dataset(spec: PaperSpec, view: ResultsView, dataset_dir: Path = DATASET_DIR) -> str | None:
    """The ``conf/dataset`` entry of the compared benchmark: the manifest's for the paper's
    benchmark, else the entry of that name (``None``: there is none)."""
    if view.benchmark == spec.benchmark:
        return spec.dataset
    if view.bench.dataset:
        return view.bench.dataset
    for path in sorted(dataset_dir.glob("*.yaml")):
        raw = OmegaConf.load(path)
        try:  # the name only: a source may need paths this check does not have
            if "defaults" not in raw and str(OmegaConf.create({"dataset": raw}).dataset.name) == view.benchmark:
                return path.stem
        except OmegaConfBaseException:
            continue
    return None


def _derived(entry: str, dataset_dir: Path) -> tuple[str, dict] | None:
    """``(parent entry, derive node)`` of a derived ``conf/dataset`` entry (the reduced corpora), else ``None``."""
    path = dataset_dir / f"{entry}.yaml"
    if not path.is_file():
        return None
    raw = OmegaConf.to_container(OmegaConf.load(path))
    defaults = [d for d in raw.get("defaults", []) if isinstance(d, dict)]
    parents = [parent for d in defaults for key, parent in d.items() if key.endswith("@derive.parent")]
    if not parents:
        return None
    return str(parents[0]), {k: v for k, v in (raw.get("derive") or {}).items() if k != "parent"}


def run_command(ref: RunRef, spec: PaperSpec, view: ResultsView, dataset_dir: Path = DATASET_DIR) -> str:
    """The ``run.py`` call that makes ``ref``'s run on the compared benchmark, runnable as printed.

    The paper's benchmark: the manifest's dataset (or the row's own, the reduced corpus). Another
    benchmark (the mini): its own ``conf/dataset`` entry, and for a row on a dataset derived from
    the paper's (``vldocir_reduced``) the same derivation of the compared one: the entry that
    derives it (``mini_reduced``), else the row's entry with its parent replaced.
    """
    if view.benchmark == spec.benchmark:
        return ref.command(spec.dataset)
    compared = compared_dataset(spec, view, dataset_dir) or "<its conf/dataset entry>"
    derived = None if ref.dataset is None else _derived(ref.dataset, dataset_dir)
    if derived is None:
        return replace(ref, dataset=None).command(compared)
    derive = derived[1]
    for path in sorted(dataset_dir.glob("*.yaml")):
        if _derived(path.stem, dataset_dir) == (compared, derive):
            return replace(ref, dataset=None).command(path.stem)
    return replace(ref, dataset=None).command(f"{ref.dataset} dataset@dataset.derive.parent={compared}")


def missing_commands(spec, view: ResultsView, names, dataset_dir: Path = DATASET_DIR) -> list[str]:
    """The run.py commands for the mapped runs that are not in the store, once each."""
    refs: dict[str, RunRef] = {}
    for name in names:
        for ref in _refs(spec.tables[name]):
            refs.setdefault(ref.store_path(view.benchmark), ref)
    return [
        f"{path:<52} {run_command(ref, spec, view, dataset_dir)}   # {ref.status}"
        for path, ref in sorted(refs.items())
        if view.get(ref) is None
    ]


def reproduced_from(spec: PaperSpec, view: ResultsView, table: ReportTable) -> str:
    """What a table's reproduced numbers come from, for the summary: the runs of the benchmarks its
    rows map to; the labelled queries that the cleaning stage's files were computed on (Tables
    6-10, which no benchmark's runs enter); else the table's own caption text."""
    entry = spec.tables.get(table.name, {})
    refs = _refs(entry)
    if refs:
        return "runs on " + " and ".join(dict.fromkeys(ref.benchmark_for(view.benchmark) for ref in refs))
    if entry.get("layout") != "confusion":
        return table.reproduced_from.replace("`", "")
    sets = {}
    for path in dict.fromkeys(p for p in table.cells["run"] if p):
        try:
            record = json.loads(Path(path).read_text())
            labelled = record["labelled_set"]
            held_out = record.get("evaluated_on") == "held_out"
            sets[(str(labelled["path"]), int(labelled["rows"]))] = held_out
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not sets:
        return f"the cleaning ablations' labelled queries (no results/cleaning files yet), not runs on {view.benchmark}"
    described = [
        f"{Path(path).name} ({rows} queries{'; scored on a held-out part' if held_out else ''})"
        for (path, rows), held_out in sets.items()
    ]
    return f"the cleaning ablations' labelled set {', '.join(described)}, not runs on {view.benchmark}"


def missing_inputs(spec: PaperSpec, cells: pd.DataFrame) -> list[tuple[str, str]]:
    """Why the MISSING cells of the tables made from no run are missing (the benchmark, an imported
    audit, the cleaning stage's files): (table, reason), once each."""
    missing = cells[(cells["check"] == "MISSING") & cells["table"].map(lambda name: not _refs(spec.tables[name]))]
    return list(dict.fromkeys(zip(missing["table"], missing["status"], strict=True)))


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
        counted = "  ".join(f"{s} {c.get(s, 0):>4}" for s in STATUSES)
        print(f"  {name:<38} {counted}   from {reproduced_from(spec, view, tables[name])}")
    return 1 if counts.get("DIFF", 0) else 0

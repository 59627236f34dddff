"""The paper's tables, reproduced from the results store beside the published numbers.

Each table of ``conf/paper_tables.yaml`` becomes a :class:`ReportTable`: one cell per printed
number, holding the published value (``results/paper/<csv>``), the reproduced value where the
row's run exists in the store (``None`` otherwise: missing, never zero) and the rank groups used to
mark the best / second / third values as the paper does. A table's ``layout`` names the function
below that reads its cells; the CSV fixes its rows and columns. Tables 1 and 12 need no run: they
read the compared benchmark's documents table and its imported audit.

A table whose entry declares ``significance: {baseline: <row or setting>, ...}`` also marks each
reproduced cell whose run differs significantly from the baseline's run on the cell's own aggregate
and metric: a layout says per cell what to test, and
:func:`vldocir.reporting.significance_marks.mark_significance` tests it.

Built by ``python -m vldocir.apps.report`` (``make tables``, :func:`vldocir.reporting.report_tasks.run`),
which writes them as Markdown and LaTeX (:func:`vldocir.reporting.formats.write_tables`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vldocir.queries.cleaning import false_omission_rate  # one definition, shared with the cleaning stage
from vldocir.reporting.audit import ISSUES, AuditSheetError, wilson_interval
from vldocir.reporting.outputs import CELL_COLUMNS, ReportTable
from vldocir.reporting.paper import PaperSpec, PaperSpecError, RunRef, metric_label
from vldocir.reporting.significance_marks import baseline_label, mark_significance
from vldocir.reporting.store_view import ResultsView, StoredRun

log = logging.getLogger(__name__)


class _Cells:
    """Collects a table's cells in printing order."""

    def __init__(self, entry: dict[str, Any], spec: PaperSpec, view: ResultsView):
        self.records: list[dict[str, Any]] = []
        self.tests: list[dict[str, Any] | None] = []  # per cell: what to test against the baseline, if anything
        self.benchmark = view.benchmark
        self.decimals = int(entry.get("decimals", 2))
        self.tolerance = float(entry.get("tolerance", spec.tolerance))

    def add(
        self,
        row: tuple,
        column: str,
        published,
        reproduced,
        run: StoredRun | None,
        ref: RunRef | None,
        group=None,
        decimals: int | None = None,
        tolerance: float | None = None,
        why: str | None = None,
        test: dict[str, Any] | None = None,
    ) -> None:
        """``test``: ``{"baseline": StoredRun | None, "aggregate": ..., "metric": ..., "subset": ...}`` for
        a cell that the table's significance test compares with its baseline run."""
        self.tests.append(None if test is None else {**test, "run": run})
        if run is None:
            if ref is None:
                status = why or f"no run of {self.benchmark} in the store"
            else:
                status = f"no run {ref.store_path(self.benchmark)} ({ref.status or 'not run yet'})"
        else:
            status = "ok" if reproduced is not None else f"{run.label} has no value for {column}"
        self.records.append(
            {
                "row": tuple(row),
                "column": column,
                "published": _float(published),
                "reproduced": _float(reproduced),
                "run": None if run is None else str(run.path),
                "status": status,
                "group": group,
                "decimals": self.decimals if decimals is None else decimals,
                "tolerance": self.tolerance if tolerance is None else tolerance,
            }
        )

    def frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self.records, columns=CELL_COLUMNS)
        frame.attrs["tests"] = self.tests
        return frame


def _float(value) -> float:
    if value is None:
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def _metric_columns(csv: pd.DataFrame) -> list[str]:
    return [c for c in csv.columns if "@" in c]


# -- layouts: one function per kind of table ---------------------------------------------------------


def layout_aggregates(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[list[str], pd.DataFrame]:
    """Rows: model (x aggregate); columns: metrics at k. Tables 3, 13, 14, 15, 19, 20."""
    csv = spec.csv(entry["csv"])
    aggregates = entry["aggregates"]
    has_aggregate = "aggregate" in csv.columns
    metrics = _metric_columns(csv)
    cells = _Cells(entry, spec, view)
    baseline = baseline_label(entry, csv["model"])
    base_run = None if baseline is None else view.get(spec.row_ref(entry, baseline))
    for record in csv.to_dict("records"):
        label = record["model"]
        ref = spec.row_ref(entry, label)
        run = view.get(ref)
        aggregate_label = record["aggregate"] if has_aggregate else None
        values = run.aggregates(entry.get("subset")) if run is not None else None
        values = (values or {}).get(aggregates[aggregate_label], {}) if run is not None else {}
        row = (label, aggregate_label) if has_aggregate else (label,)
        for metric in metrics:
            test = None
            if baseline is not None and label != baseline:
                test = {
                    "baseline": base_run,
                    "aggregate": aggregates[aggregate_label],
                    "metric": metric,
                    "subset": entry.get("subset"),
                }
            cells.add(
                row,
                metric_label(metric),
                record[metric],
                values.get(metric),
                run,
                ref,
                group=(aggregate_label, metric),
                test=test,
            )
    return (["Model", "Aggregate"] if has_aggregate else ["Model"]), cells.frame()


def layout_settings(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[list[str], pd.DataFrame]:
    """Table 4: rows family x aggregate; per setting, nDCGAll@10 and RecallAll@10 (best per row)."""
    csv = spec.csv(entry["csv"])
    cells = _Cells(entry, spec, view)
    baseline = baseline_label(entry, csv["setting"])
    for (family, aggregate), block in csv.groupby(["family", "aggregate"], sort=False):
        base_ref = None if baseline is None else RunRef.from_entry((entry["rows"].get(family) or {}).get(baseline))
        base_run = view.get(base_ref)
        for record in block.to_dict("records"):
            settings = entry["rows"].get(family)
            if settings is None or record["setting"] not in settings:
                raise PaperSpecError(
                    f"Table 4 row {family}/{record['setting']} has no mapping in conf/paper_tables.yaml"
                )
            ref = RunRef.from_entry(settings[record["setting"]])
            run = view.get(ref)
            why = None if ref is not None else "not evaluated in the paper"
            values = (run.aggregates() or {}).get(entry["aggregates"][aggregate], {}) if run is not None else {}
            for metric in entry["metrics"]:
                test = None
                if baseline is not None and record["setting"] != baseline and ref is not None:
                    test = {"baseline": base_run, "aggregate": entry["aggregates"][aggregate], "metric": metric}
                cells.add(
                    (family, aggregate),
                    f"{record['setting']} {metric_label(metric)}",
                    record[metric],
                    values.get(metric),
                    run,
                    ref,
                    group=(family, aggregate, metric),
                    why=why,
                    test=test,
                )
    return ["Family", "Aggregate"], cells.frame()


def layout_structure_view(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[list[str], pd.DataFrame]:
    """Table 5: per structure, the query count and the source-averaged RecallAll@5 of one run."""
    csv = spec.csv(entry["csv"])
    metric = entry["metric"]
    ref = RunRef.from_entry(entry["run"])
    run = view.get(ref)
    cells = _Cells(entry, spec, view)
    value_column = next(c for c in csv.columns if c not in ("evidence_structure", "queries"))
    for record in csv.to_dict("records"):
        structure = spec.structure_id(record["evidence_structure"])
        count = value = None
        if run is not None:
            count = run.structure(structure, "n_queries")
            per_source = [
                run.source_structure(source, structure, metric)
                for source in run.metrics["breakdowns"]["source_structure"]
            ]
            per_source = [v for v in per_source if v is not None]
            value = float(np.mean(per_source)) if per_source else None
        row = (record["evidence_structure"],)
        cells.add(row, "#Queries", record["queries"], count, run, ref, decimals=0, tolerance=0)
        cells.add(row, f"Source-avg {metric_label(metric)}", record[value_column], value, run, ref)
    return ["Evidence structure"], cells.frame()


def layout_source_structure(
    name: str, entry: dict, spec: PaperSpec, view: ResultsView
) -> tuple[list[str], pd.DataFrame]:
    """Table 16: rows source x model; columns the six structures."""
    csv = spec.csv(entry["csv"])
    metric = entry["metric"]
    cells = _Cells(entry, spec, view)
    structures = [c for c in csv.columns if c not in ("source", "model")]
    for record in csv.to_dict("records"):
        source = spec.source_id(record["source"])
        ref = spec.row_ref(entry, record["model"])
        run = view.get(ref)
        for structure in structures:
            value = run.source_structure(source, structure, metric) if run is not None else None
            cells.add(
                (record["source"], record["model"]),
                spec.structure_label(structure),
                record[structure],
                value,
                run,
                ref,
                group=(source, structure),
            )
    return ["Source", "Model"], cells.frame()


def layout_source_structure_by_structure(
    name: str, entry: dict, spec: PaperSpec, view: ResultsView
) -> tuple[list[str], pd.DataFrame]:
    """Table 18: rows structure x model; columns the four sources."""
    csv = spec.csv(entry["csv"])
    metric = entry["metric"]
    cells = _Cells(entry, spec, view)
    sources = [c for c in csv.columns if c not in ("evidence_structure", "model")]
    for record in csv.to_dict("records"):
        structure = spec.structure_id(record["evidence_structure"])
        ref = spec.row_ref(entry, record["model"])
        run = view.get(ref)
        for column in sources:
            source = spec.source_id(column)
            value = run.source_structure(source, structure, metric) if run is not None else None
            cells.add(
                (record["evidence_structure"], record["model"]),
                spec.source_label(source),
                record[column],
                value,
                run,
                ref,
                group=(structure, source),
            )
    return ["Evidence structure", "Model"], cells.frame()


def layout_evidence_type(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[list[str], pd.DataFrame]:
    """Table 17: rows evidence type x model; structure-balanced means within each type group."""
    csv = spec.csv(entry["csv"])
    metrics = _metric_columns(csv)
    groups = spec.labels["evidence_types"]
    cells = _Cells(entry, spec, view)
    tables: dict[str, pd.DataFrame] = {}
    for record in csv.to_dict("records"):
        ref = spec.row_ref(entry, record["model"])
        run = view.get(ref)
        if run is not None and run.label not in tables:
            tables[run.label] = run.balanced("evidence_type", metrics, groups=groups)
        table = tables.get(run.label) if run is not None else None
        for metric in metrics:
            value = None
            if table is not None and record["evidence_type"] in table.index:
                value = table.loc[record["evidence_type"], metric]
            cells.add(
                (record["evidence_type"], record["model"]),
                metric_label(metric),
                record[metric],
                value,
                run,
                ref,
                group=(record["evidence_type"], metric),
            )
    return ["Evidence type", "Model"], cells.frame()


def _query_counts(run: StoredRun | None, by: str) -> pd.DataFrame | None:
    """Queries per value of ``by`` (index) x evidence structure (columns), from a run's rows."""
    if run is None:
        return None
    return run.per_query.groupby([by, "evidence_structure"]).size().unstack(fill_value=0)


def _count(counts: pd.DataFrame | None, row: str | None, column: str | None) -> int | None:
    """One cell of a count table; ``None`` for a key means the total over it."""
    if counts is None:
        return None
    part = counts if row is None else counts.reindex(index=[row], fill_value=0)
    part = part if column is None else part.reindex(columns=[column], fill_value=0)
    return int(part.to_numpy().sum())


def layout_query_counts(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[list[str], pd.DataFrame]:
    """Table 2: queries per structure (rows) x source (columns), with totals; from any run."""
    csv = spec.csv(entry["csv"])
    run = view.any_run()
    counts = _query_counts(run, "source")
    cells = _Cells(entry, spec, view)
    for record in csv.to_dict("records"):
        label = record["evidence_structure"]
        structure = None if label == "Total" else spec.structure_id(label)
        for column in [c for c in csv.columns if c != "evidence_structure"]:
            source = None if column == "total" else spec.source_id(column)
            value = _count(None if counts is None else counts.T, structure, source)
            cells.add(
                (label,), "Total" if source is None else spec.source_label(source), record[column], value, run, None
            )
    return ["Evidence structure"], cells.frame()


def layout_domain_counts(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[list[str], pd.DataFrame]:
    """Table 11: queries per domain (rows) x structure (columns), with totals; from any run."""
    csv = spec.csv(entry["csv"])
    run = view.any_run()
    counts = _query_counts(run, "domain")
    cells = _Cells(entry, spec, view)
    for record in csv.to_dict("records"):
        domain = None if record["domain"] == "Total" else record["domain"]
        for column in [c for c in csv.columns if c != "domain"]:
            structure = None if column == "total" else column
            label = "Total" if structure is None else spec.structure_label(structure)
            cells.add((record["domain"],), label, record[column], _count(counts, domain, structure), run, None)
    return ["Domain"], cells.frame()


CONFUSION_COLUMNS = {
    "actual_removed_pred_removed": "P as P",
    "actual_removed_pred_kept": "P as N",
    "actual_kept_pred_removed": "N as P",
    "actual_kept_pred_kept": "N as N",
    "total": "Total",
}


def layout_confusion(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[list[str], pd.DataFrame]:
    """Tables 6-10: one confusion matrix per cleaning method (rows actual, columns predicted) and
    its false omission rate; reproduced from ``<results>/<store>`` once the cleaning stage writes it."""
    csv = spec.csv(entry["csv"]).set_index("method")
    cells = _Cells(entry, spec, view)
    for label, method in entry["rows"].items():
        if method not in csv.index:
            raise PaperSpecError(f"{name}: method {method!r} is not in {entry['csv']}")
        published = csv.loc[method]
        relative = entry["store"].format(method=method)
        path = view.results_dir / relative
        reproduced = json.loads(path.read_text()) if path.is_file() else None
        if reproduced is not None and "total" not in reproduced:
            reproduced["total"] = sum(reproduced[c] for c in CONFUSION_COLUMNS if c != "total")
        source = _ResultFile(path) if reproduced is not None else None
        why = f"no {relative} in the results directory (written by the cleaning stage)"
        for column, display in CONFUSION_COLUMNS.items():
            cells.add(
                (label,),
                display,
                published[column],
                None if reproduced is None else reproduced.get(column),
                source,
                None,
                decimals=0,
                tolerance=0,
                why=why,
            )
        cells.add(
            (label,),
            "FOR",
            published["reported_for"],
            None if reproduced is None else false_omission_rate(reproduced),
            source,
            None,
            decimals=4,
            tolerance=0.00005,
            why=why,
        )
    return ["Method"], cells.frame()


class _ResultFile:
    """Where a table's reproduction is one results file rather than a store entry."""

    def __init__(self, path: Path):
        self.path, self.label = path, path.name


def layout_benchmark_sources(
    name: str, entry: dict, spec: PaperSpec, view: ResultsView
) -> tuple[list[str], pd.DataFrame]:
    """Table 1: documents and mean pages per document, per source and in total, from the compared
    benchmark's documents table (:attr:`ResultsView.bench`), not from runs."""
    csv = spec.csv(entry["csv"])
    bench = view.bench
    documents = bench.documents()
    cells = _Cells(entry, spec, view)
    for record in csv.to_dict("records"):
        label = record["source"]
        docs = pages = None
        if documents is not None:
            rows = documents if label == "Total" else documents[documents["source"] == spec.source_id(label)]
            docs, pages = len(rows), (float(rows["n_pages"].mean()) if len(rows) else None)
        source = None if documents is None else bench
        cells.add((label,), "Docs", record["docs"], docs, source, None, decimals=0, tolerance=0, why=bench.found)
        cells.add((label,), "Avg. Pages", record["avg_pages"], pages, source, None, why=bench.found)
    return ["Source"], cells.frame()


AUDIT_REPORT = "report.json"  # what `python -m vldocir.apps.audit do=import` writes into its out_dir


def _audit_command(view: ResultsView, spec: PaperSpec) -> str:
    dataset = spec.dataset if view.benchmark == spec.benchmark else view.bench.dataset
    where = f" dataset={dataset}" if dataset else " dataset=<its conf/dataset entry>"
    return (
        f"python -m vldocir.apps.audit{where}, review the sheet it writes, then "
        f"python -m vldocir.apps.audit{where} do=import"
    )


def layout_audit(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[list[str], pd.DataFrame]:
    """Table 12: per source x structure and in total, the audited queries found correct, the issue
    counts (F, E, U, N), the accuracy and its Wilson interval, reproduced from the imported audit
    (``<audit_dir>/report.json``). The paper prints the interval for the total only; the published
    accuracy and interval of every row are computed from its printed counts, as the reproduced ones
    are from the audit's."""
    csv = spec.csv(entry["csv"])
    path = view.audit_dir / AUDIT_REPORT
    report = _read_audit(path) if path.is_file() else None
    source = None if report is None else _ResultFile(path)
    why = f"no imported audit {path} ({_audit_command(view, spec)})"
    confidence = float(entry.get("confidence", 0.95))
    level = f"{round(100 * confidence)}%"
    cells = _Cells(entry, spec, view)
    strata = {}
    if report is not None:
        strata = {(c["source"], c["evidence_structure"]): c for c in report["strata"]}
        strata[None] = report["overall"]
    for record in csv.to_dict("records"):
        total_row = record["source"] == "Total"
        key = None if total_row else (spec.source_id(record["source"]), spec.structure_id(record["evidence_structure"]))
        row = ("Total", None) if total_row else (record["source"], record["evidence_structure"])
        found = strata.get(key)
        reproduced = {} if found is None else {"correct": found["correct"], "total": found["total"], **found["issues"]}
        for column in ("correct", "total", *ISSUES):
            cells.add(
                row,
                column.capitalize() if column in ("correct", "total") else column,
                record[column],
                reproduced.get(column),
                source,
                None,
                decimals=0,
                tolerance=0,
                why=why,
            )
        published = _accuracy(record["correct"], record["total"], confidence)
        ours = _accuracy(reproduced["correct"], reproduced["total"], confidence) if reproduced else (None, None, None)
        # The paper's decimals (93.25%, 91.3-94.8); OK within half a unit of the last printed digit.
        for column, pub, rep, decimals in zip(
            ("Accuracy (%)", f"Wilson {level} low", f"Wilson {level} high"), published, ours, (2, 1, 1), strict=True
        ):
            cells.add(row, column, pub, rep, source, None, decimals=decimals, tolerance=0.5 * 10**-decimals, why=why)
    return ["Source", "Evidence structure"], cells.frame()


def _read_audit(path: Path) -> dict:
    """The ``accuracy`` section of an imported audit's report (``overall`` and ``strata``, each with
    ``correct``, ``total`` and ``issues``)."""
    try:
        accuracy = json.loads(path.read_text())["accuracy"]
        cells = [accuracy["overall"], *accuracy["strata"]]
        if not all({"correct", "total", "issues"} <= set(cell) for cell in cells):
            raise KeyError("correct, total or issues")
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise AuditSheetError(
            f"{path}: not a report of `python -m vldocir.apps.audit do=import` ({error!r}); import the sheet again"
        ) from error
    return accuracy


def _accuracy(correct, total, confidence: float) -> tuple[float | None, float | None, float | None]:
    """Accuracy and its Wilson interval, in percent (``None`` for an empty stratum)."""
    correct, total = int(correct), int(total)
    if total == 0:
        return None, None, None
    low, high = wilson_interval(correct, total, confidence)
    return 100 * correct / total, 100 * low, 100 * high


LAYOUTS: dict[str, Callable[..., tuple[list[str], pd.DataFrame]]] = {
    "aggregates": layout_aggregates,
    "settings": layout_settings,
    "structure_view": layout_structure_view,
    "source_structure": layout_source_structure,
    "source_structure_by_structure": layout_source_structure_by_structure,
    "evidence_type": layout_evidence_type,
    "query_counts": layout_query_counts,
    "domain_counts": layout_domain_counts,
    "confusion": layout_confusion,
    "benchmark_sources": layout_benchmark_sources,
    "audit": layout_audit,
}


def _reproduced_from(layout: str, entry: dict, view: ResultsView) -> str:
    """For the caption: what a table not made from runs is reproduced from ("" for runs)."""
    if layout == "confusion":
        return f"the cleaning stage's `{entry['store']}` files"
    if layout == "benchmark_sources":
        return f"the documents table of `{view.bench.name}`"
    if layout == "audit":
        return f"the imported audit `{view.audit_dir / AUDIT_REPORT}`"
    return ""


def build_table(name: str, spec: PaperSpec, view: ResultsView, cache_dir: Path | None = None) -> ReportTable:
    """One table of the manifest; ``cache_dir``: where significance results are cached (``paths.cache_dir``)."""
    entry = spec.tables[name]
    layout = entry.get("layout")
    if layout not in LAYOUTS:
        raise PaperSpecError(f"table {name}: unknown layout {layout!r} (one of {sorted(LAYOUTS)})")
    index, cells = LAYOUTS[layout](name, entry, spec, view)
    markers, significance = mark_significance(entry, cells, cache_dir)
    cells.attrs.pop("tests", None)
    cells["marker"] = markers
    columns = list(dict.fromkeys(cells["column"]))
    return ReportTable(
        name=name,
        title=entry.get("title", name),
        index=index,
        columns=columns,
        cells=cells,
        benchmark=view.benchmark,
        marks=entry.get("marks", "none"),
        reproduced_from=_reproduced_from(layout, entry, view),
        significance=significance,
    )


def build_tables(
    spec: PaperSpec, view: ResultsView, names: list[str] | None = None, cache_dir: Path | None = None
) -> dict[str, ReportTable]:
    """The tables ``names`` (default: every table of the manifest)."""
    names = list(spec.tables) if names is None else names
    return {name: build_table(name, spec, view, cache_dir) for name in names}

"""The table printed at the end of a run: headline aggregates and the per-structure view."""

from __future__ import annotations

import pandas as pd

from vldocir.data.schema import EVIDENCE_STRUCTURES, UNKNOWN_DOCUMENTS_STRUCTURE
from vldocir.evaluation.aggregate import HEADLINE_AGGREGATES, headline_columns

INTERVAL_LEVEL, INTERVAL_RESAMPLES, INTERVAL_SEED = 0.95, 2000, 0


def headline_intervals(per_query: pd.DataFrame, ks) -> pd.DataFrame:
    """The stratified bootstrap intervals of the headline aggregates (``eval.intervals=true``):
    :func:`vldocir.evaluation.significance.bootstrap_intervals` at :data:`INTERVAL_LEVEL`, seeded."""
    from vldocir.evaluation.significance import bootstrap_intervals

    return bootstrap_intervals(
        per_query,
        headline_columns(ks),
        level=INTERVAL_LEVEL,
        n_resamples=INTERVAL_RESAMPLES,
        seed=INTERVAL_SEED,
        cells=False,
    )


def headline_table(metrics: dict, intervals: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rows: aggregations; columns: nDCGAll@k and RecallAll@k for each k (percent). With ``intervals``
    (:func:`headline_intervals`), each cell is text: the value and the interval's half-width (``56.45 ±2.10``)."""
    ks = metrics["ks"]
    columns = headline_columns(ks)
    if intervals is not None:
        half = {(r.aggregate, r.metric): (r.high - r.low) / 2 for r in intervals.itertuples()}
        rows = {
            label: {c: f"{metrics['aggregates'][name][c]:6.2f} ±{half[(name, c)]:.2f}" for c in columns}
            for name, label in HEADLINE_AGGREGATES.items()
        }
        return pd.DataFrame.from_dict(rows, orient="index")[columns]
    rows = {label: {c: metrics["aggregates"][name][c] for c in columns} for name, label in HEADLINE_AGGREGATES.items()}
    return pd.DataFrame.from_dict(rows, orient="index")[columns]


def structure_table(metrics: dict) -> pd.DataFrame:
    """Rows: evidence structures (with query counts); columns: every metric at every k (percent)."""
    frame = pd.DataFrame.from_dict(metrics["breakdowns"]["structure"], orient="index")
    frame.index.name = "evidence_structure"
    return frame


def format_report(metrics: dict, run_dir, reused: bool, intervals: pd.DataFrame | None = None) -> str:
    """The report printed at the end of a run. Without a ``protocol`` section in ``metrics`` it is
    what it always was; with one, it names the protocol and its main score, and for a protocol with
    subsets one row per subset and their mean (:mod:`vldocir.evaluation.protocol`)."""
    head = headline_table(metrics, intervals)
    ks = metrics["ks"]
    per_structure = structure_table(metrics)[["n_queries", *[f"recallall@{k}" for k in ks]]]
    missing = metrics["n_queries_missing_from_run"]
    language = metrics.get("language")
    protocol = metrics.get("protocol")
    # a protocol with subsets, more than one of them here (eval.language leaves one: reported as before)
    subsets = protocol["subsets"] if protocol and protocol["subsets"] and len(protocol["per_subset"]) > 1 else None
    if subsets:  # counts per subset (the mean over subsets where they differ)
        per_structure = per_structure.astype({"n_queries": object})
        per_structure["n_queries"] = per_structure["n_queries"].map(_count)
        per_structure = per_structure.rename(columns={"n_queries": f"n_queries per {subsets}"})
        counts = sorted({row["n_queries"] for row in protocol["per_subset"].values()})
        each = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        title = (
            f"Headline metrics (percent): the mean over the {len(protocol['per_subset'])} {subsets}s, each its own "
            f"query set of {each} queries ({metrics['n_queries']} in all)"
        )
    else:
        per_structure = per_structure.astype({"n_queries": int})
        title = f"Headline metrics (percent), {metrics['n_queries']} queries" + (
            f" in language {language}" if language else ""
        )
    lines = [
        "",
        *(_protocol_lines(protocol, subsets) if protocol else []),
        title + (f", {missing} absent from the run (scored 0)" if missing else ""),
        head.to_string(float_format=lambda v: f"{v:6.2f}"),
        *(
            []
            if intervals is None
            else [
                f"±: half-width of the {INTERVAL_LEVEL:.0%} bootstrap interval over queries, resampled within the "
                f"cells each aggregate balances ({INTERVAL_RESAMPLES} resamples, seed {INTERVAL_SEED})"
            ]
        ),
        *(_subset_lines(protocol, ks) if subsets else []),
        "",
        "RecallAll@k by evidence structure" + (f" (the mean over the {subsets}s)" if subsets else ""),
        per_structure.to_string(float_format=lambda v: f"{v:6.2f}"),
    ]
    empty = metrics["empty"]["structures"]
    if empty:
        present = metrics.get("macro_structures") or list(per_structure.index)
        lines.append(
            f"No queries for: {', '.join(empty)}; Macro is the mean over the {len(present)} "
            f"structure(s) present ({', '.join(present)})"
        )
    for label, row in metrics["breakdowns"]["structure"].items():
        if label not in EVIDENCE_STRUCTURES:
            lines.append(
                f"{_count(row['n_queries'])} queries{f' per {subsets}' if subsets else ''} labelled {label}"
                f"{' (multi-page, documents unknown)' if label == UNKNOWN_DOCUMENTS_STRUCTURE else ''} are left "
                "out of the structure Macro (and of every structure-balanced mean); Micro counts them"
            )
    by_language = metrics["breakdowns"].get("language")
    if by_language and len(by_language) > 1 and subsets != "language":
        table = pd.DataFrame.from_dict(by_language, orient="index")[["n_queries", *[f"recallall@{k}" for k in ks]]]
        table.index.name = "language"
        lines += [
            "",
            "RecallAll@k by language (structure-balanced)",
            table.astype({"n_queries": int}).to_string(float_format=lambda v: f"{v:6.2f}"),
        ]
    if "pooled" in metrics:
        lines += [
            "",
            f"Pooled view (eval.pooled=true): all {metrics['n_queries']} queries as one query set, every "
            f"{protocol['subsets']}'s queries together",
            headline_table(metrics["pooled"]).to_string(float_format=lambda v: f"{v:6.2f}"),
        ]
    lines += ["", f"Run directory: {run_dir}" + ("  (run reused from the store)" if reused else ""), ""]
    return "\n".join(lines)


def _count(value) -> str:
    """A query count: an int, or (a mean over subsets) one decimal."""
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _protocol_lines(protocol: dict, subsets: str | None) -> list[str]:
    """The protocol's name, main score and scope (a warning where the run's scope is not the protocol's).
    ``subsets``: the subsets column when there are several subsets to average."""
    main = protocol["main_score"]
    value = protocol["mean"][main]
    if subsets:
        over = f"the mean over each {subsets}'s queries, then over the {len(protocol['per_subset'])} {subsets}s"
    elif protocol["subsets"]:
        only = next(iter(protocol["per_subset"]))
        over = f"the mean over the {protocol['mean']['n_queries']} queries of {protocol['subsets']} {only}"
    else:
        over = f"the mean over the {protocol['mean']['n_queries']} queries"
    lines = [f"Protocol: {protocol['name']}; main score {main} = {value:.2f} ({over})"]
    if protocol.get("summary"):
        lines.append(f"  {protocol['summary']}")
    run_scope = protocol.get("run_scope")
    if run_scope and run_scope != protocol["scope"]:
        fix = (
            "run setting=doc_scope for the protocol's numbers"
            if protocol["scope"] == "document"
            else "run a corpus setting, e.g. setting=base, for the protocol's numbers"
        )
        lines.append(
            f"  Scope: the protocol's is {protocol['scope']}, this run's is {run_scope}: the numbers are not the "
            f"protocol's ({fix})"
        )
    return [*lines, ""]


def _subset_lines(protocol: dict, ks) -> list[str]:
    """One row per subset (queries, main score, Macro nDCGAll@k and RecallAll@k) and their mean."""
    main, columns = protocol["main_score"], headline_columns(ks)
    rows = {**protocol["per_subset"], "mean": protocol["mean"]}
    table = pd.DataFrame.from_dict(
        {
            name: {"n_queries": _count(row["n_queries"]), main: row[main]}
            | {f"Macro {c}": row["aggregates"]["macro"][c] for c in columns}
            for name, row in rows.items()
        },
        orient="index",
    )
    table.index.name = protocol["subsets"]
    return ["", f"By {protocol['subsets']} (percent)", table.to_string(float_format=lambda v: f"{v:6.2f}")]

"""The table printed at the end of a run: headline aggregates and the per-structure view."""

from __future__ import annotations

import pandas as pd

from vldocir.evaluation.metrics import metric_columns

HEADLINE_AGGREGATES = {
    "macro": "Macro",
    "micro": "Micro",
    "source_macro": "Source Macro",
    "domain_macro": "Domain Macro",
}


INTERVAL_LEVEL, INTERVAL_RESAMPLES, INTERVAL_SEED = 0.95, 2000, 0


def headline_columns(ks) -> list[str]:
    return [c for c in metric_columns(ks) if c.startswith(("ndcgall@", "recallall@"))]


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
    head = headline_table(metrics, intervals)
    ks = metrics["ks"]
    per_structure = structure_table(metrics)[["n_queries", *[f"recallall@{k}" for k in ks]]]
    per_structure = per_structure.astype({"n_queries": int})
    missing = metrics["n_queries_missing_from_run"]
    language = metrics.get("language")
    lines = [
        "",
        f"Headline metrics (percent), {metrics['n_queries']} queries"
        + (f" in language {language}" if language else "")
        + (f", {missing} absent from the run (scored 0)" if missing else ""),
        head.to_string(float_format=lambda v: f"{v:6.2f}"),
        *(
            []
            if intervals is None
            else [
                f"±: half-width of the {INTERVAL_LEVEL:.0%} bootstrap interval over queries, resampled within the "
                f"cells each aggregate balances ({INTERVAL_RESAMPLES} resamples, seed {INTERVAL_SEED})"
            ]
        ),
        "",
        "RecallAll@k by evidence structure",
        per_structure.to_string(float_format=lambda v: f"{v:6.2f}"),
    ]
    empty = metrics["empty"]["structures"]
    if empty:
        present = metrics.get("macro_structures") or list(per_structure.index)
        lines.append(
            f"No queries for: {', '.join(empty)}; Macro is the mean over the {len(present)} "
            f"structure(s) present ({', '.join(present)})"
        )
    by_language = metrics["breakdowns"].get("language")
    if by_language and len(by_language) > 1:
        table = pd.DataFrame.from_dict(by_language, orient="index")[["n_queries", *[f"recallall@{k}" for k in ks]]]
        table.index.name = "language"
        lines += [
            "",
            "RecallAll@k by language (structure-balanced)",
            table.astype({"n_queries": int}).to_string(float_format=lambda v: f"{v:6.2f}"),
        ]
    lines += ["", f"Run directory: {run_dir}" + ("  (run reused from the store)" if reused else ""), ""]
    return "\n".join(lines)

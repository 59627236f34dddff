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


def headline_table(metrics: dict) -> pd.DataFrame:
    """Rows: aggregations; columns: nDCGAll@k and RecallAll@k for each k (percent)."""
    ks = metrics["ks"]
    columns = [c for c in metric_columns(ks) if c.startswith(("ndcgall@", "recallall@"))]
    rows = {label: {c: metrics["aggregates"][name][c] for c in columns} for name, label in HEADLINE_AGGREGATES.items()}
    return pd.DataFrame.from_dict(rows, orient="index")[columns]


def structure_table(metrics: dict) -> pd.DataFrame:
    """Rows: evidence structures (with query counts); columns: every metric at every k (percent)."""
    frame = pd.DataFrame.from_dict(metrics["breakdowns"]["structure"], orient="index")
    frame.index.name = "evidence_structure"
    return frame


def format_report(metrics: dict, run_dir, reused: bool) -> str:
    head = headline_table(metrics)
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

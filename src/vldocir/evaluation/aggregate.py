"""Aggregations and breakdowns of per-query metrics (paper Eq. 7, 9–11; App. B).

All reported values are percentages. Structure-balanced Macro averages the per-structure means;
source and domain Macro first balance structures within each source/domain, then average the
sources/domains. A structure (or source × structure cell) without queries is listed under
``empty`` and left out of the average it would have entered; nothing is filled with zeros: on a
benchmark that lacks structures (most imported ones), Macro is the mean over the structures present
(``macro_structures``), in the paper's order, and the printed report names the missing ones.

Breakdowns by evidence type and generator, and by language where the queries carry one (ViDoRe
v2/v3), are structure-balanced like source and domain. ``eval.language=<code>`` evaluates one
language's queries alone (:func:`language_subset`; every aggregate over those queries).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from vldocir.data.schema import EVIDENCE_STRUCTURES, MULTI_PAGE_STRUCTURES
from vldocir.errors import ConfigError
from vldocir.evaluation.codes import LANGUAGE
from vldocir.evaluation.metrics import metric_columns

STRUCTURE = "evidence_structure"
HEADLINE_METRICS = ("ndcgall", "recallall")
"""The metrics of the headline table (and of a protocol's per-subset records)."""


HEADLINE_AGGREGATES = {
    "macro": "Macro",
    "micro": "Micro",
    "source_macro": "Source Macro",
    "domain_macro": "Domain Macro",
}
"""The headline aggregates (``metrics.json`` key: printed label), in the console's order."""


def headline_columns(ks) -> list[str]:
    """``ndcgall@k`` and ``recallall@k`` for each k, in :func:`metric_columns`' order."""
    return [c for c in metric_columns(ks) if c.startswith(tuple(f"{m}@" for m in HEADLINE_METRICS))]


def _records(frame: pd.DataFrame) -> dict:
    return {str(k): {c: _num(v) for c, v in row.items()} for k, row in frame.iterrows()}


def _num(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if np.isnan(value) else round(float(value), 6)
    return value


def _present_structures(per_query: pd.DataFrame) -> list[str]:
    present = set(per_query[STRUCTURE].unique())
    return [s for s in EVIDENCE_STRUCTURES if s in present]


def balanced_by(per_query: pd.DataFrame, by: str, columns: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """Per value of ``by``: the structure-balanced mean (M_g of Eq. 9) of each column, in percent.

    Returns the table (index = group value, plus ``n_queries`` and ``n_structures``) and the list
    of empty ``group/structure`` cells among the structures present in the benchmark. Queries of a
    label outside :data:`EVIDENCE_STRUCTURES` (``multi_page_docs_unknown``) are left out, as they are
    of Macro: a structure-balanced mean balances the six structures.
    """
    known = per_query[STRUCTURE].isin(EVIDENCE_STRUCTURES)
    if not known.all():
        per_query = per_query[known]
    cells = per_query.groupby([by, STRUCTURE], observed=True)[list(columns)].mean()
    balanced = cells.groupby(level=0).mean() * 100
    balanced.insert(0, "n_structures", cells.groupby(level=0).size())
    balanced.insert(0, "n_queries", per_query.groupby(by).size())
    structures = _present_structures(per_query)
    empty = [f"{group}/{s}" for group in balanced.index for s in structures if (group, s) not in cells.index]
    return balanced, empty


def summarise(per_query: pd.DataFrame, ks: Sequence[int]) -> dict:
    """Everything ``metrics.json`` holds: aggregates, breakdowns, evidence completeness."""
    columns = metric_columns(ks)
    structures = _present_structures(per_query)
    by_structure = per_query.groupby(STRUCTURE)[columns].mean() * 100
    by_structure.insert(0, "n_queries", per_query.groupby(STRUCTURE).size())
    others = sorted(set(by_structure.index) - set(EVIDENCE_STRUCTURES))
    by_structure = by_structure.reindex([s for s in EVIDENCE_STRUCTURES if s in by_structure.index] + others)

    source_table, source_empty = balanced_by(per_query, "source", columns)
    domain_table, domain_empty = balanced_by(per_query, "domain", columns)
    aggregates = {
        "macro": by_structure.loc[structures, columns].mean(),
        "micro": per_query[columns].mean() * 100,
        "source_macro": source_table[columns].mean(),
        "domain_macro": domain_table[columns].mean(),
    }
    source_structure = per_query.groupby(["source", STRUCTURE])[columns].mean() * 100
    source_structure.insert(0, "n_queries", per_query.groupby(["source", STRUCTURE]).size())

    breakdowns = {
        "structure": _records(by_structure),
        "source_structure": {
            str(source): _records(group.droplevel(0)) for source, group in source_structure.groupby(level=0)
        },
        "source": _records(source_table),
        "domain": _records(domain_table),
    }
    for by in ("evidence_type", "generator", LANGUAGE):
        if by in per_query.columns:
            table, _ = balanced_by(per_query, by, columns)
            breakdowns[by] = _records(table)

    return {
        "ks": sorted(int(k) for k in ks),
        "n_queries": len(per_query),
        "n_queries_missing_from_run": int((~per_query["in_run"]).sum()),
        "macro_structures": structures,
        "aggregates": {name: {c: _num(v) for c, v in values.items()} for name, values in aggregates.items()},
        "empty": {
            "structures": [s for s in EVIDENCE_STRUCTURES if s not in structures],
            "source_structure_cells": source_empty,
            "domain_structure_cells": domain_empty,
        },
        "breakdowns": breakdowns,
        "evidence_completeness": evidence_completeness(per_query, ks),
    }


def evidence_completeness(per_query: pd.DataFrame, ks: Sequence[int]) -> dict:
    """For multi-page queries: share (percent) whose evidence pages / documents are all, partly or
    not at all in the top k, per structure and overall (paper Fig. 11)."""
    multi = per_query[per_query[STRUCTURE].isin(MULTI_PAGE_STRUCTURES)]
    result: dict = {"page": {}, "document": {}}
    for level, found_col, total_col in (
        ("page", "pages_found", "n_evidence_pages"),
        ("document", "docs_found", "n_evidence_docs"),
    ):
        for k in sorted(ks):
            found, total = multi[f"{found_col}@{k}"], multi[total_col]
            split = pd.DataFrame(
                {
                    STRUCTURE: multi[STRUCTURE],
                    "all": found == total,
                    "partial": (found > 0) & (found < total),
                    "none": found == 0,
                }
            )
            table = split.groupby(STRUCTURE)[["all", "partial", "none"]].mean() * 100
            table.loc["all_multi_page"] = split[["all", "partial", "none"]].mean() * 100
            result[level][f"@{k}"] = _records(table)
    return result


LANGUAGE_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
"""What ``eval.language`` may be: it names a results-store directory (``<benchmark>.lang-<language>``)."""


def check_language(languages: pd.Series, language: str) -> None:
    """``eval.language`` must be one of the benchmark's query languages (``languages``: the queries'
    language column, null where not stated); raises :class:`ConfigError` naming those present."""
    present = sorted(set(languages.dropna().astype(str)))
    if not LANGUAGE_PATTERN.fullmatch(language):
        raise ConfigError(f"eval.language={language!r} must match [A-Za-z0-9_-]+ (e.g. en, fr, pt-BR)")
    if language not in present:
        found = f"its queries' languages are {', '.join(present)}" if present else "its queries state no language"
        raise ConfigError(f"eval.language={language}: no query of the benchmark is in {language} ({found})")


def language_subset(per_query: pd.DataFrame, language: str) -> pd.DataFrame:
    """The per-query rows of one language (``eval.language``), for :func:`summarise`."""
    if LANGUAGE not in per_query.columns:
        raise ConfigError(f"eval.language={language}: the benchmark's queries state no language")
    return per_query[per_query[LANGUAGE] == language].reset_index(drop=True)

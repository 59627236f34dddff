"""A public benchmark's own evaluation protocol (the ``protocol:`` block of a dataset config), and the
summary it asks for.

A protocol names whose protocol the numbers follow, its **main score** (``<metric>@<k>``: the mean
over queries of a per-query metric, as mteb reports it), its **subsets** (a queries column such as
``language``: each value is a query set of its own, evaluated alone, and every aggregate is the
mean over subsets, as mteb averages a task's hf_subsets; ``null``: one query set) and its search
**scope** (``corpus``, or ``document``: pages ranked within the query's own document, which
``setting=doc_scope`` computes). ``mteb_task`` (optional) names the task in mteb's registry whose
numbers the protocol reproduces (e.g. ``Vidore2ESGReportsRetrieval``): results exported in mteb's
format (``python -m vldocir.store export --format mteb``) carry that task name; it changes no metric.

:func:`summarise_protocol` is :func:`~vldocir.evaluation.aggregate.summarise` under a protocol:
without subsets it is ``summarise`` plus the ``protocol`` section; with subsets each subset is
summarised alone and every number of ``metrics.json`` (aggregates, breakdowns, evidence
completeness; query counts too, which then read "per subset") is the mean over the subsets that
have it, so a query translated into six languages counts once per language's query set, never six
times in one. ``eval.pooled=true`` adds the pooled view (all queries as one set) under ``pooled``.
Without a protocol, nothing here runs and ``metrics.json`` is as it always was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import ConfigError
from vldocir.evaluation.aggregate import HEADLINE_AGGREGATES, headline_columns, summarise

MAIN_SCORE_METRICS = ("ndcg", "recall", "mrr", "ndcgall", "recallall")
"""What a main score may average per query (``mrr``: the per-query ``mrr@k`` column)."""
SUBSET_COLUMNS = ("language", "domain", "source", "generator")
"""The query attributes a protocol may split the queries by."""
SCOPES = ("corpus", "document")
PROTOCOL_KEYS = ("name", "main_score", "subsets", "scope", "summary", "mteb_task")

_MAIN_SCORE = re.compile(rf"({'|'.join(MAIN_SCORE_METRICS)})@([1-9][0-9]*)")


@dataclass(frozen=True)
class Protocol:
    """A dataset config's ``protocol:`` block (see ``docs/evaluation.md``)."""

    name: str
    main_score: str
    subsets: str | None = None
    scope: str = "corpus"
    summary: str = ""
    mteb_task: str | None = None
    """The mteb task (its registry name) whose numbers this protocol reproduces; ``None``: none does."""

    @classmethod
    def from_config(cls, block: Mapping[str, Any] | None) -> Protocol | None:
        """From ``cfg.dataset.protocol`` (``None``: no protocol); a bad block is one :class:`ConfigError` line."""
        if block is None:
            return None
        if not isinstance(block, Mapping):
            raise ConfigError(f"dataset.protocol must be a mapping of {', '.join(PROTOCOL_KEYS)}, got {block!r}")
        unknown = sorted(set(block) - set(PROTOCOL_KEYS))
        if unknown:
            raise ConfigError(
                f"dataset.protocol: unknown key(s) {', '.join(unknown)}; it takes {', '.join(PROTOCOL_KEYS)}"
            )
        name, main_score = block.get("name"), block.get("main_score")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(
                "dataset.protocol.name must name whose protocol it is, e.g. 'mteb Vidore2ESGReportsRetrieval'"
            )
        if not isinstance(main_score, str) or not _MAIN_SCORE.fullmatch(main_score):
            raise ConfigError(
                f"dataset.protocol.main_score={main_score!r} must be <metric>@<k> with metric in "
                f"{' | '.join(MAIN_SCORE_METRICS)} and k >= 1, e.g. ndcg@5"
            )
        subsets = block.get("subsets")
        if subsets is not None and subsets not in SUBSET_COLUMNS:
            raise ConfigError(
                f"dataset.protocol.subsets={subsets!r} must be null (one query set) or a queries column: "
                f"{', '.join(SUBSET_COLUMNS)}"
            )
        scope = block.get("scope") or "corpus"
        if scope not in SCOPES:
            raise ConfigError(f"dataset.protocol.scope={scope!r} must be one of {', '.join(SCOPES)}")
        summary = block.get("summary") or ""
        if not isinstance(summary, str):
            raise ConfigError(f"dataset.protocol.summary must be text, got {summary!r}")
        mteb_task = block.get("mteb_task")
        if mteb_task is not None and not (isinstance(mteb_task, str) and re.fullmatch(r"[A-Za-z0-9._-]+", mteb_task)):
            raise ConfigError(
                f"dataset.protocol.mteb_task={mteb_task!r} must be null or an mteb task name, "
                "e.g. Vidore2ESGReportsRetrieval"
            )
        return cls(
            name=name.strip(), main_score=main_score, subsets=subsets, scope=scope, summary=summary, mteb_task=mteb_task
        )

    @property
    def main_k(self) -> int:
        return int(self.main_score.rpartition("@")[2])

    def eval_params(self, pooled: bool) -> dict[str, Any]:
        """What of the protocol changes ``metrics.json``: part of the evaluation's store key."""
        return {"protocol": {"main_score": self.main_score, "subsets": self.subsets, "pooled": bool(pooled)}}

    def check_subsets(self, all_null: bool) -> None:
        """The benchmark's queries must state the subsets column (``all_null``: none does; checked
        before any search)."""
        if self.subsets is not None and all_null:
            raise ConfigError(
                f"dataset.protocol.subsets={self.subsets}: the benchmark's queries state no {self.subsets} "
                "(import it again, or set dataset.protocol.subsets=null)"
            )


def with_main_k(ks: Sequence[int], protocol: Protocol | None) -> list[int]:
    """``eval.ks`` plus the main score's k when missing (kept sorted when it is added)."""
    ks = [int(k) for k in ks]
    if protocol is None or protocol.main_k in ks:
        return ks
    return sorted([*ks, protocol.main_k])


def summarise_protocol(
    per_query: pd.DataFrame, ks: Sequence[int], protocol: Protocol, pooled: bool = False, run_scope: str | None = None
) -> dict:
    """``metrics.json`` under ``protocol``: the summary (the mean over subsets where it has them)
    and its ``protocol`` section; with ``pooled`` and subsets, the pooled view under ``pooled``.
    ``run_scope``: the search scope of the run evaluated (``corpus`` | ``document``), recorded beside
    the protocol's."""
    columns = headline_columns(ks)
    if protocol.subsets is None:
        metrics = summarise(per_query, ks)
        whole = _record(per_query, metrics, protocol, columns)
        metrics["protocol"] = _section(protocol, whole, None, run_scope)
        return metrics
    groups = {str(value): rows.reset_index(drop=True) for value, rows in per_query.groupby(protocol.subsets, sort=True)}
    summaries = {value: summarise(rows, ks) for value, rows in groups.items()}
    per_subset = {value: _record(groups[value], summaries[value], protocol, columns) for value in groups}
    metrics = {
        "ks": sorted(int(k) for k in ks),
        "n_queries": len(per_query),
        "n_queries_missing_from_run": int((~per_query["in_run"]).sum()),
        "macro_structures": [
            s for s in EVIDENCE_STRUCTURES if any(s in m["macro_structures"] for m in summaries.values())
        ],
    }
    for key in ("aggregates", "breakdowns", "evidence_completeness"):
        metrics[key] = _mean_tree([m[key] for m in summaries.values()])
    structures = metrics["breakdowns"]["structure"]
    others = [s for s in structures if s not in EVIDENCE_STRUCTURES]
    metrics["breakdowns"]["structure"] = {
        s: structures[s] for s in [*[s for s in EVIDENCE_STRUCTURES if s in structures], *sorted(others)]
    }
    metrics["empty"] = {
        "structures": [s for s in EVIDENCE_STRUCTURES if s not in metrics["macro_structures"]],
        **{
            cells: list(dict.fromkeys(c for m in summaries.values() for c in m["empty"][cells]))
            for cells in ("source_structure_cells", "domain_structure_cells")
        },
    }
    mean = _mean_tree(list(per_subset.values()))
    metrics["protocol"] = _section(protocol, mean, per_subset, run_scope)
    if pooled:
        metrics["pooled"] = summarise(per_query, ks)
    return metrics


def main_score_value(per_query: pd.DataFrame, protocol: Protocol) -> float:
    """The main score in percent: the mean over queries, within each subset, then over subsets."""
    column = per_query[protocol.main_score]
    if protocol.subsets is not None:
        return round(float(column.groupby(per_query[protocol.subsets]).mean().mean() * 100), 6)
    return round(float(column.mean() * 100), 6)


def _record(rows: pd.DataFrame, metrics: dict, protocol: Protocol, columns: list[str]) -> dict:
    """One query set's line of the ``protocol`` section: queries, main score, headline aggregates."""
    return {
        "n_queries": len(rows),
        protocol.main_score: main_score_value(rows, protocol),
        "aggregates": {a: {c: metrics["aggregates"][a][c] for c in columns} for a in HEADLINE_AGGREGATES},
    }


def _section(protocol: Protocol, mean: dict, per_subset: dict | None, run_scope: str | None) -> dict:
    return {
        "name": protocol.name,
        "summary": protocol.summary,
        "scope": protocol.scope,
        "run_scope": run_scope,
        "main_score": protocol.main_score,
        "subsets": protocol.subsets,
        "per_subset": per_subset,
        "mean": mean,
    }


def _mean_tree(trees: list):
    """The leaf-wise mean of equally shaped nested dicts of numbers (a key: over the trees that
    have it; ``None`` leaves skipped). Keys in order of first appearance; a mean that is a whole
    number of counted things stays an int when every value was one."""
    if trees and all(isinstance(t, Mapping) for t in trees):
        keys = list(dict.fromkeys(k for t in trees for k in t))
        return {k: _mean_tree([t[k] for t in trees if k in t]) for k in keys}
    values = [v for v in trees if v is not None and not (isinstance(v, float) and np.isnan(v))]
    if not values:
        return None
    mean = float(np.mean(values))
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values) and mean.is_integer():
        return int(mean)
    return round(mean, 6)

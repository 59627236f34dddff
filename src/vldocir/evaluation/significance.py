"""Uncertainty of the aggregates and paired significance tests between runs.

Every aggregate of :mod:`vldocir.evaluation.aggregate` is a fixed linear weighting of the per-query
values, ``aggregate = w . x`` (:func:`aggregate_weights`), with ``w`` constant within a *cell*
(all queries for Micro; a structure for Macro and ``structure:<s>``; a (source, structure) cell for
source Macro and ``source:<g>``; likewise for domains; a label outside the six structures, such as
``multi_page_docs_unknown``, enters Micro only, as in ``summarise``). That makes both procedures matrix products:

- :func:`bootstrap_intervals`: a stratified bootstrap; each resample draws, within every cell of the
  aggregate, as many queries as the cell holds (with replacement), so the cell sizes the aggregate
  balances stay fixed. Percentile intervals, in percent.
- :func:`paired_tests`: the paired randomization test (Fisher; Smucker et al., CIKM 2007): flip the
  sign of each per-query difference ``d = x_a - x_b`` with probability 1/2 and aggregate as the
  reported number, so Macro is tested as Macro. Two-sided, ``p = (hits + 1) / (P + 1)`` where a hit
  is a permutation whose ``|w . (s * d)|`` reaches the observed ``|w . d|``. Beside it the paired
  t-test (``scipy.stats.ttest_rel`` on single-cell targets; a stratified t with Welch–Satterthwaite
  degrees of freedom on weighted aggregates) and an effect size.
- :func:`correct`: Holm or Benjamini–Hochberg over the comparisons of a table.
- :func:`minimum_detectable_difference`: what a benchmark's query counts can show.

Rows are labelled by ``aggregate``: one of :data:`AGGREGATES`, or a cell ``structure:<s>``,
``source:<g>``, ``domain:<g>``.

Additions to the shared API (keywords with defaults): ``minimum_detectable_difference`` takes
``correlation`` (between the two systems' per-query values, default 0.5); ``paired_tests`` takes
``n_resamples`` (of the difference's bootstrap, default 2000; 0 skips the interval); and
:func:`randomization_p` is the sampled test of one weighted difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import VldocirError

AGGREGATES = ("micro", "macro", "source_macro", "domain_macro")
STRUCTURE = "evidence_structure"
_GROUP_OF = {"source_macro": "source", "domain_macro": "domain"}
_CHUNK_ELEMENTS = 1 << 22
"""Elements of one chunk of the sign or count matrix: bounds memory whatever P or the resamples."""


class QuerySetMismatch(VldocirError, ValueError):
    """Two runs to compare do not hold the same queries."""


@dataclass(frozen=True)
class _Target:
    """One aggregate as cells: ``value = sum_c weight_c * mean(x[cells_c])``."""

    name: str
    cells: tuple[np.ndarray, ...]
    weights: np.ndarray

    def vector(self, n: int) -> np.ndarray:
        w = np.zeros(n)
        for idx, weight in zip(self.cells, self.weights, strict=True):
            w[idx] = weight / len(idx)
        return w


ATTRIBUTE_BREAKDOWNS = ("evidence_type", "generator", "language")
"""Optional query attributes broken down structure-balanced, as in ``summarise``."""


def _structures(per_query: pd.DataFrame) -> list[str]:
    present = set(per_query[STRUCTURE].unique())
    return [s for s in EVIDENCE_STRUCTURES if s in present]


def _cells(keys: pd.DataFrame | pd.Series) -> dict:
    return {k: np.asarray(v, dtype=np.int64) for k, v in keys.groupby(_by(keys), observed=True).indices.items()}


def _by(keys):
    return list(keys.columns) if isinstance(keys, pd.DataFrame) else keys


def _targets(per_query: pd.DataFrame, cells: bool) -> list[_Target]:
    """The aggregates (and cells) as :class:`_Target`, in the order rows are reported."""
    frame = per_query.reset_index(drop=True)
    structures = _structures(frame)
    by_structure = _cells(frame[STRUCTURE])
    out = [_Target("micro", (np.arange(len(frame)),), np.ones(1))]
    if structures:
        out.append(
            _Target("macro", tuple(by_structure[s] for s in structures), np.full(len(structures), 1 / len(structures)))
        )
    group_cells: dict[str, dict] = {}
    for aggregate, by in _GROUP_OF.items():
        grouped = _cells(frame[[by, STRUCTURE]])
        group_cells[by] = grouped
        groups = sorted({g for g, s in grouped if s in EVIDENCE_STRUCTURES})
        idx, weights = [], []
        for g in groups:
            mine = [c for c in grouped if c[0] == g and c[1] in EVIDENCE_STRUCTURES]
            for c in mine:
                idx.append(grouped[c])
                weights.append(1 / (len(groups) * len(mine)))
        out.append(_Target(aggregate, tuple(idx), np.asarray(weights)))
    out += [_Target(f"structure:{s}", (by_structure[s],), np.ones(1)) for s in structures]
    if cells:
        # The breakdowns of metrics.json: per source and per domain (structure-balanced), each
        # source x structure cell, and the structure-balanced groups of the optional attributes.
        for by in [b for b in ATTRIBUTE_BREAKDOWNS if b in frame.columns]:
            group_cells[by] = _cells(frame[[by, STRUCTURE]])
        for by, grouped in group_cells.items():
            for g in sorted({g for g, s in grouped if s in EVIDENCE_STRUCTURES}):
                mine = [c for c in grouped if c[0] == g and c[1] in EVIDENCE_STRUCTURES]
                out.append(_Target(f"{by}:{g}", tuple(grouped[c] for c in mine), np.full(len(mine), 1 / len(mine))))
        out += [
            _Target(f"source_structure:{g}/{s}", (idx,), np.ones(1)) for (g, s), idx in group_cells["source"].items()
        ]
    return out


def _target(per_query: pd.DataFrame, aggregate: str) -> _Target:
    for t in _targets(per_query, cells=True):
        if t.name == aggregate:
            return t
    raise VldocirError(f"aggregate {aggregate!r} is not one of {', '.join(AGGREGATES)} or a cell of the benchmark")


def aggregate_weights(per_query: pd.DataFrame, aggregate: str) -> np.ndarray:
    """The weight of each query (row order of ``per_query``) in ``aggregate``; sums to 1.

    ``aggregate`` is one of :data:`AGGREGATES` or a cell ``structure:<s>``, ``source:<g>``,
    ``domain:<g>``. Returns (N,) float64; ``w @ per_query[metric] * 100`` is the reported value.
    """
    return _target(per_query, aggregate).vector(len(per_query))


def _cell_resamples(values: np.ndarray, idx: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_resamples`` bootstrap resamples of the rows ``idx`` of ``values`` (N, K): (B, K).

    One chunk of resamples at a time (memory bounded whatever B): for a few columns, a gather of the
    drawn rows; for many (the coverage simulation stacks replications as columns), the draws become
    count vectors applied by one product, so no (B, n, K) array is ever built."""
    n, k = len(idx), values.shape[1]
    x = values[idx]
    out = np.empty((n_resamples, k))
    step = max(1, _CHUNK_ELEMENTS // max(n, 1))
    for start in range(0, n_resamples, step):
        b = min(step, n_resamples - start)
        draws = rng.integers(0, n, size=(b, n), dtype=np.int32 if n < 2**31 else np.int64)
        if k <= 8:
            for j in range(k):
                out[start : start + b, j] = x[:, j].take(draws).mean(axis=1)
        else:
            flat = (draws + (np.arange(b, dtype=draws.dtype) * n)[:, None]).ravel()
            counts = np.bincount(flat, minlength=b * n).reshape(b, n)
            out[start : start + b] = counts @ x / n
    return out


def _resampled(values: np.ndarray, targets: list[_Target], n_resamples: int, seed: int) -> dict[str, np.ndarray]:
    """(B, K) bootstrap statistics per target; a cell shared by targets is resampled once."""
    rng = np.random.default_rng(seed)
    cache: dict[int, np.ndarray] = {}  # by array identity: targets share their cells' index arrays
    result = {}
    for t in targets:
        total = np.zeros((n_resamples, values.shape[1]))
        for idx, weight in zip(t.cells, t.weights, strict=True):
            if id(idx) not in cache:
                cache[id(idx)] = _cell_resamples(values, idx, n_resamples, rng)
            total += weight * cache[id(idx)]
        result[t.name] = total
    return result


def _percentiles(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    low, high = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return low, high


def bootstrap_intervals(
    per_query: pd.DataFrame,
    metrics: Sequence[str],
    *,
    level: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    cells: bool = True,
) -> pd.DataFrame:
    """Stratified bootstrap percentile intervals of every aggregate of one run, in percent.

    Rows per (aggregate, metric): the four :data:`AGGREGATES` and every ``structure:<s>``; with
    ``cells`` also every other breakdown cell of ``metrics.json``: ``source:<g>``, ``domain:<g>``,
    ``source_structure:<g>/<s>`` and the groups of :data:`ATTRIBUTE_BREAKDOWNS` present. Each
    aggregate resamples within the cells it balances (see the module docstring). Columns:
    aggregate, metric, value, low, high.
    """
    frame = per_query.reset_index(drop=True)
    metrics = list(metrics)
    values = frame[metrics].to_numpy(dtype=np.float64)
    targets = _targets(frame, cells=cells)
    samples = _resampled(values, targets, n_resamples, seed)
    rows = []
    for t in targets:
        value = t.vector(len(frame)) @ values
        low, high = _percentiles(samples[t.name], level)
        for j, metric in enumerate(metrics):
            rows.append((t.name, metric, 100 * value[j], 100 * low[j], 100 * high[j]))
    return pd.DataFrame(rows, columns=["aggregate", "metric", "value", "low", "high"])


def align(a: pd.DataFrame, b: pd.DataFrame, *, intersection: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The two runs' per-query rows on the same queries, in ``a``'s order.

    Raises :class:`QuerySetMismatch` when the query sets differ, unless ``intersection``: then both
    keep the common queries and the dict says ``{"n_queries", "dropped_a", "dropped_b"}``.
    """
    for name, frame in (("a", a), ("b", b)):
        if frame["query_id"].duplicated().any():
            raise QuerySetMismatch(f"run {name} holds duplicated query ids")
    ids_a, ids_b = pd.Index(a["query_id"]), pd.Index(b["query_id"])
    common = ids_a.intersection(ids_b, sort=False)
    dropped_a, dropped_b = len(ids_a) - len(common), len(ids_b) - len(common)
    if (dropped_a or dropped_b) and not intersection:
        raise QuerySetMismatch(
            f"the runs' query sets differ ({dropped_a} queries only in the first, {dropped_b} only in the second);"
            " compare them on the common queries with intersection=True"
        )
    if not len(common):
        raise QuerySetMismatch("the runs share no query")
    keep_a = a[ids_a.isin(common)].reset_index(drop=True)
    keep_b = b.set_index("query_id").loc[keep_a["query_id"]].reset_index()
    return keep_a, keep_b, {"n_queries": len(common), "dropped_a": int(dropped_a), "dropped_b": int(dropped_b)}


def _random_bits(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """(rows, n) float32 of fair random bits: 64 per draw of a uint64."""
    words = rng.integers(0, np.iinfo(np.uint64).max, size=(rows, -(-n // 64)), dtype=np.uint64, endpoint=True)
    return np.unpackbits(words.view(np.uint8), axis=1, count=n).astype(np.float32)


def _randomization_hits(weighted: np.ndarray, n_permutations: int, rng: np.random.Generator) -> np.ndarray:
    """How many random sign flips reach the observed ``|sum(weighted)|``, per column of ``weighted`` (N, K).

    With bits ``b`` and signs ``s = 2b - 1``: ``s @ v = 2 (b @ v) - sum(v)``, one float32 product per
    chunk of permutations, so memory is flat in ``n_permutations``."""
    n = weighted.shape[0]
    observed = np.abs(weighted.sum(axis=0))
    # the float32 product errs by a few 1e-8 of sum|v| (measured up to 271,760 queries): a permutation that
    # ties the observed value (zero differences, equal ones swapped) must still count as a hit
    tolerance = 1e-6 * np.abs(weighted).sum(axis=0) + 1e-12
    v32 = weighted.astype(np.float32)
    total = v32.sum(axis=0, dtype=np.float64)
    hits = np.zeros(weighted.shape[1], dtype=np.int64)
    step = max(1, _CHUNK_ELEMENTS // max(n, 1))
    for start in range(0, n_permutations, step):
        rows = min(step, n_permutations - start)
        flipped = 2 * (_random_bits(rng, rows, n) @ v32).astype(np.float64) - total
        hits += (np.abs(flipped) >= observed - tolerance).sum(axis=0)
    return hits


def randomization_p(d: np.ndarray, w: np.ndarray, *, n_permutations: int = 10000, seed: int = 0) -> float:
    """Two-sided sampled randomization p-value of ``w . d`` (``d``, ``w``: (N,)): ``(hits + 1) / (P + 1)``."""
    hits = _randomization_hits(
        (np.asarray(d, float) * np.asarray(w, float))[:, None], n_permutations, np.random.default_rng(seed)
    )
    return float((hits[0] + 1) / (n_permutations + 1))


def exact_randomization_p(d: np.ndarray, w: np.ndarray) -> float:
    """The exact two-sided randomization p-value of ``w . d`` over all ``2^n`` sign patterns (``n <= 20``).

    ``d``, ``w``: (n,). The identity pattern is among the 2^n, so the p-value is ``hits / 2^n``: the
    limit of the sampler's ``(hits + 1) / (P + 1)`` as ``P`` grows."""
    v = np.asarray(d, dtype=np.float64) * np.asarray(w, dtype=np.float64)
    n = len(v)
    if n > 20:
        raise ValueError(f"exact enumeration is for n <= 20 queries, got {n}")
    patterns = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    flipped = (2 * patterns - 1) @ v
    observed = abs(v.sum())
    return float(np.mean(np.abs(flipped) >= observed - 1e-12 * (np.abs(v).sum() + 1)))


def _stratified_t(d: np.ndarray, target: _Target) -> tuple[float, float]:
    """(two-sided p, effect size) of the paired difference under ``target``'s weighting, one metric.

    The variance of ``sum_c W_c mean_c(d)`` is ``sum_c W_c^2 s_c^2 / n_c`` with Welch–Satterthwaite
    degrees of freedom; on one cell this is exactly ``scipy.stats.ttest_rel``. The effect size is the
    difference over the weighted within-cell standard deviation (paired Cohen's d on one cell). A cell
    of one query has no variance of its own (small source x structure cells of a domain Macro): it
    takes the pooled variance of the other cells, with their pooled degrees of freedom."""
    sizes = np.array([len(i) for i in target.cells], dtype=np.float64)
    means = np.array([d[i].mean() for i in target.cells])
    var = np.array([d[i].var(ddof=1) if len(i) > 1 else np.nan for i in target.cells])
    cell_dof = sizes - 1
    several = sizes > 1
    if several.any() and not several.all():
        var[~several] = np.sum(cell_dof[several] * var[several]) / cell_dof[several].sum()
        cell_dof[~several] = cell_dof[several].sum()
    diff = float(target.weights @ means)
    parts = target.weights**2 * var / sizes
    se = np.sqrt(parts.sum())
    spread = np.sqrt(target.weights @ var)
    effect = diff / spread if spread > 0 else (0.0 if diff == 0 else np.sign(diff) * np.inf)
    if not se > 0:
        return (np.nan if diff == 0 or np.isnan(se) else 0.0), float(effect)
    dof = parts.sum() ** 2 / np.sum(parts**2 / cell_dof)
    return float(2 * stats.t.sf(abs(diff) / se, dof)), float(effect)


def paired_tests(
    a: pd.DataFrame,
    b: pd.DataFrame,
    metrics: Sequence[str],
    *,
    n_permutations: int = 10000,
    level: float = 0.95,
    seed: int = 0,
    intersection: bool = False,
    n_resamples: int = 2000,
) -> pd.DataFrame:
    """Paired tests of run ``a`` against run ``b`` per aggregate (:data:`AGGREGATES`, every ``structure:<s>``).

    Columns: aggregate, metric, a, b, difference (a - b, percentage points), diff_low, diff_high
    (stratified bootstrap interval of the difference at ``level``, ``n_resamples`` resamples; NaN when 0),
    p_randomization, p_t,
    effect_size, n_queries. The structure labels and groups come from ``a``. Raises
    :class:`QuerySetMismatch` when the query sets differ, unless ``intersection`` (then see
    ``frame.attrs["alignment"]``, set in either case).
    """
    a, b, alignment = align(a, b, intersection=intersection)
    metrics = list(metrics)
    xa, xb = a[metrics].to_numpy(np.float64), b[metrics].to_numpy(np.float64)
    d = xa - xb
    targets = _targets(a, cells=False)
    n = len(a)
    weights = np.stack([t.vector(n) for t in targets], axis=1)
    rng = np.random.default_rng(seed)
    hits = _randomization_hits((weights[:, :, None] * d[:, None, :]).reshape(n, -1), n_permutations, rng)
    hits = hits.reshape(len(targets), len(metrics))
    samples = _resampled(d, targets, n_resamples, seed + 1) if n_resamples else {}
    nan = np.full(len(metrics), np.nan)
    rows = []
    for i, t in enumerate(targets):
        low, high = _percentiles(samples[t.name], level) if n_resamples else (nan, nan)
        for j, metric in enumerate(metrics):
            p_t, effect = _stratified_t(d[:, j], t)
            rows.append(
                {
                    "aggregate": t.name,
                    "metric": metric,
                    "a": 100 * weights[:, i] @ xa[:, j],
                    "b": 100 * weights[:, i] @ xb[:, j],
                    "difference": 100 * weights[:, i] @ d[:, j],
                    "diff_low": 100 * low[j],
                    "diff_high": 100 * high[j],
                    "p_randomization": (hits[i, j] + 1) / (n_permutations + 1),
                    "p_t": p_t,
                    "effect_size": effect,
                    "n_queries": int(sum(len(c) for c in t.cells)),
                }
            )
    frame = pd.DataFrame(rows)
    frame.attrs["alignment"] = alignment
    return frame


def correct(p_values, method: str = "holm", alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """(reject, adjusted p-values) over a family of comparisons; ``method`` "holm" or "bh".

    Equal to ``statsmodels.stats.multitest.multipletests`` with "holm" / "fdr_bh"."""
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    if m == 0:
        return np.zeros(0, bool), np.zeros(0)
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        adjusted_sorted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    elif method == "bh":
        adjusted_sorted = np.minimum.accumulate(m / np.arange(m, 0, -1) * ranked[::-1])[::-1]
        adjusted_sorted = np.minimum(1.0, adjusted_sorted)
    else:
        raise VldocirError(f"multiple-comparison method {method!r} is not one of holm, bh")
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return adjusted <= alpha, adjusted


def minimum_detectable_difference(
    per_query: pd.DataFrame, metric: str, *, alpha: float = 0.05, power: float = 0.8, correlation: float = 0.5
) -> pd.DataFrame:
    """The smallest true difference (percentage points) a paired comparison detects with ``power``.

    Normal approximation of a two-sided paired test at ``alpha``: ``MDD = (z_{1-alpha/2} + z_power) *
    SE``, where the per-query difference of two systems is assumed to have the spread of one system's
    values with ``correlation`` between the systems: ``sd_d = sd * sqrt(2 (1 - correlation))`` (0.5
    makes ``sd_d = sd``). For Macro, ``SE^2 = sum_s sd_d,s^2 / (S^2 n_s)``; for Micro ``sd_d / sqrt(N)``.
    Rows: one per structure, then macro, micro; columns: aggregate, n_queries, sd (of the per-query
    values, percentage points), mdd.
    """
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    scale = np.sqrt(2 * (1 - correlation))
    frame = per_query.reset_index(drop=True)
    x = frame[metric].to_numpy(np.float64) * 100
    rows = []
    parts = []
    for s in _structures(frame):
        xs = x[(frame[STRUCTURE] == s).to_numpy()]
        sd = xs.std(ddof=1) if len(xs) > 1 else np.nan
        parts.append((sd * scale) ** 2 / len(xs))
        rows.append((f"structure:{s}", len(xs), sd, z * sd * scale / np.sqrt(len(xs))))
    macro_se = np.sqrt(np.sum(parts)) / len(parts) if parts else np.nan
    rows.append(("macro", int((frame[STRUCTURE].isin(_structures(frame))).sum()), np.nan, z * macro_se))
    sd = x.std(ddof=1) if len(x) > 1 else np.nan
    rows.append(("micro", len(x), sd, z * sd * scale / np.sqrt(len(x))))
    return pd.DataFrame(rows, columns=["aggregate", "n_queries", "sd", "mdd"])

"""``python -m vldocir.apps.report do=compare runs=[...] baseline=...``: is a difference between stored runs real?

Every run named in ``runs`` is compared with ``baseline`` on the stored per-query rows of both entries
(``per_query.parquet``; nothing is re-run): for each aggregate (Micro, structure Macro, source Macro, domain
Macro) and each evidence structure, the two values, the paired difference with its bootstrap interval, the
paired randomization p-value (signs flipped per query, then aggregated as the reported number), the paired
t-test, the effect size, and the decision after Holm or Benjamini-Hochberg across every p-value of the table
(the family is the whole table: all runs, aggregates, structures and metrics). Beside it, the minimum
detectable difference per structure for the baseline's query counts.

The result is cached in ``<paths.cache_dir>/significance/<key>.json``, keyed by the compared entries' keys
(``store.run_key``, ``store.eval_key``, the checksum of ``per_query.parquet``) and the test parameters; a
rerun reads it ("reused"). The table is written to ``<out_dir>/compare/comparison_<key>.csv`` and ``.md``.

``mteb_results=<folder>``: the mteb result files there whose task is the baseline's benchmark's
(:func:`vldocir.reporting.other_runs.matching`) follow as external rows, their values as the files hold
them (Micro, Macro, per structure), marked † and never tested: a result file has no per-query values.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from vldocir.cache import content_key
from vldocir.errors import ConfigError, VldocirError
from vldocir.io import atomic_path, atomic_write_text
from vldocir.reporting.outputs import ignore_generated
from vldocir.store import PER_QUERY_FILE, Entry, resolve_entry

log = logging.getLogger(__name__)

CACHE_KIND = "significance"
FORMAT = 1  # of the cached JSON: a change of what is cached changes every key
CORRECTIONS = ("holm", "bh")
HEADLINE_METRICS = ("ndcgall", "recallall")  # at the runs' largest common k when ``metrics`` is null
COLUMNS = [
    "run",
    "metric",
    "aggregate",
    "baseline_value",
    "run_value",
    "difference",
    "diff_low",
    "diff_high",
    "p_randomization",
    "p_t",
    "effect_size",
    "n_queries",
    "p_adjusted",
    "significant",
]


class CompareError(VldocirError):
    """Runs that cannot be compared (other benchmarks, other query sets), named in one line."""


@dataclass
class StoredRun:
    """One entry named in ``runs`` or ``baseline``: its label in the table and its per-query rows."""

    name: str
    label: str
    entry: Entry
    how: str
    per_query: pd.DataFrame

    @property
    def benchmark(self) -> tuple[str, str]:
        bench = self.entry.manifest.get("benchmark") or {}
        return str(bench.get("name")), str(bench.get("fingerprint"))

    @property
    def keys(self) -> dict[str, Any]:
        record = self.entry.record
        return {
            "run_key": record.get("run_key"),
            "eval_key": record.get("eval_key"),
            "per_query": (record.get("files", {}).get(PER_QUERY_FILE) or {}).get("sha256"),
        }


def load_run(name: str, results_dir: Path) -> StoredRun:
    """The verified entry ``name`` names (as :func:`vldocir.store.resolve_entry` reads names) with its rows."""
    entry, how = resolve_entry(name, results_dir)
    path = entry.path / PER_QUERY_FILE
    label = f"{entry.path.parents[1].name}/{entry.path.parent.name}"
    return StoredRun(name=str(name), label=label, entry=entry, how=how, per_query=pd.read_parquet(path))


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


@dataclass
class Params:
    metrics: list[str]
    correction: str
    alpha: float
    n_permutations: int
    level: float
    seed: int
    intersection: bool

    def describe(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _params(cfg: DictConfig, runs: Sequence[StoredRun]) -> Params:
    sig = OmegaConf.to_container(cfg.significance, resolve=True)
    correction = str(sig["correction"]).lower()
    if correction not in CORRECTIONS:
        raise ConfigError(f"significance.correction={sig['correction']}: one of {', '.join(CORRECTIONS)}")
    if not 0 < float(sig["alpha"]) < 1 or not 0 < float(sig["level"]) < 1:
        raise ConfigError(f"significance.alpha={sig['alpha']}, level={sig['level']}: each lies strictly in (0, 1)")
    if int(sig["n_permutations"]) < 1:
        raise ConfigError(f"significance.n_permutations={sig['n_permutations']}: at least 1")
    metrics = _names(sig["metrics"])
    common = set.intersection(*(set(run.per_query.columns) for run in runs))
    if not metrics:
        ks = [int(c.rpartition("@")[2]) for c in common if c.startswith(f"{HEADLINE_METRICS[0]}@")]
        if not ks:
            raise CompareError(f"the runs share no {HEADLINE_METRICS[0]}@k column; name significance.metrics")
        metrics = [f"{m}@{max(ks)}" for m in HEADLINE_METRICS]
    missing = [m for m in metrics if m not in common]
    if missing:
        raise ConfigError(
            f"significance.metrics: {missing} are not per-query columns of every run "
            f"(they share {sorted(c for c in common if '@' in c)})"
        )
    return Params(
        metrics=metrics,
        correction=correction,
        alpha=float(sig["alpha"]),
        n_permutations=int(sig["n_permutations"]),
        level=float(sig["level"]),
        seed=int(sig["seed"]),
        intersection=bool(sig["intersection"]),
    )


def check_benchmarks(baseline: StoredRun, runs: Sequence[StoredRun], intersection: bool) -> list[str]:
    """Refuse runs of another benchmark (its name) in one line; another version of it (same name, another
    fingerprint) only without ``intersection``. Returns the notes to print."""
    notes = []
    for run in runs:
        if run.benchmark[0] != baseline.benchmark[0]:
            raise CompareError(
                f"{run.label} is a run of {run.benchmark[0]}, the baseline {baseline.label} of "
                f"{baseline.benchmark[0]}: only runs of one benchmark can be compared"
            )
        if run.benchmark[1] != baseline.benchmark[1]:
            if not intersection:
                raise CompareError(
                    f"{run.label} and the baseline {baseline.label} were made on different versions of "
                    f"{baseline.benchmark[0]} (fingerprints {run.benchmark[1]}, {baseline.benchmark[1]}); "
                    "significance.intersection=true compares their common queries"
                )
            notes.append(f"{run.label}: another version of {baseline.benchmark[0]} (fingerprint {run.benchmark[1]})")
    return notes


def compute(baseline: StoredRun, runs: Sequence[StoredRun], params: Params) -> dict[str, Any]:
    """The comparison table (rows of :data:`COLUMNS`), the minimum detectable differences and the notes."""
    from vldocir.evaluation import significance as sig

    frames, notes = [], []
    for run in runs:
        try:
            tests = sig.paired_tests(
                run.per_query,
                baseline.per_query,
                params.metrics,
                n_permutations=params.n_permutations,
                level=params.level,
                seed=params.seed,
                intersection=params.intersection,
            )
        except sig.QuerySetMismatch as error:
            raise CompareError(f"{run.label} vs the baseline {baseline.label}: {error}") from None
        aligned = tests.attrs["alignment"]
        if aligned["dropped_a"] or aligned["dropped_b"]:
            notes.append(
                f"{run.label} vs {baseline.label}: compared on their {aligned['n_queries']} common queries "
                f"({aligned['dropped_a']} only in {run.label}, {aligned['dropped_b']} only in the baseline left out)"
            )
        tests = tests.rename(columns={"a": "run_value", "b": "baseline_value"})
        tests.insert(0, "run", run.label)
        frames.append(tests)
    table = pd.concat(frames, ignore_index=True)
    reject, adjusted = sig.correct(table["p_randomization"].to_numpy(), params.correction, params.alpha)
    table["p_adjusted"], table["significant"] = adjusted, reject.astype(bool)
    mdd = pd.concat(
        [
            sig.minimum_detectable_difference(baseline.per_query, metric, alpha=params.alpha).assign(metric=metric)
            for metric in params.metrics
        ],
        ignore_index=True,
    )
    return {
        "comparisons": table[COLUMNS].to_dict(orient="records"),
        "mdd": mdd.to_dict(orient="records"),
        "notes": notes,
    }


def cache_key(baseline: StoredRun, runs: Sequence[StoredRun], params: Params) -> str:
    return content_key(
        {
            "kind": CACHE_KIND,
            "format": FORMAT,
            "baseline": baseline.keys,
            "runs": [run.keys for run in runs],
            "labels": [baseline.label, *(run.label for run in runs)],
            "params": params.describe(),
        }
    )


def _plain(value: Any) -> Any:
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return float(value)


def cached_compute(
    baseline: StoredRun, runs: Sequence[StoredRun], params: Params, cache_dir: Path
) -> tuple[dict, str, Path, bool]:
    """The result from ``<cache_dir>/significance/<key>.json`` if it is there and readable, else computed and
    stored there. Returns (result, key, path, reused)."""
    key = cache_key(baseline, runs, params)
    path = Path(cache_dir) / CACHE_KIND / f"{key}.json"
    if path.is_file():
        try:
            stored = json.loads(path.read_text())
            if stored.get("key") == key and stored.get("sha256") == _digest(stored["result"]):
                log.info("significance %s reused from %s", key, path)
                return stored["result"], key, path, True
            log.warning("cached comparison %s does not match its key or checksum, recomputing it", path)
        except (OSError, ValueError, AttributeError, KeyError, TypeError) as error:
            log.warning("cached comparison %s is unreadable, recomputing it: %s", path, error)
    # through JSON here too, so that a computed result and a reused one are the same values and types
    result = json.loads(json.dumps(compute(baseline, runs, params), default=_plain))
    description = {"baseline": baseline.keys, "runs": [run.keys for run in runs], "params": params.describe()}
    record = {"key": key, "description": description, "result": result, "sha256": _digest(result)}
    atomic_write_text(json.dumps(record), path)
    return result, key, path, False


def _digest(result: Any) -> str:
    """The checksum a cached comparison carries: a changed number in it is found, never reported."""
    return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()


def _format_p(p: float) -> str:
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def to_frame(result: dict) -> pd.DataFrame:
    return pd.DataFrame(result["comparisons"], columns=COLUMNS)


def render(result: dict, params: Params, baseline: StoredRun) -> tuple[str, str]:
    """(console text, Markdown) of the comparison table and the minimum detectable differences."""
    table = to_frame(result)
    pct = f"{params.level * 100:g}%"
    shown = pd.DataFrame(
        {
            "run": table["run"],
            "metric": table["metric"],
            "aggregate": table["aggregate"],
            "baseline": table["baseline_value"].map("{:.2f}".format),
            "run value": table["run_value"].map("{:.2f}".format),
            f"diff [{pct} CI]": [
                f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]"
                for d, lo, hi in zip(table["difference"], table["diff_low"], table["diff_high"], strict=True)
            ],
            "p rand": table["p_randomization"].map(_format_p),
            "p t": table["p_t"].map(_format_p),
            "effect": table["effect_size"].map("{:+.2f}".format),
            f"p {params.correction}": table["p_adjusted"].map(_format_p),
            "decision": ["differs" if s else "-" for s in table["significant"]],
            "n": table["n_queries"].astype(int),
        }
    )
    long = pd.DataFrame(result["mdd"])
    mdd = long.pivot(index="aggregate", columns="metric", values="mdd").reindex(
        index=list(dict.fromkeys(long["aggregate"])), columns=params.metrics
    )
    mdd = mdd.round(2).add_prefix("MDD ").reset_index()
    mdd.insert(1, "n", long.drop_duplicates("aggregate").set_index("aggregate")["n_queries"].astype(int).to_numpy())
    family = (
        f"{'Holm' if params.correction == 'holm' else 'Benjamini-Hochberg'} at alpha {params.alpha:g} across all "
        f"{len(table)} p-values (randomization, {params.n_permutations} sign flips) of this table"
    )
    head = (
        f"Baseline {baseline.label} ({baseline.name}); differences are run - baseline in percentage points, "
        f"intervals paired bootstrap at {pct}.\nCorrected: {family}."
    )
    notes = "".join(f"\nNote: {note}" for note in result["notes"])
    mdd_title = (
        f"Minimum detectable difference (pp) for the baseline's query counts: alpha {params.alpha:g}, power 0.8, "
        "normal approximation, correlation 0.5 between two runs' per-query values"
    )
    text = f"{head}{notes}\n{shown.to_string(index=False)}\n\n{mdd_title}:\n{mdd.to_string(index=False)}"
    table_md = shown.to_markdown(index=False, disable_numparse=True)  # keep the p-values as printed
    markdown = f"{head}{notes}\n\n{table_md}\n\n{mdd_title}:\n\n{mdd.to_markdown(index=False)}\n"
    return text, markdown


def external_table(external: Sequence, metrics: Sequence[str]) -> pd.DataFrame:
    """The external results' values (percent) of ``metrics`` for the comparison's aggregates that
    their files hold: ``micro`` (``ndcgall_at_10``), ``macro`` (``macro_ndcgall_at_10``) and
    ``structure:<s>`` (``<s>_ndcgall_at_10``); plus each file's main score."""
    from vldocir.data.schema import EVIDENCE_STRUCTURES
    from vldocir.reporting.other_runs import EXTERNAL_MARK

    rows = []
    for result in external:
        label = f"{result.model} {EXTERNAL_MARK}"
        main = result.main_score_name or "main_score"
        rows.append({"run": label, "metric": "main score", "aggregate": main, "value": 100 * result.main_score})
        for metric in metrics:
            name, _, k = metric.partition("@")
            keys = {"micro": f"{name}_at_{k}", "macro": f"macro_{name}_at_{k}"}
            keys.update({f"structure:{s}": f"{s}_{name}_at_{k}" for s in EVIDENCE_STRUCTURES})
            for aggregate, key in keys.items():
                if key in result.scores:
                    rows.append(
                        {"run": label, "metric": metric, "aggregate": aggregate, "value": 100 * result.scores[key]}
                    )
    return pd.DataFrame(rows, columns=["run", "metric", "aggregate", "value"])


def _external_section(cfg: DictConfig, baseline: StoredRun, metrics: Sequence[str]) -> tuple[str, str]:
    """(console text, Markdown) of the external rows of ``cfg.mteb_results`` for the baseline's benchmark."""
    from vldocir.reporting.other_runs import EXTERNAL_FOOTNOTE, external_results, matching
    from vldocir.reporting.store_view import StoredRun as ViewRun

    found, where = external_results(cfg.get("mteb_results"))
    if not found:
        return "", ""
    name = baseline.benchmark[0]
    theirs = matching(found, name, [ViewRun(baseline.entry.path, name, "", "")])
    title = f"External rows (mteb result files in {where} of {name}'s task; not significance-tested)"
    if not theirs:
        return f"\n{title}: none of the {len(found)} file(s) is of this benchmark's task\n", ""
    table = external_table(theirs, metrics)
    shown = table.assign(value=table["value"].map("{:.2f}".format))
    text = f"\n{title}:\n{shown.to_string(index=False)}\n{EXTERNAL_FOOTNOTE.replace('`', '')}\n"
    markdown = f"\n{title}:\n\n{shown.to_markdown(index=False, disable_numparse=True)}\n\n{EXTERNAL_FOOTNOTE}\n"
    return text, markdown


def run_compare(cfg: DictConfig) -> int:
    """``do=compare``: compare every run of ``cfg.runs`` with ``cfg.baseline``, print the table and write it."""
    results = Path(cfg.paths.results_dir)
    if cfg.baseline is None:
        raise ConfigError("do=compare needs baseline=<benchmark>/<retriever>/<setting> (or an entry directory)")
    baseline = load_run(str(cfg.baseline), results)
    runs = [load_run(name, results) for name in _names(cfg.runs)]
    runs = [run for run in runs if run.entry.path != baseline.entry.path]
    if not runs:
        raise ConfigError("do=compare needs runs=[...] naming at least one run other than the baseline")
    labels = [baseline.label, *(run.label for run in runs)]
    if len(set(labels)) < len(labels):  # two entries of one setting: tell them apart by the entry's name
        for run in (baseline, *runs):
            run.label = f"{run.label}/{run.entry.path.name}"
    params = _params(cfg, [baseline, *runs])
    notes = check_benchmarks(baseline, runs, params.intersection)
    print(f"Comparing {len(runs)} run(s) of {baseline.benchmark[0]} in {results}/runs with {baseline.label}")
    for run in (baseline, *runs):
        print(f"  {run.label:<38} {run.entry.path} ({run.how})")
    result, key, path, reused = cached_compute(baseline, runs, params, Path(cfg.paths.cache_dir))
    result = {**result, "notes": [*notes, *result["notes"]]}
    print(f"Comparison {key}: {'reused' if reused else 'computed and stored in'} {path}")
    text, markdown = render(result, params, baseline)
    external_text, external_markdown = _external_section(cfg, baseline, params.metrics)
    text, markdown = text + external_text, markdown + external_markdown
    print(text)
    out = Path(cfg.out_dir) / "compare"
    csv, md = out / f"comparison_{key}.csv", out / f"comparison_{key}.md"
    ignore_generated(out)  # creates it, with a .gitignore (not committed, as results/tables)
    with atomic_path(csv) as staging:
        to_frame(result).to_csv(staging, index=False)
    atomic_write_text(markdown, md)
    print(f"Written: {csv}, {md}")
    return 0

"""mteb result files, both ways: a stored run's scores written as mteb's ``TaskResult`` files, and a
folder of mteb result files read back as external rows of the reports.

**Out** (:func:`task_result`, used by ``python -m vldocir.store export --format mteb``). mteb's own
retrieval scoring (``calculate_retrieval_scores``: pytrec_eval's ndcg_cut, map_cut, recall, P,
success, plus mteb's MRR and nAUC; ``make_score_dict`` names them ``ndcg_at_10`` ...) runs on the
stored run and the benchmark's graded qrels, one query set per subset (the protocol's ``subsets``
column, mteb's ``hf_subset``), after mteb's own filter of queries without qrels, at the task's
``k_values``. Ties: the run's order is kept (pages tied in score are one float32 step apart in
vldocir's order, :func:`vldocir.data.runs.trec_scores`), so mteb scores the ranking the store holds.
Each ``scores.<split>[]`` entry adds the evidence-complete metrics as extra keys (fractions, as mteb's):
``ndcgall_at_k`` / ``recallall_at_k`` (mean over queries), ``macro_ndcgall_at_k`` /
``macro_recallall_at_k`` (structure-balanced Macro) and ``<structure>_ndcgall_at_k`` /
``<structure>_recallall_at_k``; ``vldocir_main_score`` names the metric ``main_score`` holds.

The task is mteb's own (``protocol.mteb_task``, its split, hf_subsets, languages, k_values and
main score from mteb's registry) or, for a benchmark no mteb task computes, ``VLDocIR-<benchmark>``
with subset ``default`` (or the protocol's subsets), mteb's default k_values, and as main score the
protocol's, else the paper's headline, structure-balanced Macro nDCGAll@10. The main score mteb's
scoring gives must equal ``metrics.json``'s (the protocol's per subset and mean), else nothing is
written.

**In** (:func:`read_results`): every ``<model>/<revision>/<Task>.json`` under a folder (mteb's
results layout, with or without its ``results/`` level), read as plain JSON and checked against
mteb's schema (``main_score``, ``hf_subset``, ``languages`` per entry); a file that does not read is
one error line naming it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from vldocir.data.runs import trec_scores
from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import MissingDependencyError, VldocirError
from vldocir.evaluation.aggregate import HEADLINE_METRICS, summarise
from vldocir.evaluation.protocol import Protocol

INSTALL = "pip install 'mteb>=2.26'"
VLDOCIR_TASK_PREFIX = "VLDocIR-"
"""Task names of benchmarks that no mteb task computes: ``VLDocIR-<benchmark name>``."""
HEADLINE_MAIN_SCORE = ("macro", "ndcgall", 10)
"""The paper's headline (structure-balanced Macro nDCGAll@10): the main score without a protocol."""
DEFAULT_LANGUAGES = ["eng-Latn"]
"""Languages of a benchmark whose queries state none (VL-DocIR's generated queries are English)."""
MAIN_SCORE_KEY = "vldocir_main_score"
TOLERANCE = 6e-6
"""mteb rounds its means to 5 decimals (fractions), metrics.json to 6 (percent)."""


class MtebResultsError(VldocirError, ValueError):
    """A run that cannot be written as mteb results, or an mteb result file that does not read."""


def require_mteb():
    """mteb, imported lazily; missing: one line saying how to install it."""
    try:
        import mteb
    except ImportError as error:
        raise MissingDependencyError(f"mteb result files need mteb ({INSTALL})") from error
    return mteb


# -- out: the task ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MtebTask:
    """What the result file is of: mteb's task (``registered``) or a ``VLDocIR-<name>`` one."""

    name: str
    split: str
    main_score: str
    """The scores key ``main_score`` copies, e.g. ``ndcg_at_10`` or ``macro_ndcgall_at_10``."""
    k_values: tuple[int, ...]
    languages: Mapping[str, list[str]]
    """hf_subset -> its languages (mteb's for a registered task)."""
    registered: bool


def _score_key(metric: str, k: int) -> str:
    return f"{metric}_at_{k}"


def resolve_task(
    protocol: Protocol | None, benchmark: str, subsets: Sequence[str], split: str, ks: Sequence[int]
) -> MtebTask:
    """The task of a stored run's results: ``protocol.mteb_task`` from mteb's registry (its split,
    k_values, main score, and the languages of ``subsets``, which must be its hf_subsets), else
    ``VLDocIR-<benchmark>``. ``subsets``: the protocol's subset values, or ``["default"]``."""
    mteb = require_mteb()
    if protocol is not None and protocol.mteb_task:
        try:
            task = mteb.get_task(protocol.mteb_task)
        except Exception as error:  # KeyError / ValueError: not in this mteb's registry
            raise MtebResultsError(
                f"dataset.protocol.mteb_task={protocol.mteb_task} is not a task of mteb {mteb.__version__} ({error})"
            ) from error
        meta = task.metadata
        metric, k = protocol.main_score.split("@")
        if meta.main_score != _score_key(metric, int(k)):
            raise MtebResultsError(
                f"protocol main score {protocol.main_score} is not {protocol.mteb_task}'s ({meta.main_score})"
            )
        langs = meta.hf_subsets_to_langscripts
        unknown = [s for s in subsets if s not in langs]
        if unknown:
            raise MtebResultsError(
                f"subset(s) {', '.join(unknown)} are not hf_subsets of {meta.name} ({', '.join(langs)})"
            )
        if meta.eval_splits != [split]:
            raise MtebResultsError(f"{meta.name} evaluates split(s) {meta.eval_splits}; the benchmark is split {split}")
        if task.ignore_identical_ids or task.skip_first_result:  # scoring options not reproduced here
            raise MtebResultsError(f"{meta.name} ignores identical ids or skips the first result: not supported")
        return MtebTask(
            meta.name, meta.eval_splits[0], meta.main_score, tuple(task.k_values), {s: langs[s] for s in subsets}, True
        )
    from mteb.abstasks.retrieval import AbsTaskRetrieval

    k_values = {int(k) for k in AbsTaskRetrieval.k_values}
    if protocol is not None:
        metric, k = protocol.main_score.split("@")
        main, k_values = _score_key(metric, int(k)), k_values | {int(k)}
    else:
        aggregate, metric, k = HEADLINE_MAIN_SCORE
        k = k if k in ks else max(ks)
        main = f"{aggregate}_{_score_key(metric, k)}"
    languages = {s: DEFAULT_LANGUAGES if s == "default" else [s] for s in subsets}
    return MtebTask(task_name_of(None, benchmark), split, main, tuple(sorted(k_values)), languages, False)


# -- out: the scores --------------------------------------------------------------------------------


def mteb_retrieval_scores(run: pa.Table, qrels: pd.DataFrame, k_values: Sequence[int]) -> dict[str, Any]:
    """mteb's retrieval scores of one query set, computed by mteb's own functions.

    Args:
        run: ``query_id``, ``page_id``, ``score`` rows (any order) of the query set's queries.
        qrels: ``query_id``, ``page_id``, ``grade`` (int) of the query set's queries.
        k_values: mteb's cut-offs.

    Returns ``make_score_dict``'s keys (``ndcg_at_k``, ``map_at_k``, ``recall_at_k``,
    ``precision_at_k``, ``mrr_at_k``, ``hit_rate_at_k``, ``accuracy``, ``nauc_*``).
    """
    require_mteb()
    from datasets import Dataset
    from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores, make_score_dict
    from mteb.abstasks.retrieval import _filter_queries_without_positives

    relevant: dict[str, dict[str, int]] = {}
    for query, page, grade in zip(qrels["query_id"], qrels["page_id"], qrels["grade"], strict=True):
        relevant.setdefault(str(query), {})[str(page)] = int(grade)
    relevant, queries = _filter_queries_without_positives(relevant, Dataset.from_dict({"id": list(relevant)}))
    ordered, _ = trec_scores(run)  # vldocir's order, ties one float32 step apart: pytrec_eval ranks alike
    results: dict[str, dict[str, float]] = {}
    columns = (ordered.column(c).to_pylist() for c in ("query_id", "page_id", "score"))
    for query, page, score in zip(*columns, strict=True):
        results.setdefault(query, {})[page] = score
    results = {query: results[query] for query in queries["id"] if query in results}
    if not results:
        raise MtebResultsError("the run ranks none of the queries that have qrels")
    _, ndcg, _map, recall, precision, naucs, mrr, naucs_mrr, hit_rate = calculate_retrieval_scores(
        results, relevant, list(k_values)
    )
    return make_score_dict(
        ndcg=ndcg,
        _map=_map,
        recall=recall,
        precision=precision,
        mrr=mrr,
        naucs=naucs,
        naucs_mrr=naucs_mrr,
        hit_rate=hit_rate,
        task_scores={},
    )


def evidence_scores(per_query: pd.DataFrame, ks: Sequence[int]) -> dict[str, float | None]:
    """The evidence-complete metrics of one query set as mteb-style keys (fractions): Micro
    (``ndcgall_at_k``), Macro (``macro_ndcgall_at_k``) and per structure (``page_single_ndcgall_at_k``)."""
    metrics = summarise(per_query, ks)
    out: dict[str, float | None] = {}

    def put(key: str, value) -> None:
        out[key] = None if value is None or (isinstance(value, float) and math.isnan(value)) else value / 100

    structures = metrics["breakdowns"]["structure"]
    for metric in HEADLINE_METRICS:
        for k in ks:
            column = f"{metric}@{k}"
            put(_score_key(metric, k), metrics["aggregates"]["micro"].get(column))
            put(f"macro_{_score_key(metric, k)}", metrics["aggregates"]["macro"].get(column))
            for structure in EVIDENCE_STRUCTURES:
                if structure in structures:
                    put(f"{structure}_{_score_key(metric, k)}", structures[structure].get(column))
    return out


def _expected_main(metrics: dict, protocol: Protocol | None, task: MtebTask, subset: str, ks) -> float | None:
    """``metrics.json``'s main score (a fraction) for ``subset``: the protocol's, else the headline."""
    if protocol is None:
        aggregate, metric, _ = HEADLINE_MAIN_SCORE
        k = task.main_score.rpartition("_at_")[2]
        value = metrics["aggregates"][aggregate].get(f"{metric}@{k}")
    else:
        section = metrics.get("protocol") or {}
        record = (section.get("per_subset") or {}).get(subset) if protocol.subsets else section.get("mean")
        value = (record or {}).get(protocol.main_score)
    return None if value is None else value / 100


@dataclass(frozen=True)
class StoredEvaluation:
    """What a store entry holds for one run, as the exporter reads it (the store is a higher layer)."""

    run: pa.Table
    """``query_id``, ``page_id``, ``score``."""
    per_query: pd.DataFrame
    metrics: dict
    ks: tuple[int, ...]


def subset_values(queries: pd.DataFrame, protocol: Protocol | None) -> dict[str, list[str]]:
    """hf_subset -> its query ids: the protocol's subsets column, else one ``default`` set."""
    if protocol is None or protocol.subsets is None:
        return {"default": queries["query_id"].astype(str).tolist()}
    groups = queries.groupby(queries[protocol.subsets].astype(str), sort=True)["query_id"]
    return {str(value): ids.astype(str).tolist() for value, ids in groups}


def task_scores(
    stored: StoredEvaluation,
    qrels: pd.DataFrame,
    subsets: Mapping[str, list[str]],
    task: MtebTask,
    protocol: Protocol | None,
) -> list[dict[str, Any]]:
    """One mteb scores entry per subset: mteb's metrics, the evidence-complete ones, ``main_score``,
    ``hf_subset``, ``languages``. Refused (:class:`MtebResultsError`) where mteb's main score is not
    ``metrics.json``'s, per subset and in the mean."""
    run_queries = stored.run.column("query_id").to_pandas().astype(str)
    per_query = stored.per_query.assign(query_id=stored.per_query["query_id"].astype(str))
    qrels = qrels.assign(query_id=qrels["query_id"].astype(str))
    entries = []
    for subset, query_ids in subsets.items():
        wanted = set(query_ids)
        rows = stored.run.filter(pa.array(run_queries.isin(wanted).to_numpy()))
        scores = mteb_retrieval_scores(rows, qrels[qrels["query_id"].isin(wanted)], task.k_values)
        scores.update(evidence_scores(per_query[per_query["query_id"].isin(wanted)], stored.ks))
        main = scores.get(task.main_score)
        expected = _expected_main(stored.metrics, protocol, task, subset, stored.ks)
        if main is None or expected is None or abs(main - expected) > TOLERANCE:
            raise MtebResultsError(
                f"{task.name} {subset}: mteb's {task.main_score} is {main}, metrics.json's main score is "
                f"{expected} (queries missing from the run, or another evaluation?); nothing written"
            )
        entries.append(
            {
                **scores,
                "main_score": main,
                MAIN_SCORE_KEY: task.main_score,
                "hf_subset": subset,
                "languages": list(task.languages[subset]),
            }
        )
    if protocol is not None:
        mean = sum(e["main_score"] for e in entries) / len(entries)
        expected = ((stored.metrics.get("protocol") or {}).get("mean") or {}).get(protocol.main_score)
        if expected is None or abs(mean - expected / 100) > TOLERANCE:
            raise MtebResultsError(
                f"{task.name}: the mean of mteb's {task.main_score} over subsets is {mean}, metrics.json's "
                f"protocol mean is {expected}; nothing written"
            )
    return entries


def task_result(
    task: MtebTask, entries: list[dict[str, Any]], revision: str, evaluation_time: float | None, date: str | None
):
    """mteb's ``TaskResult`` of the entries (validated by mteb's own model)."""
    mteb = require_mteb()
    from mteb.results import TaskResult

    return TaskResult(
        dataset_revision=revision,
        task_name=task.name,
        mteb_version=mteb.__version__,
        scores={task.split: entries},
        evaluation_time=evaluation_time,
        kg_co2_emissions=None,
        date=dt.datetime.fromisoformat(date) if date else None,
    )


# -- out: the model ---------------------------------------------------------------------------------


def _checkpoints(value) -> list[Mapping]:
    if isinstance(value, Mapping):
        found = [value] if isinstance(value.get("hub_id"), str) else []
        return found + [c for nested in value.values() for c in _checkpoints(nested)]
    if isinstance(value, list):
        return [c for nested in value for c in _checkpoints(nested)]
    return []


def model_identity(config: Mapping, run_key: str, encoder: Mapping | None = None) -> tuple[str, str]:
    """(model name, revision) of a stored run, from its resolved config: a base run of one
    checkpoint is that checkpoint (``hub_id``, ``revision``; a revision the config leaves to the
    model's registry, as ``retriever=mteb`` does, is the one the run's manifest records for its
    ``encoder``); an mteb model is its ``name`` and ``revision``; anything else (BM25, a run file, a
    setting that combines or re-ranks runs) is ``vldocir/<retriever>`` (``.<setting>`` unless base)
    at revision ``<run key>``."""
    retriever, setting = config.get("retriever") or {}, config.get("setting") or {}
    setting_id = str(setting.get("id", "base"))
    checkpoints = {(c["hub_id"], c.get("revision")) for c in _checkpoints(retriever)}
    model = retriever.get("model") or {}
    if setting_id == "base" and len(checkpoints) == 1:
        hub_id, revision = next(iter(checkpoints))
        return hub_id, str(revision or (encoder or {}).get("revision") or run_key)
    if setting_id == "base" and not checkpoints and isinstance(model.get("name"), str) and "/" in model["name"]:
        return model["name"], str(model.get("revision") or run_key)
    suffix = "" if setting_id == "base" else f".{setting_id}"
    return f"vldocir/{retriever.get('id', 'run')}{suffix}", run_key


def model_dir_name(name: str) -> str:
    """mteb's directory name for a model (``ResultCache.get_task_result_path``)."""
    return name.replace("/", "__").replace(" ", "_")


def result_path(out: Path, model: tuple[str, str], task: str) -> Path:
    """``<out>/results/<model>/<revision>/<task>.json``: mteb's ``ResultCache`` layout, so
    ``mteb.ResultCache(<out>)`` (and ``MTEB_CACHE=<out>``) reads it."""
    name, revision = model
    return out / "results" / model_dir_name(name) / revision / f"{task}.json"


def model_meta(model: tuple[str, str]) -> dict:
    """The ``model_meta.json`` mteb's loaders read (they need ``name`` and ``revision``)."""
    name, revision = model
    return {"name": name, "revision": revision, "release_date": None, "languages": None, "loader": None}


# -- in ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExternalResult:
    """One mteb result file: a model's scores on one task, read from disk."""

    path: Path
    model: str
    revision: str
    task: str
    split: str
    main_score: float
    """The mean over subsets (as mteb's ``TaskResult.main_score``), a fraction."""
    main_score_name: str | None
    """What ``main_score`` is, where the file says (``vldocir_main_score``)."""
    scores: dict[str, float]
    """Every numeric key's mean over subsets (fractions)."""
    subsets: tuple[str, ...]


def result_files(folder: Path) -> list[Path]:
    """Every ``<model>/<revision>/<task>.json`` (but ``model_meta.json``) under ``folder``, or under
    ``folder/results`` when it has that level."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MtebResultsError(f"mteb results folder {folder} does not exist")
    base = folder / "results" if (folder / "results").is_dir() else folder
    return sorted(p for p in base.glob("*/*/*.json") if p.name != "model_meta.json")


def read_result(path: Path) -> ExternalResult:
    """One result file, as plain JSON checked against mteb's schema; one error line naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        task, splits = data["task_name"], data["scores"]
        if not isinstance(task, str) or not isinstance(splits, dict) or not splits:
            raise ValueError("task_name must be text and scores a mapping of splits")
        split = next(iter(splits))
        entries = splits[split]
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"scores.{split} holds no subset")
        for entry in entries:
            if not isinstance(entry.get("hf_subset"), str) or not isinstance(entry.get("languages"), list):
                raise ValueError(f"scores.{split}[] needs hf_subset (text) and languages (a list)")
            if not _is_number(entry.get("main_score")):
                raise ValueError(f"scores.{split}[] of {entry.get('hf_subset')} has no numeric main_score")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise MtebResultsError(f"{path} is not an mteb result file ({type(error).__name__}: {error})") from error
    keys = [k for k in entries[0] if all(_is_number(e.get(k)) for e in entries)]
    scores = {k: sum(float(e[k]) for e in entries) / len(entries) for k in keys}
    meta = path.parent / "model_meta.json"
    model, revision = path.parent.parent.name.replace("__", "/"), path.parent.name
    if meta.is_file():
        try:
            identity = json.loads(meta.read_text(encoding="utf-8"))
            model, revision = str(identity.get("name") or model), str(identity.get("revision") or revision)
        except (OSError, ValueError, AttributeError) as error:
            raise MtebResultsError(f"{meta} is not readable JSON ({error})") from error
    names = {e.get(MAIN_SCORE_KEY) for e in entries}
    return ExternalResult(
        path=path,
        model=model,
        revision=revision,
        task=task,
        split=split,
        main_score=scores["main_score"],
        main_score_name=names.pop() if len(names) == 1 and None not in names else None,
        scores=scores,
        subsets=tuple(e["hf_subset"] for e in entries),
    )


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(float(value))


def read_results(folder: str | Path) -> list[ExternalResult]:
    """Every result file of an mteb results folder (:func:`result_files`), by path."""
    return [read_result(path) for path in result_files(Path(folder))]


def task_name_of(protocol: Protocol | None, benchmark: str) -> str:
    """The task name a benchmark's results carry: ``protocol.mteb_task``, else ``VLDocIR-<benchmark>``."""
    if protocol is not None and protocol.mteb_task:
        return protocol.mteb_task
    return f"{VLDOCIR_TASK_PREFIX}{benchmark}"

"""Query-cleaning ablations (paper App. A.5, Tables 6-10): how well each removal method predicts a
human keep/remove label on a labelled set of generated queries.

Methods (their ids are the rows of ``results/paper/cleaning_confusion.csv``):

- ``llm_rating_t<t>``: an LLM scores each query and its answer on four criteria (clarity, answer
  correctness or plausibility, closedness, no layout reference), each one of 0, 0.25, 0.5, 0.75, 1
  (prompt ``prompts/cleaning_rating.md``). The query is removed when **any score is at or below
  t** (``score <= t``). The paper words it as "falls below", but it also removes 344 queries at
  t = 0, which no score can fall strictly below; ``<=`` is the reading its Table 6 supports.
- ``llm_classifier``: the LLM answers keep or discard directly (``prompts/cleaning_classifier.md``).
- ``llm_combined``: removed when the classifier or the rating at ``combined_threshold`` (0.75, the
  paper's final method) removes it.
- embedding classifiers (``logreg``, ``xgboost``, ``knn5``, any node of ``classifiers``): a
  scikit-learn-style classifier on sentence embeddings of the query text, trained on a seeded,
  stratified split of ``round(n * 800 / 1438)`` queries (800 of the paper's 1,438) and evaluated on
  the rest. All classifiers share one split.

The LLM methods are evaluated on the whole set (as in the paper); the classifiers on the held-out
part only. An LLM answer that cannot be used (the request failed, no JSON object, a criterion
missing or off the score grid, an unknown decision) is counted by reason and treated as
``unparsed_as`` (default ``keep``: without a usable answer the method has no reason to remove the
query); it never stops the run. Such an answer is not cached (:meth:`LLMJudge.validator`: the same
parsers decide), so the next run asks again; answers cut at ``max_tokens`` or over the client's
``max_answer_bytes`` count as ``truncated`` or ``oversized``.

Positive means removed. Confusion counts use the CSV's column names: ``actual_removed_pred_removed``
(TP), ``actual_removed_pred_kept`` (FN), ``actual_kept_pred_removed`` (FP),
``actual_kept_pred_kept`` (TN). False omission rate = FN / (FN + TN): the share of the kept queries
that should have been removed. Retention = (FN + TN) / total.

``vldocir.apps.cleaning_ablations`` (``conf/cleaning_ablations.yaml``) runs :func:`run_cleaning`; it writes
``<results_dir>/cleaning/<method>.json``, which ``make tables`` shows beside the paper's numbers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vldocir.errors import ConfigError, VldocirError
from vldocir.io import JsonlLineError, atomic_write_json, file_digest, jsonl_objects
from vldocir.llm import UNUSABLE_KINDS, ChatClient, ChatResult, Validator

log = logging.getLogger(__name__)

CRITERIA = ("clarity", "answer_correctness", "closedness", "no_layout_reference")
SCALE = (0.0, 0.25, 0.5, 0.75, 1.0)
COUNT_COLUMNS = (
    "actual_removed_pred_removed",
    "actual_removed_pred_kept",
    "actual_kept_pred_removed",
    "actual_kept_pred_kept",
)
REQUIRED_COLUMNS = ("query_id", "question", "answer", "label")
LABELS = {"remove": True, "removed": True, "1": True, "keep": False, "kept": False, "0": False}
PAPER_TRAIN, PAPER_TOTAL = 800, 1438  # the paper's split of its labelled set (App. A.5)
PARSER_VERSION = 1
KEEP_WORDS, DISCARD_WORDS = {"keep", "accept"}, {"discard", "remove", "reject"}

_COMMENT = re.compile(r"\A\s*<!--.*?-->\s*", re.S)
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.S | re.I)
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.S)


class LabelledSetError(VldocirError, ValueError):
    """The labelled set cannot be read; the message names the file and the row."""


# -- the labelled set -------------------------------------------------------------------------------
def load_labelled(path: str | Path) -> pd.DataFrame:
    """The labelled query-removal set: columns ``query_id``, ``question``, ``answer`` (str),
    ``removed`` (bool, from ``label`` in remove/keep or 1/0) and any optional ones (``source``,
    ``structure``, ...), in file order.

    Reads ``.csv`` (leading lines starting with ``#`` are a header comment), ``.jsonl`` or
    ``.parquet``. A missing column, an empty ``query_id`` or ``question``, a repeated
    ``query_id`` or a label outside remove/keep/1/0 raises :class:`LabelledSetError` naming the
    file and the row (1 = the first data row; for CSV and JSONL also the line).
    """
    path = Path(path)
    if not path.is_file():
        raise LabelledSetError(f"{path}: no such labelled set")
    suffix = path.suffix.lower()
    lines: list[int] | None = None
    if suffix == ".csv":
        text = path.read_text(encoding="utf-8").splitlines(keepends=True)
        skipped = 0
        while skipped < len(text) and text[skipped].lstrip().startswith("#"):
            skipped += 1
        import io

        frame = pd.read_csv(io.StringIO("".join(text[skipped:])), dtype=str, keep_default_na=False)
        lines = [skipped + 2 + i for i in range(len(frame))]  # exact unless a quoted field spans lines
    elif suffix == ".jsonl":
        try:
            numbered = list(jsonl_objects(path))
        except JsonlLineError as error:
            raise LabelledSetError(f"{path}: line {error.line} is {error.reason}") from error
        lines, records = [n for n, _ in numbered], [r for _, r in numbered]
        frame = pd.DataFrame.from_records(records)
    elif suffix == ".parquet":
        frame = pd.read_parquet(path)
    else:
        raise LabelledSetError(f"{path}: unknown format {suffix!r}; use .csv, .jsonl or .parquet")
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise LabelledSetError(
            f"{path}: missing column(s) {missing}; needs {list(REQUIRED_COLUMNS)} (found {list(frame.columns)})"
        )

    def where(i: int) -> str:
        return f"{path}: row {i + 1}" + (f" (line {lines[i]})" if lines else "")

    removed, seen = [], {}
    for i, record in enumerate(frame[list(REQUIRED_COLUMNS)].itertuples(index=False)):
        qid, question, answer, label = record
        if _blank(qid):
            raise LabelledSetError(f"{where(i)}: empty query_id")
        qid = str(qid).strip()
        if qid in seen:
            raise LabelledSetError(f"{where(i)}: query_id {qid!r} repeats row {seen[qid] + 1}")
        seen[qid] = i
        if _blank(question):
            raise LabelledSetError(f"{where(i)}: query {qid!r} has an empty question")
        if answer is None or (isinstance(answer, float) and math.isnan(answer)):
            raise LabelledSetError(f"{where(i)}: query {qid!r} has no answer (an empty string is allowed)")
        value = str(label).strip().lower()
        if isinstance(label, (bool, np.bool_)):
            value = "1" if label else "0"
        elif (
            isinstance(label, (int, float, np.integer, np.floating))
            and not _blank(label)
            and float(label) in (0.0, 1.0)
        ):
            value = str(int(label))
        if value not in LABELS:
            raise LabelledSetError(
                f"{where(i)}: query {qid!r} has label {label!r}; use remove/keep or 1/0 (1 = remove)"
            )
        removed.append(LABELS[value])
    out = frame.drop(columns=["label"]).copy()
    out["query_id"] = [str(q).strip() for q in out["query_id"]]
    out["question"] = out["question"].astype(str)
    out["answer"] = out["answer"].astype(str)
    out["removed"] = np.array(removed, dtype=bool)
    return out.reset_index(drop=True)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == ""


# -- metrics ----------------------------------------------------------------------------------------
def confusion(actual_removed: Sequence[bool], predicted_removed: Sequence[bool]) -> dict[str, int]:
    """The four counts (rows actual, columns predicted; positive = removed) and ``total``."""
    actual, predicted = np.asarray(actual_removed, dtype=bool), np.asarray(predicted_removed, dtype=bool)
    if actual.shape != predicted.shape:
        raise ValueError(f"{actual.shape[0]} labels but {predicted.shape[0]} predictions")
    counts = {
        "actual_removed_pred_removed": int(np.sum(actual & predicted)),
        "actual_removed_pred_kept": int(np.sum(actual & ~predicted)),
        "actual_kept_pred_removed": int(np.sum(~actual & predicted)),
        "actual_kept_pred_kept": int(np.sum(~actual & ~predicted)),
    }
    counts["total"] = int(actual.size)
    return counts


def false_omission_rate(counts: dict[str, float]) -> float:
    """FN / (FN + TN): of the queries a method keeps, the share that should have been removed
    (NaN when it keeps none)."""
    fn, tn = counts["actual_removed_pred_kept"], counts["actual_kept_pred_kept"]
    return fn / (fn + tn) if fn + tn else float("nan")


def retention_rate(counts: dict[str, float]) -> float:
    """(FN + TN) / total: the share of the evaluated queries a method keeps."""
    total = sum(counts[c] for c in COUNT_COLUMNS)
    return (counts["actual_removed_pred_kept"] + counts["actual_kept_pred_kept"]) / total if total else float("nan")


# -- LLM answers ------------------------------------------------------------------------------------
def prompt_text(name: str) -> str:
    """``prompts/cleaning_<name>.md`` as stored (its header comment included: its hash is recorded)."""
    return resources.files(__package__).joinpath("prompts", f"cleaning_{name}.md").read_text(encoding="utf-8")


def render_prompt(template: str, question: str, answer: str) -> str:
    """The message sent: the template without its header comment, placeholders filled by plain
    replacement (braces in a question or in the JSON example need no escaping)."""
    body = _COMMENT.sub("", template, count=1).strip()
    return body.replace("{question}", question.strip()).replace("{answer}", answer.strip())


def _json_objects(text: str):
    """JSON objects an answer may hold, in order: all of it, its fenced blocks, then each ``{...}``
    in the text that parses."""
    for candidate in [text, *_FENCE.findall(text)]:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value
    decoder, position = json.JSONDecoder(), 0
    while (start := text.find("{", position)) >= 0:
        try:
            value, position = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        if isinstance(value, dict):
            yield value


def parse_rating(answer: str | None) -> tuple[dict[str, float] | None, str | None]:
    """``(scores, None)`` or ``(None, failure)`` from a rating answer.

    Accepted: the first JSON object (alone, fenced, or in text after a ``<think>`` block) that holds
    all four criteria; extra keys are ignored; a score may be a number or a numeric string and must
    be one of 0, 0.25, 0.5, 0.75, 1. Failures: ``malformed`` (no JSON object), ``missing_criteria``
    (no object holds all four), ``off_scale`` (a score off the grid).
    """
    text = _THINK.sub("", answer or "").strip()
    objects = list(_json_objects(text))
    if not objects:
        return None, "malformed"
    for obj in objects:
        lowered = {str(k).strip().lower(): v for k, v in obj.items()}
        if not all(c in lowered for c in CRITERIA):
            continue
        scores = {}
        for criterion in CRITERIA:
            try:
                value = float(lowered[criterion])
            except (TypeError, ValueError):
                return None, "off_scale"
            if isinstance(lowered[criterion], bool) or not any(abs(value - s) < 1e-9 for s in SCALE):
                return None, "off_scale"
            scores[criterion] = value
        return scores, None
    return None, "missing_criteria"


def parse_decision(answer: str | None) -> tuple[bool | None, str | None]:
    """``(removed, None)`` or ``(None, failure)`` from a keep/discard answer: the ``decision`` of
    the first JSON object that has one (keep/accept, or discard/remove/reject; any case). Failures:
    ``malformed`` (no JSON object with a ``decision``), ``unknown_decision`` (another value)."""
    text = _THINK.sub("", answer or "").strip()
    for obj in _json_objects(text):
        lowered = {str(k).strip().lower(): v for k, v in obj.items()}
        if "decision" not in lowered:
            continue
        value = str(lowered["decision"]).strip().lower()
        if value in KEEP_WORDS:
            return False, None
        if value in DISCARD_WORDS:
            return True, None
        return None, "unknown_decision"
    return None, "malformed"


def removed_by_rating(scores: dict[str, float] | None, threshold: float, unparsed_removed: bool) -> bool:
    """Removed when any criterion scores at or below ``threshold`` (module doc: why ``<=``)."""
    if scores is None:
        return unparsed_removed
    return any(score <= threshold + 1e-9 for score in scores.values())


@dataclass
class LLMJudgements:
    """Per query (in the labelled set's order): the rating scores and the keep/discard decision,
    ``None`` where the answer could not be used, with the failure reasons."""

    scores: list[dict[str, float] | None]
    decisions: list[bool | None]
    rating_failures: Counter = field(default_factory=Counter)
    decision_failures: Counter = field(default_factory=Counter)


class LLMJudge:
    """Asks ``llm`` for the rating and the keep/discard decision of each labelled query."""

    def __init__(self, llm: ChatClient, progress: bool = False):
        self.llm, self.progress = llm, progress
        self.templates = {name: prompt_text(name) for name in ("rating", "classifier")}

    def messages(self, task: str, question: str, answer: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": render_prompt(self.templates[task], question, answer)}]

    @staticmethod
    def validator(task: str) -> Validator:
        """What the client caches for ``task``: answers its parser (:func:`parse_rating`,
        :func:`parse_decision`) takes."""
        parse = parse_rating if task == "rating" else parse_decision
        return Validator(f"cleaning.{task}/v{PARSER_VERSION}", lambda answer: parse(answer)[1])

    def describe(self) -> dict[str, Any]:
        return {
            "llm": self.llm.cache_params(),
            "parser": PARSER_VERSION,
            "prompt_sha256": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in self.templates.items()},
        }

    def replay(self, labelled: pd.DataFrame, recorded: dict[str, Any]) -> int:
        """Put recorded answers (``{"generator": <model name>, "responses": {query_id: {"rating":
        text, "classifier": text}}}``) into the client's cache, so that :meth:`judge` replays them.
        The generator must be the client's model name: recorded answers never pass for a served
        model's. Returns the number of answers stored."""
        generator = recorded.get("generator")
        if generator != self.llm.model:
            raise ConfigError(
                f"recorded answers are by {generator!r} but llm.model is {self.llm.model!r}; "
                "set llm.model to the recording's generator (or llm_recorded=null to ask a server)"
            )
        stored = 0
        responses = recorded.get("responses", {})
        for row in labelled.itertuples(index=False):
            for task in ("rating", "classifier"):
                content = responses.get(row.query_id, {}).get(task)
                if content is not None:
                    self.llm.record(self.messages(task, row.question, row.answer), content, self.validator(task))
                    stored += 1
        return stored

    def requests(
        self, labelled: pd.DataFrame, tasks: Sequence[str] = ("rating", "classifier")
    ) -> list[list[dict[str, Any]]]:
        """The requests :meth:`judge` sends: every row's rating, then every row's classifier request."""
        rows = list(labelled.itertuples(index=False))
        return [
            self.messages(task, r.question, r.answer)
            for task in ("rating", "classifier")
            if task in tasks
            for r in rows
        ]

    def judge(self, labelled: pd.DataFrame, tasks: Sequence[str] = ("rating", "classifier")) -> LLMJudgements:
        """Ask for the ``tasks`` (rating, classifier) of every row; a task not asked is ``None`` per row."""
        rows = list(labelled.itertuples(index=False))
        asked = [task for task in ("rating", "classifier") if task in tasks]
        answers = self.llm.complete_many(
            self.requests(labelled, tasks),
            progress="cleaning: LLM judgements" if self.progress else False,
            validate=[self.validator(task) for task in asked for _ in rows],
        )
        skipped = [ChatResult(error="not asked", error_kind="not_asked")] * len(rows)
        ratings = answers[: len(rows)] if "rating" in tasks else skipped
        decisions = answers[-len(rows) :] if "classifier" in tasks and rows else skipped
        out = LLMJudgements(scores=[], decisions=[])
        for answer in ratings:
            scores, failure = parse_rating(answer.content) if answer.ok else (None, _failure(answer))
            out.scores.append(scores)
            if failure is True:  # not asked: nothing failed
                continue
            if failure:
                out.rating_failures[failure] += 1
        for answer in decisions:
            decision, failure = parse_decision(answer.content) if answer.ok else (None, _failure(answer))
            out.decisions.append(decision)
            if failure is True:
                continue
            if failure:
                out.decision_failures[failure] += 1
        return out


def _failure(answer: ChatResult) -> str | bool:
    """Why a request gave no answer to parse: ``True`` when it was not asked (nothing failed)."""
    if answer.error_kind == "not_asked":
        return True
    return answer.error_kind if answer.error_kind in UNUSABLE_KINDS else "llm_error"


def llm_predictions(
    judgements: LLMJudgements, thresholds: Sequence[float], combined_threshold: float, unparsed_removed: bool
) -> dict[str, np.ndarray]:
    """``method id -> predicted removed`` (bool array over the set) for the LLM methods."""
    out = {}
    for t in thresholds:
        out[rating_method_id(t)] = np.array([removed_by_rating(s, t, unparsed_removed) for s in judgements.scores])
    classifier = np.array([unparsed_removed if d is None else d for d in judgements.decisions], dtype=bool)
    out["llm_classifier"] = classifier
    rating = np.array(
        [removed_by_rating(s, combined_threshold, unparsed_removed) for s in judgements.scores], dtype=bool
    )
    out["llm_combined"] = classifier | rating
    return out


def rating_method_id(threshold: float) -> str:
    """``llm_rating_t0.0``, ``llm_rating_t0.25``, ... (the CSV's method ids)."""
    return f"llm_rating_t{float(threshold):g}" if float(threshold) % 1 else f"llm_rating_t{float(threshold):.1f}"


# -- embedding classifiers --------------------------------------------------------------------------
def train_size(n: int, train_size: int | None = None) -> int:
    """The paper's 800 of 1,438 for training, as the same fraction of ``n`` (exactly 800 for 1,438)."""
    size = round(n * PAPER_TRAIN / PAPER_TOTAL) if train_size is None else int(train_size)
    if not 2 <= size <= n - 2:
        raise ConfigError(
            f"cleaning.train_size: {size} of {n} labelled queries leaves no room for both a training "
            "and an evaluation part"
        )
    return size


def split(labelled: pd.DataFrame, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(train, held_out)``: a seeded split stratified by label."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labelled))
    train, held_out = train_test_split(
        index, train_size=size, random_state=seed, stratify=labelled["removed"].to_numpy()
    )
    return np.sort(train), np.sort(held_out)


def embed(embedder, texts: list[str]) -> np.ndarray:
    """``(n, d)`` float32 from any encoder with ``encode_queries(texts) -> [(1, d) array]`` (the
    retrieval package's SentenceTransformerEncoder, built by Hydra)."""
    vectors = embedder.encode_queries(texts)
    return np.concatenate([np.asarray(v, dtype=np.float32).reshape(1, -1) for v in vectors], axis=0)


def classifier_predictions(
    classifiers: dict[str, Any], vectors: np.ndarray, removed: np.ndarray, train: np.ndarray, held_out: np.ndarray
) -> dict[str, np.ndarray]:
    """``name -> predicted removed`` on ``held_out``: each classifier fitted on ``train`` (``vectors``
    ``(n, d)``, ``removed`` ``(n,)`` bool)."""
    out = {}
    for name, model in classifiers.items():
        model.fit(vectors[train], removed[train].astype(int))
        out[name] = np.asarray(model.predict(vectors[held_out])).astype(int) == 1
    return out


# -- the stage --------------------------------------------------------------------------------------
def write_method(out_dir: Path, method: str, counts: dict[str, int], extra: dict[str, Any]) -> Path:
    """``<out_dir>/<method>.json``: the counts under the CSV's column names, total, FOR, retention, then ``extra``."""
    record = {
        "method": method,
        **counts,
        "false_omission_rate": false_omission_rate(counts),
        "retention_rate": retention_rate(counts),
        **extra,
    }
    path = out_dir / f"{method}.json"
    atomic_write_json(record, path)
    return path


def format_summary(results: dict[str, dict[str, Any]]) -> str:
    """One line per method: the matrix (TP FN / FP TN), total, FOR, retention."""
    lines = [
        f"{'method':<18} {'P as P':>7} {'P as N':>7} {'N as P':>7} {'N as N':>7} "
        f"{'total':>6} {'FOR':>7} {'kept':>7}  unparsed"
    ]
    for method, r in results.items():
        unparsed = ", ".join(f"{k} {v}" for k, v in r.get("unparsed", {}).items()) or "-"
        lines.append(
            f"{method:<18} {r['actual_removed_pred_removed']:>7} {r['actual_removed_pred_kept']:>7} "
            f"{r['actual_kept_pred_removed']:>7} {r['actual_kept_pred_kept']:>7} {r['total']:>6} "
            f"{r['false_omission_rate']:>7.4f} {r['retention_rate']:>7.2%}  {unparsed}"
        )
    return "\n".join(lines)


def run_cleaning(cfg) -> dict[str, dict[str, Any]]:
    """Run the methods of ``cfg`` (the ``cleaning`` node of ``conf/cleaning_ablations.yaml``) on the labelled set
    and write ``<cfg.out_dir>/<method>.json`` for each; returns ``method -> record``."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from vldocir.manifest import git_state, package_versions

    methods = list(cfg.methods)
    unknown = [
        m for m in methods if m not in ("llm_rating", "llm_classifier", "llm_combined") and m not in cfg.classifiers
    ]
    if unknown:
        raise ConfigError(
            f"cleaning.methods: {unknown} are neither LLM methods (llm_rating, llm_classifier, llm_combined) "
            f"nor nodes of cleaning.classifiers ({sorted(cfg.classifiers)})"
        )
    if cfg.unparsed_as not in ("keep", "remove"):
        raise ConfigError(f"cleaning.unparsed_as must be keep or remove, got {cfg.unparsed_as!r}")
    thresholds = [float(t) for t in cfg.thresholds]
    if any(t not in SCALE for t in [*thresholds, float(cfg.combined_threshold)]):
        raise ConfigError(f"cleaning.thresholds and combined_threshold must be on the grid {SCALE}")
    path = Path(cfg.labelled)
    labelled = load_labelled(path)
    removed = labelled["removed"].to_numpy()
    out_dir = Path(cfg.out_dir)
    common = {
        "labelled_set": {
            "path": str(path),
            "sha256": file_digest(path),
            "rows": len(labelled),
            "removed": int(removed.sum()),
            "kept": int((~removed).sum()),
        },
        "seed": int(cfg.seed),
        "git": git_state(Path(cfg.root_dir)),
        "packages": {
            k: v for k, v in package_versions().items() if k in ("vldocir", "scikit-learn", "xgboost", "openai")
        },
    }
    results: dict[str, dict[str, Any]] = {}

    llm_methods = [m for m in methods if m.startswith("llm_")]
    if llm_methods:
        judge = LLMJudge(instantiate(cfg.llm), progress=bool(cfg.progress))
        recorded_from = None
        if cfg.llm_recorded:
            recorded_from = Path(cfg.llm_recorded)
            stored = judge.replay(labelled, json.loads(recorded_from.read_text(encoding="utf-8")))
            log.info("replaying %d recorded answers from %s", stored, recorded_from)
        judgements = judge.judge(labelled)
        predictions = llm_predictions(
            judgements, thresholds, float(cfg.combined_threshold), cfg.unparsed_as == "remove"
        )
        llm = {
            **judge.describe(),
            "usage": judge.llm.usage(),
            "recorded_answers": None
            if recorded_from is None
            else {"path": str(recorded_from), "sha256": file_digest(recorded_from)},
        }
        wanted = ([rating_method_id(t) for t in thresholds] if "llm_rating" in methods else []) + [
            m for m in ("llm_classifier", "llm_combined") if m in methods
        ]
        for method in wanted:
            if method.startswith("llm_rating"):
                params = {
                    "threshold": float(method.removeprefix("llm_rating_t")),
                    "rule": "removed if any score <= threshold",
                }
                unparsed = dict(judgements.rating_failures)
            elif method == "llm_classifier":
                params, unparsed = {}, dict(judgements.decision_failures)
            else:
                params = {
                    "rule": "removed if llm_classifier removes or llm_rating at combined_threshold removes",
                    "combined_threshold": float(cfg.combined_threshold),
                }
                unparsed = {f"rating_{k}": v for k, v in judgements.rating_failures.items()} | {
                    f"classifier_{k}": v for k, v in judgements.decision_failures.items()
                }
            counts = confusion(removed, predictions[method])
            extra = {
                "evaluated_on": "all",
                "params": {**params, "unparsed_as": cfg.unparsed_as},
                "unparsed": unparsed,
                "models": {"llm": llm},
                **common,
            }
            write_method(out_dir, method, counts, extra)
            results[method] = {
                **counts,
                "false_omission_rate": false_omission_rate(counts),
                "retention_rate": retention_rate(counts),
                "unparsed": unparsed,
            }

    classifier_methods = [m for m in methods if m in cfg.classifiers]
    if classifier_methods:
        embedder = instantiate(cfg.embedder)  # checkpoint.local_path may be package:<name> (retrieval.checkpoints)
        texts = labelled[list(cfg.embed_columns)].astype(str).agg("\n".join, axis=1).tolist()
        vectors = embed(embedder, texts)
        size = train_size(len(labelled), cfg.train_size)
        train, held_out = split(labelled, size, int(cfg.seed))
        models = {m: instantiate(cfg.classifiers[m]) for m in classifier_methods}
        predictions = classifier_predictions(models, vectors, removed, train, held_out)
        for method in classifier_methods:
            counts = confusion(removed[held_out], predictions[method])
            params = OmegaConf.to_container(cfg.classifiers[method], resolve=True)
            extra = {
                "evaluated_on": "held_out",
                "params": {
                    "classifier": params,
                    "train": int(train.size),
                    "held_out": int(held_out.size),
                    "split": "stratified by label, seeded",
                    "embed_columns": list(cfg.embed_columns),
                },
                "unparsed": {},
                "models": {"embedder": embedder.describe(), "dimension": int(vectors.shape[1])},
                **common,
            }
            write_method(out_dir, method, counts, extra)
            results[method] = {
                **counts,
                "false_omission_rate": false_omission_rate(counts),
                "retention_rate": retention_rate(counts),
                "unparsed": {},
            }
    return results


# -- cleaning the generated queries of a build ------------------------------------------------------
BUILD_METHODS = ("llm_combined", "llm_rating", "llm_classifier", "none")
BUILD_TASKS = {
    "llm_combined": ("rating", "classifier"),
    "llm_rating": ("rating",),
    "llm_classifier": ("classifier",),
    "none": (),
}


@dataclass
class QueryCleaningSpec:
    """The cleaning step of a build (paper §3.4): ``llm_combined`` (the paper's final method: removed
    when the classifier discards or any rating criterion is at or below ``threshold``),
    ``llm_rating``, ``llm_classifier`` or ``none``. ``unparsed_as``: what an unusable answer counts as."""

    method: str = "llm_combined"
    threshold: float = 0.75
    unparsed_as: str = "keep"

    def __post_init__(self) -> None:
        if self.method not in BUILD_METHODS:
            raise ConfigError(f"cleaning.method must be one of {', '.join(BUILD_METHODS)}, got {self.method!r}")
        if float(self.threshold) not in SCALE:
            raise ConfigError(f"cleaning.threshold must be on the grid {SCALE}, got {self.threshold!r}")
        if self.unparsed_as not in ("keep", "remove"):
            raise ConfigError(f"cleaning.unparsed_as must be keep or remove, got {self.unparsed_as!r}")


def cleaning_frame(queries: pd.DataFrame) -> pd.DataFrame:
    """What the judge reads of built queries (``query_id``, ``question``, ``answer``)."""
    return pd.DataFrame(
        {
            "query_id": queries["query_id"],
            "question": queries["text"].astype(str),
            "answer": queries["answer"].fillna("").astype(str),
        }
    )


def clean_generated_queries(
    judge: LLMJudge | None,
    queries: pd.DataFrame,
    spec: QueryCleaningSpec,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Which of ``queries`` (``query_id``, ``text``, ``answer``) the step removes (a bool array) and
    its report: counts before and after, removed per reason (``llm_classifier``, ``llm_rating``,
    or both), unusable answers per reason, and which criteria the removed queries failed."""
    n = len(queries)
    report: dict[str, Any] = {
        "method": spec.method,
        "threshold": float(spec.threshold),
        "unparsed_as": spec.unparsed_as,
        "before": n,
    }
    if spec.method == "none" or n == 0:
        return np.zeros(n, dtype=bool), {**report, "removed": {}, "after": n}
    if judge is None:
        raise ConfigError(f"cleaning.method={spec.method} needs an LLM (cleaning.llm)")
    tasks = BUILD_TASKS[spec.method]
    judgements = judge.judge(cleaning_frame(queries), tasks)
    predictions = llm_predictions(
        judgements, [float(spec.threshold)], float(spec.threshold), spec.unparsed_as == "remove"
    )
    rating = predictions[rating_method_id(spec.threshold)] if "rating" in tasks else np.zeros(n, dtype=bool)
    classifier = predictions["llm_classifier"] if "classifier" in tasks else np.zeros(n, dtype=bool)
    removed = rating | classifier
    failed = Counter(
        c
        for s, r in zip(judgements.scores, rating, strict=True)
        if r and s
        for c, v in s.items()
        if v <= spec.threshold + 1e-9
    )
    report.update(
        {
            "removed": {
                "llm_classifier_only": int((classifier & ~rating).sum()),
                "llm_rating_only": int((rating & ~classifier).sum()),
                "both": int((rating & classifier).sum()),
            },
            "after": int(n - removed.sum()),
            "unparsed": {"rating": dict(judgements.rating_failures), "classifier": dict(judgements.decision_failures)},
            "criteria_at_or_below_threshold": {c: int(failed.get(c, 0)) for c in CRITERIA},
            "judge": judge.describe(),
        }
    )
    return removed, report

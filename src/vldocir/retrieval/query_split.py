"""Query splitting (paper §4.2, "Q-Split"): an LLM decomposes each query into sub-queries, the job's
retriever searches every sub-query, and each query's sub-query lists are merged round robin with
duplicate pages skipped.

The paper names variants 1-3, tabulates only variant 3 ("Q-Split") and prints no prompts. The
variants here are our definitions; the prompts are ``prompts/query_split_v<variant>.md`` (each
file's header comment restates its variant and is not sent to the model):

1. a split in two at most: one or two sub-queries, merged round robin; the original query is not
   searched (``max_subqueries`` does not apply: the cap is 2);
2. one sub-query per piece of evidence, at most ``max_subqueries``, merged round robin; the
   original query is not searched;
3. as 2, plus the original query searched as is, its list first in the round robin (so its top
   page keeps rank 1). ``conf/setting/qsplit.yaml`` runs this one, with id ``qsplit``.

A query whose split fails (the LLM request failed after its retries, the answer was cut at
``max_tokens`` or is over the client's ``max_answer_bytes``, holds no JSON list of strings, or the
list is empty) is searched unsplit and flagged; the job goes on. Such answers are not cached
(:class:`vldocir.llm.Validator`: :func:`parse_subqueries` decides), so the next run asks again. The flags go to
``job.query_flags`` (``qsplit_failed``, ``qsplit_n``: sub-queries searched, ``qsplit_failure``:
the reason or ``""``) and the counts by reason to ``job.stats["query_split"]``. More failed
splits than ``max_failed_fraction`` of the queries stop the job instead: such a run would be the
base run filed as Q-Split (a server that is down, a model that does not follow the format).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from contextlib import suppress
from importlib import resources
from typing import Any

import pyarrow as pa

from vldocir.errors import ConfigError, VldocirError
from vldocir.llm import UNUSABLE_KINDS, ChatClient, Validator
from vldocir.retrieval.fusion import ordered_run, ranked_lists, round_robin_lists
from vldocir.retrieval.settings import RunJob, Setting

VARIANTS = (1, 2, 3)
VARIANT_1_CAP = 2
PARSER_VERSION = 1  # part of the run key: bump it when parse_subqueries changes what it accepts
SUBQUERY_ID = "{query_id}#s{n}"
FAILURES = ("llm_error", *UNUSABLE_KINDS, "malformed", "empty")

_COMMENT = re.compile(r"\A\s*<!--.*?-->\s*", re.S)
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.S | re.I)  # a reasoning model's preamble
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.S)


class QuerySplitError(VldocirError, RuntimeError):
    """Too many queries could not be split (see ``max_failed_fraction``)."""


def prompt_text(variant: int) -> str:
    """The prompt file of ``variant`` as stored (header comment included: its hash keys the run)."""
    return resources.files(__package__).joinpath("prompts", f"query_split_v{variant}.md").read_text(encoding="utf-8")


def render_prompt(template: str, query: str, max_subqueries: int) -> str:
    """The message sent for ``query``: the template without its header comment, placeholders filled
    (plain replacement, so that braces in a query or in the JSON example need no escaping)."""
    body = _COMMENT.sub("", template, count=1).strip()
    return body.replace("{max_subqueries}", str(max_subqueries)).replace("{query}", query.strip())


def _json_values(text: str):
    """The JSON values an answer may hold, in order: all of it, its fenced blocks, then each
    outermost array or object in the text (one that starts at a ``[`` or ``{`` and parses)."""
    for candidate in [text, *_FENCE.findall(text)]:
        with suppress(ValueError):
            yield json.loads(candidate)
    decoder = json.JSONDecoder()
    position = 0
    while (start := min((i for i in (text.find("[", position), text.find("{", position)) if i >= 0), default=-1)) >= 0:
        try:
            value, position = decoder.raw_decode(text, start)
            yield value
        except ValueError:
            position = start + 1


def parse_subqueries(answer: str, limit: int) -> tuple[list[str] | None, str | None, bool]:
    """``(sub_queries, failure, truncated)`` from an LLM answer.

    Accepted: the first JSON array of strings in the answer, alone, in a code fence or in
    surrounding text (after a ``<think>`` block), or an object holding one such array
    (``{"sub_queries": [...]}``). Items are stripped; empty and repeated ones (ignoring case)
    dropped; more than ``limit`` cut to the first ``limit`` (``truncated``). Failures: ``malformed``
    (no array of strings), ``empty`` (nothing left).
    """
    text = _THINK.sub("", answer or "").strip()
    items = None
    for value in _json_values(text):
        if isinstance(value, dict):
            lists = [v for v in value.values() if isinstance(v, list)]
            value = lists[0] if len(lists) == 1 else None
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            items = value
            break
    if items is None:
        return None, "malformed", False
    seen: set[str] = set()
    subqueries = []
    for item in (i.strip() for i in items):
        if item and item.casefold() not in seen:
            seen.add(item.casefold())
            subqueries.append(item)
    if not subqueries:
        return None, "empty", False
    return subqueries[:limit], None, len(subqueries) > limit


class QuerySplit(Setting):
    """Q-Split: LLM sub-queries searched with the job's retriever, merged round robin (module doc).

    Args:
        llm: the chat client (``vldocir.llm.ChatClient``, built by Hydra).
        variant: 1, 2 or 3 (module doc; the paper's tabulated Q-Split is 3).
        max_subqueries: the most sub-queries kept per query (variants 2 and 3; variant 1's cap is 2).
        max_failed_fraction: the job stops (:class:`QuerySplitError`) when more than this fraction
            of the queries could not be split; 1.0 never stops.
        progress: a progress bar over the LLM requests.
    """

    def __init__(
        self,
        llm: ChatClient,
        variant: int = 3,
        max_subqueries: int = 4,
        max_failed_fraction: float = 1.0,
        progress: bool = True,
    ):
        if variant not in VARIANTS:
            raise ConfigError(f"setting.method.variant must be one of {VARIANTS}, got {variant!r}")
        if isinstance(max_subqueries, bool) or not isinstance(max_subqueries, int) or max_subqueries < 1:
            raise ConfigError(f"setting.method.max_subqueries must be an integer >= 1, got {max_subqueries!r}")
        if not 0.0 <= float(max_failed_fraction) <= 1.0:
            raise ConfigError(f"setting.method.max_failed_fraction must be in [0, 1], got {max_failed_fraction!r}")
        self.llm, self.variant = llm, variant
        self.limit = VARIANT_1_CAP if variant == 1 else max_subqueries
        self.max_failed_fraction, self.progress = float(max_failed_fraction), progress
        self.template = prompt_text(variant)

    def cache_params(self) -> dict[str, Any]:
        return {
            "setting": "qsplit",
            "variant": self.variant,
            "max_subqueries": self.limit,
            "prompt_sha256": hashlib.sha256(self.template.encode()).hexdigest(),
            "parser": PARSER_VERSION,
            "llm": self.llm.cache_params(),
        }

    def messages(self, query: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": render_prompt(self.template, query, self.limit)}]

    def split(self, queries: dict[str, str]) -> dict[str, tuple[list[str] | None, str | None, bool]]:
        """``query_id -> (sub_queries or None, failure reason or None, truncated)``."""
        query_ids = list(queries)
        answers = self.llm.complete_many(
            [self.messages(queries[q]) for q in query_ids],
            progress="Q-Split: sub-queries" if self.progress else False,
            validate=self.validator(),
        )
        return {q: self._parsed(a) for q, a in zip(query_ids, answers, strict=True)}

    def validator(self) -> Validator:
        """What the client caches: answers :func:`parse_subqueries` takes (the limit only cuts)."""
        return Validator(f"qsplit.subqueries/v{PARSER_VERSION}", lambda answer: parse_subqueries(answer, 1)[1])

    def _parsed(self, answer) -> tuple[list[str] | None, str | None, bool]:
        if not answer.ok:
            return None, answer.error_kind if answer.error_kind in UNUSABLE_KINDS else "llm_error", False
        return parse_subqueries(answer.content, self.limit)

    def make_run(self, job: RunJob) -> pa.Table:
        query_ids = list(job.queries)
        splits = self.split(job.queries)
        searches: dict[str, str] = {}  # search id -> text, all searched in one retrieve call
        plan: dict[str, list[str]] = {}  # query id -> its search ids, in round-robin order
        for qid in query_ids:
            subqueries = splits[qid][0]
            plan[qid] = [qid] if subqueries is None or self.variant == 3 else []
            if plan[qid]:
                searches[qid] = job.queries[qid]
            for n, text in enumerate(subqueries or (), start=1):
                sid = SUBQUERY_ID.format(query_id=qid, n=n)
                if sid in job.queries:
                    raise ValueError(f"sub-query id {sid!r} is also a query id of {job.bench.name}")
                searches[sid] = text
                plan[qid].append(sid)

        failures = Counter(reason for _, reason, _ in splits.values() if reason)
        failed = sum(failures.values())
        job.stats["query_split"] = {
            "variant": self.variant,
            "queries": len(query_ids),
            "split": len(query_ids) - failed,
            "failed": {reason: failures.get(reason, 0) for reason in FAILURES},
            "truncated": sum(truncated for _, _, truncated in splits.values()),
            "subqueries": sum(len(s or ()) for s, _, _ in splits.values()),
            "llm": self.llm.usage(),
        }
        if query_ids and failed > self.max_failed_fraction * len(query_ids):
            raise QuerySplitError(
                f"query splitting failed for {failed} of {len(query_ids)} queries ({dict(failures)}), more than "
                f"max_failed_fraction={self.max_failed_fraction:g}; is the LLM server up ({self.llm!r})?"
            )
        flags = getattr(job, "query_flags", None)
        if flags is not None:
            flags["qsplit_failed"] = {q: splits[q][0] is None for q in query_ids}
            flags["qsplit_n"] = {q: len(splits[q][0] or ()) for q in query_ids}
            flags["qsplit_failure"] = {q: splits[q][1] or "" for q in query_ids}

        run = job.retriever.retrieve(job.bench, searches, job.depth, job.cache) if searches else None
        job.stats.update(getattr(job.retriever, "stats", {}))
        lists = ranked_lists(run) if run is not None and run.num_rows else {}
        merged = [round_robin_lists([lists.get(s, []) for s in plan[q]], job.depth) for q in query_ids]
        return ordered_run(query_ids, merged)

"""Two-step VLM query generation over evidence configurations (paper §3.3, App. A.4).

For each evidence configuration (:mod:`vldocir.queries.evidence_configs`), :func:`generate_queries`
runs:

1. **Page description.** A VLM describes the visual elements of each page image of the
   configurations (prompt ``prompts/generation/describe.md``); a page shared by several
   configurations is described once, and a failed description leaves the page "not available".
2. **Query writing.** A VLM gets the page images, their descriptions, the document titles and each
   page's HTML with element ids (rebuilt from the elements table by :func:`page_html`, cut at
   ``html_max_chars``) and writes ``queries_per_config`` queries (extra ones are dropped), answering
   as free reasoning, then a line holding only the splitter, then a JSON array of
   ``{"question", "answer", "evidence"}`` (``evidence``: the element ids the answer rests on). The
   prompt is ``prompts/generation/<source>_<family>.md`` (:data:`FAMILIES`): ``page_single``,
   ``page_multi``, ``within_doc`` (Doc-Adjacent/Near/Far, asked alike and labelled afterwards from
   the pages the evidence lands on, as in the paper) or ``cross_doc`` (the documents are called
   "12345" and "54321", element ids are written ``12345/e00012``, evidence from both is required).

An answer is parsed by :func:`parse_output` (a ``<think>`` block and a code fence around the JSON
are tolerated) and **discarded whole**, counted by reason (:data:`OUTPUT_DISCARDS`), when the
request failed, the answer was cut at ``max_tokens`` (``truncated``) or is over the client's
``max_answer_bytes`` (``oversized``), the splitter is missing, the part after the last splitter is not JSON, the JSON is
not an array of objects with a non-blank question, an answer and a non-empty evidence list, or any
cited element id is not one given in the prompt. The queries of a valid answer are resolved to
their evidence pages through the elements table with
:func:`vldocir.data.evidence.resolve_element_pages` (the code path of the template
queries) and labelled from where the evidence lands: a page-family query is Page-Single with one
cited element and Page-Multi with several; a within-document query takes its structure from the
largest gap between its pages (:func:`~vldocir.data.evidence.within_document_structure`). The
deterministic filter (:data:`FILTER_DISCARDS`) then drops within-document queries whose evidence
lies on one page and Cross-Doc queries whose evidence lies in one document.

All calls go through :class:`vldocir.llm.ChatClient` (any OpenAI-compatible server; bounded
concurrency, retries with backoff, an on-disk response cache keyed by content, so a rerun with the
server down replays it). Only usable answers are cached: a description that is not blank, a
generation answer that :func:`parse_output` accepts (its :class:`~vldocir.llm.Validator`); a
discarded one is asked again by the next run. The result holds the queries before cleaning, their qrels, every candidate
with its fate and boxes, one row per configuration's answer, and a report (counts per reason,
tokens and cost per client: :func:`usage_report`) that the query stage writes into
``benchmark.json``.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vldocir.data.evidence import (
    element_boxes,
    evidence_types,
    page_id,
    resolve_element_pages,
    within_document_structure,
)
from vldocir.data.schema import SOURCES
from vldocir.errors import ConfigError
from vldocir.llm import UNUSABLE_KINDS, ChatClient, ChatResult, Validator, image_part
from vldocir.queries.template_queries import QREL_COLUMNS, QUERY_COLUMNS

log = logging.getLogger(__name__)

FAMILIES = {
    "page_single": "page_single",
    "page_multi": "page_multi",
    "doc_adjacent": "within_doc",
    "doc_near": "within_doc",
    "doc_far": "within_doc",
    "cross_doc": "cross_doc",
}
"""Evidence structure of a configuration -> prompt family (Doc-Adjacent/Near/Far are asked alike)."""
NEUTRAL_DOC_IDS = ("12345", "54321")
"""How a Cross-Doc prompt names its two documents (the paper's ids): no real id leaks into a query."""
OUTPUT_DISCARDS = (
    "request_failed",
    *UNUSABLE_KINDS,
    "missing_splitter",
    "invalid_json",
    "invalid_format",
    "unknown_element_id",
)
FILTER_DISCARDS = ("evidence_on_one_page", "evidence_in_one_document")
PARSER_VERSION = 1

_TAGS = {
    "headline": "h2",
    "text": "p",
    "list": "ul",
    "caption": "figcaption",
    "image": "figure",
    "figure": "figure",
    "chart": "figure",
    "table": "table",
    "table_row": "tr",
    "formula": "math",
}
_COMMENT = re.compile(r"\A\s*<!--.*?-->\s*", re.S)
_INCLUDE = re.compile(r"\{\{>\s*([a-z_]+)\s*\}\}")
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.S | re.I)
_FENCE = re.compile(r"\A\s*```[a-zA-Z]*\s*\n?(.*?)```\s*\Z", re.S)


@dataclass
class GenerationSpec:
    """How queries are generated (the clients are configured separately)."""

    queries_per_config: int = 10
    """Queries asked for per configuration (the paper: 10); extra ones in an answer are dropped."""
    splitter: str = "### QUERIES ###"
    """The line separating the reasoning from the JSON array."""
    html_max_chars: int = 20000
    """Per page; a longer page HTML is cut at an element boundary (and says so in the prompt)."""
    describe: bool = True
    """Step 1 on; off: the prompt says no description is available."""
    image_detail: str | None = None
    """``detail`` of the image parts (``high``/``low``/``auto`` for the OpenAI API; ``None``: not sent)."""
    prices_per_million_tokens: dict[str, list[float]] = field(default_factory=dict)
    """``model -> [input USD, output USD]`` per million tokens, for the report's cost (unknown model: no cost)."""

    def __post_init__(self) -> None:
        if int(self.queries_per_config) < 1:
            raise ConfigError(f"generation.queries_per_config must be >= 1, got {self.queries_per_config!r}")
        if not str(self.splitter).strip() or "\n" in str(self.splitter):
            raise ConfigError(f"generation.splitter must be one non-blank line, got {self.splitter!r}")


# -- prompts ------------------------------------------------------------------------------------------
def prompt_file(name: str) -> str:
    """``prompts/generation/<name>.md`` as stored."""
    path = resources.files(__package__).joinpath("prompts", "generation", f"{name}.md")
    if not path.is_file():
        raise ConfigError(f"no generation prompt {name!r} (prompts/generation/{name}.md)")
    return path.read_text(encoding="utf-8")


def prompt_template(name: str) -> str:
    """The prompt ``name`` without its header comment, its ``{{> part}}`` includes expanded."""
    body = _COMMENT.sub("", prompt_file(name), count=1).strip()
    return _INCLUDE.sub(lambda m: prompt_template(m.group(1)), body)


def prompt_name(source: str, structure: str) -> str:
    if source not in SOURCES:
        raise ConfigError(f"no generation prompts for source {source!r}; sources: {', '.join(SOURCES)}")
    if structure not in FAMILIES:
        raise ConfigError(f"unknown evidence structure {structure!r}; structures: {', '.join(FAMILIES)}")
    return f"{source}_{FAMILIES[structure]}"


def _fill(template: str, values: Mapping[str, Any]) -> str:
    """Plain replacement of ``{name}`` placeholders (braces elsewhere, as in JSON examples, stay)."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", str(value))
    return template


# -- the HTML of a page -------------------------------------------------------------------------------
def page_html(page_elements: pd.DataFrame, id_prefix: str = "", max_chars: int | None = None) -> str:
    """The HTML of one page as the generator sees it, rebuilt from the elements table: one tag per
    element in reading order (top, then left), ``id`` = the element id (``<prefix>/<id>`` in
    Cross-Doc prompts), its recorded text as content; table rows nest in the table above them.
    Cut at an element boundary after ``max_chars`` characters, with a closing comment saying so."""
    ordered = page_elements.assign(
        sort_top=[float(b[1]) for b in page_elements["bbox"]], sort_left=[float(b[0]) for b in page_elements["bbox"]]
    )
    ordered = ordered.sort_values(["sort_top", "sort_left", "element_id"], kind="mergesort")
    lines: list[str] = []
    table_bottom: float | None = None  # the open table's bottom edge: what starts above it is inside
    size = 0
    for position, row in enumerate(ordered.itertuples(index=False)):
        kind = str(row.element_type)
        tag = _TAGS.get(kind, "div")
        ident = html.escape(f"{id_prefix}/{row.element_id}" if id_prefix else str(row.element_id), quote=True)
        text = html.escape(" ".join(str(row.text or "").split()))
        if table_bottom is not None and row.sort_top >= table_bottom - 1.0:
            lines.append("</table>")
            table_bottom = None
        indent = "  " if table_bottom is not None else ""
        if kind == "table":
            line = f'<table id="{ident}">'
            table_bottom = float(row.bbox[3])
        elif kind == "table_row":
            line = f'{indent}<tr id="{ident}">{text}</tr>'
        else:
            line = f'{indent}<{tag} id="{ident}" data-type="{html.escape(kind)}">{text}</{tag}>'
        if max_chars is not None and size + len(line) > max_chars and lines:
            lines.append(f"<!-- {len(ordered) - position} more element(s) of this page not shown -->")
            break
        lines.append(line)
        size += len(line) + 1
    if table_bottom is not None:
        lines.append("</table>")
    return "\n".join(lines)


# -- parsing an answer --------------------------------------------------------------------------------
@dataclass
class ParsedOutput:
    items: list[dict[str, Any]] | None
    reason: str | None = None
    detail: str = ""


def parse_output(content: str | None, splitter: str, known_ids: set[str]) -> ParsedOutput:
    """The queries of one generation answer, or the reason it is discarded (:data:`OUTPUT_DISCARDS`,
    bar ``request_failed``). The JSON is what follows the last splitter line (a code fence around
    it is allowed); every item needs a non-blank ``question``, an ``answer`` (text or number) and a
    non-empty list of ``evidence`` ids, all in ``known_ids``."""
    text = _THINK.sub("", content or "")
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.strip() == splitter.strip()]
    if not at:
        return ParsedOutput(None, "missing_splitter", f"no line {splitter!r}")
    tail = "\n".join(lines[at[-1] + 1 :]).strip()
    if fenced := _FENCE.match(tail):
        tail = fenced.group(1).strip()
    try:
        value = json.loads(tail)
    except ValueError as error:
        return ParsedOutput(None, "invalid_json", str(error))
    if not isinstance(value, list) or not value:
        return ParsedOutput(None, "invalid_format", "not a non-empty JSON array")
    items = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            return ParsedOutput(None, "invalid_format", f"item {i} is not an object")
        question, answer, evidence = item.get("question"), item.get("answer"), item.get("evidence")
        if not isinstance(question, str) or not question.strip():
            return ParsedOutput(None, "invalid_format", f"item {i}: no question")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or not str(answer).strip():
            return ParsedOutput(None, "invalid_format", f"item {i}: no answer")
        if isinstance(evidence, str):
            evidence = [evidence]
        if (
            not isinstance(evidence, list)
            or not evidence
            or not all(isinstance(e, str) and e.strip() for e in evidence)
        ):
            return ParsedOutput(None, "invalid_format", f"item {i}: evidence is not a non-empty list of element ids")
        evidence = list(dict.fromkeys(e.strip() for e in evidence))
        unknown = [e for e in evidence if e not in known_ids]
        if unknown:
            return ParsedOutput(None, "unknown_element_id", f"item {i} cites {', '.join(unknown[:5])}")
        items.append(
            {"question": " ".join(question.split()), "answer": " ".join(str(answer).split()), "evidence": evidence}
        )
    return ParsedOutput(items)


# -- the requests -------------------------------------------------------------------------------------
@dataclass
class ConfigInput:
    """One configuration as the generator sees it: its pages and how its element ids are written."""

    config: dict[str, Any]
    pages: list[tuple[str, int]]  # (doc_id, page_index) per evidence page
    labels: dict[str, str]  # doc_id -> the id prefix in the prompt ("" outside Cross-Doc)
    known: dict[str, tuple[str, str]]  # id as written -> (doc_id, element_id)

    @property
    def signature(self) -> str:
        """Names the configuration by content: ``structure|doc:page+doc:page`` (recordings key on it)."""
        return config_signature(self.config["structure"], self.pages)


def config_signature(structure: str, pages: Sequence[tuple[str, int]]) -> str:
    return f"{structure}|" + "+".join(f"{d}:{int(p)}" for d, p in pages)


class QueryGenerator:
    """Writes the requests of both steps, parses the answers, and turns valid ones into queries."""

    def __init__(
        self,
        spec: GenerationSpec,
        describer: ChatClient,
        generator: ChatClient,
        progress: bool = True,
        before_requests: Callable[[str, list[str], list[list[dict[str, Any]]]], None] | None = None,
    ):
        self.spec, self.describer, self.generator, self.progress = spec, describer, generator, progress
        self.before_requests = before_requests
        """Called as ``(step, keys, requests)`` before each batch is sent: step ``describe`` (keys:
        page ids) or ``generate`` (keys: configuration signatures). Replaying recordings uses it."""

    def _send(
        self,
        client: ChatClient,
        step: str,
        keys: list[str],
        requests: list,
        label: str,
        validate: Validator | list[Validator] | None = None,
    ) -> list[ChatResult]:
        if self.before_requests is not None:
            self.before_requests(step, keys, requests)
        return client.complete_many(requests, progress=label if self.progress else False, validate=validate)

    def description_validator(self) -> Validator:
        """A description is usable when it is not blank (it goes into the generation prompt as written)."""
        return Validator(f"generation.describe/v{PARSER_VERSION}", lambda text: None if text.strip() else "blank")

    def generation_validator(self, item: ConfigInput) -> Validator:
        """An answer is usable when :func:`parse_output` takes it, against the ids of its own prompt."""
        known, splitter = set(item.known), self.spec.splitter
        return Validator(
            f"generation.queries/v{PARSER_VERSION}", lambda text: parse_output(text, splitter, known).reason
        )

    # step 1
    def describe_messages(self, image: bytes) -> list[dict[str, Any]]:
        return [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": prompt_template("describe")},
                    image_part(image, _mime(image), self.spec.image_detail),
                ],
            }
        ]

    # step 2
    def config_input(
        self, config: Mapping[str, Any], elements_by_page: Mapping[tuple[str, int], pd.DataFrame]
    ) -> ConfigInput:
        pages = [(str(d), int(p)) for d, p in zip(config["doc_ids"], config["page_indices"], strict=True)]
        cross = config["structure"] == "cross_doc"
        docs = list(dict.fromkeys(d for d, _ in pages))
        labels = {d: (NEUTRAL_DOC_IDS[i] if cross else "") for i, d in enumerate(docs)}
        known = {}
        for doc_id, index in pages:
            for element_id in elements_by_page.get((doc_id, index), pd.DataFrame(columns=["element_id"]))["element_id"]:
                written = f"{labels[doc_id]}/{element_id}" if labels[doc_id] else str(element_id)
                known[written] = (doc_id, str(element_id))
        return ConfigInput(dict(config), pages, labels, known)

    def generate_messages(
        self,
        item: ConfigInput,
        titles: Mapping[str, str],
        descriptions: Mapping[str, str | None],
        elements_by_page: Mapping[tuple[str, int], pd.DataFrame],
        images: Mapping[str, bytes],
    ):
        structure, source = item.config["structure"], item.config["source"]
        blocks = []
        cross = structure == "cross_doc"
        for number, (doc_id, index) in enumerate(item.pages, 1):
            pid = page_id(doc_id, index)
            label = item.labels[doc_id]
            doc_name = f'document {label}, "{titles[doc_id]}"' if cross else f'"{titles[doc_id]}"'
            description = descriptions.get(pid) if self.spec.describe else None
            blocks.append(
                "\n".join(
                    [
                        f"## Page image {number} ({doc_name})",
                        "### Description of its visual elements",
                        (description or "(no description available)").strip(),
                        "### HTML with element ids",
                        page_html(elements_by_page.get((doc_id, index), _NO_ELEMENTS), label, self.spec.html_max_chars),
                    ]
                )
            )
        text = _fill(
            prompt_template(prompt_name(source, structure)),
            {
                "n": self.spec.queries_per_config,
                "splitter": self.spec.splitter,
                "pages": len(item.pages),
                "input": "\n\n".join(blocks),
            },
        )
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        for number, (doc_id, index) in enumerate(item.pages, 1):
            content.append({"type": "text", "text": f"Page image {number}:"})
            image = images[page_id(doc_id, index)]
            content.append(image_part(image, _mime(image), self.spec.image_detail))
        return [{"role": "user", "content": content}]

    def describe(self) -> dict[str, Any]:
        prompts = ["describe", *sorted({prompt_name(s, e) for s in SOURCES for e in FAMILIES})]
        return {
            "spec": {k: v for k, v in asdict(self.spec).items() if k != "prices_per_million_tokens"},
            "describer": self.describer.cache_params(),
            "generator": self.generator.cache_params(),
            "parser": PARSER_VERSION,
            "prompts_sha256": {p: hashlib.sha256(prompt_file(p).encode()).hexdigest()[:16] for p in prompts},
        }


_NO_ELEMENTS = pd.DataFrame(columns=["element_id", "bbox", "element_type", "text"])


def _mime(image: bytes) -> str:
    return "image/jpeg" if image[:3] == b"\xff\xd8\xff" else "image/png"


# -- the stage ----------------------------------------------------------------------------------------
@dataclass
class GenerationResult:
    queries: pd.DataFrame  # QUERY_COLUMNS + config_id (before cleaning)
    qrels: pd.DataFrame  # QREL_COLUMNS
    candidates: pd.DataFrame  # every parsed query, kept or not, with its discard reason and boxes
    outputs: pd.DataFrame  # one row per configuration: signature, reason, detail, attempts
    report: dict[str, Any]


def usage_report(client: ChatClient, prices: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """The client's usage with its cost in USD where the model's prices are known. Replayed answers
    cost nothing now; ``cost_usd_if_uncached`` prices every token as if asked."""
    usage = client.usage()
    price = prices.get(client.model)
    if price is not None:
        inp, out = (float(p) / 1e6 for p in price)
        usage["cost_usd"] = round(usage["prompt_tokens"] * inp + usage["completion_tokens"] * out, 6)
        usage["cost_usd_if_uncached"] = round(
            (usage["prompt_tokens"] + usage["cached_prompt_tokens"]) * inp
            + (usage["completion_tokens"] + usage["cached_completion_tokens"]) * out,
            6,
        )
    else:
        usage["cost_usd"] = None
    return usage


def generate_queries(
    generator: QueryGenerator,
    configs: pd.DataFrame,
    documents: pd.DataFrame,
    elements: pd.DataFrame,
    images: Mapping[str, bytes | Path | str],
    near_max_gap: int,
) -> GenerationResult:
    """Run both steps over ``configs`` (:data:`vldocir.queries.evidence_configs.CONFIG_COLUMNS`).

    ``images``: page id -> the page image (bytes or a file) for every page of a configuration.
    Returns the queries before cleaning (ids ``g<config>-<n>``; the build renumbers the kept ones),
    their qrels, every candidate with its fate, and the report (counts per reason, tokens, cost).
    """
    spec = generator.spec
    titles = dict(zip(documents["doc_id"], documents["title"].fillna("").astype(str), strict=True))
    domains = dict(zip(documents["doc_id"], documents["domain"], strict=True))
    elements = elements.copy()
    elements["element_id"] = elements["element_id"].astype(str)
    if "text" not in elements.columns:
        elements["text"] = ""
    elements_by_page = {(str(d), int(p)): g for (d, p), g in elements.groupby(["doc_id", "page_index"], sort=False)}
    elements_by_doc = {
        str(d): g for d, g in elements.groupby("doc_id", sort=False)
    }  # resolve per document, not per corpus
    fragments = elements["fragments"] if "fragments" in elements.columns else [None] * len(elements)
    boxes = {  # each element's evidence boxes: its fragments, each on its page, else its box
        (str(d), str(e)): element_boxes(p, b, f)
        for d, e, p, b, f in zip(
            elements["doc_id"], elements["element_id"], elements["page_index"], elements["bbox"], fragments, strict=True
        )
    }
    types = {
        (str(d), str(e)): str(t)
        for d, e, t in zip(elements["doc_id"], elements["element_id"], elements["element_type"], strict=True)
    }

    rows = configs.to_dict("records")
    inputs = [generator.config_input(row, elements_by_page) for row in rows]
    needed = list(dict.fromkeys(page_id(d, p) for item in inputs for d, p in item.pages))
    missing = [p for p in needed if p not in images]
    if missing:
        raise ConfigError(f"no page image for {len(missing)} configuration page(s), e.g. {missing[:3]}")
    page_bytes = {p: _read_image(images[p], p) for p in needed}

    # step 1: one description per distinct page
    descriptions, describe_failed = describe_pages(generator, needed, page_bytes) if spec.describe else ({}, 0)

    # step 2
    requests = [
        generator.generate_messages(item, titles, descriptions, elements_by_page, page_bytes) for item in inputs
    ]
    answers = generator._send(
        generator.generator,
        "generate",
        [item.signature for item in inputs],
        requests,
        "generate queries",
        [generator.generation_validator(item) for item in inputs],
    )

    outputs, candidates = [], []
    for item, answer in zip(inputs, answers, strict=True):
        parsed = _parse_answer(answer, spec.splitter, set(item.known))
        config_id = item.config["config_id"]
        outputs.append(
            {
                "config_id": config_id,
                "signature": item.signature,
                "structure": item.config["structure"],
                "source": item.config["source"],
                "reason": parsed.reason,
                "detail": parsed.detail[:300],
                "attempts": answer.attempts,
                "cached": answer.cached,
                "queries": len(parsed.items or []),
            }
        )
        for n, query in enumerate((parsed.items or [])[: spec.queries_per_config]):
            candidates.append(_resolve(item, n, query, elements_by_doc, boxes, types, near_max_gap))
    candidates_frame = pd.DataFrame(
        candidates,
        columns=[
            "query_id",
            "config_id",
            "structure",
            "question",
            "answer",
            "evidence",
            "pages",
            "boxes",
            "evidence_types",
            "discard",
        ],
    )
    kept = candidates_frame[candidates_frame["discard"].isna()]
    config_by_id = {item.config["config_id"]: item.config for item in inputs}
    queries, qrels = [], []
    for row in kept.itertuples(index=False):
        config = config_by_id[row.config_id]
        queries.append(
            (
                row.query_id,
                row.question,
                row.answer,
                row.structure,
                config["source"],
                domains[config["doc_ids"][0]],
                generator.generator.model,
                row.evidence_types,
            )
        )
        for (doc_id, index), element_ids in row.pages.items():
            qrels.append((row.query_id, page_id(doc_id, index), doc_id, element_ids))
    output_frame = pd.DataFrame(outputs)
    report = {
        "pages_described": len(needed) if spec.describe else 0,
        "descriptions_failed": describe_failed,
        "outputs": {
            "requested": len(inputs),
            "valid": int(output_frame["reason"].isna().sum()) if len(output_frame) else 0,
            "discarded": {
                r: int((output_frame["reason"] == r).sum()) if len(output_frame) else 0 for r in OUTPUT_DISCARDS
            },
        },
        "queries": {
            "generated": len(candidates_frame),
            "discarded": {r: int((candidates_frame["discard"] == r).sum()) for r in FILTER_DISCARDS},
            "after_filter": len(kept),
        },
        "usage": {
            "describer": usage_report(generator.describer, spec.prices_per_million_tokens),
            "generator": usage_report(generator.generator, spec.prices_per_million_tokens),
        },
        "generation": generator.describe(),
    }
    return GenerationResult(
        pd.DataFrame(queries, columns=QUERY_COLUMNS),
        pd.DataFrame(qrels, columns=QREL_COLUMNS),
        candidates_frame,
        output_frame,
        report,
    )


def describe_pages(
    generator: QueryGenerator, page_ids: Sequence[str], images: Mapping[str, bytes | Path | str]
) -> tuple[dict[str, str | None], int]:
    """Step 1 for ``page_ids``: ``(page id -> its description, None where it failed; failures)``."""
    if not page_ids:
        return {}, 0
    page_bytes = [_read_image(images[p], p) for p in page_ids]
    answers = generator._send(
        generator.describer,
        "describe",
        list(page_ids),
        [generator.describe_messages(image) for image in page_bytes],
        "describe pages",
        generator.description_validator(),
    )
    descriptions: dict[str, str | None] = {}
    for pid, answer in zip(page_ids, answers, strict=True):
        descriptions[pid] = answer.content if answer.ok and not answer.unusable else None
    failed = sum(d is None for d in descriptions.values())
    if failed:
        log.warning(
            "%d of %d page description(s) failed; those pages are described as unavailable", failed, len(page_ids)
        )
    return descriptions, failed


def _read_image(image: bytes | Path | str, pid: str) -> bytes:
    if isinstance(image, bytes):
        return image
    try:
        return Path(image).read_bytes()
    except OSError as error:
        raise ConfigError(f"page {pid}: cannot read its image {image}: {error}") from error


def _parse_answer(answer: ChatResult, splitter: str, known: set[str]) -> ParsedOutput:
    if not answer.ok:
        reason = answer.error_kind if answer.error_kind in UNUSABLE_KINDS else "request_failed"
        return ParsedOutput(None, reason, answer.error or "")
    return parse_output(answer.content, splitter, known)


def _resolve(
    item: ConfigInput,
    n: int,
    query: Mapping[str, Any],
    elements_by_doc: Mapping[str, pd.DataFrame],
    boxes: Mapping,
    types: Mapping,
    near_max_gap: int,
) -> dict[str, Any]:
    """One parsed query -> its evidence pages (through ``resolve_element_pages``: the configuration's
    pages first), boxes (per page id: the cited elements' boxes there, an element split over columns
    or pages giving each of its fragments on its page), types, its structure label and, where the
    deterministic filter drops it, why."""
    cited: dict[str, list[str]] = {}
    for written in query["evidence"]:
        doc_id, element_id = item.known[written]
        cited.setdefault(doc_id, []).append(element_id)
    pages: dict[tuple[str, int], list[str]] = {}
    for doc_id, element_ids in cited.items():
        shown = {p for d, p in item.pages if d == doc_id}
        for element_id, index in resolve_element_pages(elements_by_doc[doc_id], doc_id, element_ids, shown).items():
            pages.setdefault((doc_id, index), []).append(element_id)
    evidence_boxes: dict[str, list[list[float]]] = {}
    for (doc_id, _), element_ids in pages.items():
        for element_id in element_ids:
            for index, box in boxes[(doc_id, element_id)]:
                evidence_boxes.setdefault(page_id(doc_id, index), []).append(box)
    structure = item.config["structure"]
    discard = None
    family = FAMILIES[structure]
    if family in ("page_single", "page_multi"):  # one page: one element or several (paper §3.1)
        structure = "page_single" if len(query["evidence"]) == 1 else "page_multi"
    elif family == "within_doc":
        within = within_document_structure((index for _, index in pages), near_max_gap)
        if within is None:
            discard = "evidence_on_one_page"
        else:
            structure = within
    elif family == "cross_doc" and len(cited) < 2:
        discard = "evidence_in_one_document"
    element_types = evidence_types(types[(d, e)] for d, ids in cited.items() for e in ids)
    return {
        "query_id": f"g{item.config['config_id']}-{n:02d}",
        "config_id": item.config["config_id"],
        "structure": structure,
        "question": query["question"],
        "answer": query["answer"],
        "evidence": list(query["evidence"]),
        "pages": pages,
        "boxes": evidence_boxes,
        "evidence_types": element_types,
        "discard": discard,
    }


def candidate_records(candidates: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready candidates (page keys as page ids), for the generation record next to the build."""
    out = []
    for row in candidates.to_dict("records"):
        row["pages"] = {page_id(d, p): ids for (d, p), ids in row["pages"].items()}
        row["discard"] = None if (isinstance(row["discard"], float) and np.isnan(row["discard"])) else row["discard"]
        out.append(row)
    return out

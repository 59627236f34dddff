"""Wikipedia articles (App. A.1): seed articles, link expansion breadth-first, and an LLM relevance
filter over the linked titles with an instruction per seed.

For each seed (``{title, domain, instruction}``, optionally its own ``max_depth`` and
``max_documents``), in order:

1. the article is read with one MediaWiki API request, ``GET api.php`` with the parameters
   ``action=parse&page=<title>&prop=text|links|categories|displaytitle|headhtml`` and
   ``redirects=1&format=json&formatversion=2``:
   its HTML (``headhtml`` + ``text``: the page with its stylesheets), its links and categories;
2. an article in a category of ``exclude_categories`` (disambiguation pages) is skipped; any other is
   a document of the seed's domain, licence CC BY-SA 4.0, id ``wikipedia-<pageid>``;
3. while the article is less than ``max_depth`` links from the seed, its links to existing articles
   (namespace 0) not taken yet are judged by the LLM (``prompts/wikipedia_relevance.md``,
   ``filter_batch`` titles per request, the seed's instruction in the prompt): the titles it keeps are
   queued, the others counted as ``not_relevant``;
4. until the seed has ``max_documents`` documents or its queue is empty.

The LLM is any OpenAI-compatible server through :class:`vldocir.llm.ChatClient` (its answers cached,
so a rerun asks it nothing it answered before); ``llm: null`` keeps every linked title.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib import resources
from typing import Any
from urllib.parse import quote

from vldocir.construction.collect.collector import Collector, CollectRun, Document, Failed, Item, Skipped
from vldocir.construction.collect.http import PoliteClient, full_url
from vldocir.errors import ConfigError
from vldocir.llm import Validator

PARSE_PROPS = "text|links|categories|displaytitle|headhtml"
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


@dataclass
class Seed:
    title: str
    domain: str
    instruction: str
    max_depth: int
    max_documents: int


@dataclass
class _Article:
    title: str
    pageid: int
    html: str
    links: list[str]
    categories: list[str]


def relevance_prompt() -> str:
    """``prompts/wikipedia_relevance.md`` without its header comment."""
    text = resources.files(__package__).joinpath("prompts", "wikipedia_relevance.md").read_text(encoding="utf-8")
    return re.sub(r"\A\s*<!--.*?-->\s*", "", text, count=1, flags=re.S).strip()


def _norm(title: str) -> str:
    """A title as MediaWiki compares them: underscores are spaces, the first letter is upper case."""
    title = " ".join(str(title).replace("_", " ").split())
    return title[:1].upper() + title[1:]


class WikipediaCollector(Collector):
    """Built by Hydra from conf/collect/wikipedia.yaml.

    Args:
        seeds: ``[{title, domain, instruction, max_depth?, max_documents?}]``.
        llm: the relevance filter's client (``vldocir.llm.ChatClient``); None keeps every link.
        api_url: the wiki's ``api.php``.
        article_url: the public address of an article, ``{title}`` replaced (underscores, quoted).
        license: of every article (Wikipedia's text: CC BY-SA 4.0).
        max_depth, max_documents: per seed, unless the seed sets its own.
        filter_batch: titles per LLM request.
        max_links: the most links of one article sent to the filter (in the article's order).
        exclude_categories: an article in one of these is skipped (``excluded_category``).
    """

    source = "wikipedia"

    def __init__(
        self,
        seeds: Sequence[Mapping[str, Any]],
        llm=None,
        api_url: str = "https://en.wikipedia.org/w/api.php",
        article_url: str = "https://en.wikipedia.org/wiki/{title}",
        license: str = "CC-BY-SA-4.0",
        max_depth: int = 1,
        max_documents: int = 100,
        filter_batch: int = 50,
        max_links: int = 500,
        exclude_categories: Sequence[str] = ("Disambiguation pages", "All article disambiguation pages"),
    ):
        if not seeds:
            raise ConfigError("collect.collector.seeds: at least one seed {title, domain, instruction}")
        if "{title}" not in str(article_url):
            raise ConfigError(f"collect.collector.article_url must contain {{title}}, got {article_url!r}")
        if int(filter_batch) < 1:
            raise ConfigError(f"collect.collector.filter_batch must be >= 1, got {filter_batch!r}")
        self.seeds = [self._seed(i, s, int(max_depth), int(max_documents)) for i, s in enumerate(seeds)]
        self.llm = llm
        self.api_url, self.article_url, self.license = str(api_url), str(article_url), str(license)
        self.filter_batch, self.max_links = int(filter_batch), int(max_links)
        self.exclude_categories = {_norm(c) for c in exclude_categories}
        self._template = relevance_prompt()

    def endpoints(self) -> dict[str, str]:
        return {"api_url": self.api_url, "article_url": self.article_url}

    @staticmethod
    def _seed(number: int, seed: Mapping[str, Any], max_depth: int, max_documents: int) -> Seed:
        key = f"collect.collector.seeds[{number}]"
        if not isinstance(seed, Mapping) or not seed.get("title") or not seed.get("domain"):
            raise ConfigError(f"{key}: a seed is {{title, domain, instruction}}, got {seed!r}")
        unknown = set(seed) - {"title", "domain", "instruction", "max_depth", "max_documents"}
        if unknown:
            raise ConfigError(f"{key}: unknown keys {sorted(unknown)}")
        depth, limit = int(seed.get("max_depth", max_depth)), int(seed.get("max_documents", max_documents))
        if depth < 0 or limit < 1:
            raise ConfigError(f"{key}: max_depth must be >= 0 and max_documents >= 1")
        if depth > 0 and not str(seed.get("instruction") or "").strip():
            raise ConfigError(f"{key}.instruction: the relevance filter's instruction is required when max_depth > 0")
        return Seed(_norm(seed["title"]), str(seed["domain"]), str(seed.get("instruction") or ""), depth, limit)

    def stats(self) -> dict[str, Any]:
        return {"llm": self.llm.usage()} if self.llm is not None else {}

    # -- the crawl ----------------------------------------------------------------------------------
    def candidates(self, run: CollectRun) -> Iterator[Item]:
        taken: set[str] = set()  # titles queued by any seed (each article is collected once)
        pages: set[int] = set()  # page ids seen (a redirect may lead to one already seen)
        for seed in self.seeds:
            considered = {seed.title}
            queue: deque[tuple[str, int]] = deque()
            if seed.title not in taken:
                taken.add(seed.title)
                queue.append((seed.title, 0))
            kept = 0
            while queue and kept < seed.max_documents:
                title, depth = queue.popleft()
                article = run.attempt(title, partial(self._parse, run.client, title))
                if isinstance(article, (Failed, Skipped)):
                    yield article
                    continue
                if article.pageid in pages:
                    yield Skipped(title, "duplicate")
                    continue
                pages.add(article.pageid)
                if self.exclude_categories & set(article.categories):
                    yield Skipped(title, "excluded_category")
                    continue
                kept += 1
                url = self.article_url.format(title=quote(article.title.replace(" ", "_"), safe="()_,'!:"))
                yield Document(
                    doc_id=f"wikipedia-{article.pageid}",
                    title=article.title,
                    url=url,
                    domain=seed.domain,
                    license=self.license,
                    html=article.html,
                    base_url=url,
                    meta={"seed": seed.title, "depth": depth, "pageid": article.pageid},
                )
                if depth >= seed.max_depth:
                    continue
                links = [t for t in article.links if t not in considered and t not in taken][: self.max_links]
                considered.update(links)
                relevant, outcomes = self._filter(seed, article.title, links)
                yield from outcomes
                for link in relevant:
                    taken.add(link)
                    queue.append((link, depth + 1))

    def _parse(self, client: PoliteClient, title: str) -> _Article | Skipped:
        params = {
            "action": "parse",
            "page": title,
            "prop": PARSE_PROPS,
            "redirects": 1,
            "disableeditsection": 1,
            "format": "json",
            "formatversion": 2,
        }
        answer = client.get_json(self.api_url, params)
        url = full_url(self.api_url, params)
        if isinstance(answer, Mapping) and isinstance(answer.get("error"), Mapping):
            code = str(answer["error"].get("code", "error"))
            if code in ("missingtitle", "invalidtitle", "nosuchpageid"):
                return Skipped(title, "missing_page")
            raise client.api_error(url, code, str(answer["error"].get("info", "")))
        parse = answer.get("parse") if isinstance(answer, Mapping) else None
        if not isinstance(parse, Mapping) or not isinstance(parse.get("text"), str) or not parse.get("pageid"):
            raise client.malformed(url, f"no parse.text / parse.pageid in the answer for {title!r}")
        name = _norm(parse.get("title") or title)
        head = (
            parse.get("headhtml")
            if isinstance(parse.get("headhtml"), str)
            else (f"<!DOCTYPE html><html><head><title>{name}</title></head><body>")
        )
        links = [
            _norm(link["title"])
            for link in parse.get("links") or []
            if isinstance(link, Mapping) and link.get("ns") == 0 and link.get("exists", True) and link.get("title")
        ]
        categories = [_norm(c.get("category", "")) for c in parse.get("categories") or [] if isinstance(c, Mapping)]
        return _Article(
            name, int(parse["pageid"]), f"{head}{parse['text']}</body></html>", list(dict.fromkeys(links)), categories
        )

    # -- the relevance filter -----------------------------------------------------------------------
    def messages(self, seed: Seed, page: str, titles: Sequence[str]) -> list[dict[str, str]]:
        """The chat request judging ``titles`` (linked from ``page``) for ``seed``."""
        text = self._template.format(
            seed=seed.title, instruction=seed.instruction.strip(), page=page, titles="\n".join(titles)
        )
        return [{"role": "user", "content": text}]

    def _filter(self, seed: Seed, page: str, titles: list[str]) -> tuple[list[str], list[Item]]:
        if not titles:
            return [], []
        if self.llm is None:
            return titles, []
        batches = [titles[i : i + self.filter_batch] for i in range(0, len(titles), self.filter_batch)]
        results = self.llm.complete_many([self.messages(seed, page, batch) for batch in batches], validate=TITLES)
        relevant: list[str] = []
        outcomes: list[Item] = []
        for number, (batch, result) in enumerate(zip(batches, results, strict=True)):
            key = f"{page} (links, batch {number})"
            if not result.ok:
                outcomes.append(Failed(key, "llm_request_failed", str(result.error)))
                continue
            chosen = parse_title_list(result.content or "")
            if chosen is None:
                outcomes.append(
                    Failed(key, "llm_unparsed", f"no JSON array of titles in {str(result.content)[:200]!r}")
                )
                continue
            chosen_norm = {_norm(t) for t in chosen}
            for title in batch:
                if title in chosen_norm:
                    relevant.append(title)
                else:
                    outcomes.append(Skipped(title, "not_relevant"))
        return relevant, outcomes


def parse_title_list(content: str) -> list[str] | None:
    """The JSON array of strings in an answer (code fences and surrounding prose tolerated), or None."""
    text = _FENCE.sub("", content.strip())
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return value


# What the LLM cache keeps: answers parse_title_list reads (``[]``, no relevant title, is one).
TITLES = Validator("wikipedia.titles/v1", lambda content: None if parse_title_list(content) is not None else "unparsed")

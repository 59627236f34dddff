"""What the four collectors share: the interface of a collector, and the run that turns its
candidates into ``<out_dir>/<doc_id>/index.html`` (+ ``assets/``) and rows of ``<out_dir>/index.jsonl``.

A collector (:class:`Collector`) knows its source's APIs: it yields, in a deterministic order,
:class:`Document` (a document to keep: its metadata and where its HTML is), :class:`Skipped` (a
candidate left out by policy: a licence not allowed, no HTML version, a retracted article, ...) and
:class:`Failed` (a candidate whose metadata could not be had). :func:`collect` does the rest, the same
for every source: documents already in the index are not fetched again, the HTML is fetched and its
assets localized (:mod:`.assets`), the folder is written under ``.partial/`` and renamed into place,
then the index row is appended; a document that fails is counted by reason and the run goes on.

Resuming: every response is stored by the client (:mod:`.http`), the LLM's answers by its cache, and
the index says which documents are done. A rerun after an interruption (``max_documents``, an error
that ended the run, a killed process) walks the same candidates: what was answered before is
replayed from the store without a request, documents in the index are skipped, and only what was
never fetched is asked for.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from vldocir.construction.collect.assets import AssetSpec, decode_html, localize
from vldocir.construction.collect.http import CollectError, HttpSpec, PoliteClient, ResponseStore, check_hosts
from vldocir.construction.collect.index import INDEX_FILE, DocumentIndex, IndexRow
from vldocir.errors import ConfigError
from vldocir.io import atomic_write_json

log = logging.getLogger(__name__)

T = TypeVar("T")
RESPONSES_DIR = ".responses"  # the client's stored responses
PARTIAL_DIR = ".partial"  # document folders being written
SUMMARY_FILE = "summary.json"
MAX_LISTED_FAILURES = 1000  # in summary.json


@dataclass
class Document:
    """A document to collect. ``url``: its public address (the index's); ``html_url``: where its
    HTML is fetched (a 404 there skips it with ``missing_reason``); or ``html``: the HTML already in
    hand (e.g. from an API answer), its references resolved against ``base_url`` (default ``url``).
    An empty ``title`` is taken from the page (:func:`.assets.page_title`)."""

    doc_id: str
    title: str
    url: str
    domain: str
    license: str
    html_url: str | None = None
    html: str | None = None
    base_url: str | None = None
    missing_reason: str = "not_found"
    meta: dict[str, Any] = field(default_factory=dict)


ALREADY = "already_collected"


@dataclass
class Skipped:
    """A candidate left out by the source's policy; ``reason`` is what the summary counts.
    ``Skipped.already(doc_id)``: a document the index holds, recognized before any request."""

    key: str
    reason: str

    @classmethod
    def already(cls, doc_id: str) -> Skipped:
        return cls(doc_id, ALREADY)


@dataclass
class Failed:
    """A candidate that could not be looked at (its request failed); retried by the next run."""

    key: str
    reason: str
    error: str


Item = Document | Skipped | Failed


class Collector:
    """One source's client. Subclasses set ``source`` and implement :meth:`candidates`."""

    source: str = ""

    def check(self, http: HttpSpec) -> None:
        """Raise :class:`ConfigError` if the source cannot be fetched with ``http`` (SEC EDGAR: a
        User-Agent with a contact address). Called before any request."""

    def endpoints(self) -> dict[str, str]:
        """The source's URLs (templates allowed), by parameter name: their hosts are looked up
        before any request (:func:`.http.check_hosts`)."""
        return {}

    def candidates(self, run: CollectRun) -> Iterator[Item]:
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        """Source-specific counts for the summary (e.g. the LLM filter's usage)."""
        return {}


class CollectRun:
    """What a collector gets while it runs: the polite ``client``, the ``index`` (``done``) and
    :meth:`attempt` to turn a failed request for one candidate into a :class:`Failed` item."""

    def __init__(self, client: PoliteClient, index: DocumentIndex, out_dir: Path):
        self.client, self.index, self.out_dir = client, index, out_dir

    def done(self, doc_id: str) -> bool:
        return doc_id in self.index

    @staticmethod
    def attempt(key: str, step: Callable[[], T]) -> T | Failed:
        """``step()``, or a :class:`Failed` for ``key`` if it raised :class:`CollectError`."""
        try:
            return step()
        except CollectError as error:
            return Failed(key, error.reason, str(error))


@dataclass
class Summary:
    """What a run did: ``fetched`` (new documents), ``already`` (in the index before), ``skipped``
    and ``failed`` per reason, the failures themselves, the client's request counts."""

    source: str
    out_dir: str
    fetched: int = 0
    already: int = 0
    documents: int = 0
    skipped: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)
    failures: list[dict[str, str]] = field(default_factory=list)
    failed_assets: int = 0
    http: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    stopped_at_limit: bool = False
    error: str | None = None  # the error that ended the run early

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "out_dir": self.out_dir,
            "fetched": self.fetched,
            "already": self.already,
            "documents": self.documents,
            "skipped": dict(sorted(self.skipped.items())),
            "failed": dict(sorted(self.failed.items())),
            "failed_assets": self.failed_assets,
            "stopped_at_limit": self.stopped_at_limit,
            "error": self.error,
            "http": self.http,
            **self.extra,
            "failures": self.failures[:MAX_LISTED_FAILURES],
        }

    def nothing_fetched(self) -> str | None:
        """Why a run that added no document failed, in one line, or ``None`` when it did not fail:
        it fetched some, stopped at ``max_documents=0``, or found every candidate already collected."""
        if self.fetched or (self.stopped_at_limit and not self.failed):
            return None
        where = f"see {self.out_dir}/{SUMMARY_FILE}"
        if self.failed:
            reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(self.failed.items()))
            first = self.failures[0]["error"] if self.failures else ""
            return (
                f"{self.source}: nothing fetched, {sum(self.failed.values())} candidate(s) failed ({reasons}), "
                f"the first: {first}; {where}, a rerun retries them"
            )
        if self.documents:
            return None  # a rerun after a complete run: nothing left to fetch
        if self.skipped:
            reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(self.skipped.items()))
            return f"{self.source}: nothing fetched, every candidate was skipped ({reasons}); {where}"
        return f"{self.source}: nothing fetched, the source listed no candidates (see collect.collector's parameters)"

    def report(self) -> str:
        """A few lines for the console."""
        lines = [
            f"{self.source}: {self.fetched} fetched, {self.already} already in the index, "
            f"{self.documents} documents in {self.out_dir}/{INDEX_FILE}"
            + (" (stopped at max_documents; run again to continue)" if self.stopped_at_limit else "")
        ]
        for title, counts in (("skipped", self.skipped), ("failed", self.failed)):
            if counts:
                lines.append(f"  {title}: " + ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())))
        if self.failed_assets:
            lines.append(f"  assets that could not be fetched: {self.failed_assets} (listed in the index rows)")
        if self.failed:
            lines.append(f"  failures listed in {self.out_dir}/{SUMMARY_FILE}; a rerun retries them")
        lines.append(
            f"  HTTP: {self.http.get('requests', 0)} requests, {self.http.get('stored', 0)} answered "
            f"from stored responses, {self.http.get('retries', 0)} retries"
        )
        return "\n".join(lines)


def collect(
    collector: Collector,
    out_dir: str | Path,
    http: HttpSpec,
    assets: AssetSpec | None = None,
    max_documents: int | None = None,
    progress: bool = False,
) -> Summary:
    """Collect ``collector``'s documents into ``out_dir`` (see the module docstring) and return what
    the run did (also written to ``out_dir/summary.json``, however the run ends). ``max_documents``:
    stop after that many new documents (a rerun continues). Raises :class:`CollectError` when the
    source itself cannot be read (a listing that stays malformed or unreachable); what was collected
    until then is kept."""
    if max_documents is not None and (isinstance(max_documents, bool) or int(max_documents) < 0):
        raise ConfigError(f"collect.max_documents must be null or >= 0, got {max_documents!r}")
    collector.check(http)
    check_hosts(collector.endpoints(), http)
    assets = assets or AssetSpec()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    index = DocumentIndex(out_dir / INDEX_FILE)
    summary = Summary(collector.source, str(out_dir), stopped_at_limit=max_documents == 0)
    bar = _progress(progress, collector.source, max_documents)
    with PoliteClient(http, ResponseStore(out_dir / RESPONSES_DIR)) as client:
        run = CollectRun(client, index, out_dir)
        try:
            for item in () if summary.stopped_at_limit else collector.candidates(run):
                if isinstance(item, Document):
                    item = (
                        Skipped.already(item.doc_id)
                        if item.doc_id in index
                        else run.attempt(item.doc_id, partial(_write_document, item, collector.source, run, assets))
                    )
                _count(summary, item)
                if isinstance(item, IndexRow):
                    bar(1)
                    if max_documents is not None and summary.fetched >= int(max_documents):
                        summary.stopped_at_limit = True
                        break
                bar(0, summary)
        except CollectError as error:  # the source's listing: recorded, then the run ends
            summary.error = str(error)
            raise
        finally:
            bar(0, summary, close=True)
            summary.http = dict(client.stats)
            shutil.rmtree(out_dir / PARTIAL_DIR, ignore_errors=True)  # a document cut short is redone from the store
            summary.documents = len(index)
            summary.extra = collector.stats()
            atomic_write_json(summary.as_dict(), out_dir / SUMMARY_FILE)
    return summary


def _count(summary: Summary, outcome: Skipped | Failed | IndexRow) -> None:
    if isinstance(outcome, IndexRow):
        summary.fetched += 1
        summary.failed_assets += len(outcome.failed_assets)
    elif isinstance(outcome, Failed):
        summary.failed[outcome.reason] += 1
        summary.failures.append({"key": outcome.key, "reason": outcome.reason, "error": outcome.error})
        log.warning("%s: %s", outcome.key, outcome.error)
    elif outcome.reason == ALREADY:
        summary.already += 1
    else:
        summary.skipped[outcome.reason] += 1


def _write_document(doc: Document, source: str, run: CollectRun, assets: AssetSpec) -> IndexRow | Skipped:
    row = IndexRow(
        doc_id=doc.doc_id,
        source=source,
        domain=doc.domain,
        title=doc.title,
        url=doc.url,
        license=doc.license,
        path=doc.doc_id,
        meta=dict(doc.meta),
    )
    html, base = doc.html, doc.base_url or doc.url
    if html is None:
        if not doc.html_url:
            raise ValueError(f"{doc.doc_id}: a Document needs html_url or html")
        response = run.client.get(doc.html_url, missing_ok=True)
        if response.missing:
            return Skipped(doc.doc_id, doc.missing_reason)
        html, base = decode_html(response), response.final_url
    stage = run.out_dir / PARTIAL_DIR / doc.doc_id
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    page = localize(html, base, run.client.get, stage, assets)
    (stage / "index.html").write_text(page.html, encoding="utf-8")
    target = run.out_dir / doc.doc_id
    if target.exists():  # written by a run that stopped before its index row: replaced
        shutil.rmtree(target)
    stage.rename(target)
    row.n_assets, row.failed_assets = len(page.assets), page.failed
    row.title = doc.title or page.title or doc.doc_id
    run.index.add(row)
    return row


def _progress(enabled: bool, source: str, total: int | None) -> Callable[..., None]:
    if not enabled:
        return lambda n, summary=None, close=False: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=f"collect {source}", unit="doc")

    def update(n: int, summary: Summary | None = None, close: bool = False) -> None:
        if n:
            bar.update(n)
        if summary is not None:
            bar.set_postfix(
                already=summary.already,
                skipped=sum(summary.skipped.values()),
                failed=sum(summary.failed.values()),
                refresh=False,
            )
        if close:
            bar.close()

    return update


# -- shared by the collectors' configs --------------------------------------------------------------
class DomainRules:
    """Ordered ``[{match: <regex>, domain: <name>}]`` rules; the first whose regex is found in a
    text (an arXiv category, a journal title) names the domain."""

    def __init__(self, rules: Iterable[Mapping[str, str]], key: str):
        self.rules: list[tuple[re.Pattern, str]] = []
        for number, rule in enumerate(rules or ()):
            if not isinstance(rule, Mapping) or not rule.get("match") or not rule.get("domain"):
                raise ConfigError(f"{key}[{number}]: a rule is {{match: <regex>, domain: <name>}}, got {rule!r}")
            try:
                self.rules.append((re.compile(str(rule["match"])), str(rule["domain"])))
            except re.error as error:
                raise ConfigError(f"{key}[{number}].match: not a regular expression ({error})") from error

    def domain(self, text: str) -> str | None:
        return next((domain for pattern, domain in self.rules if pattern.search(text or "")), None)


def collect_from_config(node) -> Summary:
    """What ``vldocir.apps.collect`` runs: :func:`collect` with the objects of a composed ``collect`` node
    (conf/collect.yaml + conf/collect/<source>.yaml). A parameter check that fails while Hydra
    instantiates is raised as the :class:`ConfigError` itself (one line naming the key)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    def build(part):
        try:
            return instantiate(part)
        except InstantiationException as error:
            if isinstance(error.__cause__, ConfigError):
                raise error.__cause__ from None
            raise

    return collect(
        build(node.collector),
        node.out_dir,
        build(node.http),
        build(node.assets),
        max_documents=node.max_documents,
        progress=bool(node.progress),
    )

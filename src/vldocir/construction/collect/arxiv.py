"""arXiv papers in their HTML version (App. A.1): seeds from survey papers and their references,
plus papers sampled per category; only licences that allow redistribution.

Candidates, in order, each paper once:

1. each survey of ``surveys`` itself, then the arXiv ids its HTML version's bibliography cites
   (``arXiv:2401.01234``, ``arxiv.org/abs/...`` links; at most ``max_references`` per survey);
2. for each of ``categories``, its ``per_category`` latest submissions, from
   the arXiv API (``GET /api/query?search_query=cat:<category>&sortBy=submittedDate&sortOrder=descending``,
   Atom XML, paged by ``start`` / ``max_results``).

Each candidate's metadata comes from arXiv's OAI-PMH interface in its ``arXiv`` format
(``GET /oai?verb=GetRecord&identifier=oai:arXiv.org:<id>&metadataPrefix=arXiv``): title, categories
(the first is the primary one, which names the domain through ``domains``) and ``<license>`` (absent:
arXiv's default non-exclusive licence). A paper whose licence is not in ``allowed_licenses`` is
skipped (``license_not_allowed``), as is one without an HTML version (``https://arxiv.org/html/<id>``
answers 404: ``no_html``). Ids are ``arxiv-<id>`` (``/`` of old-style ids as ``_``).

arXiv asks API clients for at most one request every three seconds (conf/collect/arxiv.yaml).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from functools import partial

from vldocir.construction.collect.assets import decode_html, parse_html
from vldocir.construction.collect.collector import (
    Collector,
    CollectRun,
    Document,
    DomainRules,
    Failed,
    Item,
    Skipped,
)
from vldocir.construction.collect.http import PoliteClient, full_url
from vldocir.construction.collect.index import canonical_license, check_allowed_licenses, license_allowed
from vldocir.errors import ConfigError

ATOM = "{http://www.w3.org/2005/Atom}"
OPENSEARCH = "{http://a9.com/-/spec/opensearch/1.1/}"
OAI = "{http://www.openarchives.org/OAI/2.0/}"
ARXIV_OAI = "{http://arxiv.org/OAI/arXiv/}"
DEFAULT_LICENSE = "http://arxiv.org/licenses/nonexclusive-distrib/1.0/"  # what a record without <license> has
_ID = r"(\d{4}\.\d{4,5}|[a-z][a-z-]*(?:\.[A-Za-z]{2})?/\d{7})"
_CITED_ID = re.compile(
    r"(?:arxiv\s*(?:preprint\s*)?(?:e-?print\s*)?:?\s*(?:abs/)?|arxiv\.org/(?:abs|pdf|html)/)" + _ID + r"(?:v\d+)?",
    re.I,
)
_PLAIN_ID = re.compile(r"^" + _ID + r"(?:v\d+)?$")


def normalize_id(value: str) -> str | None:
    """An arXiv id without version (``2401.01234``, ``hep-th/9901001``), or None if ``value`` is not one."""
    value = str(value).strip()
    value = re.sub(r"^(?:https?://)?(?:export\.)?arxiv\.org/(?:abs|pdf|html)/", "", value)
    match = _PLAIN_ID.match(value)
    if not match:
        return None
    found = match.group(1)
    return re.sub(r"\.[A-Za-z]{2}/", "/", found) if "/" in found else found  # math.GT/0309136 -> math/0309136


def doc_id(arxiv_id: str) -> str:
    return "arxiv-" + arxiv_id.replace("/", "_")


class ArxivCollector(Collector):
    """Built by Hydra from conf/collect/arxiv.yaml.

    Args:
        surveys: arXiv ids of survey papers (seeds).
        categories: arXiv categories or archives to sample (``cs.CL``, ``astro-ph``).
        per_category: the latest papers taken from each.
        domains: ``[{match, domain}]`` over the primary category (first match wins).
        allowed_licenses: canonical licence ids or patterns (:func:`.index.license_allowed`).
        api_url, oai_url: the arXiv API's query endpoint and the OAI-PMH endpoint.
        html_url, abs_url: a paper's HTML version and its public page, ``{id}`` replaced.
        max_references: per survey.
        page_size: results per API request when sampling a category.
    """

    source = "arxiv"

    def __init__(
        self,
        surveys: Sequence[str] = (),
        categories: Sequence[str] = (),
        per_category: int = 20,
        domains: Sequence[Mapping[str, str]] = (),
        allowed_licenses: Sequence[str] = ("CC-BY-4.0",),
        api_url: str = "https://export.arxiv.org/api/query",
        oai_url: str = "https://oaipmh.arxiv.org/oai",
        html_url: str = "https://arxiv.org/html/{id}",
        abs_url: str = "https://arxiv.org/abs/{id}",
        max_references: int = 200,
        page_size: int = 100,
    ):
        self.surveys = []
        for survey in surveys or ():
            if (arxiv_id := normalize_id(survey)) is None:
                raise ConfigError(f"collect.collector.surveys: {survey!r} is not an arXiv id")
            self.surveys.append(arxiv_id)
        if isinstance(categories, str):
            raise ConfigError(f"collect.collector.categories: a list of categories, got {categories!r}")
        self.categories = list(dict.fromkeys(str(c) for c in categories or ()))
        if not self.surveys and not self.categories:
            raise ConfigError("collect.collector: give surveys and/or categories to sample")
        if isinstance(per_category, bool) or int(per_category) < 0:
            raise ConfigError(f"collect.collector.per_category must be >= 0, got {per_category!r}")
        self.per_category = int(per_category)
        self.domains = DomainRules(domains, "collect.collector.domains")
        self.allowed = check_allowed_licenses(allowed_licenses, "collect.collector.allowed_licenses")
        for name, template in (("html_url", html_url), ("abs_url", abs_url)):
            if "{id}" not in str(template):
                raise ConfigError(f"collect.collector.{name} must contain {{id}}, got {template!r}")
        self.api_url, self.oai_url = str(api_url), str(oai_url)
        self.html_url, self.abs_url = str(html_url), str(abs_url)
        self.max_references, self.page_size = int(max_references), max(1, int(page_size))

    def endpoints(self) -> dict[str, str]:
        return {"api_url": self.api_url, "oai_url": self.oai_url, "html_url": self.html_url}

    def candidates(self, run: CollectRun) -> Iterator[Item]:
        seen: set[str] = set()

        def paper(arxiv_id: str, origin: str) -> Iterator[Item]:
            if arxiv_id in seen:
                return
            seen.add(arxiv_id)
            if run.done(doc_id(arxiv_id)):
                yield Skipped.already(doc_id(arxiv_id))
                return
            yield run.attempt(arxiv_id, lambda: self._document(run.client, arxiv_id, origin))

        for survey in self.surveys:
            yield from paper(survey, "survey")
            cited = run.attempt(f"{survey} (bibliography)", partial(self._references, run.client, survey))
            if isinstance(cited, (Failed, Skipped)):
                yield cited
                continue
            for arxiv_id in cited[: self.max_references]:
                yield from paper(arxiv_id, f"survey:{survey}")
        for category in self.categories:
            sampled = run.attempt(f"cat:{category}", partial(self._sample, run.client, category, self.per_category))
            if isinstance(sampled, Failed):
                yield sampled
                continue
            for arxiv_id in sampled:
                yield from paper(arxiv_id, f"category:{category}")

    # -- candidates ---------------------------------------------------------------------------------
    def _references(self, client: PoliteClient, survey: str) -> list[str] | Skipped:
        """The arXiv ids the survey's bibliography cites, in order of appearance."""
        response = client.get(self.html_url.format(id=survey), missing_ok=True)
        if response.missing:
            return Skipped(f"{survey} (bibliography)", "survey_without_html")
        root = parse_html(decode_html(response), response.url)
        sections = root.xpath("//*[contains(concat(' ', normalize-space(@class), ' '), ' ltx_bibliography ')]") or [
            root
        ]
        found: list[str] = []
        for section in sections:
            texts = [section.text_content()] + [a.get("href", "") for a in section.iter("a")]
            for text in texts:
                for match in _CITED_ID.finditer(text):
                    arxiv_id = normalize_id(match.group(1))
                    if arxiv_id and arxiv_id != survey and arxiv_id not in found:
                        found.append(arxiv_id)
        return found

    def _sample(self, client: PoliteClient, category: str, count: int) -> list[str]:
        """The ``count`` latest ids of ``category`` from the API (Atom), page by page."""
        ids: list[str] = []
        start = 0
        while len(ids) < count:
            params = {
                "search_query": f"cat:{category}",
                "start": start,
                "max_results": min(self.page_size, count - len(ids)),
                "sortBy": "submittedDate",
                "sortOrder": "descending",
            }
            feed = client.get_xml(self.api_url, params)
            url = full_url(self.api_url, params)
            if feed.tag != f"{ATOM}feed":
                raise client.malformed(url, f"expected an Atom <feed>, got <{feed.tag}>")
            entries = feed.findall(f"{ATOM}entry")
            for entry in entries:
                entry_id = (entry.findtext(f"{ATOM}id") or "").strip()
                if "/api/errors" in entry_id:  # the API reports a bad query as a feed with one error entry
                    raise client.api_error(url, "query", (entry.findtext(f"{ATOM}summary") or "").strip())
                arxiv_id = normalize_id(entry_id)
                if arxiv_id is None:
                    raise client.malformed(url, f"entry id {entry_id!r} is not an arXiv abstract URL")
                if arxiv_id not in ids:
                    ids.append(arxiv_id)
            total = feed.findtext(f"{OPENSEARCH}totalResults")
            start += len(entries)
            if not entries or (total and total.strip().isdigit() and start >= int(total)):
                break
        return ids[:count]

    def _document(self, client: PoliteClient, arxiv_id: str, origin: str) -> Document | Skipped:
        """The paper's metadata from OAI-PMH, judged by licence and domain."""
        params = {"verb": "GetRecord", "identifier": f"oai:arXiv.org:{arxiv_id}", "metadataPrefix": "arXiv"}
        root = client.get_xml(self.oai_url, params)
        url = full_url(self.oai_url, params)
        error = root.find(f"{OAI}error")
        if error is not None:
            code = error.get("code", "error")
            if code == "idDoesNotExist":
                return Skipped(arxiv_id, "unknown_id")
            raise client.api_error(url, code, (error.text or "").strip())
        record = root.find(f"{OAI}GetRecord/{OAI}record")
        if record is None:
            raise client.malformed(url, "no GetRecord/record")
        header = record.find(f"{OAI}header")
        if header is not None and header.get("status") == "deleted":
            return Skipped(arxiv_id, "withdrawn")
        meta = record.find(f"{OAI}metadata/{ARXIV_OAI}arXiv")
        if meta is None:
            raise client.malformed(url, "no metadata/arXiv element (metadataPrefix=arXiv)")
        title = " ".join((meta.findtext(f"{ARXIV_OAI}title") or "").split())
        categories = (meta.findtext(f"{ARXIV_OAI}categories") or "").split()
        if not title or not categories:
            raise client.malformed(url, "the record has no title or no categories")
        license = canonical_license(meta.findtext(f"{ARXIV_OAI}license") or DEFAULT_LICENSE)
        if not license_allowed(license, self.allowed):
            return Skipped(arxiv_id, "license_not_allowed")
        domain = self.domains.domain(categories[0])
        if domain is None:
            return Skipped(arxiv_id, "no_domain")
        return Document(
            doc_id=doc_id(arxiv_id),
            title=title,
            url=self.abs_url.format(id=arxiv_id),
            domain=domain,
            license=license,
            html_url=self.html_url.format(id=arxiv_id),
            missing_reason="no_html",
            meta={"arxiv_id": arxiv_id, "categories": categories, "origin": origin},
        )

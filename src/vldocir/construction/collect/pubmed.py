"""PubMed Central open-access articles (App. A.1), by date range, with the licence PMC records.

The PMC OA Web Service lists the open-access articles updated in a date range:
``GET oa.fcgi?from=YYYY-MM-DD&until=YYYY-MM-DD`` answers XML, ``<OA><records><record id="PMC..."
citation="J Med Case Rep. 2024 Jan 3; 18:1" license="CC BY" retracted="no">...`` (at most 1000 records
an answer), and a ``<resumption><link token="..."/>`` while there are more, fetched as
``oa.fcgi?resumptionToken=<token>``. An ``<error code="...">`` answer is an error of the run.

Each record is judged: retracted articles are skipped (``retracted``), licences not in
``allowed_licenses`` too (``license_not_allowed``: PMC's ``CC BY-NC-ND`` is ``CC-BY-NC-ND``); the domain
comes from ``domains`` matched against the citation (its journal), else ``default_domain`` (None:
``no_domain``). The article's HTML is its PMC page (``article_url``), its title the page's
``citation_title``. Ids are ``pubmed-<PMCID>``.

NCBI asks for at most three requests per second without an API key (conf/collect/pubmed.yaml).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence

from vldocir.construction.collect.collector import Collector, CollectRun, Document, DomainRules, Item, Skipped
from vldocir.construction.collect.http import full_url
from vldocir.construction.collect.index import canonical_license, check_allowed_licenses, license_allowed
from vldocir.errors import ConfigError


class PubmedCollector(Collector):
    """Built by Hydra from conf/collect/pubmed.yaml.

    Args:
        date_from, date_until: the range of update dates listed (``YYYY-MM-DD``, inclusive).
        allowed_licenses: canonical licence ids or patterns (:func:`.index.license_allowed`).
        domains: ``[{match, domain}]`` over the record's citation (first match wins).
        default_domain: the domain of an article no rule matches; None skips it.
        oa_url: the OA Web Service.
        article_url: an article's page, ``{pmcid}`` replaced.
    """

    source = "pubmed"

    def __init__(
        self,
        date_from: str,
        date_until: str,
        allowed_licenses: Sequence[str] = ("CC-BY", "CC0"),
        domains: Sequence[Mapping[str, str]] = (),
        default_domain: str | None = None,
        oa_url: str = "https://www.ncbi.nlm.nih.gov/pmc/utils/oa/oa.fcgi",
        article_url: str = "https://pmc.ncbi.nlm.nih.gov/articles/{pmcid}/",
    ):
        for name, value in (("date_from", date_from), ("date_until", date_until)):
            try:
                dt.date.fromisoformat(str(value))
            except ValueError as error:
                raise ConfigError(f"collect.collector.{name}: a date YYYY-MM-DD, got {value!r}") from error
        if str(date_from) > str(date_until):
            raise ConfigError(f"collect.collector: date_from {date_from} is after date_until {date_until}")
        if "{pmcid}" not in str(article_url):
            raise ConfigError(f"collect.collector.article_url must contain {{pmcid}}, got {article_url!r}")
        self.date_from, self.date_until = str(date_from), str(date_until)
        self.allowed = check_allowed_licenses(allowed_licenses, "collect.collector.allowed_licenses")
        self.domains = DomainRules(domains, "collect.collector.domains")
        self.default_domain = default_domain
        self.oa_url, self.article_url = str(oa_url), str(article_url)

    def endpoints(self) -> dict[str, str]:
        return {"oa_url": self.oa_url, "article_url": self.article_url}

    def candidates(self, run: CollectRun) -> Iterator[Item]:
        params: dict[str, str] = {"from": self.date_from, "until": self.date_until}
        while True:
            # A listing page that cannot be read ends the run (its resumption token is the only way on);
            # the pages and documents done so far are stored, so the rerun starts where this one stopped.
            root = run.client.get_xml(self.oa_url, params)
            url = full_url(self.oa_url, params)
            error = root.find("error")
            if error is not None:
                raise run.client.api_error(url, error.get("code", "error"), (error.text or "").strip())
            records = root.find("records")
            if root.tag != "OA" or records is None:
                raise run.client.malformed(url, "expected <OA> with <records>")
            for record in records.findall("record"):
                yield self._judge(run, record, url)
            link = root.find("resumption/link")
            if link is None or not link.get("token"):
                return
            params = {"resumptionToken": link.get("token")}

    def _judge(self, run: CollectRun, record, url: str) -> Item:
        pmcid = (record.get("id") or "").strip()
        if not pmcid.startswith("PMC") or not pmcid[3:].isdigit():
            raise run.client.malformed(url, f"record id {pmcid!r} is not a PMCID")
        doc_id = f"pubmed-{pmcid}"
        if run.done(doc_id):
            return Skipped.already(doc_id)
        if (record.get("retracted") or "").lower() == "yes":
            return Skipped(pmcid, "retracted")
        license = canonical_license(record.get("license"))
        if not license_allowed(license, self.allowed):
            return Skipped(pmcid, "license_not_allowed")
        citation = " ".join((record.get("citation") or "").split())
        domain = self.domains.domain(citation) or self.default_domain
        if not domain:
            return Skipped(pmcid, "no_domain")
        page = self.article_url.format(pmcid=pmcid)
        return Document(
            doc_id=doc_id,
            title="",
            url=page,
            domain=str(domain),
            license=license,
            html_url=page,
            meta={"pmcid": pmcid, "citation": citation, "journal": citation.split(".")[0].strip()},
        )

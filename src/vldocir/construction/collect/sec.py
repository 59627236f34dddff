"""SEC EDGAR proxy statements (App. A.1): the latest DEF 14A of each company, one per company.

Companies come from ``companies`` (tickers or CIKs) or, when it is null, from EDGAR's
``company_tickers.json`` (``{"0": {"cik_str": 320193, "ticker": "AAPL", "title": "Apple Inc."}, ...}``, in
its order; a company listed under several tickers counts once). For each company:

1. its filing history, ``GET https://data.sec.gov/submissions/CIK##########.json`` (the CIK padded to ten
   digits): ``filings.recent`` holds parallel arrays ``form``, ``accessionNumber``, ``filingDate``,
   ``primaryDocument``, ...; when none of the recent filings is a ``form``, the older pages listed in
   ``filings.files`` (same arrays, top level) are read in order;
2. the latest filing of that form (by ``filingDate``); none: skipped (``no_matching_form``);
3. its primary document, ``/Archives/edgar/data/<cik>/<accession without dashes>/<primaryDocument>``.

The id is ``sec-<cik>``: one document per company, also across reruns. EDGAR's fair-access policy
asks for a User-Agent naming the requester with a contact address and at most ten requests per
second over all its hosts: :meth:`SecCollector.check` refuses a client that does not say who it is
or is faster than ``max_requests_per_s``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from vldocir.construction.collect.collector import Collector, CollectRun, Document, Item, Skipped
from vldocir.construction.collect.http import HttpSpec, PoliteClient
from vldocir.errors import ConfigError

_CONTACT = re.compile(r"\S+@\S+\.\w+")
_FIELDS = ("form", "accessionNumber", "filingDate", "primaryDocument")


class SecCollector(Collector):
    """Built by Hydra from conf/collect/sec.yaml.

    Args:
        companies: tickers (``AAPL``) or CIKs (``320193``); null: every company of ``tickers_url``.
        form: the form collected (``DEF 14A``: the definitive proxy statement; amendments and
            additional materials, ``DEFA14A``, are other forms).
        domain, license: of every document.
        tickers_url: EDGAR's ``company_tickers.json``.
        submissions_url: a company's filing history, ``{cik}`` = the CIK padded to ten digits.
        submissions_file_url: an older page of it, ``{name}`` = the name ``filings.files`` gives.
        document_url: a filing's document, ``{cik}`` (not padded), ``{accession}`` (no dashes), ``{document}``.
        max_requests_per_s: the fastest rate the client may be configured for (EDGAR: 10).
    """

    source = "sec"

    def __init__(
        self,
        companies: Sequence[str | int] | None = None,
        form: str = "DEF 14A",
        domain: str = "Financial Reports",
        license: str = "SEC-public-information",
        tickers_url: str = "https://www.sec.gov/files/company_tickers.json",
        submissions_url: str = "https://data.sec.gov/submissions/CIK{cik}.json",
        submissions_file_url: str = "https://data.sec.gov/submissions/{name}",
        document_url: str = "https://www.sec.gov/Archives/edgar/data/{cik}/{accession}/{document}",
        max_requests_per_s: float = 10.0,
    ):
        for name, template, fields in (
            ("submissions_url", submissions_url, ("{cik}",)),
            ("submissions_file_url", submissions_file_url, ("{name}",)),
            ("document_url", document_url, ("{cik}", "{accession}", "{document}")),
        ):
            if missing := [f for f in fields if f not in str(template)]:
                raise ConfigError(f"collect.collector.{name} must contain {', '.join(missing)}, got {template!r}")
        if companies is not None and (isinstance(companies, (str, int)) or not companies):
            raise ConfigError("collect.collector.companies: null (every company) or a non-empty list of tickers / CIKs")
        if float(max_requests_per_s) <= 0:
            raise ConfigError(f"collect.collector.max_requests_per_s must be > 0, got {max_requests_per_s!r}")
        self.companies = None if companies is None else [str(c).strip() for c in companies]
        self.form, self.domain, self.license = str(form), str(domain), str(license)
        self.tickers_url, self.submissions_url = str(tickers_url), str(submissions_url)
        self.submissions_file_url, self.document_url = str(submissions_file_url), str(document_url)
        self.max_requests_per_s = float(max_requests_per_s)

    def endpoints(self) -> dict[str, str]:
        return {
            "tickers_url": self.tickers_url,
            "submissions_url": self.submissions_url,
            "document_url": self.document_url,
        }

    def check(self, http: HttpSpec) -> None:
        agent = str(http.user_agent or "")
        if not _CONTACT.search(agent) or len(agent.split()) < 2:
            raise ConfigError(
                "collect.http.user_agent: SEC EDGAR requires a User-Agent with your name or company and a "
                "contact e-mail, e.g. 'Example Lab admin@example.org' (set VLDOCIR_SEC_USER_AGENT); "
                f"got {agent!r}"
            )
        if (
            http.per_host
            or float(http.min_interval_s) < 1.0 / self.max_requests_per_s - 1e-9
            or any(seconds < 1.0 / self.max_requests_per_s - 1e-9 for seconds in http.host_intervals.values())
        ):
            raise ConfigError(
                f"collect.http: EDGAR allows at most {self.max_requests_per_s:g} requests/s over all its "
                f"hosts; set per_host: false and min_interval_s >= {1.0 / self.max_requests_per_s:g}"
            )

    def candidates(self, run: CollectRun) -> Iterator[Item]:
        for cik, name in self._companies(run.client):
            doc_id = f"sec-{cik}"
            if run.done(doc_id):
                yield Skipped.already(doc_id)
                continue
            yield run.attempt(f"CIK {cik}", partial(self._latest_filing, run.client, cik, name))

    # -- companies ----------------------------------------------------------------------------------
    def _companies(self, client: PoliteClient) -> list[tuple[int, str]]:
        """``[(cik, name)]``, each company once, in the configured (or the file's) order."""
        wanted = self.companies
        if wanted is not None and all(c.isdigit() for c in wanted):
            return list(dict.fromkeys((int(c), "") for c in wanted))
        table = client.get_json(self.tickers_url)
        rows = table.values() if isinstance(table, Mapping) else table if isinstance(table, list) else None
        by_ticker: dict[str, tuple[int, str]] = {}
        ordered: list[tuple[int, str]] = []
        try:
            for row in rows:
                cik, ticker, title = int(row["cik_str"]), str(row["ticker"]).upper(), str(row.get("title", ""))
                by_ticker.setdefault(ticker, (cik, title))
                ordered.append((cik, title))
        except (TypeError, KeyError, ValueError, AttributeError) as error:
            raise client.malformed(self.tickers_url, f"rows are {{cik_str, ticker, title}} ({error!r})") from error
        if wanted is None:
            seen: dict[int, str] = {}
            for cik, title in ordered:
                seen.setdefault(cik, title)
            return list(seen.items())
        chosen: dict[int, str] = {}
        for company in wanted:
            if company.isdigit():
                chosen.setdefault(int(company), "")
            elif company.upper() in by_ticker:
                cik, title = by_ticker[company.upper()]
                chosen.setdefault(cik, title)
            else:
                raise ConfigError(f"collect.collector.companies: ticker {company!r} is not in {self.tickers_url}")
        return list(chosen.items())

    # -- filings ------------------------------------------------------------------------------------
    def _latest_filing(self, client: PoliteClient, cik: int, name: str) -> Document | Skipped:
        url = self.submissions_url.format(cik=f"{cik:010d}")
        history = client.get_json(url)
        if not isinstance(history, Mapping) or not isinstance(history.get("filings"), Mapping):
            raise client.malformed(url, "no filings object")
        name = str(history.get("name") or name or f"CIK {cik}")
        best = self._latest(client, url, history["filings"].get("recent"))
        for page in history["filings"].get("files") or []:
            if best is not None:
                break
            if not isinstance(page, Mapping) or not page.get("name"):
                raise client.malformed(url, f"filings.files entry {page!r} has no name")
            page_url = self.submissions_file_url.format(name=page["name"])
            best = self._latest(client, page_url, client.get_json(page_url))
        if best is None:
            return Skipped(f"CIK {cik}", "no_matching_form")
        accession, filed, document = best["accessionNumber"], best["filingDate"], best["primaryDocument"]
        if not document.lower().endswith((".htm", ".html")):
            return Skipped(f"CIK {cik}", "not_html")
        doc_url = self.document_url.format(cik=cik, accession=accession.replace("-", ""), document=document)
        return Document(
            doc_id=f"sec-{cik}",
            title=f"{name} {self.form} ({filed})",
            url=doc_url,
            domain=self.domain,
            license=self.license,
            html_url=doc_url,
            missing_reason="missing_document",
            meta={"cik": cik, "company": name, "form": self.form, "accession": accession, "filing_date": filed},
        )

    def _latest(self, client: PoliteClient, url: str, arrays: Any) -> dict[str, str] | None:
        """The latest filing of ``self.form`` in parallel arrays (``filings.recent`` or an older page)."""
        if not isinstance(arrays, Mapping) or any(not isinstance(arrays.get(f), list) for f in _FIELDS):
            raise client.malformed(url, f"filing arrays {list(_FIELDS)} missing")
        columns = [arrays[f] for f in _FIELDS]
        if len({len(c) for c in columns}) != 1:
            raise client.malformed(url, "filing arrays of different lengths")
        matches = [
            dict(zip(_FIELDS, map(str, values), strict=True))
            for values in zip(*columns, strict=True)
            if values[0] == self.form
        ]
        return max(matches, key=lambda filing: filing["filingDate"]) if matches else None

"""The document collectors (App. A.1; vldocir.construction.collect, vldocir.apps.collect) against a real HTTP
server on 127.0.0.1 serving recorded responses in the APIs' formats (tests/construction/collect_server.py,
tests/fixtures/collect/<source>/): success, HTTP 429 with Retry-After, 500, a malformed body, and an
interrupted run that resumes without asking the server again for anything it answered.

Every collector is built from the real config (conf/collect.yaml + conf/collect/<source>.yaml) with
its endpoints pointed at the local server. A guard on the socket layer refuses, and records, any
connection or name lookup that is not loopback: nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time

import pytest

from collect_server import Fault, RecordedServer
from helpers import CONFIG_DIR, REPO_ROOT
from vldocir.construction.collect import (
    AssetSpec,
    CollectError,
    FetchError,
    HttpSpec,
    IndexFileError,
    IndexRow,
    MalformedResponse,
    read_index,
    write_index,
)
from vldocir.construction.collect.collector import collect, collect_from_config
from vldocir.construction.collect.http import PoliteClient, ResponseStore, full_url, parse_retry_after
from vldocir.construction.collect.index import DocumentIndex, canonical_license, license_allowed
from vldocir.errors import ConfigError
from vldocir.llm_server import ChatServer, Reply

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
AGENT = "vldocir-tests admin@example.org"


@pytest.fixture(autouse=True)
def network_guard(monkeypatch) -> list[str]:
    """Refuse (and list) every name lookup and connection that is not loopback."""
    blocked: list[str] = []
    real_lookup, real_connect = socket.getaddrinfo, socket.socket.connect

    def lookup(host, *args, **kwargs):
        if str(host) not in LOOPBACK:
            blocked.append(str(host))
            raise socket.gaierror(socket.EAI_NONAME, f"test network guard: {host} is not loopback")
        return real_lookup(host, *args, **kwargs)

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else str(address)
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in LOOPBACK:
            blocked.append(host)
            raise OSError(f"test network guard: {host} is not loopback")
        return real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return blocked


@pytest.fixture(autouse=True)
def _llm_key(monkeypatch):
    monkeypatch.setenv("VLDOCIR_TEST_LLM_KEY", "sk-test-collect-0123456789")


def compose(source: str, out_dir, *overrides: str):
    """The ``collect`` node ``python -m vldocir.apps.collect collect=<source> <overrides>`` would run, made quick
    (no waits between requests, tiny backoff, Retry-After capped at 50 ms) and quiet."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    quick = [
        f"collect={source}",
        f"collect.out_dir={out_dir}",
        "collect.progress=false",
        f"collect.http.user_agent='{AGENT}'",
        "collect.http.min_interval_s=0.001",
        "collect.http.max_retries=3",
        "collect.http.backoff_s=0.001",
        "collect.http.backoff_max_s=0.01",
        "collect.http.retry_after_max_s=0.05",
        "collect.http.trust_env=false",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="collect", overrides=quick + list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg.collect


def rows(out_dir) -> dict[str, IndexRow]:
    return {row.doc_id: row for row in read_index(out_dir / "index.jsonl")}


def assert_resumed(server: RecordedServer, first_run: set[str], expected: set[str]) -> None:
    """The second run asked only for ``expected``, nothing the first run was answered."""
    asked = {h.route for h in server.hits()}
    assert asked == expected
    assert not asked & first_run, f"asked again: {sorted(asked & first_run)}"
    assert server.unmatched == []


def assert_self_contained(out_dir, row: IndexRow) -> str:
    """The document's HTML refers to its own assets (all present) for every image and stylesheet
    that could be had; returns the HTML."""
    import lxml.html

    folder = out_dir / row.path
    html = (folder / "index.html").read_text(encoding="utf-8")
    root = lxml.html.document_fromstring(html)
    failed = {f["url"] for f in row.failed_assets}
    refs = [img.get("src") for img in root.iter("img")] + [
        link.get("href") for link in root.iter("link") if "stylesheet" in (link.get("rel") or "")
    ]
    for ref in refs:
        assert ref.startswith("assets/") or ref in failed, f"{row.doc_id}: {ref} is neither local nor listed as failed"
        if ref.startswith("assets/"):
            assert (folder / ref).is_file()
    assert not list(root.iter("script")) and not list(root.iter("base")), "scripts and <base> are dropped"
    assert '<meta charset="utf-8">' in html
    if row.n_assets:
        assert len(list((folder / "assets").iterdir())) == row.n_assets
    return html


# --- the polite client ---------------------------------------------------------------------------------


def client(tmp_path, **overrides) -> PoliteClient:
    options = dict(
        user_agent=AGENT,
        min_interval_s=0.0,
        timeout_s=60,  # generous: no answer of the recorded server is late
        max_retries=2,
        backoff_s=0.001,
        backoff_max_s=0.01,
        retry_after_max_s=1.0,
        trust_env=False,
    )
    return PoliteClient(HttpSpec(**{**options, **overrides}), ResponseStore(tmp_path / "responses"))


def test_client_rate_limit_per_host_and_over_all_hosts(tmp_path):
    """The k-th request is sent no earlier than k intervals after the first could start: a lower
    bound from a clock read before the first request, so a loaded machine (which only delays
    requests) cannot fail it, while a limiter that does not wait does."""

    def send_times(http: PoliteClient, urls: list[str]) -> list[float]:
        sent: list[float] = []
        http._http.event_hooks["request"].append(lambda request: sent.append(time.monotonic()))
        start = time.monotonic()
        for url in urls:
            http.get(url)
        return [t - start for t in sent]

    interval = 0.1
    with RecordedServer("sec") as server:
        port = server.base.rsplit(":", 1)[1]
        with client(tmp_path / "a", min_interval_s=interval) as http:
            sent = send_times(http, [f"{server.base}/submissions/CIK000010000{cik}.json" for cik in (1, 2, 3, 4)])
        assert all(t >= k * interval for k, t in enumerate(sent)), sent
        assert all(h.headers["user-agent"] == AGENT for h in server.hits())

        # two host names of one server: per_host=false spaces them too (EDGAR's rule); per host, not
        hosts = ("127.0.0.1", "localhost", "127.0.0.1", "localhost")
        urls = [f"http://{host}:{port}/submissions/CIK000010000{i + 1}.json" for i, host in enumerate(hosts)]
        with client(tmp_path / "b", min_interval_s=interval, per_host=False) as http:
            sent = send_times(http, urls)
        assert all(t >= k * interval for k, t in enumerate(sent)), sent
        with client(tmp_path / "c", min_interval_s=30) as http:  # per host: the other host need not wait
            sent = send_times(http, urls[:2])
        assert sent[1] < 30, sent


def test_client_honours_retry_after_and_caps_it(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="vldocir.construction.collect.http")
    with RecordedServer("sec") as server:
        server.fail("company_tickers.json", Fault(429, retry_after="0.3"))
        with client(tmp_path / "a") as http:
            assert http.get_json(f"{server.base}/files/company_tickers.json")["0"]["ticker"] == "EXMP"
        first, second = server.hits()
        assert (first.status, second.status) == (429, 200) and second.time - first.time >= 0.28
        assert http.stats["retry_http_429"] == 1

        server.clear_log()
        server.fail("company_tickers.json", Fault(429, retry_after="3600"))
        with client(tmp_path / "b", retry_after_max_s=0.05) as http:
            http.get(f"{server.base}/files/company_tickers.json")
        assert "retry 1/2 in 0.05 s" in caplog.text, "a Retry-After longer than retry_after_max_s is cut to it"
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0 and parse_retry_after("2") == 2.0
    assert parse_retry_after("soon") is None


def test_client_gives_up_after_retries_and_stores_only_answers(tmp_path):
    with RecordedServer("sec") as server:
        url = f"{server.base}/files/company_tickers.json"
        server.fail("company_tickers.json", *[Fault(500)] * 3)
        with client(tmp_path) as http:
            with pytest.raises(FetchError, match="HTTP 500") as failure:
                http.get(url)
            assert failure.value.reason == "http_500" and url in str(failure.value)
            assert http.store.get(url) is None, "a failure is never stored"
            assert len(server.hits()) == 3  # the first attempt and max_retries=2 retries

            server.clear_log()
            assert http.get(url).status == 200 and http.get(url).stored
            assert len(server.hits()) == 1, "the second answer comes from the store"
            missing = http.get(f"{server.base}/no/such/file", missing_ok=True)
            assert missing.missing and http.get(f"{server.base}/no/such/file", missing_ok=True).stored
            with pytest.raises(FetchError, match="404"):
                http.get(f"{server.base}/no/such/file")


def test_client_malformed_body_names_the_url_and_is_fetched_again(tmp_path):
    with RecordedServer("sec") as server:
        server.fail("company_tickers.json", Fault(malformed=True))
        url = f"{server.base}/files/company_tickers.json"
        with client(tmp_path) as http:
            with pytest.raises(
                MalformedResponse, match=r"company_tickers\.json: malformed response: not JSON"
            ) as failure:
                http.get_json(url)
            assert failure.value.reason == "malformed_response"
            assert http.store.get(url) is None, "a malformed body is dropped from the store"
            assert http.get_json(url)["2"]["ticker"] == "CTSO"
        assert [h.status for h in server.hits()] == [200, 200]


def test_http_spec_checks():
    with pytest.raises(ConfigError, match="user_agent"):
        HttpSpec(user_agent="  ")
    with pytest.raises(ConfigError, match="min_interval_s"):
        HttpSpec(user_agent=AGENT, min_interval_s=-1)
    assert full_url("http://h/p", {"a": "b c", "n": 1}) == "http://h/p?a=b+c&n=1"


# --- the index and licences ----------------------------------------------------------------------------


def _row(doc_id: str, **extra) -> IndexRow:
    return IndexRow(
        doc_id, "pubmed", "Medical Reports", "A title, with a comma", "https://x/1", "CC-BY", doc_id, **extra
    )


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_index_round_trip(tmp_path, suffix):
    written = [
        _row(
            "pubmed-PMC1",
            n_assets=2,
            failed_assets=[{"url": "https://x/a.png", "error": "http_404: gone"}],
            meta={"citation": "J X. 2024"},
        ),
        _row("pubmed-PMC2"),
    ]
    write_index(written, tmp_path / f"index.{suffix}")
    assert read_index(tmp_path / f"index.{suffix}") == written


def test_index_checks_ids_and_survives_a_cut_line(tmp_path):
    with pytest.raises(IndexFileError, match="duplicate document id 'pubmed-PMC1'"):
        write_index([_row("pubmed-PMC1"), _row("pubmed-PMC1")], tmp_path / "dup.csv")
    with pytest.raises(ValueError, match="not a folder name"):
        _row("../escape")
    path = tmp_path / "index.jsonl"
    index = DocumentIndex(path)
    index.add(_row("pubmed-PMC1"))
    with pytest.raises(IndexFileError, match="duplicate"):
        index.add(_row("pubmed-PMC1"))
    with open(path, "a") as handle:
        handle.write('{"doc_id": "pubmed-PMC2", "sou')  # a run killed while writing its row
    reopened = DocumentIndex(path)
    assert list(reopened.rows) == ["pubmed-PMC1"]
    reopened.add(_row("pubmed-PMC3"))
    assert [r.doc_id for r in read_index(path)] == ["pubmed-PMC1", "pubmed-PMC3"]
    path.write_text(path.read_text() + "not json\n")
    with pytest.raises(IndexFileError, match=r"index\.jsonl:3"):
        read_index(path)


def test_licences():
    assert canonical_license("http://creativecommons.org/licenses/by-sa/4.0/") == "CC-BY-SA-4.0"
    assert canonical_license("http://creativecommons.org/publicdomain/zero/1.0/") == "CC0-1.0"
    assert canonical_license("http://arxiv.org/licenses/nonexclusive-distrib/1.0/") == "arXiv-nonexclusive-distrib-1.0"
    assert [canonical_license(v) for v in ("CC BY", "CC BY-NC-ND", "CC0", "CC BY 4.0", "")] == [
        "CC-BY",
        "CC-BY-NC-ND",
        "CC0",
        "CC-BY-4.0",
        "",
    ]
    assert license_allowed("CC-BY-4.0", ["CC BY 4.0"]) and license_allowed("CC0-1.0", ["CC0*"])
    assert not license_allowed("CC-BY-NC-4.0", ["CC-BY-4.0", "CC-BY"]) and not license_allowed("", ["*"])


def test_localize_rewrites_references_and_keeps_the_page_when_an_asset_fails(tmp_path):
    from vldocir.construction.collect.assets import localize
    from vldocir.construction.collect.http import Response

    files = {
        "https://cdn.example/s/a.css": (b"body{background:url('../img/bg.png')}", "text/css"),
        "https://cdn.example/img/bg.png": (b"PNG", "image/png"),
        "https://site.example/doc/f/fig.png": (b"PNG2", "image/png"),
        "https://site.example/doc/f/tile.gif": (b"GIF", "image/gif"),
    }

    def fetch(url):
        if url not in files:
            raise FetchError(url, "http_404", "HTTP 404 (not found)")
        body, kind = files[url]
        return Response(url, url, 200, kind, body)

    page = localize(
        """<html><head><base href="f/"><link rel="stylesheet" href="https://cdn.example/s/a.css">
        <script>alert(1)</script><meta name="citation_title" content="The  title"></head><body>
        <picture><source srcset="fig.webp" type="image/webp"><img src="fig.png" srcset="fig@2x.png 2x"></picture>
        <img src="data:image/png;base64,AAAA"><img src="gone.png"><div style="background:url(tile.gif)">x</div>
        <video><source src="clip.mp4"></video><a href="#top">top</a> <a href="other.html">next</a></body></html>""",
        "https://site.example/doc/page.html",
        fetch,
        tmp_path,
        AssetSpec(),
    )
    assert page.title == "The title" and len(page.assets) == 4
    assert page.failed == [
        {
            "url": "https://site.example/doc/f/gone.png",
            "error": "http_404: https://site.example/doc/f/gone.png: HTTP 404 (not found)",
        }
    ]
    html = page.html
    assert "<script" not in html and "<base" not in html and "srcset" not in html and "fig.webp" not in html
    assert 'src="data:image/png;base64,AAAA"' in html and 'src="https://site.example/doc/f/gone.png"' in html
    assert 'href="#top"' in html and 'href="https://site.example/doc/f/other.html"' in html
    assert 'src="clip.mp4"' in html, "video sources are not fetched"
    css = (tmp_path / "assets" / page.assets["https://cdn.example/s/a.css"]).read_text()
    assert css == f'body{{background:url("{page.assets["https://cdn.example/img/bg.png"]}")}}'
    assert f'url("assets/{page.assets["https://site.example/doc/f/tile.gif"]}")' in html
    with pytest.raises(MalformedResponse, match=r"https://site\.example/empty"):
        localize("<html><body>  </body></html>", "https://site.example/empty", fetch, tmp_path, AssetSpec())


# --- Wikipedia -------------------------------------------------------------------------------------------

KEEP = ["Photovoltaics", "Perovskite solar cell", "Solar (disambiguation)", "Solar thermal collector"]


def relevance_judge() -> ChatServer:
    """Keeps the titles of KEEP that the request lists, answering in a code fence as models do."""
    return ChatServer(
        responder=lambda request: Reply(
            "```json\n" + json.dumps([t for t in KEEP if f"\n{t}\n" in request.text() + "\n"]) + "\n```"
        )
    )


def wikipedia(server: RecordedServer, chat: ChatServer, out_dir, *overrides: str):
    seeds = (
        "[{title:'Solar cell',domain:Technology,instruction:'Articles about photovoltaic technology.'},"
        "{title:'Tour de France',domain:Sports,max_depth:0}]"
    )
    return compose(
        "wikipedia",
        out_dir,
        f"collect.collector.api_url={server.base}/w/api.php",
        f"collect.collector.article_url='{server.base}/wiki/{{title}}'",
        f"collect.collector.seeds={seeds}",
        "collect.collector.llm.model=test-model",
        f"collect.collector.llm.base_url={chat.url}",
        "collect.collector.llm.api_env_var=VLDOCIR_TEST_LLM_KEY",
        "+collect.collector.llm.backoff_s=0.01",
        *overrides,
    )


def test_wikipedia_seeds_links_relevance_filter_faults_and_resume(tmp_path, network_guard):
    out = tmp_path / "wikipedia"
    with RecordedServer("wikipedia") as server, relevance_judge() as chat:
        server.fail("parse Photovoltaics", Fault(429, retry_after="0"))
        server.fail("parse Perovskite solar cell", Fault(500))
        server.fail("parse Tour de France", Fault(malformed=True))
        server.fail("image PV_array.jpg", *[Fault(500)] * 4)  # past max_retries: the asset fails, the page is kept
        first = collect_from_config(wikipedia(server, chat, out))
        served = server.served()

        assert (first.fetched, first.already) == (3, 0)
        assert first.skipped == {"not_relevant": 2, "excluded_category": 1, "missing_page": 1}
        assert first.failed == {"malformed_response": 1}
        assert "page=Tour+de+France" in first.failures[0]["error"]
        assert server.unmatched == []
        index = rows(out)
        assert sorted(index) == ["wikipedia-24130", "wikipedia-28244", "wikipedia-38723112"]
        solar = index["wikipedia-28244"]
        assert (solar.title, solar.domain, solar.license, solar.meta["depth"]) == (
            "Solar cell",
            "Technology",
            "CC-BY-SA-4.0",
            0,
        )
        assert solar.url == f"{server.base}/wiki/Solar_cell" and index["wikipedia-24130"].meta == {
            "seed": "Solar cell",
            "depth": 1,
            "pageid": 24130,
        }
        html = assert_self_contained(out, solar)
        assert "srcset" not in html and "Record cell efficiencies" in html
        assert solar.n_assets == 4  # the image, site.styles, the stylesheet it imports, the bullet icon it uses
        css = next(p for p in (out / solar.path / "assets").glob("*.css") if "infobox" in p.read_text())
        assert 'url("' in css.read_text() and "/w/skins" not in css.read_text() and "load.php" not in css.read_text()
        # the image on another host was never fetched: the guard refused it, the page lists it as failed
        assert "upload.wikimedia.org" in network_guard
        assert [f["url"] for f in solar.failed_assets] == [
            "http://upload.wikimedia.org/wikipedia/commons/thumb/a/a8/Solar_panel_diagram.svg/250px-Solar_panel_diagram.svg.png"
        ]
        assert index["wikipedia-24130"].failed_assets[0]["error"].startswith("http_500")
        prompt = chat.requests[0].text()
        assert (
            "Articles about photovoltaic technology." in prompt
            and "Silicon" in prompt
            and "Help:Contents" not in prompt
        )
        assert len(chat.requests) == 1 and first.extra["llm"]["called"] == 1

        server.clear_log()
        second = collect_from_config(wikipedia(server, chat, out))
        assert (second.fetched, second.already, second.failed) == (1, 3, {})
        assert_resumed(server, served, {"parse Tour de France", "image Tour_map.png"})
        assert len(chat.requests) == 1, "the relevance filter's answers are replayed from the LLM cache"
        tour = rows(out)["wikipedia-19853"]
        assert (tour.domain, tour.meta["depth"]) == ("Sports", 0)
        assert_self_contained(out, tour)
    assert set(network_guard) == {"upload.wikimedia.org"}


def test_wikipedia_interrupted_run_resumes(tmp_path):
    out = tmp_path / "wikipedia"
    with RecordedServer("wikipedia") as server, relevance_judge() as chat:
        first = collect_from_config(wikipedia(server, chat, out, "collect.max_documents=2"))
        assert first.fetched == 2 and first.stopped_at_limit and len(rows(out)) == 2
        served = server.served()
        server.clear_log()
        second = collect_from_config(wikipedia(server, chat, out))
        assert (second.fetched, second.already) == (2, 2)
        assert sorted(rows(out)) == ["wikipedia-19853", "wikipedia-24130", "wikipedia-28244", "wikipedia-38723112"]
        assert_resumed(
            server,
            served,
            {
                "parse Perovskite solar cell",
                "image Perovskite_structure.png",
                "parse Solar (disambiguation)",
                "parse Solar thermal collector",
                "parse Tour de France",
                "image Tour_map.png",
            },
        )


def test_wikipedia_llm_failure_is_counted_and_retried(tmp_path):
    out = tmp_path / "wikipedia"
    with RecordedServer("wikipedia") as server:
        with ChatServer([Reply(status=500)] * 2) as chat:
            first = collect_from_config(wikipedia(server, chat, out, "collect.collector.llm.max_retries=1"))
        assert first.failed == {"llm_request_failed": 1} and first.fetched == 2  # Solar cell, Tour de France
        with relevance_judge() as chat:
            second = collect_from_config(wikipedia(server, chat, out))
        assert second.failed == {} and (second.fetched, second.already) == (2, 2) and len(chat.requests) == 1
        assert len(server.hits("parse Solar cell")) == 1, "the seed's answer is replayed to read its links again"


# --- arXiv -------------------------------------------------------------------------------------------------


def arxiv(server: RecordedServer, out_dir, *overrides: str):
    return compose(
        "arxiv",
        out_dir,
        "collect.collector.surveys=[2402.00001]",
        "collect.collector.categories=[astro-ph.GA]",
        "collect.collector.per_category=2",
        f"collect.collector.api_url={server.base}/api/query",
        f"collect.collector.oai_url={server.base}/oai",
        f"collect.collector.html_url='{server.base}/html/{{id}}'",
        f"collect.collector.abs_url='{server.base}/abs/{{id}}'",
        *overrides,
    )


def test_arxiv_surveys_categories_licences_html_only_faults_and_resume(tmp_path, network_guard):
    out = tmp_path / "arxiv"
    with RecordedServer("arxiv") as server:
        server.fail("oai 2301.00011", Fault(429, retry_after="0"))
        server.fail("html 2403.00021", Fault(500))
        server.fail("oai 2301.00013", Fault(malformed=True))
        first = collect_from_config(arxiv(server, out))
        served = server.served()

        assert (first.fetched, first.skipped) == (3, {"license_not_allowed": 2, "unknown_id": 1})
        assert (
            first.failed == {"malformed_response": 1} and "oai%3AarXiv.org%3A2301.00013" in first.failures[0]["error"]
        )
        assert server.unmatched == [], "only the bibliography is read: arXiv:2301.99999 in the abstract is no candidate"
        index = rows(out)
        assert {d: (r.domain, r.license) for d, r in index.items()} == {
            "arxiv-2402.00001": ("Artificial Intelligence", "CC-BY-4.0"),
            "arxiv-2301.00011": ("Artificial Intelligence", "CC-BY-4.0"),
            "arxiv-2403.00021": ("Astrophysics", "CC0-1.0"),
        }
        survey = index["arxiv-2402.00001"]
        assert survey.title == "A Survey of Retrieval over Visually Rich Documents"
        assert survey.url == f"{server.base}/abs/2402.00001" and survey.meta["origin"] == "survey"
        assert index["arxiv-2301.00011"].meta["origin"] == "survey:2402.00001"
        assert index["arxiv-2403.00021"].meta == {
            "arxiv_id": "2403.00021",
            "categories": ["astro-ph.GA"],
            "origin": "category:astro-ph.GA",
        }
        html = assert_self_contained(out, survey)
        assert survey.n_assets == 4 and not survey.failed_assets  # figure (via <base>), two stylesheets, the font
        assert 'href="https://arxiv.org/abs/2402.00001v2"' in html, "links stay links, made absolute"
        assert "html 2301.00012" not in served, "a licence that is not allowed is never fetched"

        server.clear_log()
        second = collect_from_config(arxiv(server, out))
        assert (second.fetched, second.already, second.failed) == (0, 3, {})
        assert second.skipped == {"license_not_allowed": 2, "unknown_id": 1, "no_html": 1}
        assert_resumed(server, served, {"oai 2301.00013", "html 2301.00013"})
    assert network_guard == []


def test_arxiv_interrupted_run_resumes(tmp_path):
    out = tmp_path / "arxiv"
    with RecordedServer("arxiv") as server:
        collect_from_config(arxiv(server, out, "collect.max_documents=1"))
        assert sorted(rows(out)) == ["arxiv-2402.00001"]
        served = server.served()
        server.clear_log()
        second = collect_from_config(arxiv(server, out))
        assert (second.fetched, second.already) == (2, 1)
        assert_resumed(
            server,
            served,
            {
                "oai 2301.00011",
                "html 2301.00011",
                "figure 2301.00011v1/x1.png",
                "oai 2301.00012",
                "oai 2301.00013",
                "html 2301.00013",
                "oai hep-th/9913999",
                "api cat:astro-ph.GA",
                "oai 2403.00021",
                "html 2403.00021",
                "figure 2403.00021v1/x1.png",
                "oai 2403.00022",
            },
        )


# --- PubMed Central ---------------------------------------------------------------------------------------


def pubmed(server: RecordedServer, out_dir, *overrides: str):
    return compose(
        "pubmed",
        out_dir,
        "collect.collector.date_from='2024-01-01'",
        "collect.collector.date_until='2024-01-31'",
        f"collect.collector.oa_url={server.base}/pmc/utils/oa/oa.fcgi",
        f"collect.collector.article_url='{server.base}/articles/{{pmcid}}/'",
        *overrides,
    )


def test_pubmed_date_range_licences_faults_and_resume_after_a_failed_listing(tmp_path, network_guard):
    out = tmp_path / "pubmed"
    with RecordedServer("pubmed") as server:
        server.fail("oa page 1", Fault(429, retry_after="0"))
        server.fail("article PMC10800004", Fault(500))
        server.fail("oa page 2", Fault(malformed=True))
        with pytest.raises(MalformedResponse, match=r"oa\.fcgi\?resumptionToken=4477812.*malformed response"):
            collect_from_config(pubmed(server, out))
        assert sorted(rows(out)) == ["pubmed-PMC10800001"], "what was collected before the error is kept"
        assert "resumptionToken" in json.loads((out / "summary.json").read_text())["error"]
        served = server.served()

        server.clear_log()
        second = collect_from_config(pubmed(server, out))
        assert (second.fetched, second.already) == (2, 1)
        assert second.skipped == {"license_not_allowed": 1, "retracted": 1, "no_domain": 1}
        assert_resumed(
            server,
            served,
            {"oa page 2", "article PMC10800004", "figure PMC10800004", "article PMC10800005", "figure PMC10800005"},
        )
        assert [h.status for h in server.hits("article PMC10800004")] == [500, 200]
        index = rows(out)
        assert {d: (r.domain, r.license) for d, r in index.items()} == {
            "pubmed-PMC10800001": ("Medical Reports", "CC-BY"),
            "pubmed-PMC10800004": ("Surgical Case Reports", "CC-BY"),
            "pubmed-PMC10800005": ("Bioinformatics", "CC0"),
        }
        case = index["pubmed-PMC10800004"]
        assert case.title == "Laparoscopic management of a rare internal hernia: a case report", "from citation_title"
        assert case.meta["journal"] == "Int J Surg Case Rep" and case.url == f"{server.base}/articles/PMC10800004/"
        assert case.n_assets == 2 and "CRP (mg/L)" in assert_self_contained(out, case)
        summary = json.loads((out / "summary.json").read_text())
        assert summary["fetched"] == 2 and summary["skipped"]["retracted"] == 1 and summary["error"] is None
    assert network_guard == []


def test_pubmed_interrupted_run_resumes_and_api_errors_name_the_url(tmp_path):
    out = tmp_path / "pubmed"
    with RecordedServer("pubmed") as server:
        collect_from_config(pubmed(server, out, "collect.max_documents=1"))
        served = server.served()
        server.clear_log()
        second = collect_from_config(pubmed(server, out))
        assert (second.fetched, second.already) == (2, 1)
        assert_resumed(
            server,
            served,
            {"oa page 2", "article PMC10800004", "figure PMC10800004", "article PMC10800005", "figure PMC10800005"},
        )
        with pytest.raises(
            CollectError, match=r"oa\.fcgi\?from=2024-12-01&until=2024-12-31: API error badArgument"
        ) as error:
            collect_from_config(
                pubmed(
                    server,
                    tmp_path / "future",
                    "collect.collector.date_from='2024-12-01'",
                    "collect.collector.date_until='2024-12-31'",
                )
            )
        assert error.value.reason == "api_badArgument"


# --- SEC EDGAR --------------------------------------------------------------------------------------------


def sec(server: RecordedServer, out_dir, *overrides: str):
    b = server.base
    return compose(
        "sec",
        out_dir,
        "collect.http.min_interval_s=0.001",
        "collect.collector.max_requests_per_s=1000",
        f"collect.collector.tickers_url={b}/files/company_tickers.json",
        f"collect.collector.submissions_url='{b}/submissions/CIK{{cik}}.json'",
        f"collect.collector.submissions_file_url='{b}/submissions/{{name}}'",
        f"collect.collector.document_url='{b}/Archives/edgar/data/{{cik}}/{{accession}}/{{document}}'",
        *overrides,
    )


def test_sec_latest_def14a_per_company_user_agent_faults_and_resume(tmp_path, network_guard):
    out = tmp_path / "sec"
    with RecordedServer("sec") as server:
        server.fail("submissions 100001", Fault(429, retry_after="0"))
        server.fail("def14a 100003", Fault(500))
        server.fail("submissions 100004", Fault(malformed=True))
        first = collect_from_config(sec(server, out))
        served = server.served()
        assert (first.fetched, first.failed) == (3, {"malformed_response": 1})
        assert "CIK0000100004.json: malformed response" in first.failures[0]["error"]
        assert {h.headers["user-agent"] for h in server.hits()} == {AGENT}
        assert server.unmatched == [] and "submissions 100002 page 1" in served
        index = rows(out)
        assert {d: (r.meta["accession"], r.meta["filing_date"]) for d, r in index.items()} == {
            "sec-100001": ("0000100001-24-000019", "2024-03-28"),  # the latest DEF 14A, not the DEFA14A
            "sec-100002": ("0000100002-24-000412", "2024-03-12"),  # from the older filings page
            "sec-100003": ("0000950170-24-041122", "2024-04-05"),
        }  # one document for its two tickers
        contoso = index["sec-100003"]
        assert (contoso.title, contoso.domain) == ("Contoso Industries Corp DEF 14A (2024-04-05)", "Financial Reports")
        html = assert_self_contained(out, contoso)
        assert "Analysis\u00a0\u00a7 4.2" in html and "iso-8859-1" not in html.lower(), (
            "Latin-1 filing rewritten as UTF-8"
        )

        server.clear_log()
        second = collect_from_config(sec(server, out))
        assert (second.fetched, second.already, second.skipped) == (0, 3, {"no_matching_form": 1})
        assert_resumed(server, served, {"submissions 100004"})
    assert network_guard == []


def test_sec_run_killed_between_folder_and_index_row_resumes(tmp_path, monkeypatch):
    out = tmp_path / "sec"
    real_add = DocumentIndex.add

    def add_then_die(self, row):
        if len(self) == 1:
            raise KeyboardInterrupt  # the process is stopped after sec-100002's folder was renamed into place
        real_add(self, row)

    with RecordedServer("sec") as server:
        monkeypatch.setattr(DocumentIndex, "add", add_then_die)
        with pytest.raises(KeyboardInterrupt):
            collect_from_config(sec(server, out))
        monkeypatch.setattr(DocumentIndex, "add", real_add)
        assert sorted(rows(out)) == ["sec-100001"] and (out / "sec-100002" / "index.html").is_file()
        served = server.served()
        server.clear_log()
        second = collect_from_config(sec(server, out))
        assert (second.fetched, second.already) == (2, 1) and sorted(rows(out)) == [
            "sec-100001",
            "sec-100002",
            "sec-100003",
        ]
        assert_resumed(server, served, {"submissions 100003", "def14a 100003", "logo 100003", "submissions 100004"})


def test_sec_requires_a_contact_user_agent_and_its_rate_limit(tmp_path):
    with RecordedServer("sec") as server:
        for override, message in (
            ("collect.http.user_agent=null", "user_agent: required"),
            ("collect.http.user_agent=vldocir-collect/0.1", "SEC EDGAR requires a User-Agent"),
            ("collect.http.per_host=true", "at most 1000 requests/s over all its hosts"),
        ):
            with pytest.raises(ConfigError, match=message):
                collect_from_config(sec(server, tmp_path / "sec", override))
        with pytest.raises(ConfigError, match=r"min_interval_s >= 0\.1"):
            collect_from_config(sec(server, tmp_path / "sec", "collect.collector.max_requests_per_s=10"))
        with pytest.raises(ConfigError, match="ticker 'NOPE'"):
            collect_from_config(sec(server, tmp_path / "sec", "collect.collector.companies=[EXMP,NOPE]"))
        assert server.hits("submissions 100001") == [], "nothing is collected before the checks pass"


# --- config and entry point ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["wikipedia", "arxiv", "pubmed", "sec"])
def test_each_source_config_composes_and_points_at_the_real_apis(tmp_path, source):
    from hydra.utils import instantiate

    node = compose(source, tmp_path)
    collector = instantiate(node.collector)
    assert collector.source == source and node.source == source
    urls = [str(v) for k, v in node.collector.items() if str(k).endswith("_url")]
    assert urls and all(u.startswith("https://") for u in urls), (
        "defaults name the real endpoints (tests override them)"
    )
    assert isinstance(instantiate(node.http), HttpSpec) and isinstance(instantiate(node.assets), AssetSpec)


def test_no_request_leaves_loopback(tmp_path, network_guard):
    """The guard itself: a collector pointed at the real API is refused before any packet leaves (at
    the name lookup of the hosts check), and a request to such a host is one lookup, not retried."""
    out = tmp_path / "sec"
    from hydra.utils import instantiate

    spec = HttpSpec(user_agent=AGENT, min_interval_s=0.1, per_host=False, max_retries=3, trust_env=False)
    with pytest.raises(ConfigError, match=r"collect\.collector\.tickers_url: host www\.sec\.gov does not resolve"):
        collect(instantiate(compose("sec", out).collector), out, spec)
    assert network_guard == ["www.sec.gov"] and not out.exists()
    with PoliteClient(spec) as http, pytest.raises(FetchError, match=r"host www\.sec\.gov does not resolve") as error:
        http.get("https://www.sec.gov/files/company_tickers.json")
    assert error.value.reason == "connection" and http.stats["retries"] == 0


@pytest.mark.slow
def test_collect_py_refuses_without_a_user_agent_and_refuses_secret_overrides(tmp_path):
    env = {**os.environ, "VLDOCIR_LOG_DIR": str(tmp_path / "logs")}
    env.pop("VLDOCIR_SEC_USER_AGENT", None)
    done = subprocess.run(
        [sys.executable, "-m", "vldocir.apps.collect", "collect=sec", f"collect.out_dir={tmp_path / 'sec'}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "collect error: collect.http.user_agent: required" in done.stderr
    assert not (tmp_path / "sec").exists()
    done = subprocess.run(
        [sys.executable, "-m", "vldocir.apps.collect", "collect=sec", "+collect.api_key=sekrit-value"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "sekrit-value" not in done.stderr + done.stdout

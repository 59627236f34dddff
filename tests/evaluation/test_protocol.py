"""A benchmark's own protocol (``dataset.protocol``): per-subset evaluation, the main score, the console.

a) the protocol block parsed, bad blocks refused in one line;
b) :func:`summarise_protocol` on a hand-made two-language frame: per-language Macro and main score,
   their mean, structure counts per language, the pooled view (all by hand);
c) the console: the protocol line, one row per language and the mean; without a protocol, the
   report is byte for byte what it was before protocols existed;
d) a label outside the six structures (``multi_page_docs_unknown``) left out of every
   structure-balanced mean, counted by Micro, and named in a note;
e) the pipeline on the small graded two-language benchmark of ``test_scope_language``.
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
import pytrec_eval

from helpers import evaluate
from test_scope_language import QUERIES, write_graded_bench
from vldocir import store
from vldocir.errors import ConfigError
from vldocir.evaluation.aggregate import summarise
from vldocir.evaluation.console import format_report
from vldocir.evaluation.metrics import metric_columns
from vldocir.evaluation.protocol import Protocol, summarise_protocol, with_main_k
from vldocir.evaluation.significance import aggregate_weights

# ----------------------------------------------------------------------------------------------
# a) the protocol block
# ----------------------------------------------------------------------------------------------

BLOCK = {"name": "mteb X", "main_score": "mrr@3", "subsets": "language", "scope": "document", "summary": "test split"}


def test_the_block_is_parsed():
    protocol = Protocol.from_config(BLOCK)
    assert protocol == Protocol("mteb X", "mrr@3", "language", "document", "test split") and protocol.main_k == 3
    assert Protocol.from_config(None) is None
    assert Protocol.from_config({"name": "x", "main_score": "ndcg@10"}).scope == "corpus"
    assert with_main_k([3, 5], Protocol.from_config({"name": "x", "main_score": "ndcg@10"})) == [3, 5, 10]
    assert with_main_k([5, 3], None) == [5, 3] and with_main_k([5, 3], protocol) == [5, 3]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"main_score": "map@5"}, r"main_score='map@5' must be <metric>@<k> with metric in ndcg \| recall \| mrr"),
        ({"main_score": "ndcg@0"}, r"main_score='ndcg@0' must be"),
        ({"subsets": "text"}, r"subsets='text' must be null \(one query set\) or a queries column: language"),
        ({"scope": "page"}, r"scope='page' must be one of corpus, document"),
        ({"split": "test"}, r"unknown key\(s\) split; it takes name, main_score"),
        ({"name": ""}, r"dataset.protocol.name must name whose protocol it is"),
    ],
)
def test_a_bad_block_is_refused_in_one_line(change, message):
    with pytest.raises(ConfigError, match=message) as raised:
        Protocol.from_config(BLOCK | change)
    assert "\n" not in str(raised.value)


# ----------------------------------------------------------------------------------------------
# b) per-subset summary on a hand-made frame
# ----------------------------------------------------------------------------------------------

# (query, structure, language, value of every metric, mrr@3): q1-q3 in both languages, q4 French only.
ROWS = [
    ("q1", "page_single", "en", 1, 1.0),
    ("q2", "page_single", "en", 0, 0.5),
    ("q3", "doc_far", "en", 1, 0.0),
    ("q1", "page_single", "fr", 1, 1.0),
    ("q2", "page_single", "fr", 1, 1 / 3),
    ("q3", "doc_far", "fr", 0, 0.0),
    ("q4", "cross_doc", "fr", 1, 1.0),
]


def frame_of(rows, k: int = 3) -> pd.DataFrame:
    records = []
    for query, structure, language, value, mrr in rows:
        record = {
            "query_id": f"{query}-{language}",
            "evidence_structure": structure,
            "source": "wikipedia",
            "domain": "Arts",
            "generator": "gen",
            "evidence_type": "text",
            "language": language,
            "n_evidence_pages": 1,
            "n_evidence_docs": 1,
            "in_run": True,
            f"pages_found@{k}": value,
            f"docs_found@{k}": value,
            f"mrr@{k}": mrr,
        }
        records.append(record | {c: float(value) for c in metric_columns([k])})
    return pd.DataFrame(records)


def test_each_language_is_its_own_query_set():
    metrics = summarise_protocol(frame_of(ROWS), [3], Protocol.from_config(BLOCK), pooled=True, run_scope="corpus")
    section = metrics["protocol"]
    # en: page_single (1 + 0) / 2, doc_far 1 -> Macro 75, Micro 2/3; MRR@3 (1 + 1/2 + 0) / 3 = 50.
    # fr: page_single 1, doc_far 0, cross_doc 1 -> Macro 2/3, Micro 3/4; MRR@3 (1 + 1/3 + 0 + 1) / 4 = 58.33.
    en, fr = section["per_subset"]["en"], section["per_subset"]["fr"]
    assert (en["n_queries"], fr["n_queries"]) == (3, 4)
    assert en["mrr@3"] == pytest.approx(50.0) and fr["mrr@3"] == pytest.approx(100 * 7 / 12, abs=1e-6)
    assert en["aggregates"]["macro"]["recallall@3"] == pytest.approx(75.0)
    assert fr["aggregates"]["macro"]["recallall@3"] == pytest.approx(200 / 3, abs=1e-6)
    assert fr["aggregates"]["micro"]["ndcgall@3"] == pytest.approx(75.0)
    # the mean over the two languages, everywhere; the main score computed from the rows
    assert section["mean"]["mrr@3"] == pytest.approx((50 + 700 / 12) / 2, abs=1e-6)  # 54.1667
    assert section["mean"]["n_queries"] == 3.5
    for aggregate in ("macro", "micro"):
        assert metrics["aggregates"][aggregate]["recallall@3"] == pytest.approx(
            (en["aggregates"][aggregate]["recallall@3"] + fr["aggregates"][aggregate]["recallall@3"]) / 2, abs=1e-6
        )
    assert metrics["aggregates"]["macro"]["recallall@3"] == pytest.approx((75 + 200 / 3) / 2, abs=1e-5)  # 70.83
    # per structure: the mean of the per-language means, and the queries per language (not pooled)
    structure = metrics["breakdowns"]["structure"]
    assert list(structure) == ["page_single", "doc_far", "cross_doc"]
    assert structure["page_single"]["recallall@3"] == pytest.approx(75.0) and structure["page_single"]["n_queries"] == 2
    assert structure["doc_far"]["recallall@3"] == pytest.approx(50.0) and structure["doc_far"]["n_queries"] == 1
    assert structure["cross_doc"]["recallall@3"] == pytest.approx(100.0)  # French only
    assert metrics["n_queries"] == 7 and metrics["empty"]["structures"] == ["page_multi", "doc_adjacent", "doc_near"]
    assert section["scope"] == "document" and section["run_scope"] == "corpus" and section["main_score"] == "mrr@3"
    # the pooled view: all seven as one set. Macro: page_single 3/4, doc_far 1/2, cross_doc 1 -> 75; Micro 5/7
    assert metrics["pooled"]["aggregates"]["macro"]["recallall@3"] == pytest.approx(75.0)
    assert metrics["pooled"]["aggregates"]["micro"]["recallall@3"] == pytest.approx(500 / 7, abs=1e-5)
    assert "pooled" not in summarise_protocol(frame_of(ROWS), [3], Protocol.from_config(BLOCK))
    json.dumps(metrics)  # metrics.json can hold it


def test_one_query_set_is_summarise_plus_the_section():
    frame = frame_of(ROWS)
    protocol = Protocol.from_config(BLOCK | {"subsets": None})
    metrics = summarise_protocol(frame, [3], protocol)
    assert {k: v for k, v in metrics.items() if k != "protocol"} == summarise(frame, [3])
    assert metrics["protocol"]["per_subset"] is None
    assert metrics["protocol"]["mean"]["mrr@3"] == pytest.approx(100 * (1 + 0.5 + 1 + 1 / 3 + 1) / 7, abs=1e-6)


# ----------------------------------------------------------------------------------------------
# c) the console
# ----------------------------------------------------------------------------------------------


def test_the_console_names_the_protocol_and_prints_a_row_per_language():
    metrics = summarise_protocol(frame_of(ROWS), [3], Protocol.from_config(BLOCK), pooled=True, run_scope="corpus")
    report = format_report(metrics, "x", reused=False)
    assert (
        "Protocol: mteb X; main score mrr@3 = 54.17 (the mean over each language's queries, then over the 2 languages)"
    ) in report
    assert "this run's is corpus: the numbers are not the protocol's (run setting=doc_scope" in report
    assert "the mean over the 2 languages, each its own query set of 3-4 queries (7 in all)" in report
    lines = report.splitlines()
    by_language = lines[lines.index("By language (percent)") + 1 :][:5]
    assert by_language[2].split() == ["en", "3", "50.00", "75.00", "75.00"]
    assert by_language[3].split() == ["fr", "4", "58.33", "66.67", "66.67"]
    assert by_language[4].split() == ["mean", "3.5", "54.17", "70.83", "70.83"]
    structures = lines[lines.index("RecallAll@k by evidence structure (the mean over the languages)") + 1 :]
    assert "n_queries per language" in structures[0] and structures[2].split() == ["page_single", "2", "75.00"]
    assert "RecallAll@k by language (structure-balanced)" not in report  # the rows per language say it
    title = "Pooled view (eval.pooled=true): all 7 queries as one query set, every language's queries together"
    pooled = lines[lines.index(title) :]
    assert pooled[3].split() == ["Micro", "71.43", "71.43"]


GOLDEN = "\n".join(
    [
        "",
        "Headline metrics (percent), 5 queries, 1 absent from the run (scored 0)",
        "              ndcgall@3  ndcgall@5  recallall@3  recallall@5",
        "Macro             20.83      41.67        20.83        41.67",
        "Micro             25.00      50.00        25.00        50.00",
        "Source Macro      20.31      40.62        20.31        40.62",
        "Domain Macro      20.83      41.67        20.83        41.67",
        "",
        "RecallAll@k by evidence structure",
        "                    n_queries  recallall@3  recallall@5",
        "evidence_structure                                     ",
        "page_single                 2        18.75        37.50",
        "doc_far                     2        43.75        87.50",
        "cross_doc                   1         0.00         0.00",
        "No queries for: page_multi, doc_adjacent, doc_near; Macro is"
        " the mean over the 3 structure(s) present (page_single, doc_far, cross_doc)",
        "",
        "RecallAll@k by language (structure-balanced)",
        "          n_queries  recallall@3  recallall@5",
        "language                                     ",
        "en                2        31.25        62.50",
        "fr                3        20.83        41.67",
        "",
        "Run directory: results/x  (run reused from the store)",
        "",
    ]
)


def test_without_a_protocol_the_report_is_as_before():
    # GOLDEN is format_report's output for this frame before protocols existed (commit 1d62b78).
    values = [("page_single", "en", 0.25), ("page_single", "fr", 0.5), ("doc_far", "en", 1.0)]
    values += [("cross_doc", "fr", 0.0), ("doc_far", "fr", 0.75)]
    records = []
    for i, (structure, language, value) in enumerate(values):
        record = {
            "query_id": f"q{i}",
            "evidence_structure": structure,
            "source": "wikipedia" if i % 2 else "arxiv",
            "domain": "Arts",
            "generator": "gen",
            "evidence_type": "text",
            "language": language,
            "n_evidence_pages": 2,
            "n_evidence_docs": 1,
            "in_run": i != 3,
        }
        for k in (3, 5):
            record |= {f"pages_found@{k}": 1, f"docs_found@{k}": 1}
        records.append(record | {c: value * (1 if c.endswith("@5") else 0.5) for c in metric_columns([3, 5])})
    metrics = summarise(pd.DataFrame(records), [3, 5])
    assert "protocol" not in metrics
    assert format_report(metrics, "results/x", reused=True) == GOLDEN


# ----------------------------------------------------------------------------------------------
# d) a label outside the six structures
# ----------------------------------------------------------------------------------------------


def test_multi_page_docs_unknown_is_left_out_of_structure_balanced_means():
    rows = [("a", "page_single", "en", 1, 1.0), ("b", "page_single", "en", 0, 0.0)]
    rows += [("c", "multi_page_docs_unknown", "en", 1, 1.0), ("d", "multi_page_docs_unknown", "en", 1, 0.5)]
    rows += [("e", "multi_page_docs_unknown", "en", 1, 1.0)]
    frame = frame_of(rows)
    metrics = summarise(frame, [3])
    # Macro, source and domain Macro, the language breakdown: page_single only, (1 + 0) / 2 = 50;
    # Micro: all five, 4/5 = 80.
    for aggregate in ("macro", "source_macro", "domain_macro"):
        assert metrics["aggregates"][aggregate]["recallall@3"] == pytest.approx(50.0), aggregate
    assert metrics["aggregates"]["micro"]["recallall@3"] == pytest.approx(80.0)
    assert metrics["breakdowns"]["language"]["en"]["recallall@3"] == pytest.approx(50.0)
    assert metrics["breakdowns"]["language"]["en"]["n_queries"] == 2
    assert metrics["breakdowns"]["structure"]["multi_page_docs_unknown"]["n_queries"] == 3
    assert metrics["macro_structures"] == ["page_single"]
    # not one of the multi-page structures of the all/partial/none split
    assert metrics["evidence_completeness"]["page"]["@3"] == {
        "all_multi_page": dict.fromkeys(["all", "partial", "none"])
    }
    # the bootstrap's weights are the same aggregates: no weight on the unknown label
    for aggregate in ("macro", "source_macro"):
        weights = aggregate_weights(frame, aggregate)
        assert weights[2:].sum() == 0 and weights @ frame["recallall@3"] * 100 == pytest.approx(50.0)
    report = format_report(metrics, "x", reused=False)
    assert (
        "3 queries labelled multi_page_docs_unknown are left out of the structure Macro (and of every "
        "structure-balanced mean); Micro counts them"
    ) in report


# ----------------------------------------------------------------------------------------------
# e) the pipeline on the small graded two-language benchmark
# ----------------------------------------------------------------------------------------------

PROTOCOL = "+dataset.protocol={name:mteb test,main_score:ndcg@5,subsets:language,scope:corpus,summary:two languages}"


def test_the_pipeline_follows_the_protocol(isolated_paths, capsys):
    bench = write_graded_bench(isolated_paths / "graded")
    source = (f"dataset.source={bench}", "dataset.name=graded-two-lang")
    plain = evaluate(*source)
    out = evaluate(*source, PROTOCOL, "eval.ks=[3,10]", "eval.pooled=true")
    metrics = out.metrics
    assert metrics["ks"] == [3, 5, 10]  # the main score's k added
    section = metrics["protocol"]
    assert set(section["per_subset"]) == {"en", "fr", "unknown"}  # q10 states no language
    assert {s: r["n_queries"] for s, r in section["per_subset"].items()} == {"en": 5, "fr": 4, "unknown": 1}
    # nDCG@5 per language from pytrec_eval on the stored run (graded qrels), then the mean over languages
    stored = pq.read_table(out.entry / store.RUN_FILE).to_pandas()
    as_dict = {
        q: {p: float(1000 - r) for p, r in zip(g["page_id"], g["rank"], strict=True)}
        for q, g in stored.groupby("query_id")
    }
    graded = {q: dict(g) for q, (_, _, _, g) in QUERIES.items()}
    ndcg5 = {
        q: m["ndcg_cut_5"] for q, m in pytrec_eval.RelevanceEvaluator(graded, {"ndcg_cut.5"}).evaluate(as_dict).items()
    }
    ndcg5 |= {q: 0.0 for q in QUERIES if q not in ndcg5}
    language = {q: lang or "unknown" for q, (_, lang, _, _) in QUERIES.items()}
    by_language = {
        lang: 100 * sum(v for q, v in ndcg5.items() if language[q] == lang) / n
        for lang, n in {"en": 5, "fr": 4, "unknown": 1}.items()
    }
    for lang, value in by_language.items():
        assert section["per_subset"][lang]["ndcg@5"] == pytest.approx(value, abs=1e-6), lang
    assert section["mean"]["ndcg@5"] == pytest.approx(sum(by_language.values()) / 3, abs=1e-6)
    # the pooled view is today's evaluation of the same run
    assert metrics["pooled"]["aggregates"] == plain.metrics["aggregates"]
    assert metrics["aggregates"]["macro"]["recallall@10"] == pytest.approx(
        sum(r["aggregates"]["macro"]["recallall@10"] for r in section["per_subset"].values()) / 3, abs=1e-5
    )
    assert out.manifest["store"]["eval_key"] != plain.manifest["store"]["eval_key"]
    report = capsys.readouterr().out
    assert f"Protocol: mteb test; main score ndcg@5 = {section['mean']['ndcg@5']:.2f}" in report
    assert "By language (percent)" in report and "Pooled view (eval.pooled=true)" in report

    french = evaluate(*source, PROTOCOL, "eval.language=fr")  # one language alone still works
    assert french.metrics["language"] == "fr" and list(french.metrics["protocol"]["per_subset"]) == ["fr"]
    assert french.metrics["protocol"]["mean"]["ndcg@5"] == pytest.approx(by_language["fr"], abs=1e-6)
    report = capsys.readouterr().out  # one language: reported as one query set
    assert "Headline metrics (percent), 4 queries in language fr" in report and "By language" not in report
    assert f"main score ndcg@5 = {by_language['fr']:.2f} (the mean over the 4 queries of language fr)" in report


def test_a_protocol_the_benchmark_cannot_follow_is_refused_before_any_search(isolated_paths):
    bench = write_graded_bench(isolated_paths / "graded")
    source = (f"dataset.source={bench}", "dataset.name=graded-two-lang")
    with pytest.raises(ConfigError, match=r"dataset.protocol.main_score=ndcg@50 needs k=50 but depth=20"):
        evaluate(*source, PROTOCOL.replace("ndcg@5", "ndcg@50"), "depth=20")
    with pytest.raises(ConfigError, match=r"eval.intervals=true: the intervals of a mean over language query sets"):
        evaluate(*source, PROTOCOL, "eval.intervals=true")
    assert not (isolated_paths / "results" / "runs").exists()

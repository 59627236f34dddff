"""DOM-BM25 over the real bm25s index, through the artifact cache."""

from __future__ import annotations

import pytest

from vldocir.cache import ArtifactCache
from vldocir.errors import ConfigError
from vldocir.retrieval.bm25 import BM25Retriever


def _fact_queries(bench, n=20):
    """Queries that copy a page's heading and first fact sentence: that page must come first."""
    pages = bench.pages.sample(n, random_state=0)
    queries = {f"probe-{row.page_id}": row.dom_text.split(". ")[0] for row in pages.itertuples()}
    return queries, {f"probe-{p}": p for p in pages.page_id}


def test_page_with_the_exact_fact_ranks_first(small_bench, tmp_path):
    queries, expected = _fact_queries(small_bench)
    run = BM25Retriever().retrieve(small_bench, queries, depth=10, cache=ArtifactCache(tmp_path))
    top = run.to_pandas().query("rank == 1").set_index("query_id")["page_id"]
    hits = sum(top.get(q) == page for q, page in expected.items())
    assert hits >= 0.9 * len(expected), f"only {hits}/{len(expected)} probe pages ranked first"


def test_run_is_ranked_and_deterministic(small_bench, tmp_path):
    queries = dict(zip(small_bench.queries.query_id, small_bench.queries.text, strict=True))
    run = BM25Retriever().retrieve(small_bench, queries, depth=25, cache=ArtifactCache(tmp_path)).to_pandas()
    for _, group in run.groupby("query_id"):
        assert list(group["rank"]) == list(range(1, len(group) + 1))
        assert group["score"].is_monotonic_decreasing
        assert len(group) <= 25 and group["page_id"].is_unique
    again = BM25Retriever(query_batch_size=7).retrieve(small_bench, queries, depth=25, cache=ArtifactCache(tmp_path))
    assert again.to_pandas().equals(run), "results must not depend on the query batch size"


def test_index_is_built_once_per_key(small_bench, tmp_path):
    cache = ArtifactCache(tmp_path)
    queries = {"q": "population"}
    BM25Retriever().retrieve(small_bench, queries, 5, cache)
    BM25Retriever().retrieve(small_bench, queries, 5, cache)
    BM25Retriever(k1=0.9).retrieve(small_bench, queries, 5, cache)
    assert [e["status"] for e in cache.events] == ["miss", "hit", "miss"]
    assert len(list((tmp_path / "bm25-index").iterdir())) == 2
    overwrite = ArtifactCache(tmp_path, policy="overwrite")
    BM25Retriever().retrieve(small_bench, queries, 5, overwrite)
    assert overwrite.events[0]["status"] == "overwrite"


def test_missing_text_column_says_what_to_do(small_bench, tmp_path):
    with pytest.raises(ConfigError, match=r"'ocr_text', and benchmark .* has it for no page: run the OCR stage first"):
        BM25Retriever(text_field="ocr_text").retrieve(small_bench, {"q": "x"}, 5, ArtifactCache(tmp_path))


def test_query_without_known_terms_is_absent_from_the_run(small_bench, tmp_path):
    run = BM25Retriever().retrieve(small_bench, {"q": "qqqzzzxxy"}, 5, ArtifactCache(tmp_path))
    assert run.num_rows == 0


# --- deterministic rankings whatever the backend ----------------------------------------------------


@pytest.fixture(scope="module")
def tied_bench(small_bench, tmp_path_factory):
    """The small benchmark with only five distinct page texts: hundreds of pages tie on every query."""
    import pyarrow as pa

    from vldocir.data.benchmark import load_benchmark, write_benchmark

    texts = [
        "solar panel output per year",
        "solar output in the quarterly report",
        "revenue and net income",
        "income of the patient cohort",
        "panel of the report",
    ]
    pages = small_bench.arrow("pages")
    dom = pa.array([texts[i % len(texts)] for i in range(pages.num_rows)], pa.string())
    pages = pages.set_column(pages.schema.get_field_index("dom_text"), "dom_text", dom)
    tables = {name: small_bench.arrow(name) for name in ("documents", "elements", "queries", "qrels")}
    images = small_bench.root  # image paths are relative to the benchmark root: write next to it
    root = tmp_path_factory.mktemp("tied") / "tied"
    write_benchmark(root, {**tables, "pages": pages}, {"name": "tied", "version": "test"})
    if (images / "pages").is_dir():
        import shutil

        shutil.copytree(images / "pages", root / "pages")
    return load_benchmark(root)


def _oracle(bench, queries, depth, cache):
    """Every page scored (k = all pages, so no cut-off to break ties), then score desc, page_id asc."""
    retriever = BM25Retriever(backend="numpy")
    model, tokenizer, page_ids = retriever._index(bench, cache)
    out = {}
    for qid, text in queries.items():
        tokens = tokenizer.tokenize([text], update_vocab=False, return_as="ids", show_progress=False)
        docs, scores = model.retrieve(tokens, k=len(page_ids), show_progress=False)
        ranked = sorted(
            ((float(s), page_ids[d]) for d, s in zip(docs[0], scores[0], strict=True) if s > 0),
            key=lambda x: (-x[0], x[1]),
        )
        out[qid] = [p for _, p in ranked[:depth]]
    return out


@pytest.mark.parametrize(
    "options",
    [
        dict(backend="numba", n_threads=2),
        dict(backend="numba", n_threads=1, query_batch_size=7),
        dict(backend="numpy", n_threads=0),
        dict(backend="numpy", n_threads=2, query_batch_size=1),
        dict(backend="numba", n_threads=-1, tie_margin=0),
        dict(backend="auto"),
    ],
)
def test_rankings_do_not_depend_on_backend_threads_or_batch_size(tied_bench, tmp_path, options):
    queries = {"q1": "solar output", "q2": "income report", "q3": "panel", "q4": "revenue of the panel"}
    cache = ArtifactCache(tmp_path)
    expected = _oracle(tied_bench, queries, 10, cache)
    retriever = BM25Retriever(**options)
    run = retriever.retrieve(tied_bench, queries, 10, cache).to_pandas()
    got = {q: list(g.sort_values("rank").page_id) for q, g in run.groupby("query_id")}
    assert got == expected
    assert (
        retriever.stats["search"]["refetched_for_ties"] > 0
    )  # hundreds of tied pages: the cut-off needed a wider fetch
    assert retriever.stats["search"]["queries_per_s"] > 0


def test_backend_is_checked():
    with pytest.raises(ValueError, match="backend must be one of auto, numba, numpy"):
        BM25Retriever(backend="rust")


def test_auto_backend_compiles_numba_only_for_searches_that_repay_it(tied_bench, tmp_path):
    from vldocir.retrieval.bm25 import NUMBA_MIN_WORK, choose_backend

    assert choose_backend("auto", 142, 311) == "numpy"  # the mini benchmark: compiling would cost more than it saves
    assert choose_backend("auto", 271_760, 388_548) == "numba"  # the paper
    assert choose_backend("auto", 1, int(NUMBA_MIN_WORK)) == "numba"
    assert choose_backend("auto", 1, int(NUMBA_MIN_WORK) - 1) == "numpy"
    assert choose_backend("numba", 1, 1) == "numba" and choose_backend("numpy", 10**6, 10**6) == "numpy"
    retriever = BM25Retriever()  # the default
    retriever.retrieve(tied_bench, {"q": "solar output"}, 10, ArtifactCache(tmp_path))
    assert retriever.stats["search"]["backend"] == "numpy"  # the resolved backend is what the manifest records

"""Every retriever and reranker config runs end to end through the real pipeline, on one document of
the shipped mini benchmark (6 pages, 13 queries): the models from tiny offline checkpoints of their families
(tests/tiny_models.py), loaded through the config's own encoder and `from_pretrained` path with
only what a user with a local copy sets (`checkpoint.local_path`, the remote-code opt-in) and
CPU-friendly sizes changed. The configs are the files in conf/retriever/ and conf/reranker/: a new
one fails here until tiny_models.RETRIEVERS / RERANKERS name a checkpoint for its model.

tiny_models is imported in the tests, not at collection: it imports colpali-engine (seconds).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hydra.utils import instantiate

from helpers import CONFIG_DIR, compose_cfg, evaluate, mini_subset, tiny_overrides
from vldocir import store
from vldocir.cache import ArtifactCache
from vldocir.data.benchmark import load_benchmark

RETRIEVER_CONFIGS = sorted(p.stem for p in (CONFIG_DIR / "retriever").glob("*.yaml"))
RERANKER_CONFIGS = sorted(p.stem for p in (CONFIG_DIR / "reranker").glob("*.yaml"))
KS = (1, 3)
DEPTH = 5
EVAL = [f"eval.ks=[{','.join(map(str, KS))}]", f"depth={DEPTH}"]


@pytest.fixture(scope="module")
def one_doc(tmp_path_factory) -> tuple[Path, int, int]:
    """A benchmark of one mini document (images inline), its page and query counts."""
    root = mini_subset(tmp_path_factory.mktemp("one-doc") / "b", ["arxiv-00003"], name="mini-one-doc")
    pages, queries = (pq.read_metadata(root / f"{t}.parquet").num_rows for t in ("pages", "queries"))
    assert (pages, queries) == (6, 13)
    return root, pages, queries


def _model_node(cfg, group: str):
    """The config node holding the model's ``checkpoint`` (``<group>.model.encoder`` or ``<group>.model``),
    its dotted key; (None, None) for a retriever without a model (BM25, a run file)."""
    model = cfg[group].model
    for node, key in ((model.get("encoder"), f"{group}.model.encoder"), (model, f"{group}.model")):
        if node is not None and "checkpoint" in node:
            return node, key
    return None, None


def test_the_tiny_checkpoint_tables_name_only_existing_configs():
    from tiny_models import RERANKERS, RETRIEVERS

    for table, configs, where in (
        (RETRIEVERS, RETRIEVER_CONFIGS, "conf/retriever"),
        (RERANKERS, RERANKER_CONFIGS, "conf/reranker"),
    ):
        stale = sorted(set(table) - set(configs))
        assert not stale, f"tests/tiny_models.py names checkpoints for {stale}, which have no file in {where}/"


def _write_evidence_first_run(bench: Path, path: Path) -> None:
    """A TREC run ranking each query's evidence pages first, then every other page (page_id order)."""
    qrels = pq.read_table(bench / "qrels.parquet", columns=["query_id", "page_id"]).to_pandas()
    pages = sorted(pq.read_table(bench / "pages.parquet", columns=["page_id"]).column("page_id").to_pylist())
    lines = []
    for query, evidence in qrels.groupby("query_id")["page_id"]:
        ranked = sorted(set(evidence)) + [p for p in pages if p not in set(evidence)]
        lines += [f"{query} Q0 {page} {rank} {len(pages) - rank} mine" for rank, page in enumerate(ranked, 1)]
    path.write_text("\n".join(lines) + "\n")


def _check_has_tiny_checkpoint(group: str, name: str, config_dir: Path = CONFIG_DIR):
    """The config's model node, failing (saying what to add) when tiny_models has no checkpoint for it."""
    from tiny_models import RERANKERS, RETRIEVERS

    table = RETRIEVERS if group == "retriever" else RERANKERS
    extra = ["setting=rerank"] if group == "reranker" else []
    node, _ = _model_node(compose_cfg(f"{group}={name}", *extra, config_dir=config_dir), group)
    if node is not None and name not in table:
        pytest.fail(
            f"conf/{group}/{name}.yaml loads {node.checkpoint.hub_id} ({node.get('model_class') or node._target_}) "
            f"but tests/tiny_models.py has no tiny checkpoint for it: build one of its family and name it in "
            f"{'RETRIEVERS' if group == 'retriever' else 'RERANKERS'}"
        )
    return node


@pytest.mark.parametrize(
    ("group", "name"), [*(("retriever", n) for n in RETRIEVER_CONFIGS), *(("reranker", n) for n in RERANKER_CONFIGS)]
)
def test_every_config_with_a_model_has_a_tiny_checkpoint(group, name):
    node = _check_has_tiny_checkpoint(group, name)
    assert node is not None or group == "retriever"


def test_a_new_config_without_a_tiny_checkpoint_fails_saying_so(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONFIG_DIR, conf)
    text = (conf / "retriever" / "colqwen25.yaml").read_text().replace("id: colqwen25", "id: colqwen25_ft")
    (conf / "retriever" / "colqwen25_ft.yaml").write_text(text)
    with pytest.raises(pytest.fail.Exception, match=r"colqwen25_ft\.yaml loads vidore/colqwen2\.5-v0\.2 .* RETRIEVERS"):
        _check_has_tiny_checkpoint("retriever", "colqwen25_ft", conf)
    assert _check_has_tiny_checkpoint("retriever", "colqwen25", conf) is not None
    assert _check_has_tiny_checkpoint("retriever", "dom_bm25", conf) is None  # no model, nothing to stand in for


@pytest.mark.slow
@pytest.mark.parametrize("name", RETRIEVER_CONFIGS)
def test_every_retriever_config_runs_end_to_end(name, tiny, one_doc, isolated_paths):
    bench, n_pages, n_queries = one_doc
    encoder_cfg = _check_has_tiny_checkpoint("retriever", name)
    if encoder_cfg is not None:
        overrides = tiny_overrides(name, tiny)
    elif name == "run_file":
        _write_evidence_first_run(bench, isolated_paths / "mine.trec")
        overrides = [f"retriever={name}", f"retriever.path={isolated_paths / 'mine.trec'}"]
    else:
        overrides = [f"retriever={name}"]

    metrics, manifest, entry = evaluate(*overrides, f"dataset.source={bench}", *EVAL)

    run = pq.read_table(entry / store.RUN_FILE).to_pandas()
    assert metrics["n_queries"] == n_queries and run["query_id"].nunique() == n_queries
    sizes = run.groupby("query_id").size()
    # BM25 ranks only the pages sharing a term with the query; models score every page
    assert sizes.le(DEPTH).all() and (encoder_cfg is None or sizes.eq(DEPTH).all())
    assert run.groupby("query_id")["rank"].apply(lambda r: sorted(r) == list(range(1, len(r) + 1))).all()
    assert np.isfinite(run["score"]).all()
    assert run.groupby("query_id")["score"].apply(lambda s: s.is_monotonic_decreasing).all()
    # Oracle: Recall@k and RecallAll@k recomputed from the stored run and the qrels (the run's own
    # order: scores descending, ties by page_id), against per_query.parquet and the Micro (percent).
    evidence = pq.read_table(bench / "qrels.parquet").to_pandas().groupby("query_id")["page_id"].agg(set)
    ranked = run.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True]).groupby("query_id")
    per_query = pq.read_table(entry / store.PER_QUERY_FILE).to_pandas().set_index("query_id")
    assert len(per_query) == n_queries and (entry / store.MANIFEST_FILE).is_file()
    micro = metrics["aggregates"]["micro"]
    for k in KS:
        found = {q: len(evidence[q] & set(rows["page_id"].head(k))) for q, rows in ranked}
        recall = {q: n / len(evidence[q]) for q, n in found.items()}
        recall_all = {q: float(n == len(evidence[q])) for q, n in found.items()}
        for column, expected in ((f"recall@{k}", recall), (f"recallall@{k}", recall_all)):
            np.testing.assert_allclose(per_query.loc[list(expected), column], list(expected.values()), atol=1e-6)
            assert micro[column] == pytest.approx(100 * np.mean(list(expected.values())), abs=1e-4)
        assert all(0.0 <= micro[f"{metric}@{k}"] <= 100.0 for metric in ("ndcg", "ndcgall"))
        if name == "run_file":  # the file was read: its evidence-first order finds all evidence within k
            assert recall_all == {q: float(len(evidence[q]) <= k) for q in recall_all}
    if encoder_cfg is None:
        return

    retrieval = manifest["retrieval"]
    described = retrieval["encoder"]
    assert described["hub_id"] == encoder_cfg.checkpoint.hub_id and described["local_path"] == str(tiny[name])
    assert retrieval["encode_pages"]["pages_encoded"] == n_pages

    # Oracle: the encoder's own vectors, one page or query at a time, against the stored ones, and
    # MaxSim in numpy (for one vector a side, the dot product) against the run's scores.
    cfg = compose_cfg(*overrides, f"dataset.source={bench}", *EVAL)
    retriever = instantiate(cfg.retriever.model)
    page_store, inputs = retriever.page_store(load_benchmark(bench), ArtifactCache(Path(cfg.paths.cache_dir)))
    assert str(page_store.directory) == retrieval["page_embeddings"]["dir"]
    (stored,) = page_store.shards()
    assert len(stored) == n_pages
    tokens = stored.lengths
    if retriever.encoder.kind == "single_vector":
        assert (tokens == 1).all()
    else:  # a page is its visual tokens and its prompt's
        assert retriever.encoder.kind == "multi_vector" and (tokens > 4).all()
    for index, raw in enumerate(inputs.raw(0, 2)):
        (direct,) = retriever.encoder.encode_pages([inputs.decode(raw)])
        np.testing.assert_allclose(stored.item(index).astype(np.float32), direct, atol=2e-3)
    # The queries in one batch, as the pipeline encodes them (13 < query_batch_size): the
    # vectors do not depend on it (test_vectors_do_not_depend_on_the_batch).
    queries = pq.read_table(bench / "queries.parquet", columns=["query_id", "text"]).to_pandas()
    query_vectors = dict(zip(queries["query_id"], retriever.encoder.encode_queries(list(queries["text"])), strict=True))
    position = {page: i for i, page in enumerate(inputs.page_ids)}
    for query, page, score in run[["query_id", "page_id", "score"]].itertuples(index=False):
        page_vectors = stored.item(position[page]).astype(np.float32)
        maxsim = float((query_vectors[query] @ page_vectors.T).max(axis=1).sum())
        assert score == pytest.approx(maxsim, rel=1e-3, abs=1e-3), (query, page)


#: The largest difference allowed between an input's vectors (or a pair's score) computed alone and in a
#: batch, by the model's dtype: in float32 only the order of sums differs (padding changes the kernels'
#: shapes); half precision rounds each sum. The tiny checkpoints run in float32 (CPU).
BATCH_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}
#: Three queries of different lengths: a batch of them is padded.
QUERIES = ["What is the revenue in 2021?", "Find the page", "What was the total revenue in 2020 and 2022, by segment?"]
#: The models of retriever=mteb besides its default (tiny_models.RETRIEVERS["mteb"]), by a test id.
MTEB_MODELS = {"mteb-colpali": "vidore/colpali-v1.3"}


def _page_inputs(page_input: str) -> list:
    """Three pages of different sizes (images) or lengths (a text column): a batch of them is padded where
    the family's processor pads (fixed-size models such as ColPali resize every page alike)."""
    if page_input != "image":
        return ["Revenue 2021: 4.2 million.", "A page", "Total revenue grew in 2020 and in 2022, in every segment."]
    from PIL import Image

    rng = np.random.default_rng(0)
    sizes = ((96, 64), (56, 140), (80, 80))
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


def _dtype(model) -> str:
    """The torch dtype a model runs in: ``dtype`` (TorchEncoder, rerankers) or mteb's ``torch_dtype``."""
    dtype = getattr(model, "dtype", None) or getattr(model, "loader_kwargs", {}).get("torch_dtype") or "float32"
    return str(getattr(dtype, "value", dtype)).removeprefix("torch.")


def _assert_batch_invariant(encode, inputs: list, tolerance: float, what: str) -> None:
    """``encode`` of each input alone equals its vectors in a batch of all, in two orders (other neighbours,
    other padding): same token count, values within ``tolerance``."""
    alone = [encode([item])[0] for item in inputs]
    order = list(range(len(inputs)))
    for batch in (order, order[::-1]):
        together = encode([inputs[i] for i in batch])
        for i, vectors in zip(batch, together, strict=True):
            np.testing.assert_allclose(vectors, alone[i], atol=tolerance, err_msg=f"{what} {i} in batch {batch}")


def _retriever_overrides(name: str, tiny) -> list[str]:
    """tiny_overrides of a retriever config, or of retriever=mteb with one of MTEB_MODELS."""
    if name not in MTEB_MODELS:
        return tiny_overrides(name, tiny)
    import tiny_models

    model = tiny_models.MTEB_MODELS[MTEB_MODELS[name]]
    pointed = tiny_models.overrides_for(model, "retriever.model.encoder", tiny.built(model))
    return ["retriever=mteb", "retriever.model.progress=false", *pointed]


@pytest.mark.parametrize("name", [*RETRIEVER_CONFIGS, *MTEB_MODELS])
def test_vectors_do_not_depend_on_the_batch(name, tiny):
    """The Encoder contract (batch sizes are memory only), for every model config: a query or a page
    encoded alone equals the same input encoded beside longer and shorter ones, within the dtype's tolerance."""
    if name in RETRIEVER_CONFIGS and _check_has_tiny_checkpoint("retriever", name) is None:
        pytest.skip(f"conf/retriever/{name}.yaml has no model (BM25 or a run file)")
    encoder = instantiate(compose_cfg(*_retriever_overrides(name, tiny)).retriever.model).encoder
    tolerance = BATCH_TOLERANCE[_dtype(encoder)]
    _assert_batch_invariant(encoder.encode_queries, QUERIES, tolerance, "query")
    _assert_batch_invariant(encoder.encode_pages, _page_inputs(encoder.page_input), tolerance, "page")


@pytest.mark.parametrize("name", RERANKER_CONFIGS)
def test_rerank_scores_do_not_depend_on_the_batch(name, tmp_path_factory):
    """A reranker's batch mixes queries and pages: each pair scored alone scores the same in the batch."""
    from tiny_models import RERANKERS, TinyCheckpoints, overrides_for

    _, key = _model_node(compose_cfg("setting=rerank", f"reranker={name}"), "reranker")
    checkpoint = TinyCheckpoints(tmp_path_factory.mktemp("rerankers"), RERANKERS)[name]
    cfg = compose_cfg("setting=rerank", f"reranker={name}", *overrides_for(RERANKERS[name], key, checkpoint))
    reranker = instantiate(cfg.reranker.model)
    tolerance = BATCH_TOLERANCE[_dtype(getattr(reranker, "encoder", reranker))]
    pairs = list(zip(QUERIES, _page_inputs("image"), strict=True))

    def score(batch):
        return [[s] for s in reranker.score([q for q, _ in batch], [page for _, page in batch])]

    _assert_batch_invariant(score, pairs, tolerance, "pair")


def test_colpali_attends_alike_under_every_attention_implementation(tiny):
    """ColPali (PaliGemma) attends bidirectionally over its whole input as trained: the same vectors
    under sdpa and eager (before the fix, eager attended causally over a query: 0.24 apart on this
    checkpoint), and its run keys say so (embeddings of the causal queries are not reused)."""
    encoders = {
        attention: instantiate(
            compose_cfg(
                *tiny_overrides("colpali13", tiny), f"retriever.model.encoder.attn_implementation={attention}"
            ).retriever.model
        ).encoder
        for attention in ("sdpa", "eager")
    }
    pages = _page_inputs("image")
    for text in QUERIES:
        sdpa, eager = (e.encode_queries([text])[0] for e in encoders.values())
        np.testing.assert_allclose(sdpa, eager, atol=1e-5, err_msg=text)
    for sdpa, eager in zip(*(e.encode_pages(pages) for e in encoders.values()), strict=True):
        np.testing.assert_allclose(sdpa, eager, atol=1e-5)
    assert encoders["sdpa"].cache_params()["paligemma_attention"] == "bidirectional"
    colqwen = instantiate(compose_cfg(*tiny_overrides("colqwen25", tiny)).retriever.model).encoder
    assert "paligemma_attention" not in colqwen.cache_params()


@pytest.mark.slow
@pytest.mark.parametrize("name", RERANKER_CONFIGS)
def test_every_reranker_config_reranks_end_to_end(name, one_doc, isolated_paths, tmp_path_factory):
    bench, _, n_queries = one_doc
    from tiny_models import RERANKERS, TinyCheckpoints, overrides_for

    _check_has_tiny_checkpoint("reranker", name)
    _, key = _model_node(compose_cfg("setting=rerank", f"reranker={name}"), "reranker")
    checkpoints = TinyCheckpoints(tmp_path_factory.mktemp("rerankers"), RERANKERS)
    top_n = 3
    common = ["retriever=dom_bm25", f"dataset.source={bench}", *EVAL]
    _, _, base_entry = evaluate(*common)
    _, manifest, entry = evaluate(
        *common,
        "setting=rerank",
        f"reranker={name}",
        f"setting.method.top_n={top_n}",
        "setting.method.progress=false",
        *overrides_for(RERANKERS[name], key, checkpoints[name]),
    )

    base = pq.read_table(base_entry / store.RUN_FILE).to_pandas()
    reranked = pq.read_table(entry / store.RUN_FILE).to_pandas()
    assert reranked["query_id"].nunique() == n_queries
    for query, rows in reranked.groupby("query_id"):
        before = base[base.query_id == query].sort_values("rank")["page_id"].tolist()
        after = rows.sort_values("rank")["page_id"].tolist()
        assert sorted(after[:top_n]) == sorted(before[:top_n]) and after[top_n:] == before[top_n:]
    stats = manifest["retrieval"]["rerank"]
    assert stats["pairs_scored"] == sum(min(top_n, n) for n in base.groupby("query_id").size())
    described = stats["reranker"].get("encoder", stats["reranker"])  # ColEngineReranker: its encoder's facts
    assert described["local_path"] == str(checkpoints[name])

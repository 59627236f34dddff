"""Each public benchmark's dataset config run as a user runs it, under its own protocol: a fixture in the
benchmark's hub schema (hub_schema_fixtures.py, test_pdf_importers' PDF sources) placed in a Hugging
Face hub cache at the revision the composed config pins (read at test time), the hub offline, then
``run.py dataset=<name>`` in process with a cheap retriever (dom_bm25 where the pages have text, else
a tiny visual one), ``setting=doc_scope`` where the protocol ranks within the document. The printed
report names the protocol and its main score; a protocol with subsets (languages, domains) prints one
row per subset and their mean, and metrics.json holds one record per subset with the fixture's query
count. On the run the pipeline stored, mteb's evaluator (``calculate_retrieval_scores``, ``mrr``) gives
every query the nDCG@k, Recall@k and MRR@k of per_query.parquet, and the protocol's main score is
the mean of mteb's per-query values within each subset, then over subsets. (The run is handed to mteb
as this project ranks it, score then page_id, as distinct scores: the retrievers' ties are broken one
way for both; test_mteb_oracle.py checks mteb's loaders and tie-free runs.)"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import hub_schema_fixtures as fx
from helpers import compose_cfg, evaluate, tiny_overrides
from importer_fixtures import hub_cache
from test_pdf_importers import WIDTH, write_mmdocir, write_mmlongbench
from vldocir.data.benchmark import load_benchmark

PDF = ["dataset.importer.ocr=null", f"dataset.importer.pdf.width={WIDTH}"]


@dataclass
class Spec:
    write: Any
    text: bool
    """The pages have text: dom_bm25; else the tiny colqwen25."""
    subsets: dict[str, int] | None = None
    """Queries per subset the protocol evaluates (None: one query set)."""
    overrides: list[str] = field(default_factory=list)


SPECS = {
    "beir_dbpedia_entity": Spec(fx.write_dbpedia, text=True),
    "longdocurl": Spec(fx.write_longdocurl_hub, text=True, overrides=PDF),
    "mmdocir": Spec(write_mmdocir, text=True),
    "mmlongbench_doc": Spec(lambda root: write_mmlongbench(root, hub=True), text=True, overrides=PDF),
    "vidore_docvqa": Spec(fx.write_vidore_v1_qa_hub, text=False),
    "vidore_v1_docvqa_beir": Spec(fx.write_vidore_v1_docvqa_beir, text=False),
    "vidore_v2_esg": Spec(fx.write_vidore_v2_languages, text=False, subsets=fx.V2_LANGUAGE_COUNTS),
    "vidore_v3_hr": Spec(fx.write_vidore_v3_languages, text=True, subsets=fx.V3_LANGUAGE_COUNTS),
    "mteb_mmlongbench_doc_retrieval": Spec(fx.write_mmlongbench_doc_mteb, text=False),
    "mteb_mmdocir_t2i_retrieval": Spec(fx.write_mmdocir_mteb, text=False, subsets=fx.mmdocir_counts()),
    "mteb_mmdocir_t2it_retrieval": Spec(fx.write_mmdocir_mteb, text=True, subsets=fx.mmdocir_counts()),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SPECS))
def test_run_py_follows_the_benchmarks_protocol(name, offline_hub, isolated_paths, tiny, capsys):
    spec = SPECS[name]
    dataset = compose_cfg(f"dataset={name}").dataset
    protocol = dataset.get("protocol")
    assert protocol, f"conf/dataset/{name}.yaml has no protocol block"
    revision = str(dataset.importer.revision)
    assert re.fullmatch(r"[0-9a-f]{40}", revision), f"conf/dataset/{name}.yaml is not pinned to a commit: {revision}"
    repo_id = dataset.importer.source.removeprefix("hf://")
    hub_cache(offline_hub, repo_id, spec.write, revision)

    retriever = ["retriever=dom_bm25"] if spec.text else [*tiny_overrides("colqwen25", tiny), "depth=40"]
    scope = ["setting=doc_scope"] if protocol.scope == "document" else []
    metrics, _, run_dir = evaluate(f"dataset={name}", *spec.overrides, *retriever, *scope)
    printed = capsys.readouterr().out

    main = protocol.main_score
    assert f"Protocol: {protocol.name}; main score {main} = " in printed
    section = metrics["protocol"]
    assert section["main_score"] == main and section["name"] == protocol.name
    bench = load_benchmark(isolated_paths / "data" / dataset.name)
    imported = bench.info["imported_from"]
    assert (imported["source"], imported["revision"]) == (dataset.importer.source, revision)
    main_by_mteb = mteb_on_the_stored_run(run_dir, bench, metrics["ks"], main, protocol.subsets)
    assert section["mean"][main] == pytest.approx(100 * main_by_mteb, abs=1e-6)  # (metrics.json: 6 decimals)
    if spec.subsets is None:
        assert not section["subsets"]
        return
    assert section["subsets"] == protocol.subsets
    assert {s: row["n_queries"] for s, row in section["per_subset"].items()} == spec.subsets
    table = printed.split(f"By {protocol.subsets} (percent)", 1)[1].split("\n\n", 1)[0]
    rows = [line.split()[0] for line in table.strip().splitlines()[2:]]  # (after the header and index name)
    assert sorted(rows) == sorted([*spec.subsets, "mean"])
    mean = sum(row[main] for row in section["per_subset"].values()) / len(spec.subsets)
    assert section["mean"][main] == pytest.approx(mean)


def mteb_on_the_stored_run(run_dir: Path, bench, ks, main: str, subsets: str | None) -> float:
    """mteb's per-query nDCG@k, Recall@k, MRR@k on the stored run equal per_query.parquet's; returns the
    main score from mteb's per-query values (the mean within each subset, then over subsets)."""
    from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores, mrr

    run = pd.read_parquet(run_dir / "run.parquet", columns=["query_id", "page_id", "score"])
    run = run.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True], kind="stable")
    run["rank"] = run.groupby("query_id").cumcount()
    results = {q: dict(zip(g["page_id"], -g["rank"].astype(float), strict=True)) for q, g in run.groupby("query_id")}
    qrels = {
        q: dict(zip(g["page_id"], g["grade"].astype(int), strict=True)) for q, g in bench.qrels.groupby("query_id")
    }
    evaluated = calculate_retrieval_scores(results, qrels, list(ks))
    reciprocal = mrr(qrels, results, list(ks))
    per_query = pd.read_parquet(run_dir / "per_query.parquet").set_index("query_id")
    theirs = {}  # (metric, k) -> {query: value}; a query absent from the run scores 0 (as here)
    for k in ks:
        theirs[("ndcg", k)] = {q: evaluated.all_scores[q][f"ndcg_cut_{k}"] for q in results}
        theirs[("recall", k)] = {q: evaluated.all_scores[q][f"recall_{k}"] for q in results}
        theirs[("mrr", k)] = dict(zip(results, reciprocal[f"MRR@{k}"], strict=True))
    for (metric, k), values in theirs.items():
        mine = per_query[f"{metric}@{k}"]
        expected = pd.Series(values).reindex(mine.index, fill_value=0.0)
        assert mine.to_numpy() == pytest.approx(expected.to_numpy(), abs=1e-12), f"{metric}@{k}"
    metric, k = main.split("@")
    values = pd.Series(theirs[(metric, int(k))]).reindex(per_query.index, fill_value=0.0)
    if not subsets:
        return float(values.mean())
    subset_of = bench.queries.set_index("query_id")[subsets].reindex(per_query.index)
    return float(values.groupby(subset_of).mean().mean())

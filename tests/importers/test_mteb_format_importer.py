"""MtebFormatImporter on mteb's hub layouts (hub_schema_fixtures.py): documents derived from top_ranked or
qrels groups as counted by hand, subset-prefixed ids, graded qrels, and bad sources refused in one line."""

from __future__ import annotations

import shutil

import pytest

import hub_schema_fixtures as fx
from vldocir.data.schema import UNKNOWN_DOCUMENTS_STRUCTURE
from vldocir.importers.base import NO_DOCUMENT_IDS, ImporterError, import_benchmark, summary
from vldocir.importers.mteb_format import DOCUMENT_RULES, MtebFormatImporter, card_configs


def test_mmdocir_subsets_documents_from_top_ranked(tmp_path):
    source = fx.write_mmdocir_mteb(tmp_path / "src", domains=3)
    importer = MtebFormatImporter(
        source=str(source), split="train", subsets=list(fx.MMDOCIR_DOMAINS[:3]), subset_column="domain"
    )
    bench = import_benchmark(importer, tmp_path / "bench", name="mmdocir")
    built = bench.info["built_by"]
    # By hand: per domain 11 pages; both documents of the first domains are some query's top_ranked
    # (2 documents each); their pages are not split into one-page documents.
    assert built["kept"] == {"documents": 6, "pages": 33, "queries": 6, "qrels": 9}
    assert built["dropped"] == {"qrels": {"not_relevant": 3}}
    assert built["document_ids"].startswith(DOCUMENT_RULES["top_ranked"])
    queries = bench.queries.set_index("query_id")
    assert queries.loc["brochure:brochure-q1", "domain"] == "brochure"
    assert queries.loc["brochure:brochure-q1", "evidence_structure"] == "doc_far"  # pages 2 and 7 of 8
    pages = bench.pages.set_index("page_id")
    assert pages.loc["brochure:216", "dom_text"] == "brochure page 216 text"
    assert (
        pages.loc["brochure:216", "doc_id"]
        == pages.loc["brochure:210", "doc_id"]
        != pages.loc["brochure:200", "doc_id"]
    )
    assert sorted(bench.documents["n_pages"]) == [3, 3, 3, 8, 8, 8]


def test_mmlongbench_documents_from_the_qrels_graded(tmp_path):
    source = fx.write_mmlongbench_doc_mteb(tmp_path / "src")
    bench = import_benchmark(
        MtebFormatImporter(source=str(source), documents="qrels", page_text=False), tmp_path / "b", name="mmlb"
    )
    assert bench.info["built_by"]["kept"] == {"documents": 2, "pages": 9, "queries": 3, "qrels": 14}
    grades = bench.qrels.groupby("query_id")["grade"].apply(sorted).to_dict()
    assert grades == {"0": [1, 1, 1, 1, 2], "1": [1, 1, 2, 2], "2": [1, 1, 1, 1, 2]}
    assert bench.pages["dom_text"].isna().all()
    assert "page text not read" in summary(bench)


def test_no_documents_each_page_its_own(tmp_path):
    source = fx.write_mmlongbench_doc_mteb(tmp_path / "src")
    bench = import_benchmark(MtebFormatImporter(source=str(source), documents="none"), tmp_path / "b", name="x")
    assert bench.info["built_by"]["kept"]["documents"] == 9
    assert bench.info["built_by"]["document_ids"] == NO_DOCUMENT_IDS
    assert set(bench.queries["evidence_structure"]) == {UNKNOWN_DOCUMENTS_STRUCTURE}  # 4-5 judged pages each
    # No top_ranked config to derive documents from: the same, with the reason said.
    bench = import_benchmark(MtebFormatImporter(source=str(source)), tmp_path / "c", name="y")
    assert (
        bench.info["built_by"]["document_ids"] == NO_DOCUMENT_IDS + " (no top_ranked groups to derive documents from)"
    )
    assert set(bench.queries["evidence_structure"]) == {UNKNOWN_DOCUMENTS_STRUCTURE}


def test_card_configs_read_the_yaml_header(tmp_path):
    source = fx.write_dbpedia(tmp_path / "db")
    assert card_configs(source)["default"] == {"test": ["qrels/test.jsonl"], "dev": ["qrels/dev.jsonl"]}


def test_bad_sources_are_one_line(tmp_path):
    source = fx.write_mmdocir_mteb(tmp_path / "src", domains=1)
    with pytest.raises(ImporterError, match=r"no data files for config 'news-queries', split 'train'"):
        MtebFormatImporter(source=str(source), split="train", subsets=["news"]).read()
    # (a config with a single split is read whatever the split asked, as mteb's loader does)
    assert len(MtebFormatImporter(source=str(source), split="test", subsets=["academic_paper"]).read().queries) == 2
    with pytest.raises(ImporterError, match=r"config 'default' has no split 'validation' \(it has \['dev', 'test'\]\)"):
        MtebFormatImporter(source=str(fx.write_dbpedia(tmp_path / "db")), split="validation").read()
    with pytest.raises(ImporterError, match="documents must be one of"):
        MtebFormatImporter(source=str(source), documents="pages").read()
    shutil.rmtree(source / "academic_paper-queries")
    (source / "README.md").unlink()
    with pytest.raises(ImporterError, match=r"academic_paper-queries/train-\*\.parquet"):
        MtebFormatImporter(source=str(source), split="train", subsets=["academic_paper"]).read()


def test_language_subsets_by_default(tmp_path):
    """mteb's per-language layout (ViDoRe v3's mteb_format): each language's queries carry it in
    ``language``; each subset's corpus is its own (ids prefixed), so a corpus repeated per language is
    read once per language."""
    source = fx.write_vidore_v3_mteb_format(tmp_path / "src")
    importer = MtebFormatImporter(source=str(source), subsets=["english", "german"], documents="none")
    bench = import_benchmark(importer, tmp_path / "b", name="v3")
    assert bench.info["built_by"]["languages"] == {"english": 2, "german": 2}
    assert bench.info["built_by"]["kept"]["pages"] == 2 * sum(len(t) for t in fx.V3_DOCUMENTS.values())
    assert set(bench.queries["query_id"]) == {
        f"{lang}:query-test-{fx.v3_query_id(q, lang)}" for lang in ("english", "german") for q in (0, 1)
    }


@pytest.mark.parametrize(
    ("config", "task"),
    [
        ("mteb_mmlongbench_doc_retrieval", "MMLongBenchDocRetrieval"),
        ("mteb_mmdocir_t2i_retrieval", "MMDocIRT2IRetrieval"),
        ("mteb_mmdocir_t2it_retrieval", "MMDocIRT2ITRetrieval"),
    ],
)
def test_mteb_configs_read_what_the_mteb_task_pins(config, task):
    """Source, revision, split, subsets and main score as mteb's task definition has them."""
    import mteb
    from hydra.utils import instantiate

    from helpers import compose_cfg

    dataset = compose_cfg(f"dataset={config}").dataset
    importer, metadata = instantiate(dataset.importer), mteb.get_task(task).metadata
    assert (importer.source, importer.revision) == (f"hf://{metadata.dataset['path']}", metadata.dataset["revision"])
    assert [importer.split] == metadata.eval_splits and importer.allow_unpinned is False
    assert importer.subsets == (list(metadata.eval_langs) if isinstance(metadata.eval_langs, dict) else None)
    metric, k = metadata.main_score.split("_at_")
    assert dataset.protocol.main_score == f"{metric}@{k}"
    assert importer.page_text == ("t" in metadata.category.split("2")[1])  # t2i: images only; t2it: text too


def test_files_outside_the_dataset_or_unreadable_are_one_line(tmp_path):
    source = fx.write_mmlongbench_doc_mteb(tmp_path / "src")
    card, shard = source / "README.md", source / "queries" / "test-00000-of-00001.parquet"
    outside = tmp_path / "elsewhere.parquet"
    shutil.copy(shard, outside)
    card_text = card.read_text()
    card.write_text(card_text.replace("path: queries/test-*", "path: ../elsewhere.parquet"))
    with pytest.raises(ImporterError, match=r"config 'queries' names data files outside the dataset folder"):
        MtebFormatImporter(source=str(source)).read()
    card.write_text(card_text)
    shard.unlink()
    shard.symlink_to(outside)  # a readable Parquet file, but not the dataset's
    with pytest.raises(ImporterError, match=r"test-00000-of-00001\.parquet: resolves outside the source folder"):
        MtebFormatImporter(source=str(source)).read()
    shard.unlink()
    shard.write_bytes(b"PAR1 not really")
    with pytest.raises(ImporterError, match=r"test-00000-of-00001\.parquet: not a readable Parquet file"):
        MtebFormatImporter(source=str(source)).read()

"""MMLongBench-Doc, LongDocURL and MMDocIR importers on fixtures in the sources' exact schemas
(tests/fixtures/pdf_importers/: the question files, written by hand with the awkward cases; the PDFs,
page images and pages Parquet are made here), imported, validated, evaluated through the pipeline in
process and counted per structure against a hand count; the real slices in ../shared/real-benchmarks
when present; the hub path of MMLongBench-Doc end to end (``python run.py``, hub offline)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from helpers import REPO_ROOT, evaluate, make_pdf, run_py, tiny_overrides
from importer_fixtures import hub_cache
from vldocir.construction.pdf import PdfConfig
from vldocir.data.benchmark import load_benchmark
from vldocir.errors import ConfigError
from vldocir.importers.base import ImporterError, import_benchmark
from vldocir.importers.longdocurl import LongDocURL
from vldocir.importers.mmdocir import MMDocIR
from vldocir.importers.mmlongbench import MMLongBenchDoc

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "pdf_importers"
REAL = REPO_ROOT.parent / "shared" / "real-benchmarks"
WIDTH = 300  # small page images: these tests check counts and text, not pixels


def _counts(single, multi, adjacent, near, far, cross=0) -> dict[str, int]:
    return {
        "page_single": single,
        "page_multi": multi,
        "doc_adjacent": adjacent,
        "doc_near": near,
        "doc_far": far,
        "cross_doc": cross,
    }


def _structures(metrics) -> dict[str, int]:
    return {s: row["n_queries"] for s, row in metrics["breakdowns"]["structure"].items()}


def _jpeg(label: str) -> bytes:
    out = io.BytesIO()
    image = Image.new("RGB", (60, 80), "white")
    image.putpixel((len(label) % 60, 5), (0, 0, 0))
    image.save(out, "JPEG", quality=90, comment=label.encode())  # distinct bytes per page
    return out.getvalue()


# -- MMLongBench-Doc ---------------------------------------------------------------------------------
# samples.json: 18 questions over report-a (8 pages), slides_b (10), scan-e (3, images only: no text
# layer), broken.pdf (truncated) and missing.pdf (absent). By hand: page_single [3], [4, 4] (a page
# given twice), [5], [10], scan-e [2], [4] with a chart and a table (labels name modalities: not
# page_multi unless page_multi_from_labels); doc_adjacent [2, 3], [1, 2, 3] (largest gap 1); doc_near
# [2, 5], [3, 7]; doc_far [1, 8]; left out: one "None" answer format, one "[]" of an answerable
# question, page 0 of a 1-indexed list, page 9 of 8, "page six", and the questions of the broken and
# the missing PDF. q00009 lists 'Figure' and 'Hyperlink' (no mapping: counted).
MMLB_COUNTS = {
    "structures": _counts(6, 0, 2, 2, 1),
    "kept": {"documents": 3, "pages": 21, "queries": 11, "qrels": 17},
    "dropped": {
        "qrels": {"repeated_page_number": 1},
        "queries": {
            "evidence_page_past_document_end": 1,
            "evidence_page_zero": 1,
            "no_evidence": 1,
            "pdf_unavailable": 2,
            "unanswerable": 1,
            "unparseable_evidence_pages": 1,
        },
    },
}
MMLB_DOCS = {"report-a.pdf": ("rpa", 8), "slides_b.pdf": ("slb", 10), "scan-e.pdf": (None, 3)}


def write_mmlongbench(root: Path, hub: bool = False) -> Path:
    """The GitHub layout (data/samples.json, data/documents/) or the hub's (data/train-*.parquet of string
    columns, documents/)."""
    samples = json.loads((FIXTURES / "mmlongbench" / "samples.json").read_text())
    documents = root / ("documents" if hub else "data/documents")
    documents.mkdir(parents=True)
    for name, (prefix, n_pages) in MMLB_DOCS.items():
        pages = [
            [f"{prefix}{p:02d} is reported here.", f"Page {p} of {name}."] if prefix else []
            for p in range(1, n_pages + 1)
        ]
        make_pdf(documents / name, pages, figure_pages={3})
    report = (documents / "report-a.pdf").read_bytes()
    (documents / "broken.pdf").write_bytes(report[: len(report) // 3])
    if hub:
        table = pa.Table.from_pylist(samples, schema=pa.schema([(c, pa.string()) for c in samples[0]]))
        (root / "data").mkdir()
        pq.write_table(table, root / "data" / "train-00000-of-00001.parquet")
    else:
        shutil.copy(FIXTURES / "mmlongbench" / "samples.json", root / "data" / "samples.json")
    return root


@pytest.fixture(scope="module")
def mmlb_source(tmp_path_factory) -> Path:
    return write_mmlongbench(tmp_path_factory.mktemp("mmlongbench"))


def test_mmlongbench_imports_with_the_hand_counts(mmlb_source, tmp_path):
    importer = MMLongBenchDoc(
        source=str(mmlb_source), ocr=None, pdf=PdfConfig(width=WIDTH, workers=1), cache_dir=str(tmp_path / "cache")
    )
    bench = import_benchmark(importer, tmp_path / "bench", name="mmlb-test")

    built = bench.info["built_by"]
    assert built["structures"] == MMLB_COUNTS["structures"]
    assert {k: built["kept"][k] for k in MMLB_COUNTS["kept"]} == MMLB_COUNTS["kept"]
    assert built["dropped"] == MMLB_COUNTS["dropped"]
    assert built["documents_without_text"] == {"count": 1, "doc_ids": ["scan-e"]}
    notes = [n for n in built["notes"] if n.startswith("PDF left out")]
    assert len(notes) == 2 and any("broken.pdf: damaged or unreadable PDF" in n for n in notes)
    assert any("missing.pdf" in n for n in notes)
    assert bench.info["imported_from"]["license"].startswith("CC BY-NC 4.0")
    pages = bench.pages.set_index("page_id")
    assert set(pages["width"]) == {WIDTH} and pages.loc["report-a-p002", "dom_text"].startswith("rpa03 is reported")
    assert pages.loc["scan-e-p001", "dom_text"] == ""
    qrels = bench.qrels
    assert sorted(qrels.loc[qrels["query_id"] == "q00001", "page_id"]) == ["report-a-p001", "report-a-p002"]
    queries = bench.queries.set_index("query_id")
    assert queries.loc["q00004", "evidence_structure"] == "page_single"  # a chart and a table: labels, not counts
    assert queries.loc["q00004", "evidence_types"].tolist() == ["chart", "table"]
    assert queries.loc["q00009", "evidence_types"].tolist() == ["image"] and built["unmapped_labels"] == {
        "Hyperlink": 1
    }
    assert queries.loc["q00010", "evidence_structure"] == "doc_adjacent"  # [1, 2, 3]
    named = [n for n in built["notes"] if n.startswith("queries left out")]
    assert named == [
        "queries left out, unparseable_evidence_pages (1): question 17 (slides_b.pdf): evidence_pages 'page six'",
        "queries left out, evidence_page_zero (1): question 7 (report-a.pdf): evidence_pages '[0, 2]'",
        "queries left out, evidence_page_past_document_end (1): question 8 (report-a.pdf): evidence_pages '[9]'",
    ]
    assert queries.loc["q00010", "answer"] == "['plan', 'build', 'ship']"
    assert set(bench.documents["domain"]) == {"Research report / Introduction", "Tutorial/Workshop", "Brochure"}
    assert load_benchmark(bench.root).fingerprint == bench.fingerprint  # validates on load


def test_mmlongbench_page_multi_from_labels_is_an_option(mmlb_source, tmp_path):
    importer = MMLongBenchDoc(
        source=str(mmlb_source),
        ocr=None,
        pdf=PdfConfig(width=WIDTH, workers=1),
        cache_dir=str(tmp_path / "cache"),
        page_multi_from_labels=True,
    )
    built = import_benchmark(importer, tmp_path / "bench", name="mmlb-labels").info["built_by"]
    assert built["structures"] == _counts(4, 2, 2, 2, 1)  # q00004 (chart, table), q00009 (figure, hyperlink)
    assert built["importer"]["page_multi_from_labels"] is True
    assert built["structure_rules"]["page_multi"].endswith(
        "(page_multi_from_labels: each distinct evidence label counts as an element)"
    )


def test_mmlongbench_a_question_without_doc_id_is_one_line(tmp_path):
    samples = json.loads((FIXTURES / "mmlongbench" / "samples.json").read_text())
    samples[3]["doc_id"] = None
    (tmp_path / "documents").mkdir()
    (tmp_path / "samples.json").write_text(json.dumps(samples))
    with pytest.raises(
        ImporterError, match=r"samples\.json: question 3 \('How many times is rpa01 .*'\) has no doc_id$"
    ):
        MMLongBenchDoc(source=str(tmp_path), ocr=None, cache_dir=str(tmp_path / "cache")).read()


def test_a_record_without_its_document_is_one_line_in_longdocurl_and_mmdocir(tmp_path):
    records = (FIXTURES / "longdocurl" / "LongDocURL.jsonl").read_text().splitlines()
    broken = json.loads(records[2])
    broken["doc_no"] = None
    (tmp_path / "ldu").mkdir()
    (tmp_path / "ldu" / "LongDocURL.jsonl").write_text("\n".join([*records[:2], json.dumps(broken), *records[3:]]))
    with pytest.raises(
        ImporterError, match=r"LongDocURL\.jsonl:3: the record \(free_gemini15_pro_4000001_1_9_2\) has no doc_no$"
    ):
        LongDocURL(source=str(tmp_path / "ldu"), ocr=None, cache_dir=str(tmp_path / "cache")).read()
    source = write_mmdocir(tmp_path / "mmdocir")
    lines = (source / "MMDocIR_annotations.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["doc_name"] = None
    (source / "MMDocIR_annotations.jsonl").write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]))
    with pytest.raises(
        ImporterError, match=r"MMDocIR_annotations\.jsonl:2: not an MMDocIR annotation record .*doc_name"
    ):
        MMDocIR(source=str(source)).read()


@pytest.mark.slow
def test_mmlongbench_without_its_documents_folder_exits_2_in_one_line(tmp_path):
    """Before any PDF is read: the import app exits 2 with one line naming the folder it looked for
    (it logged a warning per PDF, then ended in KeyError: 'doc_id')."""
    (tmp_path / "src" / "data").mkdir(parents=True)
    shutil.copy(FIXTURES / "mmlongbench" / "samples.json", tmp_path / "src" / "data" / "samples.json")
    env = {
        **os.environ,
        "VLDOCIR_DATA_DIR": str(tmp_path / "data"),
        "VLDOCIR_LOG_DIR": str(tmp_path / "logs"),
        "VLDOCIR_CACHE_DIR": str(tmp_path / "cache"),
    }
    command = [sys.executable, "-m", "vldocir.apps.import_benchmark", "dataset=mmlongbench_doc"]
    command += [f"dataset.importer.source={tmp_path / 'src'}", "dataset.importer.revision=null"]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"import_benchmark error: {tmp_path / 'src'}: no documents folder (documents/ or data/documents/) holding "
        "the PDFs the questions name; download it with the questions, or set dataset.importer.documents"
    ]
    assert not (tmp_path / "cache" / "pdf").exists()


def test_mmlongbench_through_the_pipeline_with_bm25_and_a_tiny_visual_retriever(mmlb_source, isolated_paths, tiny):
    dataset = [
        "dataset=mmlongbench_doc",
        f"dataset.importer.source={mmlb_source}",
        "dataset.importer.revision=null",
        "dataset.importer.ocr=null",
        f"dataset.importer.pdf.width={WIDTH}",
        "dataset.importer.pdf.workers=1",
    ]
    metrics, _manifest, _ = evaluate(*dataset, "retriever=dom_bm25")
    expected = {s: n for s, n in MMLB_COUNTS["structures"].items() if n}
    assert _structures(metrics) == expected and metrics["n_queries"] == 11
    assert metrics["empty"]["structures"] == ["page_multi", "cross_doc"]  # Macro is over the four present
    # Each text question names its pages' keywords: BM25 finds every evidence page of those.
    assert metrics["breakdowns"]["structure"]["doc_adjacent"]["recallall@5"] == 100.0
    visual, _, _ = evaluate(*dataset, *tiny_overrides("colqwen25", tiny), "depth=19")
    assert _structures(visual) == expected
    assert (isolated_paths / "cache" / "pdf").is_dir()  # the PDF rasters live in the cache, reused
    # Workers and the cache's place do not change the data: the import is reused; a page width does.
    again, _, _ = evaluate(*dataset[:-1], "dataset.importer.pdf.workers=2", "dataset.importer.cache_dir=elsewhere")
    assert again == metrics
    with pytest.raises(ConfigError, match=r"imported with another dataset\.importer spec"):
        evaluate(*dataset, "dataset.importer.pdf.width=400")


# -- LongDocURL -----------------------------------------------------------------------------------
# LongDocURL.jsonl: 13 questions over 4000001 (a PDF, 9 pages, in pdf_files.tar.gz), 4000002 (PNGs
# only: pages 0, 1, 2, 3, 5, page 3 twice in two folders, page 4 missing) and 4000003 (no files). By
# hand: page_single [3], 4000002 [2], [4] (a table and a figure: labels, not counted elements);
# page_multi [5] (two boxes); doc_adjacent [2, 3]; doc_near [6, 6, 8], 4000002 [1, 4]; doc_far [1, 9];
# left out: page 0, page 10 of 9, page 7 of 6, 4000003's question, 4000002's page 5 (its PNG 4 is
# missing: evidence not in the corpus).
LDU_COUNTS = {
    "structures": _counts(3, 1, 1, 2, 1),
    "kept": {"documents": 2, "pages": 14, "queries": 8},
    "dropped": {
        "pages": {"duplicate_page_id": 1},
        "qrels": {"repeated_page_number": 1},
        "queries": {
            "document_unavailable": 1,
            "evidence_not_in_corpus": 1,
            "evidence_page_past_document_end": 2,
            "evidence_page_zero": 1,
        },
    },
}


@pytest.fixture(scope="module")
def ldu_source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("longdocurl")
    (root / "data").mkdir()
    shutil.copy(FIXTURES / "longdocurl" / "LongDocURL.jsonl", root / "data" / "LongDocURL.jsonl")
    make_pdf(root / "4000001.pdf", [[f"lda{p:02d} is on this page."] for p in range(1, 10)])
    with tarfile.open(root / "pdf_files.tar.gz", "w:gz") as tar:  # as the hub ships the PDFs
        tar.add(root / "4000001.pdf", arcname="pdf_files/4000001.pdf")
    (root / "4000001.pdf").unlink()
    pngs = root / "data" / "pdf_pngs" / "4000-4999" / "4000"
    pngs.mkdir(parents=True)
    for index in (0, 1, 2, 3, 5):
        Image.new("RGB", (61, 79), (255, 255, 255 - index)).save(pngs / f"4000002_{index}.png")
    (root / "extra").mkdir()
    Image.new("RGB", (61, 79), "gray").save(root / "extra" / "4000002_3.png")  # the same page again
    return root


def test_longdocurl_imports_pdfs_and_png_pages_with_the_hand_counts(ldu_source, tmp_path):
    importer = LongDocURL(
        source=str(ldu_source), ocr=None, pdf=PdfConfig(width=WIDTH, workers=1), cache_dir=str(tmp_path / "cache")
    )
    bench = import_benchmark(importer, tmp_path / "bench", name="ldu-test")

    built = bench.info["built_by"]
    assert built["structures"] == LDU_COUNTS["structures"]
    assert {k: built["kept"][k] for k in LDU_COUNTS["kept"]} == LDU_COUNTS["kept"]
    assert built["dropped"] == LDU_COUNTS["dropped"]
    assert built["documents_without_text"]["doc_ids"] == ["4000002"]  # PNG pages carry no text layer
    assert bench.info["imported_from"]["documents_from"] == {"pdf": ["4000001"], "png": ["4000002"]}
    assert len(list((tmp_path / "cache" / "extracted").glob("pdf_files.tar.gz-*/pdf_files/4000001.pdf"))) == 1
    pages = bench.pages.set_index("page_id")
    # 1-indexed evidence page 3 is the PDF's third page, 0-based 2; PNG <doc>_<i> is 0-based page i.
    assert pages.loc["4000001-p002", "dom_text"] == "lda03 is on this page."
    assert (pages.loc["4000002-p003", "width"], pages.loc["4000002-p003", "height"]) == (61, 79)
    assert pages.loc["4000001-p000", "width"] == WIDTH
    queries = bench.queries.set_index("query_id")
    assert queries.loc["extract_fig2tab_4000001_1_9_3", "answer"] == '["Table 1. Sales", "Figure 1. Trend"]'
    assert queries.loc["free_gpt4o_4000001_1_9_4", "evidence_structure"] == "page_multi"  # two boxes


def test_longdocurl_through_the_pipeline_with_bm25_and_a_tiny_visual_retriever(ldu_source, isolated_paths, tiny):
    dataset = [
        "dataset=longdocurl",
        f"dataset.importer.source={ldu_source}",
        "dataset.importer.revision=null",
        "dataset.importer.ocr=null",
        f"dataset.importer.pdf.width={WIDTH}",
    ]
    metrics, _, _ = evaluate(*dataset, "retriever=dom_bm25")
    assert _structures(metrics) == {s: n for s, n in LDU_COUNTS["structures"].items() if n}
    assert metrics["n_queries"] == 8
    visual, _, _ = evaluate(*dataset, *tiny_overrides("colqwen25", tiny), "depth=10", "eval.ks=[3,5,10]")
    assert _structures(visual) == _structures(metrics) and visual["n_queries"] == 8


# -- MMDocIR --------------------------------------------------------------------------------------
# MMDocIR_annotations.jsonl: annual-report-x (pages Parquet rows 0-11), field-guide-y (rows 13-22:
# row 12 is a page of a document without annotations), slides-z (rows 23-30); 0-indexed page ids.
# By hand: page_single [0], [3, 3], [9], [2]; page_multi [7] (two layout boxes on it, its
# layout_mapping a string); doc_adjacent [4, 5], [6, 7]; doc_near [2, 5], [0, 4]; doc_far [1, 11],
# [0, 5]; left out: page 12 of 12 pages, page -1, and a question without pages.
MMDOCIR_COUNTS = {
    "structures": _counts(4, 1, 2, 2, 2),
    "kept": {"documents": 3, "pages": 30, "queries": 11},
    "dropped": {
        "pages": {"row_of_no_annotated_document": 1},
        "qrels": {"repeated_page_number": 1},
        "queries": {"evidence_page_before_first_page": 1, "evidence_page_past_document_end": 1, "no_evidence": 1},
    },
}
MMDOCIR_DOCS = [
    ("annual-report-x.pdf", "mdx", 12),
    ("orphan.pdf", "orp", 1),
    ("field-guide-y.pdf", "mdy", 10),
    ("slides-z.pdf", "mdz", 8),
]
PAGES_SCHEMA = pa.schema(
    [
        ("doc_name", pa.string()),
        ("domain", pa.string()),
        ("passage_id", pa.string()),
        ("image_path", pa.string()),
        ("image_binary", pa.binary()),
        ("ocr_text", pa.string()),
        ("vlm_text", pa.string()),
    ]
)


def write_mmdocir(root: Path, docs=MMDOCIR_DOCS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "mmdocir" / "MMDocIR_annotations.jsonl", root)
    rows = [
        {
            "doc_name": name,
            "domain": "any",
            "passage_id": str(p),
            "image_path": f"doc_images/{name[:-4]}_{p}.jpg",
            "image_binary": _jpeg(f"{name}-{p}"),
            "ocr_text": f"OCR {prefix}{p:02d}",
            "vlm_text": f"{prefix}{p:02d} is shown on this page.",
        }
        for name, prefix, n in docs
        for p in range(n)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=PAGES_SCHEMA), root / "MMDocIR_pages.parquet", row_group_size=8)
    return root


def test_mmdocir_imports_the_pages_parquet_with_the_hand_counts(tmp_path, monkeypatch):
    import vldocir.importers.mmdocir as mmdocir

    monkeypatch.setattr(mmdocir, "BATCH_ROWS", 7)  # documents straddle the row batches
    bench = import_benchmark(MMDocIR(source=str(write_mmdocir(tmp_path / "src"))), tmp_path / "bench", name="mmdocir")

    built = bench.info["built_by"]
    assert built["structures"] == MMDOCIR_COUNTS["structures"]
    assert {k: built["kept"][k] for k in MMDOCIR_COUNTS["kept"]} == MMDOCIR_COUNTS["kept"]
    assert built["dropped"] == MMDOCIR_COUNTS["dropped"]
    pages = bench.pages.set_index("page_id")
    # Row 13 is field-guide-y's page 0 (page_indices are Parquet rows; page ids within the document).
    assert pages.loc["field-guide-y-p000", "dom_text"] == "mdy00 is shown on this page."
    assert pages.loc["field-guide-y-p000", "ocr_text"] == "OCR mdy00"
    assert (pages.loc["slides-z-p007", "width"], pages.loc["slides-z-p007", "height"]) == (60, 80)
    assert set(bench.documents["domain"]) == {"Financial report", "Guidebook", "Tutorial/Workshop"}
    qrels = bench.qrels.set_index(["query_id", "page_id"])
    assert qrels.loc[("q00004", "annual-report-x-p007"), "n_evidence_elements"] == 2
    # type: bare DocBench labels, a list in a string, "[]"; one label no table names (counted)
    types = bench.queries.set_index("query_id")["evidence_types"].map(list)
    assert types[["q00000", "q00002", "q00004", "q00006", "q00007", "q00009", "q00012"]].tolist() == [
        ["metadata"], ["text"], ["chart", "table"], [], ["table"], ["image"], ["text"]
    ]  # fmt: skip
    assert built["unmapped_labels"] == {"Equation": 1}
    assert [n for n in built["notes"] if n.startswith("queries left out")] == [
        "queries left out, evidence_page_before_first_page (1): question 10 (field-guide-y.pdf): page_id [-1]",
        "queries left out, evidence_page_past_document_end (1): question 5 (annual-report-x.pdf): page_id [12]",
    ]


def test_mmdocir_rows_of_another_document_are_one_line(tmp_path):
    docs = [("annual-report-x.pdf", "mdx", 12), ("field-guide-y.pdf", "mdy", 9), ("slides-z.pdf", "mdz", 9)]
    source = write_mmdocir(tmp_path / "src", docs)  # field-guide-y is a page short of its annotated rows
    with pytest.raises(
        ImporterError,
        match=r"row 21 is a page of 'slides-z.pdf', but the annotations place "
        r"rows 13\.\.22 in 'field-guide-y.pdf'",
    ):
        import_benchmark(MMDocIR(source=str(source)), tmp_path / "bench", name="mmdocir")
    assert not (tmp_path / "bench").exists()


def test_mmdocir_through_the_pipeline_with_bm25_and_a_tiny_visual_retriever(tmp_path, isolated_paths, tiny):
    source = write_mmdocir(tmp_path / "src")
    dataset = ["dataset=mmdocir", f"dataset.importer.source={source}", "dataset.importer.revision=null"]
    metrics, _, _ = evaluate(*dataset, "retriever=dom_bm25")
    assert _structures(metrics) == {s: n for s, n in MMDOCIR_COUNTS["structures"].items() if n}
    assert metrics["breakdowns"]["structure"]["doc_far"]["recallall@10"] == 100.0  # vlm_text names each page
    visual, _, _ = evaluate(*dataset, *tiny_overrides("colqwen25", tiny), "depth=10", "eval.ks=[3,5,10]")
    assert _structures(visual) == _structures(metrics)


# -- the real slices (../shared/real-benchmarks) ---------------------------------------------------


@pytest.mark.skipif(not (REAL / "mmdocir").is_dir(), reason=f"no real MMDocIR slice at {REAL / 'mmdocir'}")
def test_mmdocir_real_slice(tmp_path):
    """The first 3 documents of MMDocIR's annotations, pages from page_content/ (text only). By hand:
    PH_2016 [4], [15], [10] single, [13] with two boxes multi, [18, 19] adjacent, [1, 21, 22] far;
    Independents [2, 4] near, [7, 11] near (4 apart), [2, 21] far; 0e94b... 7 single-page questions."""
    bench = import_benchmark(MMDocIR(source=str(REAL / "mmdocir")), tmp_path / "bench", name="mmdocir-real")
    built = bench.info["built_by"]
    assert built["structures"] == _counts(10, 1, 1, 2, 2)
    assert built["kept"]["pages"] == 23 + 23 + 15 and built["kept"]["queries"] == 16
    assert bench.info["imported_from"]["pages_from"] == "page_content"
    pages = bench.pages.set_index("page_id")
    assert "Pew Research Center" in pages.loc["Independents-Report-p001", "dom_text"]


@pytest.mark.skipif(not (REAL / "longdocurl").is_dir(), reason=f"no real LongDocURL slice at {REAL / 'longdocurl'}")
def test_longdocurl_real_slice(tmp_path):
    """LongDocURL's 3-record sample with the evidence PNGs and their neighbours: [54] one table, one box:
    single; [42] a table and a figure (labels, no boxes): single; [15, 16]: adjacent. Page 54 is PNG
    4055915_53."""
    importer = LongDocURL(source=str(REAL / "longdocurl"), ocr=None, cache_dir=str(tmp_path / "cache"))
    bench = import_benchmark(importer, tmp_path / "bench", name="ldu-real")
    built = bench.info["built_by"]
    assert built["structures"] == _counts(2, 0, 1, 0, 0)
    assert built["kept"]["pages"] == 10 and built["kept"]["queries"] == 3
    qrels = bench.qrels
    evidence = qrels.loc[qrels["query_id"] == "free_gemini15_pro_4055915_42_71_8", "page_id"].tolist()
    assert evidence == ["4055915-p053"]


# -- the hub path, end to end -----------------------------------------------------------------------


@pytest.mark.slow
def test_run_py_on_mmlongbench_from_the_hub_cache_offline(tmp_path):
    """``python run.py dataset=mmlongbench_doc`` as a user runs it, the dataset read by huggingface_hub
    from a hub cache holding the hub's layout (data/train-*.parquet, documents/) at the pinned commit,
    with the hub offline (HF_HUB_OFFLINE=1)."""
    from omegaconf import OmegaConf

    config = OmegaConf.load(REPO_ROOT / "conf" / "dataset" / "mmlongbench_doc.yaml")
    repo_id = config.importer.source.removeprefix("hf://")
    hub_cache(tmp_path / "hub", repo_id, lambda root: write_mmlongbench(root, hub=True), config.importer.revision)
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "VLDOCIR_DATA_DIR": str(tmp_path / "data"),
        "VLDOCIR_CACHE_DIR": str(tmp_path / "cache"),
        "VLDOCIR_RESULTS_DIR": str(tmp_path / "results"),
        "VLDOCIR_LOG_DIR": str(tmp_path / "logs"),
        "WANDB_MODE": "disabled",
    }
    done = run_py(
        "dataset=mmlongbench_doc", "dataset.importer.ocr=null", f"dataset.importer.pdf.width={WIDTH}", env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    bench = load_benchmark(tmp_path / "data" / "mmlongbench-doc")
    assert bench.info["built_by"]["structures"] == MMLB_COUNTS["structures"]
    assert bench.info["imported_from"]["revision"] == config.importer.revision
    assert bench.info["imported_from"]["questions_file"] == "data/train-00000-of-00001.parquet"
    assert "page_single" in done.stdout

"""Every importer's bad input, run through the import app in process: one stderr line naming the file
(and the line or row where there is one), exit status 2, no traceback, no output directory.

Each importer gets a small valid source (the fixtures of importer_fixtures, hub_schema_fixtures and
tests/fixtures/) that is then damaged by class: an empty file, a damaged file (a truncated ``.gz``,
Parquet or JSON), bytes that are not UTF-8, a record or column missing a required field, a JSON value
of the wrong shape, a grade that is not an integer, judgements naming only unknown ids, a file that is
a symbolic link out of the source folder (its target a valid copy: only refusing it fails the import).
Then the malformed BEIR folders of issue 35, and the 4-column TREC qrels BEIR reads.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import REPO_ROOT
from hub_schema_fixtures import write_mmlongbench_doc_mteb
from importer_fixtures import write_vidore_v1_qa, write_vidore_v3

BEIR_TOY = REPO_ROOT / "tests" / "fixtures" / "importers" / "beir_toy"
PDF_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "pdf_importers"


def _copy(fixture: Path) -> Callable[[Path], Path]:
    def write(root: Path) -> Path:
        shutil.copytree(fixture, root)
        return root

    return write


def _mmlongbench(root: Path) -> Path:
    _copy(PDF_FIXTURES / "mmlongbench")(root)
    (root / "documents").mkdir()
    return root


@dataclass(frozen=True)
class Source:
    dataset: str
    write: Callable[[Path], Path]
    main: str
    """The file the generic damage classes (empty, damaged, symlink out) hit, relative to the source."""
    overrides: tuple[str, ...] = ()


SOURCES = {
    "beir": Source("beir_dbpedia_entity", _copy(BEIR_TOY), "corpus.jsonl"),
    "vidore": Source("vidore_v3_hr", write_vidore_v3, "queries/test-00000-of-00001.parquet"),
    "vidore_qa": Source("vidore_docvqa", write_vidore_v1_qa, "data/test-00000-of-00001.parquet"),
    "mteb_format": Source(
        "mteb_mmlongbench_doc_retrieval", write_mmlongbench_doc_mteb, "queries/test-00000-of-00001.parquet"
    ),
    "mmlongbench": Source("mmlongbench_doc", _mmlongbench, "samples.json"),
    "mmdocir": Source("mmdocir", _copy(PDF_FIXTURES / "mmdocir"), "MMDocIR_annotations.jsonl"),
    "longdocurl": Source("longdocurl", _copy(PDF_FIXTURES / "longdocurl"), "LongDocURL.jsonl"),
}


@pytest.fixture
def run_import(isolated_paths, monkeypatch, capsys, restored_logging):
    """``python -m vldocir.apps.import_benchmark dataset=<..> dataset.importer.source=<source>``, in
    process: ``(status, stdout, stderr)``."""
    from vldocir.apps.import_benchmark import main

    def run(source: Source, root: Path, *extra: str) -> tuple[int, str, str]:
        argv = [
            "import_benchmark.py",
            f"dataset={source.dataset}",
            f"dataset.importer.source={root}",
            "dataset.importer.revision=null",
            "dataset.name=imported",
            "hydra.job.chdir=false",
            *source.overrides,
            *extra,
        ]
        monkeypatch.setattr(sys, "argv", argv)
        try:
            main()
            status = 0
        except SystemExit as stopped:
            status = stopped.code
        out = capsys.readouterr()
        return status, out.out, out.err

    return run


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _set_line(path: Path, number: int, text: str) -> None:
    lines = _lines(path)
    lines[number - 1] = text + "\n"
    path.write_text("".join(lines), encoding="utf-8")


def _edit_record(path: Path, number: int, edit: Callable[[dict], object]) -> None:
    """Line ``number`` of a JSON-lines file replaced by ``edit(record)``."""
    record = json.loads(_lines(path)[number - 1])
    _set_line(path, number, json.dumps(edit(record)))


def _rewrite_parquet(path: Path, edit: Callable[[pa.Table], pa.Table]) -> None:
    pq.write_table(edit(pq.read_table(path)), path)


def _without(table: pa.Table, column: str) -> pa.Table:
    return table.drop_columns([column])


def _replace(table: pa.Table, column: str, values: list, type_: pa.DataType) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), column, pa.array(values, type_))


def _first(root: Path, pattern: str) -> Path:
    return sorted(root.glob(pattern))[0]


# -- damage classes: each returns (the file the line must name, the line or row marker or None) ---------


def empty(name: str, root: Path) -> tuple[Path, str | None]:
    path = root / SOURCES[name].main
    path.write_bytes(b"")
    return path, None


def damaged(name: str, root: Path) -> tuple[Path, str | None]:
    path = root / SOURCES[name].main
    if name == "beir":  # a truncated .gz in place of the corpus
        packed = gzip.compress(path.read_bytes())
        path.unlink()
        path = root / "corpus.jsonl.gz"
        path.write_bytes(packed[: len(packed) // 2])
        return path, None
    data = path.read_bytes()
    if path.suffix == ".parquet":
        path.write_bytes(data[: len(data) // 2])
        return path, None
    if name == "mmdocir":  # the pages Parquet, truncated
        pages = root / "MMDocIR_pages.parquet"
        pq.write_table(pa.table({"doc_name": ["x.pdf"] * 50, "ocr_text": ["words " * 40] * 50}), pages)
        pages.write_bytes(pages.read_bytes()[:300])
        return pages, None
    cut = data.index(b"\n", len(data) // 2) - 5  # a record cut in the middle
    path.write_bytes(data[:cut])
    line = data[:cut].count(b"\n") + 1
    return path, f":{line}"


def non_utf8(name: str, root: Path) -> tuple[Path, str | None]:
    path = root / SOURCES[name].main
    lines = path.read_bytes().split(b"\n")
    number = 3 if name == "mmlongbench" else 2
    lines[number - 1] = lines[number - 1].replace(b"a", b"\xff\xfe", 1)
    path.write_bytes(b"\n".join(lines))
    return path, f":{number}"


def missing_field(name: str, root: Path) -> tuple[Path, str | None]:
    path = root / SOURCES[name].main
    if name in ("vidore", "vidore_qa", "mteb_format"):
        _rewrite_parquet(path, lambda t: _without(t, "query"))
        return path, None
    if name == "mmlongbench":
        records = json.loads(path.read_text())
        del records[1]["doc_id"]
        path.write_text(json.dumps(records))
        return path, "record 1"
    field = {"beir": "_id", "mmdocir": "page_indices", "longdocurl": "doc_no"}[name]
    _edit_record(path, 2, lambda record: {k: v for k, v in record.items() if k != field})
    return path, ":2"


def wrong_shape(name: str, root: Path) -> tuple[Path, str | None]:
    path = root / SOURCES[name].main
    if name == "mmlongbench":
        records = json.loads(path.read_text())
        records[2] = ["report-a.pdf", "a question"]
        path.write_text(json.dumps(records))
        return path, "record 2"
    _edit_record(path, 2, lambda record: list(record.values()))
    return path, ":2"


def bad_grade(name: str, root: Path) -> tuple[Path, str | None]:
    if name == "beir":
        path = root / "qrels" / "test.tsv"
        _set_line(path, 3, "SemSearch_ES-1\t<dbpedia:Photovoltaics>\t1.7")
        return path, ":3"
    if name in ("vidore", "mteb_format"):
        path = _first(root, "qrels/*.parquet")
        table = pq.read_table(path)
        scores = [float(s) for s in table.column("score").to_pylist()]
        scores[1] = 1.7
        pq.write_table(_replace(table, "score", scores, pa.float64()), path)
        return path, "row 1"
    raise AssertionError(name)


def unknown_ids(name: str, root: Path) -> tuple[Path, str | None]:
    if name == "beir":
        path = root / "qrels" / "test.tsv"
        lines = _lines(path)
        path.write_text(lines[0] + "".join(f"{line.split(chr(9))[0]}\t<dbpedia:Nowhere>\t1\n" for line in lines[1:]))
        return path, None
    if name in ("vidore", "mteb_format"):
        column = "corpus_id" if name == "vidore" else "corpus-id"
        paths = sorted(root.glob("qrels/*.parquet"))
        for path in paths:
            table = pq.read_table(path)
            unknown = [v + 100_000 for v in table.column(column).to_pylist()]
            pq.write_table(_replace(table, column, unknown, table.schema.field(column).type), path)
        return paths[0], None
    raise AssertionError(name)


def symlink_out(name: str, root: Path) -> tuple[Path, str | None]:
    """The file moved out of the source folder (a valid copy) and linked back: reading it would succeed."""
    path = root / SOURCES[name].main
    outside = root.parent / "outside" / path.name
    outside.parent.mkdir(exist_ok=True)
    shutil.move(path, outside)
    path.symlink_to(outside)
    return path, "outside"


TEXT_SOURCES = ("beir", "mmlongbench", "mmdocir", "longdocurl")
GRADED_SOURCES = ("beir", "vidore", "mteb_format")
DAMAGES = {  # damage class -> (its damage, the importers that can meet it)
    "empty": (empty, tuple(SOURCES)),
    "damaged": (damaged, tuple(SOURCES)),
    "non_utf8": (non_utf8, TEXT_SOURCES),  # (Parquet holds UTF-8 by type)
    "missing_field": (missing_field, tuple(SOURCES)),
    "wrong_shape": (wrong_shape, TEXT_SOURCES),  # (a JSON value of the wrong kind; Parquet is typed)
    "bad_grade": (bad_grade, GRADED_SOURCES),  # (the others judge pages by listing them: no grades)
    "unknown_ids": (unknown_ids, GRADED_SOURCES),  # (the others name pages by number, checked by range)
    "symlink_out": (symlink_out, tuple(SOURCES)),
}


def _assert_one_line(status: int, err: str, data_dir: Path, file: Path, marker: str | None) -> str:
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1, err
    line = lines[0]
    assert line.startswith("import_benchmark error: ") and "Traceback" not in err, err
    assert file.name in line, f"the line names no {file.name}: {line}"
    if marker:
        assert marker in line, f"the line names no {marker!r}: {line}"
    left = sorted(p.name for p in data_dir.iterdir()) if data_dir.is_dir() else []
    assert left == [], f"left behind: {left}"
    return line


@pytest.mark.parametrize(
    ("importer", "damage"), [(name, damage) for damage, (_, names) in DAMAGES.items() for name in names]
)
def test_a_damaged_source_is_one_line(importer, damage, run_import, isolated_paths, tmp_path):
    source = SOURCES[importer]
    root = source.write(tmp_path / "source" / importer)
    where = DAMAGES[damage][0](importer, root)
    status, _, err = run_import(source, root)
    _assert_one_line(status, err, isolated_paths / "data", *where)


@pytest.mark.parametrize("importer", ["beir", "vidore", "vidore_qa", "mteb_format"])
def test_the_undamaged_sources_import(importer, run_import, isolated_paths, tmp_path):
    """The control: each source above imports as it is (so the damage is what fails it)."""
    source = SOURCES[importer]
    status, _, err = run_import(source, source.write(tmp_path / "source" / importer))
    assert status == 0, err
    assert (isolated_paths / "data" / "imported" / "benchmark.json").is_file()


# -- the malformed BEIR folders of issue 35 --------------------------------------------------------------


def _qrels(root: Path, text: str) -> Path:
    path = root / "qrels" / "test.tsv"
    path.write_text(text)
    return path


def _line(root: Path, file: str, number: int, text: str | bytes) -> Path:
    path = root / file
    lines = path.read_bytes().split(b"\n")
    lines[number - 1] = text if isinstance(text, bytes) else text.encode()
    path.write_bytes(b"\n".join(lines))
    return path


def _link_out(root: Path, file: str) -> Path:
    path = root / file
    outside = root.parent / "outside" / path.name
    outside.parent.mkdir(exist_ok=True)
    shutil.move(path, outside)
    path.symlink_to(outside)
    return path


def _gz(root: Path, file: str, keep: float) -> Path:
    path = root / file
    packed = gzip.compress(path.read_bytes())
    path.unlink()
    target = root / f"{file}.gz"
    target.write_bytes(packed[: int(len(packed) * keep)] if keep < 1 else packed[:-4] + b"\0\0\0\0")
    return target


HEADER = "query-id\tcorpus-id\tscore\n"
BEIR_CASES: dict[str, Callable[[Path], tuple[Path, str | None]]] = {
    "empty corpus": lambda r: ((r / "corpus.jsonl").write_text(""), r / "corpus.jsonl", None)[1:],
    "blank-lines corpus": lambda r: ((r / "corpus.jsonl").write_text("\n\n"), r / "corpus.jsonl", None)[1:],
    "empty queries": lambda r: ((r / "queries.jsonl").write_text(""), r / "queries.jsonl", None)[1:],
    "empty qrels": lambda r: (_qrels(r, ""), None),
    "header-only qrels": lambda r: (_qrels(r, HEADER), None),
    "qrels naming only unknown documents": lambda r: (_qrels(r, HEADER + "SemSearch_ES-1\tnowhere\t1\n"), None),
    "qrels naming only unknown queries": lambda r: (_qrels(r, HEADER + "nobody\t<dbpedia:Silicon>\t1\n"), None),
    "qrels of non-relevant judgements only": lambda r: (_qrels(r, HEADER + "SemSearch_ES-1\tx\t0\n"), None),
    "qrels of two columns": lambda r: (_qrels(r, HEADER + "SemSearch_ES-1\t<dbpedia:Silicon>\n"), ":2"),
    "qrels of five columns": lambda r: (_qrels(r, HEADER + "a\tb\t1\t2\t3\n"), ":2"),
    "qrels with another header": lambda r: (_qrels(r, "qid\tdocid\trel\nSemSearch_ES-1\tx\t1\n"), ":1"),
    "qrels of spaces, three columns": lambda r: (_qrels(r, "SemSearch_ES-1 <dbpedia:Silicon> 1\n"), ":1"),
    "grade 1.7": lambda r: (_qrels(r, HEADER + "SemSearch_ES-1\t<dbpedia:Silicon>\t1.7\n"), ":2"),
    "grade 0.5": lambda r: (_qrels(r, HEADER + "SemSearch_ES-1\t<dbpedia:Silicon>\t1\nx\ty\t0.5\n"), ":3"),
    "grade 2^70": lambda r: (_qrels(r, HEADER + f"SemSearch_ES-1\t<dbpedia:Silicon>\t{2**70}\n"), ":2"),
    "grade not a number": lambda r: (_qrels(r, HEADER + "SemSearch_ES-1\t<dbpedia:Silicon>\t1\nx\ty\thigh\n"), ":3"),
    "grade nan": lambda r: (_qrels(r, HEADER + "SemSearch_ES-1\t<dbpedia:Silicon>\tnan\n"), ":2"),
    "grade inf": lambda r: (_qrels(r, HEADER + "SemSearch_ES-1\t<dbpedia:Silicon>\tinf\n"), ":2"),
    "TREC qrels, grade 1.5": lambda r: (_qrels(r, "SemSearch_ES-1 0 <dbpedia:Silicon> 1.5\n"), ":1"),
    "qrels not UTF-8": lambda r: (_line(r, "qrels/test.tsv", 2, b"S\xffemSearch_ES-1\t<dbpedia:Silicon>\t1"), ":2"),
    "corpus line without _id": lambda r: (_line(r, "corpus.jsonl", 2, '{"title": "t", "text": "x"}'), ":2"),
    "corpus _id null": lambda r: (_line(r, "corpus.jsonl", 2, '{"_id": null, "text": "x"}'), ":2"),
    "corpus line a JSON array": lambda r: (_line(r, "corpus.jsonl", 2, '["<dbpedia:Silicon>", "x"]'), ":2"),
    "corpus line a JSON string": lambda r: (_line(r, "corpus.jsonl", 3, '"just text"'), ":3"),
    "corpus text a list": lambda r: (_line(r, "corpus.jsonl", 2, '{"_id": "a", "text": ["x"]}'), ":2"),
    "corpus line not JSON": lambda r: (_line(r, "corpus.jsonl", 2, '{"_id": "a", '), ":2"),
    "corpus not UTF-8": lambda r: (_line(r, "corpus.jsonl", 3, b'{"_id": "a", "text": "caf\xe9"}'), ":3"),
    "queries line without _id": lambda r: (_line(r, "queries.jsonl", 2, '{"text": "x"}'), ":2"),
    "queries line a JSON array": lambda r: (_line(r, "queries.jsonl", 1, "[1, 2]"), ":1"),
    "queries not UTF-8": lambda r: (_line(r, "queries.jsonl", 2, b'{"_id": "\xc3(", "text": "x"}'), ":2"),
    "corpus.jsonl.gz truncated": lambda r: (_gz(r, "corpus.jsonl", 0.5), None),
    "corpus.jsonl.gz bad checksum": lambda r: (_gz(r, "corpus.jsonl", 1), None),
    "queries.jsonl.gz not gzip": lambda r: (
        (r / "queries.jsonl").rename(r / "queries.jsonl.gz"),
        r / "queries.jsonl.gz",
        None,
    )[1:],
    "corpus a symbolic link out of the folder": lambda r: (_link_out(r, "corpus.jsonl"), "outside"),
    "qrels a symbolic link out of the folder": lambda r: (_link_out(r, "qrels/test.tsv"), "outside"),
    "no corpus": lambda r: ((r / "corpus.jsonl").unlink(), r / "corpus.jsonl", None)[1:],
}


@pytest.mark.parametrize("case", BEIR_CASES)
def test_a_malformed_beir_folder_is_one_line(case, run_import, isolated_paths, tmp_path):
    root = _copy(BEIR_TOY)(tmp_path / "source" / "beir")
    file, marker = BEIR_CASES[case](root)
    status, _, err = run_import(SOURCES["beir"], root)
    line = _assert_one_line(status, err, isolated_paths / "data", file, marker)
    if "grade" in case:
        assert ("grade" in line and "integer" in line) or "out of range" in line, line


def test_trec_qrels_are_read_as_trec_qrels(run_import, isolated_paths, tmp_path):
    """``query-id 0 corpus-id score`` (TREC's four columns, no header): the same import as BEIR's own."""
    root = _copy(BEIR_TOY)(tmp_path / "source" / "beir")
    beir = [line.rstrip("\n").split("\t") for line in _lines(root / "qrels" / "test.tsv")[1:]]
    status, _, err = run_import(SOURCES["beir"], root)
    assert status == 0, err
    expected = json.loads((isolated_paths / "data" / "imported" / "benchmark.json").read_text())["built_by"]
    shutil.rmtree(isolated_paths / "data" / "imported")
    _qrels(root, "".join(f"{q} 0 {d} {s}\n" for q, d, s in beir))
    status, _, err = run_import(SOURCES["beir"], root)
    assert status == 0, err
    built = json.loads((isolated_paths / "data" / "imported" / "benchmark.json").read_text())["built_by"]
    for key in ("structures", "dropped", "grades", "kept"):
        assert built[key] == expected[key]


LINKED_FILES = {  # (importer, a file of the source other than the main one, made a link out of the folder)
    ("beir", "queries.jsonl"),
    ("beir", "qrels/test.tsv"),
    ("vidore", "documents_metadata/test-00000-of-00001.parquet"),
    ("vidore", "corpus/test-00000-of-00001.parquet"),
    ("mteb_format", "README.md"),
    ("mteb_format", "corpus/test-00000-of-00001.parquet"),
    ("mmdocir", "MMDocIR_pages.parquet"),
    ("mmdocir", "page_content/annual-report-x_page.jsonl"),
    ("longdocurl", "4000001.pdf"),
    ("mmlongbench", "documents/report-a.pdf"),
}


@pytest.mark.parametrize(("importer", "file"), sorted(LINKED_FILES))
def test_any_file_linked_from_outside_the_source_is_refused(importer, file, run_import, isolated_paths, tmp_path):
    """Every file an importer opens, not only the first: a link out of the folder is refused before it
    is read (its target is a file of the right kind, so only the refusal stops the import)."""
    root = SOURCES[importer].write(tmp_path / "source" / importer)
    path = root / file
    if not path.exists():  # (files the fixture does not ship: a file of the kind the importer reads)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".parquet":
            pq.write_table(pa.table({"doc_name": ["annual-report-x.pdf"], "ocr_text": ["words"]}), path)
        elif path.suffix == ".pdf":
            path.write_bytes(b"%PDF-1.4\n%%EOF\n")
        else:
            path.write_text(json.dumps({"page": 0, "ocr_text": "words", "vlm_text": "words"}) + "\n")
    _link_out(root, file)
    status, _, err = run_import(SOURCES[importer], root)
    _assert_one_line(status, err, isolated_paths / "data", path, "outside")

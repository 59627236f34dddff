"""ViDoRe fixtures written by the tests in the datasets' exact hub layout and schema (read from their
dataset cards and mteb's loaders): Parquet shards ``<config>/<split>-0000i-of-0000n.parquet`` with
``datasets.Image`` structs ``{bytes, path}``, tiny PNG pages made with PIL. Each module-level
``*_COUNTS`` is the hand count of what an import keeps and drops.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
BOX = pa.struct(
    [("annotator", pa.int64()), ("x1", pa.int64()), ("x2", pa.int64()), ("y1", pa.int64()), ("y2", pa.int64())]
)


def png(label: str, size: tuple[int, int] = (64, 96)) -> bytes:
    """A small page image with ``label`` drawn on it (distinct labels give distinct bytes)."""
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((4, 4), label, fill="black")
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _write(root: Path, config: str, rows: list[dict], schema: pa.Schema, shards: int = 1, split: str = "test") -> None:
    folder = root / config
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(rows) // shards)
    for i in range(shards):
        part = pa.Table.from_pylist(rows[i * size : (i + 1) * size], schema=schema)
        pq.write_table(part, folder / f"{split}-{i:05d}-of-{shards:05d}.parquet", row_group_size=4)


# ----------------------------------------------------------------------------------------------
# ViDoRe v3 (underscores; doc ids, markdown, graded qrels with boxes, six languages)
# ----------------------------------------------------------------------------------------------

V3_CORPUS = pa.schema(
    [
        ("corpus_id", pa.int64()),
        ("image", IMAGE),
        ("doc_id", pa.string()),
        ("markdown", pa.string()),
        ("page_number_in_doc", pa.int64()),
    ]
)
V3_QUERIES = pa.schema(
    [
        ("query_id", pa.int64()),
        ("query", pa.string()),
        ("language", pa.string()),
        ("query_types", pa.list_(pa.string())),
        ("query_format", pa.string()),
        ("content_type", pa.list_(pa.string())),
        ("raw_answers", pa.list_(pa.string())),
        ("query_generator", pa.string()),
        ("query_generation_pipeline", pa.string()),
        ("source_type", pa.string()),
        ("query_type_for_generation", pa.string()),
        ("answer", pa.string()),
    ]
)
V3_QRELS = pa.schema(
    [
        ("query_id", pa.int64()),
        ("corpus_id", pa.int64()),
        ("score", pa.int64()),
        ("content_type", pa.list_(pa.string())),
        ("bounding_boxes", pa.list_(BOX)),
    ]
)
V3_DOCS = pa.schema(
    [
        ("file_name", pa.string()),
        ("doc_id", pa.string()),
        ("url", pa.string()),
        ("doc_type", pa.string()),
        ("doc_language", pa.string()),
        ("doc_year", pa.string()),
        ("visual_types", pa.list_(pa.string())),
        ("page_number", pa.int64()),
        ("license", pa.string()),
    ]
)

V3_TOPICS = {
    "hr_a": [
        "remote work policy",
        "annual leave days",
        "parental leave weeks",
        "training budget",
        "pension scheme",
        "overtime rules",
        "health insurance",
        "salary bands",
    ],
    "hr_b": [
        "recruitment process",
        "probation period",
        "performance review",
        "promotion criteria",
        "mobility allowance",
        "diversity targets",
    ],
    "slides_c": [None] * 5,  # an image-only slide deck: no text layer
}


def _box(annotator: int, i: int) -> dict:
    return {"annotator": annotator, "x1": 2 + 10 * i, "x2": 9 + 10 * i, "y1": 5, "y2": 20}


def write_vidore_v3(root: Path) -> Path:
    """19 pages in 3 documents (one without text), 13 queries in 3 languages: see ``V3_COUNTS``."""
    corpus, ids = [], {}
    for doc_id, topics in V3_TOPICS.items():
        for page, topic in enumerate(topics, 1):  # page_number_in_doc is 1-based
            corpus_id = len(corpus)
            ids[(doc_id, page)] = corpus_id
            corpus.append(
                {
                    "corpus_id": corpus_id,
                    "image": {"bytes": png(f"{doc_id} {page}"), "path": None},
                    "doc_id": doc_id,
                    "markdown": f"# {doc_id} page {page}\n\nThe {topic} of the staff." if topic else "",
                    "page_number_in_doc": page,
                }
            )
    corpus.append({**corpus[3], "markdown": "a repeated corpus_id"})  # dropped: duplicate_page_id
    corpus.append({"corpus_id": 20, "image": None, "doc_id": "hr_b", "markdown": "no image", "page_number_in_doc": 7})
    _write(root, "corpus", corpus, V3_CORPUS, shards=2)

    a, b, c = (lambda p, d=d: ids[(d, p)] for d in ("hr_a", "hr_b", "slides_c"))
    content_types = {  # the card's labels (others: ["Text"]); the form placeholder and an unknown label
        10: ["Table", "Text"],
        13: ["Image", "N/A (If relevance score=0)"],
        4: ["Text", "Diagram"],
        5: ["Infographic", "Mixed"],
    }
    queries = [  # (query_id, text, language)
        (1, "How many days of remote work are allowed?", "english"),
        (2, "What is the annual leave and its rules?", "english"),
        (3, "Quelle est la durée du congé parental et le budget de formation ?", "french"),
        (4, "Comment le régime de pension et les assurances santé sont-ils liés ?", "french"),
        (5, "Compare remote work policy and salary bands", "english"),
        (6, "How do recruitment and the slide deck overview relate?", "english"),
        (7, "Une question sans page pertinente", "french"),
        (8, "A question on a page whose image is missing", "english"),
        (9, "A question on a page that is not in the corpus", "english"),
        (10, "Welche Gehaltsbänder gibt es für die Probezeit?", "german"),
        (11, "What is the promotion criteria?", "english"),
        (12, "   ", "english"),
        (13, "Que montrent les diapositives deux à quatre ?", "french"),
    ]
    _write(
        root,
        "queries",
        [
            {
                "query_id": q,
                "query": text,
                "language": language,
                "query_types": ["extractive"],
                "query_format": "question",
                "content_type": content_types.get(q, ["Text"]),
                "raw_answers": ["x"],
                "query_generator": "human",
                "query_generation_pipeline": "p",
                "source_type": "document",
                "query_type_for_generation": "open",
                "answer": f"answer {q}",
            }
            for q, text, language in queries
        ],
        V3_QUERIES,
    )
    qrels = [  # (query_id, corpus_id, score, content types, boxes)
        (1, a(1), 2, ["Text", "N/A (If relevance score=0)"], [_box(1, 0)]),  # one kind: page_single
        (2, a(2), 1, ["text"], [_box(1, 0), _box(1, 1), _box(2, 0)]),  # two elements (annotator 1)
        (3, a(3), 2, ["text"], []),
        (3, a(4), 1, ["text"], []),  # pages 3 and 4: doc_adjacent
        (4, a(5), 1, ["text"], []),
        (4, a(7), 1, ["table"], []),  # 5 and 7 (gap 2): doc_near
        (5, a(1), 1, ["text"], []),
        (5, a(8), 2, ["table"], []),  # 1 and 8 (gap 7 > 4): doc_far
        (6, b(1), 1, ["text"], []),
        (6, c(1), 1, ["image"], []),  # two documents: cross_doc
        (7, b(2), 0, ["text"], []),  # only a score-0 judgement: no evidence
        (8, 20, 1, ["text"], []),  # its page has no image (dropped): evidence not in corpus
        (9, 99, 1, ["text"], []),  # no such corpus_id: evidence not in corpus
        (10, b(3), 2, ["table", "text"], []),  # two kinds of content on one page: page_multi
        (11, b(4), 1, ["text"], []),
        (11, b(4), 2, ["text"], []),  # repeated: collapses to grade 2
        (12, b(5), 1, ["text"], []),  # its query text is blank
        (13, c(2), 1, ["image"], []),
        (13, c(3), 1, ["image"], []),
        (13, c(4), 1, ["image"], []),  # pages 2, 3, 4 (largest gap 1): doc_adjacent
    ]
    _write(
        root,
        "qrels",
        [
            {"query_id": q, "corpus_id": p, "score": s, "content_type": t, "bounding_boxes": bx}
            for q, p, s, t, bx in qrels
        ],
        V3_QRELS,
    )
    _write(
        root,
        "documents_metadata",
        [
            {
                "file_name": f"{d}.pdf",
                "doc_id": d,
                "url": f"https://example.org/{d}.pdf",
                "doc_type": kind,
                "doc_language": "english",
                "doc_year": "2024",
                "visual_types": ["table"],
                "page_number": len(V3_TOPICS[d]),
                "license": "cc-by-4.0",
            }
            for d, kind in (("hr_a", "report"), ("hr_b", "report"), ("slides_c", "slides"))
        ],
        V3_DOCS,
    )
    return root


V3_COUNTS = {
    "structures": {"page_single": 2, "page_multi": 2, "doc_adjacent": 2, "doc_near": 1, "doc_far": 1, "cross_doc": 1},
    "languages": {"english": 5, "french": 3, "german": 1},
    "structures_per_language": {  # 1, 11 single, 2 multi, 5 far, 6 cross | 3, 13 adjacent, 4 near | 10 multi
        "english": {"page_single": 2, "page_multi": 1, "doc_adjacent": 0, "doc_near": 0, "doc_far": 1, "cross_doc": 1},
        "french": {"page_single": 0, "page_multi": 0, "doc_adjacent": 2, "doc_near": 1, "doc_far": 0, "cross_doc": 0},
        "german": {"page_single": 0, "page_multi": 1, "doc_adjacent": 0, "doc_near": 0, "doc_far": 0, "cross_doc": 0},
    },
    # per kept query: 10 Table+Text, 13 Image (placeholder dropped), 4 Text (Diagram unmapped), 5 Infographic+Mixed
    "evidence_types": {"10": ["table", "text"], "13": ["image"], "4": ["text"], "5": ["image", "other"], "1": ["text"]},
    "unmapped_labels": {"Diagram": 1},
    "dropped": {
        "pages": {"duplicate_page_id": 1, "missing_image": 1},
        "qrels": {"duplicate": 1, "not_relevant": 1, "unknown_query": 1},
        "queries": {"blank_text": 1, "evidence_not_in_corpus": 2, "no_evidence": 1},
    },
    "kept": {"documents": 3, "pages": 19, "queries": 9},
    "documents_without_text": ["slides_c"],
}


# ----------------------------------------------------------------------------------------------
# ViDoRe v2 (hyphens; image file names but no document ids) and v1 _beir (neither)
# ----------------------------------------------------------------------------------------------

V2_CORPUS = pa.schema([("corpus-id", pa.int64()), ("image", IMAGE), ("image_filename", pa.string())])
V2_QUERIES = pa.schema([("query-id", pa.int64()), ("query", pa.string()), ("language", pa.string())])
V2_QRELS = pa.schema([("query-id", pa.int64()), ("corpus-id", pa.int64()), ("score", pa.float64())])


def write_vidore_v2(root: Path, with_filenames: bool = True) -> Path:
    """Two reports of 6 pages (file names ``<report>_page_<n>.png``), 5 queries: see ``V2_COUNTS``.
    ``with_filenames=False``: v1 ``_beir``'s corpus (``corpus-id``, ``image`` only)."""
    rows = [
        {
            "corpus-id": 10 * r + p,
            "image": {"bytes": png(f"esg{r} {p}"), "path": None},
            "image_filename": f"data/esg_report_{r}_page_{p}.png",
        }
        for r in (1, 2)
        for p in range(1, 7)
    ]
    schema = V2_CORPUS if with_filenames else pa.schema(list(V2_CORPUS)[:2])
    if not with_filenames:
        rows = [{k: v for k, v in row.items() if k != "image_filename"} for row in rows]
    _write(root, "corpus", rows, schema)
    _write(
        root,
        "queries",
        [
            {"query-id": q, "query": t, "language": lang}
            for q, t, lang in (
                (0, "scope 1 emissions", "english"),
                (1, "émissions du scope 2", "french"),
                (2, "water use", "english"),
                (3, "board diversity", "spanish"),
                (4, "biodiversity", "german"),
            )
        ],
        V2_QUERIES,
    )
    _write(
        root,
        "qrels",
        [
            {"query-id": q, "corpus-id": c, "score": s}
            for q, c, s in (
                (0, 11, 1.0),  # one page: page_single
                (1, 12, 1.0),
                (1, 13, 1.0),  # report 1 pages 2-3
                (2, 11, 1.0),
                (2, 16, 1.0),  # report 1 pages 1 and 6
                (3, 14, 1.0),
                (3, 21, 1.0),  # reports 1 and 2
                (4, 25, 0.0),
            )
        ],
        V2_QRELS,
    )  # score 0 only: no evidence
    return root


V2_COUNTS = {  # with file names: documents derived from them
    "structures": {"page_single": 1, "page_multi": 0, "doc_adjacent": 1, "doc_near": 0, "doc_far": 1, "cross_doc": 1},
    "kept": {"documents": 2, "pages": 12, "queries": 4},
}
V1_BEIR_COUNTS = {  # no document ids at all: each page its own document, multi-page queries: documents unknown
    "structures": {
        "page_single": 1,
        "page_multi": 0,
        "doc_adjacent": 0,
        "doc_near": 0,
        "doc_far": 0,
        "cross_doc": 0,
        "multi_page_docs_unknown": 3,
    },
    "kept": {"documents": 12, "pages": 12, "queries": 4},
}


# ----------------------------------------------------------------------------------------------
# ViDoRe v1, QA form (one row per query with its page image)
# ----------------------------------------------------------------------------------------------

V1_QA = pa.schema(
    [
        ("questionId", pa.string()),
        ("query", pa.string()),
        ("question_types", pa.null()),
        ("image", IMAGE),
        ("docId", pa.int64()),
        ("image_filename", pa.string()),
        ("page", pa.string()),
        ("answer", pa.null()),
        ("data_split", pa.string()),
        ("source", pa.string()),
    ]
)


def write_vidore_v1_qa(root: Path) -> Path:
    """8 query rows on 5 pages (rows share pages; one page has no image; two rows repeat an earlier
    row's text, as docvqa's 500 rows hold 451 texts): see ``V1_QA_COUNTS``."""
    rows = []
    for i, (doc, page, text) in enumerate(
        [
            (101, "1", "What is the invoice total?"),
            (101, "2", "Who signed the memo?"),
            (102, "1", "What is the date of the letter?"),
            (103, "1", "Which company sent the fax?"),
            (104, "3", "What is the title of the table?"),
        ]
    ):
        filename = f"{doc}_p{page}.png"
        rows.append(
            {
                "questionId": f"{49000 + i}",
                "query": text,
                "image": {"bytes": png(filename), "path": None},
                "docId": doc,
                "image_filename": filename,
                "page": page,
                "data_split": "test",
                "source": "docvqa",
            }
        )
    rows.append({**rows[0], "questionId": "49100", "query": "What is the amount due on the invoice?"})  # same page
    # Texts repeated on other pages: merged into 49000 (pages 101_p1, 102_p1: two documents, cross_doc)
    # and 49001 (101_p2, 101_p1: pages 1 and 2 of document 101, doc_adjacent).
    rows.append({**rows[2], "questionId": "49101", "query": rows[0]["query"]})
    rows.append({**rows[0], "questionId": "49102", "query": rows[1]["query"]})
    rows[3]["image"] = None  # a row whose image is missing: its page is dropped, so is its query
    _write(root, "data", rows, V1_QA)
    return root


V1_QA_COUNTS = {  # 49002, 49004, 49100 single; 49000 cross_doc, 49001 doc_adjacent (merged); 49003 no page image
    "structures": {"page_single": 3, "page_multi": 0, "doc_adjacent": 1, "doc_near": 0, "doc_far": 0, "cross_doc": 1},
    "kept": {"documents": 3, "pages": 4, "queries": 5, "qrels": 7},
    "dropped": {
        "pages": {"missing_image": 1},
        "queries": {"evidence_not_in_corpus": 1, "merged_duplicate_text": 2},
    },
}


def hub_cache(cache: Path, repo_id: str, write, commit: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """A Hugging Face hub cache holding dataset ``repo_id`` at ``commit`` (refs/main pointing at it), its
    files written by ``write(snapshot_dir)``: what ``snapshot_download`` leaves after a download."""
    repo = cache / f"datasets--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    write(repo / "snapshots" / commit)
    return repo / "snapshots" / commit

"""Fixtures in the public benchmarks' exact hub schemas, small enough to run through mteb's own loaders.

Each ``write_*`` writes a folder as the hub repository holds it: Parquet shards
``<config>/<split>-0000i-of-0000n.parquet`` (or BEIR's JSON lines and TSV), and a ``README.md`` whose
``configs:`` YAML header names each config's data files, as the real cards do, so that
``datasets.load_dataset(folder, "queries", split="test")`` (what mteb's loaders call) reads it. Pages are
64x96 PNGs (importer_fixtures.png). Where the translations of a query are separate rows, each has its
own query id (ViDoRe v2/v3); qrels are graded and carry score-0 rows; ViDoRe v1's BEIR form merges
duplicate query texts into one query with several relevant pages.

What the schemas rest on:
- ViDoRe v2 (``vidore/esg_reports_v2``): importer_fixtures' v2 schema (``corpus-id``, ``image``,
  ``image_filename``; ``query-id``, ``query``, ``language``; ``query-id``, ``corpus-id``, float
  ``score``), read by mteb's ``vidore2_bench_retrieval._load_data``.
- ViDoRe v3 (``vidore/vidore_v3_hr``): importer_fixtures' v3 schema (underscores); mteb reads v3 from
  a per-language conversion (``vidore/vidore_v3_hr_mteb_format``: ``<language>-corpus`` ``id``,
  ``image``, ``text``; ``<language>-queries`` ``id``, ``text``, ``language``; ``<language>-qrels``
  ``query-id``, ``corpus-id``, ``score``; ids ``corpus-test-<n>`` / ``query-test-<n>``), which
  :func:`write_vidore_v3_mteb_format` derives from the same rows.
- ViDoRe v1 BEIR form (``vidore/docvqa_test_subsampled_beir``; mteb reads its copy
  ``mteb/docvqa_test_subsampled_beir``): ``corpus-id``, ``image``; ``query-id``, ``query``; ``query-id``,
  ``corpus-id``, ``score``: no document ids, no file names.
- BEIR DBPedia-Entity (``mteb/dbpedia``): ``corpus.jsonl`` (``_id``, ``title``, ``text``),
  ``queries.jsonl`` (``_id``, ``text``; every split's queries), BEIR's ``qrels/<split>.tsv`` (``query-id
  corpus-id score``, grades 0/1/2) and the same qrels as ``qrels/<split>.jsonl`` (float ``score``) that
  the card's configs name: ``default`` (the qrels), ``corpus``, ``queries`` (one file format per
  repository: ``datasets`` infers one builder for all configs, so the configs cannot name the TSVs).
- mteb's MMLongBench-Doc conversion (``VLM2Vec/MMLongBench-doc``): ``corpus/test-*`` (``corpus-id``
  int, ``image``), ``queries/test-*`` (``query-id`` int, ``query``), ``qrels/test-*`` (``query-id``,
  ``corpus-id``, ``score``). Every page of the question's document is judged with a grade > 0 (mteb's
  descriptive statistics: 48.7 relevant pages per query on average, at least 9, every corpus page
  relevant to some query), the evidence pages higher; the exact grade values (here 2 for evidence
  pages, 1 for the others) are not documented and are the one assumption of this fixture.
- mteb's MMDocIR conversion (``mteb/MMDocIRT2ITRetrieval``): mteb's standard layout, one subset per
  domain, split ``train``: ``<domain>-corpus`` (``id``, ``text``, ``image``), ``<domain>-queries``
  (``id``, ``text``), ``<domain>-qrels`` (``query-id``, ``corpus-id``, ``score``),
  ``<domain>-top_ranked`` (``query-id``, ``corpus-ids``: the pages of the question's document).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from importer_fixtures import IMAGE, V2_CORPUS, V2_QRELS, V2_QUERIES, V3_CORPUS, V3_DOCS, V3_QRELS, V3_QUERIES, png
from importer_fixtures import _write as write_parquet_shards


def hf_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the ``huggingface`` metadata ``datasets.push_to_hub`` writes into each shard, its
    ``image`` column typed ``Image`` (so ``datasets`` decodes it to a PIL image, as it does the hub's)."""
    from datasets import Features, Image

    features = Features.from_arrow_schema(schema)
    if "image" in features:
        features["image"] = Image()
    return schema.with_metadata({"huggingface": json.dumps({"info": {"features": features.to_dict()}})})


def write_shards(root: Path, config: str, rows: list[dict], schema: pa.Schema, split: str = "test") -> None:
    """importer_fixtures' shard writer, with the ``huggingface`` schema metadata."""
    write_parquet_shards(root, config, rows, hf_schema(schema), split=split)


def write_readme(root: Path, configs: dict[str, dict[str, str]], *, default: str | None = None) -> None:
    """The dataset card's ``configs:`` header: config name -> {split: data file pattern}."""
    lines = ["---", "configs:"]
    for name, splits in configs.items():
        lines.append(f"- config_name: {name}")
        if name == default:
            lines.append("  default: true")
        lines.append("  data_files:")
        for split, path in splits.items():
            lines += [f"  - split: {split}", f"    path: {path}"]
    lines += ["---", "", f"# {root.name} (a test fixture in the dataset's hub layout)", ""]
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("\n".join(lines))


def _parquet_configs(names, split: str) -> dict[str, dict[str, str]]:
    return {name: {split: f"{name}/{split}-*"} for name in names}


# ----------------------------------------------------------------------------------------------
# ViDoRe v2: four languages, each translation its own query id
# ----------------------------------------------------------------------------------------------

V2_LANGUAGES = ("english", "french", "spanish", "german")
V2_TOPICS = [  # (text per language, graded qrels: (report, page, score))
    (
        ("scope 1 emissions", "émissions scope 1", "emisiones de alcance 1", "Scope-1-Emissionen"),
        ((1, 2, 1), (1, 3, 1), (2, 5, 0)),
    ),
    (
        ("water use", "consommation d'eau", "uso del agua", "Wasserverbrauch"),
        ((1, 1, 1), (1, 5, 1), (2, 1, 1)),
    ),
    (("board diversity", "diversité du conseil", "diversidad del consejo", "Vielfalt im Vorstand"), ((2, 3, 1),)),
]
V2_PAGES = [(r, p) for r in (1, 2) for p in range(1, 6)]


def v2_query_id(topic: int, language: str) -> int:
    return 100 * (V2_LANGUAGES.index(language) + 1) + topic


def write_vidore_v2_languages(root: Path) -> Path:
    """ViDoRe v2 ESG's schema: 10 pages of two reports, 3 questions x 4 languages (12 query ids), qrels
    repeated per translation, one score-0 row per translation of the first question."""
    write_shards(
        root,
        "corpus",
        [
            {
                "corpus-id": 10 * r + p,
                "image": {"bytes": png(f"esg{r} {p}"), "path": None},
                "image_filename": f"data/esg_report_{r}_page_{p}.png",
            }
            for r, p in V2_PAGES
        ],
        V2_CORPUS,
    )
    queries, qrels = [], []
    for language in V2_LANGUAGES:
        for topic, (texts, judged) in enumerate(V2_TOPICS):
            query_id = v2_query_id(topic, language)
            queries.append({"query-id": query_id, "query": texts[V2_LANGUAGES.index(language)], "language": language})
            qrels += [{"query-id": query_id, "corpus-id": 10 * r + p, "score": float(s)} for r, p, s in judged]
    write_shards(root, "queries", queries, V2_QUERIES)
    write_shards(root, "qrels", qrels, V2_QRELS)
    write_readme(root, _parquet_configs(("corpus", "queries", "qrels"), "test"))
    return root


V2_LANGUAGE_COUNTS = {language: len(V2_TOPICS) for language in V2_LANGUAGES}


# ----------------------------------------------------------------------------------------------
# ViDoRe v3: six languages, underscore columns, graded qrels; and mteb's per-language conversion
# ----------------------------------------------------------------------------------------------

V3_LANGUAGES = ("english", "french", "spanish", "german", "italian", "portuguese")
V3_DOCUMENTS = {
    "hr_a": ["remote work policy", "annual leave days", "parental leave weeks", "training budget", "pension scheme"],
    "hr_b": ["recruitment process", "probation period", "performance review", "promotion criteria"],
}
V3_QUESTIONS = [  # (English text, graded qrels: (doc, page number, score))
    ("How many days of remote work and annual leave?", (("hr_a", 1, 2), ("hr_a", 2, 1), ("hr_b", 3, 0))),
    ("What is the probation period before a performance review?", (("hr_b", 2, 2), ("hr_b", 3, 2), ("hr_b", 4, 1))),
]


def _v3_corpus_ids() -> dict[tuple[str, int], int]:
    ids, n = {}, 0
    for doc, topics in V3_DOCUMENTS.items():
        for page in range(1, len(topics) + 1):
            ids[(doc, page)] = n
            n += 1
    return ids


def v3_query_id(question: int, language: str) -> int:
    return 1000 * (V3_LANGUAGES.index(language) + 1) + question


def _v3_rows() -> tuple[list[dict], list[dict], list[dict]]:
    ids = _v3_corpus_ids()
    corpus = [
        {
            "corpus_id": ids[(doc, page)],
            "image": {"bytes": png(f"{doc} {page}"), "path": None},
            "doc_id": doc,
            "markdown": f"# {doc} page {page}\n\nThe {topic} of the staff.",
            "page_number_in_doc": page,
        }
        for doc, topics in V3_DOCUMENTS.items()
        for page, topic in enumerate(topics, 1)
    ]
    queries, qrels = [], []
    for language in V3_LANGUAGES:
        for question, (text, judged) in enumerate(V3_QUESTIONS):
            query_id = v3_query_id(question, language)
            queries.append(
                {
                    "query_id": query_id,
                    "query": text if language == "english" else f"[{language}] {text}",
                    "language": language,
                    "query_types": ["extractive"],
                    "query_format": "question",
                    "content_type": ["text"],
                    "raw_answers": ["x"],
                    "query_generator": "human",
                    "query_generation_pipeline": "p",
                    "source_type": "document",
                    "query_type_for_generation": "open",
                    "answer": f"answer {question}",
                }
            )
            qrels += [
                {
                    "query_id": query_id,
                    "corpus_id": ids[(doc, page)],
                    "score": score,
                    "content_type": ["text"] if score else ["N/A (If relevance score=0)"],
                    "bounding_boxes": [],
                }
                for doc, page, score in judged
            ]
    return corpus, queries, qrels


def write_vidore_v3_languages(root: Path) -> Path:
    """ViDoRe v3 HR's schema: 9 pages of two documents with markdown, 2 questions x 6 languages (12
    query ids), grades 0/1/2 (a score-0 row per translation of the first question)."""
    corpus, queries, qrels = _v3_rows()
    write_shards(root, "corpus", corpus, V3_CORPUS)
    write_shards(root, "queries", queries, V3_QUERIES)
    write_shards(root, "qrels", qrels, V3_QRELS)
    write_shards(
        root,
        "documents_metadata",
        [
            {
                "file_name": f"{doc}.pdf",
                "doc_id": doc,
                "url": f"https://example.org/{doc}.pdf",
                "doc_type": "report",
                "doc_language": "english",
                "doc_year": "2024",
                "visual_types": ["table"],
                "page_number": len(topics),
                "license": "cc-by-4.0",
            }
            for doc, topics in V3_DOCUMENTS.items()
        ],
        V3_DOCS,
    )
    write_readme(root, _parquet_configs(("corpus", "queries", "qrels", "documents_metadata"), "test"))
    return root


MTEB_CORPUS = pa.schema([("id", pa.string()), ("image", IMAGE), ("text", pa.string())])
MTEB_QUERIES = pa.schema([("id", pa.string()), ("text", pa.string())])
MTEB_QRELS = pa.schema([("query-id", pa.string()), ("corpus-id", pa.string()), ("score", pa.int64())])
MTEB_TOP_RANKED = pa.schema([("query-id", pa.string()), ("corpus-ids", pa.list_(pa.string()))])


def write_vidore_v3_mteb_format(root: Path) -> Path:
    """The same rows as :func:`write_vidore_v3_languages` in the per-language layout mteb's
    Vidore3HrRetrieval reads (``vidore/vidore_v3_hr_mteb_format``): each language its own corpus,
    queries and qrels configs, ids prefixed ``corpus-test-`` / ``query-test-``."""
    corpus, queries, qrels = _v3_rows()
    pages = [{"id": f"corpus-test-{r['corpus_id']}", "image": r["image"], "text": r["markdown"]} for r in corpus]
    language_of = {q["query_id"]: q["language"] for q in queries}
    configs = {}
    for language in V3_LANGUAGES:
        write_shards(root, f"{language}-corpus", pages, MTEB_CORPUS)
        write_shards(
            root,
            f"{language}-queries",
            [{"id": f"query-test-{q['query_id']}", "text": q["query"]} for q in queries if q["language"] == language],
            MTEB_QUERIES,
        )
        write_shards(
            root,
            f"{language}-qrels",
            [
                {
                    "query-id": f"query-test-{r['query_id']}",
                    "corpus-id": f"corpus-test-{r['corpus_id']}",
                    "score": r["score"],
                }
                for r in qrels
                if language_of[r["query_id"]] == language
            ],
            MTEB_QRELS,
        )
        configs |= _parquet_configs((f"{language}-corpus", f"{language}-queries", f"{language}-qrels"), "test")
    write_readme(root, configs)
    return root


V3_LANGUAGE_COUNTS = {language: len(V3_QUESTIONS) for language in V3_LANGUAGES}


# ----------------------------------------------------------------------------------------------
# ViDoRe v1 DocVQA, BEIR form: duplicate query texts merged into one query with several pages
# ----------------------------------------------------------------------------------------------

V1_BEIR_CORPUS = pa.schema([("corpus-id", pa.int64()), ("image", IMAGE)])
V1_BEIR_QUERIES = pa.schema([("query-id", pa.int64()), ("query", pa.string())])
V1_BEIR_QRELS = pa.schema([("query-id", pa.int64()), ("corpus-id", pa.int64()), ("score", pa.int64())])
V1_BEIR_QRELS_ROWS = [  # (query-id, corpus-id, score)
    (0, 0, 1),
    (1, 1, 1),
    (1, 4, 1),
    (1, 6, 1),  # "What is the date?" asked of three pages: one query, three relevant pages
    (2, 2, 1),
    (3, 3, 1),
    (3, 5, 1),
]


def write_vidore_v1_docvqa_beir(root: Path) -> Path:
    """ViDoRe v1 DocVQA's BEIR form: 8 pages, 4 queries, one of them a merged duplicate text with three
    relevant pages and another with two."""
    write_shards(
        root,
        "corpus",
        [{"corpus-id": i, "image": {"bytes": png(f"docvqa {i}"), "path": None}} for i in range(8)],
        V1_BEIR_CORPUS,
    )
    texts = ["What is the invoice total?", "What is the date?", "Who signed the memo?", "What is the title?"]
    write_shards(root, "queries", [{"query-id": i, "query": t} for i, t in enumerate(texts)], V1_BEIR_QUERIES)
    write_shards(
        root, "qrels", [{"query-id": q, "corpus-id": c, "score": s} for q, c, s in V1_BEIR_QRELS_ROWS], V1_BEIR_QRELS
    )
    write_readme(root, _parquet_configs(("corpus", "queries", "qrels"), "test"))
    return root


# ----------------------------------------------------------------------------------------------
# BEIR DBPedia-Entity (mteb/dbpedia): JSON lines and a TSV per split, graded 0/1/2
# ----------------------------------------------------------------------------------------------

DBPEDIA_PASSAGES = {
    "<dbpedia:Alan_Turing>": ("Alan Turing", "English mathematician and computer scientist, father of computing."),
    "<dbpedia:Enigma_machine>": ("Enigma machine", "A cipher machine broken at Bletchley Park during the war."),
    "<dbpedia:Bletchley_Park>": ("Bletchley Park", "The estate where codebreakers worked, Turing among them."),
    "<dbpedia:Ada_Lovelace>": ("Ada Lovelace", "English mathematician who wrote the first computer program."),
    "<dbpedia:Charles_Babbage>": ("Charles Babbage", "Inventor of the analytical engine, a mechanical computer."),
    "<dbpedia:Grace_Hopper>": ("Grace Hopper", "American computer scientist who built the first compiler."),
}
DBPEDIA_QUERIES = {
    "INEX_LD-2012318": ("turing codebreaker bletchley", "test"),
    "QALD2_te-19": ("first computer program mathematician", "test"),
    "SemSearch_ES-7": ("compiler inventor", "test"),
    "TREC_Entity-9": ("mechanical computer engine", "dev"),  # another split's query: not in the test set
}
DBPEDIA_QRELS = {  # split -> rows (query-id, corpus-id, score)
    "test": [
        ("INEX_LD-2012318", "<dbpedia:Alan_Turing>", 2),
        ("INEX_LD-2012318", "<dbpedia:Bletchley_Park>", 1),
        ("INEX_LD-2012318", "<dbpedia:Enigma_machine>", 1),
        ("INEX_LD-2012318", "<dbpedia:Grace_Hopper>", 0),
        ("QALD2_te-19", "<dbpedia:Ada_Lovelace>", 2),
        ("QALD2_te-19", "<dbpedia:Charles_Babbage>", 0),
        ("SemSearch_ES-7", "<dbpedia:Grace_Hopper>", 2),
        ("SemSearch_ES-7", "<dbpedia:Alan_Turing>", 0),
    ],
    "dev": [("TREC_Entity-9", "<dbpedia:Charles_Babbage>", 2)],
}


def write_dbpedia(root: Path) -> Path:
    """mteb/dbpedia's layout: 6 passages, 3 test queries (grades 0/1/2) and a dev query."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / "corpus.jsonl").open("w") as out:
        for passage_id, (title, text) in DBPEDIA_PASSAGES.items():
            out.write(json.dumps({"_id": passage_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w") as out:
        for query_id, (text, _) in DBPEDIA_QUERIES.items():
            out.write(json.dumps({"_id": query_id, "text": text}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    for split, rows in DBPEDIA_QRELS.items():
        lines = ["query-id\tcorpus-id\tscore", *(f"{q}\t{c}\t{s}" for q, c, s in rows)]
        (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
        records = [json.dumps({"query-id": q, "corpus-id": c, "score": float(s)}) for q, c, s in rows]
        (root / "qrels" / f"{split}.jsonl").write_text("\n".join(records) + "\n")
    write_readme(
        root,
        {
            "default": {"test": "qrels/test.jsonl", "dev": "qrels/dev.jsonl"},
            "corpus": {"corpus": "corpus.jsonl"},
            "queries": {"queries": "queries.jsonl"},
        },
        default="default",
    )
    return root


# ----------------------------------------------------------------------------------------------
# mteb's MMLongBench-Doc conversion (VLM2Vec/MMLongBench-doc): graded over the document's pages
# ----------------------------------------------------------------------------------------------

MMLB_DOCUMENTS = {"report": 5, "slides": 4}
MMLB_QUESTIONS = [  # (text, document, evidence pages 0-based)
    ("What is the revenue growth in the report?", "report", (1,)),
    ("Which two slides show the roadmap?", "slides", (0, 2)),
    ("What is the conclusion of the report?", "report", (4,)),
]
MMLB_CORPUS = pa.schema([("corpus-id", pa.int64()), ("image", IMAGE)])
MMLB_QUERIES = pa.schema([("query-id", pa.int64()), ("query", pa.string())])
MMLB_QRELS = pa.schema([("query-id", pa.int64()), ("corpus-id", pa.int64()), ("score", pa.int64())])


def mmlb_corpus_ids() -> dict[tuple[str, int], int]:
    ids, n = {}, 0
    for doc, pages in MMLB_DOCUMENTS.items():
        for page in range(pages):
            ids[(doc, page)] = n
            n += 1
    return ids


def write_mmlongbench_doc_mteb(root: Path) -> Path:
    """9 pages of two documents (no document id in the corpus), 3 questions: every page of the question's
    document judged, evidence pages 2, the others 1 (see the module docstring)."""
    ids = mmlb_corpus_ids()
    write_shards(
        root,
        "corpus",
        [{"corpus-id": n, "image": {"bytes": png(f"{doc} {page}"), "path": None}} for (doc, page), n in ids.items()],
        MMLB_CORPUS,
    )
    write_shards(
        root, "queries", [{"query-id": q, "query": t} for q, (t, _, _) in enumerate(MMLB_QUESTIONS)], MMLB_QUERIES
    )
    write_shards(
        root,
        "qrels",
        [
            {"query-id": q, "corpus-id": ids[(doc, page)], "score": 2 if page in evidence else 1}
            for q, (_, doc, evidence) in enumerate(MMLB_QUESTIONS)
            for page in range(MMLB_DOCUMENTS[doc])
        ],
        MMLB_QRELS,
    )
    write_readme(root, _parquet_configs(("corpus", "queries", "qrels"), "test"))
    return root


# ----------------------------------------------------------------------------------------------
# mteb's MMDocIR conversion (mteb/MMDocIRT2ITRetrieval): one subset per domain, split train
# ----------------------------------------------------------------------------------------------

MMDOCIR_DOMAINS = (
    "academic_paper",
    "admin_industry",
    "brochure",
    "financial_report",
    "government",
    "guidebook",
    "laws",
    "news",
    "research_report",
    "tutorial_workshop",
)
MMDOCIR_SPLIT = "train"


def mmdocir_layout(domain: int) -> tuple[dict[str, list[str]], list[tuple[str, str, dict[str, int]]]]:
    """A domain's documents (doc -> page ids) and questions (query id, text, {page id: score}): two
    documents of 3 and 8 pages; two questions in the first four domains, one in the others; the second
    with evidence pages 2 and 7 of the longer document and a score-0 row."""
    name = MMDOCIR_DOMAINS[domain]
    docs = {f"{name}-d{d}": [f"{domain * 100 + d * 10 + p}" for p in range(n)] for d, n in ((0, 3), (1, 8))}
    first, second = docs[f"{name}-d0"], docs[f"{name}-d1"]
    questions = [(f"{name}-q0", f"what does the {name} say on page two", {first[1]: 1})]
    if domain < 4:
        questions.append(
            (f"{name}-q1", f"which {name} pages hold the table", {second[1]: 1, second[6]: 1, second[0]: 0})
        )
    return docs, questions


def write_mmdocir_mteb(root: Path, domains: int = len(MMDOCIR_DOMAINS)) -> Path:
    """mteb/MMDocIRT2ITRetrieval's layout for the first ``domains`` domains (all ten by default): per
    domain a corpus with page text, its queries, qrels and top_ranked (each question's document)."""
    configs = {}
    for d in range(domains):
        name = MMDOCIR_DOMAINS[d]
        docs, questions = mmdocir_layout(d)
        pages = [
            {"id": page, "image": {"bytes": png(f"{name} {page}"), "path": None}, "text": f"{name} page {page} text"}
            for doc in docs.values()
            for page in doc
        ]
        document_of = {page: doc for doc, ids in docs.items() for page in ids}
        write_shards(root, f"{name}-corpus", pages, MTEB_CORPUS, split=MMDOCIR_SPLIT)
        write_shards(
            root, f"{name}-queries", [{"id": q, "text": t} for q, t, _ in questions], MTEB_QUERIES, split=MMDOCIR_SPLIT
        )
        write_shards(
            root,
            f"{name}-qrels",
            [{"query-id": q, "corpus-id": p, "score": s} for q, _, judged in questions for p, s in judged.items()],
            MTEB_QRELS,
            split=MMDOCIR_SPLIT,
        )
        write_shards(
            root,
            f"{name}-top_ranked",
            [{"query-id": q, "corpus-ids": docs[document_of[next(iter(judged))]]} for q, _, judged in questions],
            MTEB_TOP_RANKED,
            split=MMDOCIR_SPLIT,
        )
        configs |= _parquet_configs(
            (f"{name}-corpus", f"{name}-queries", f"{name}-qrels", f"{name}-top_ranked"), MMDOCIR_SPLIT
        )
    write_readme(root, configs)
    return root


def mmdocir_counts(domains: int = len(MMDOCIR_DOMAINS)) -> dict[str, int]:
    """Queries per domain (subset) of :func:`write_mmdocir_mteb`, counted from its layout."""
    return {MMDOCIR_DOMAINS[d]: len(mmdocir_layout(d)[1]) for d in range(domains)}


# ----------------------------------------------------------------------------------------------
# The hub layouts of the PDF benchmarks and of ViDoRe v1's QA form (the dataset configs' sources)
# ----------------------------------------------------------------------------------------------

PDF_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pdf_importers"


def write_longdocurl_hub(root: Path) -> Path:
    """``dengchao/LongDocURL``'s layout: ``LongDocURL_public.jsonl`` (the question records of
    tests/fixtures/pdf_importers/longdocurl) and ``pdf_files.tar.gz`` holding document 4000001's PDF
    (9 pages with a text layer); document 4000002's pages as PNGs under ``pdf_pngs/``."""
    import tarfile

    from PIL import Image

    from helpers import make_pdf

    root.mkdir(parents=True, exist_ok=True)
    (root / "LongDocURL_public.jsonl").write_text((PDF_FIXTURES / "longdocurl" / "LongDocURL.jsonl").read_text())
    pdf = make_pdf(root / "4000001.pdf", [[f"lda{p:02d} is on this page."] for p in range(1, 10)])
    with tarfile.open(root / "pdf_files.tar.gz", "w:gz") as tar:
        tar.add(pdf, arcname="pdf_files/4000001.pdf")
    pdf.unlink()
    pngs = root / "pdf_pngs" / "4000-4999" / "4000"
    pngs.mkdir(parents=True)
    for index in range(6):
        Image.new("RGB", (61, 79), (255, 255, 255 - index)).save(pngs / f"4000002_{index}.png")
    return root


def write_vidore_v1_qa_hub(root: Path) -> Path:
    """``vidore/docvqa_test_subsampled``: importer_fixtures' QA-form rows under ``data/`` and the card's
    configs header."""
    from importer_fixtures import write_vidore_v1_qa

    write_vidore_v1_qa(root)
    write_readme(root, {"default": {"test": "data/test-*"}})
    return root

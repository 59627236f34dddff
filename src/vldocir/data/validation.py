"""The rules a benchmark must satisfy, checked on load.

Each rule is vectorised over the key columns only (texts and images are never read here), so a
paper-scale benchmark validates in seconds. The first broken rule raises an error naming the table,
the first offending row and the rule, with the number of rows that break it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from vldocir.data.schema import (
    EVIDENCE_STRUCTURES,
    MULTI_PAGE_STRUCTURES,
    SINGLE_PAGE_STRUCTURES,
    TABLES,
    WITHIN_DOC_STRUCTURES,
)

if TYPE_CHECKING:
    from vldocir.data.benchmark import Benchmark


def _row_name(frame: pd.DataFrame, key: tuple[str, ...], index) -> str:
    row = frame.loc[index]
    if len(key) == 1:
        return str(row[key[0]])
    return ", ".join(f"{k}={row[k]}" for k in key)


def _is_arrow_string(column: pd.Series) -> bool:
    return isinstance(column.dtype, pd.StringDtype) and column.dtype.storage == "pyarrow"


def _isin(values: pd.Series, allowed: pd.Series) -> np.ndarray:
    """``values.isin(allowed)`` as a boolean array; for two Arrow-backed string columns through
    ``pyarrow.compute.is_in`` directly (pandas converts ``allowed`` value by value, which takes
    seconds for a few hundred thousand ids). Same answer, nulls included: a null matches a null."""
    if _is_arrow_string(values) and _is_arrow_string(allowed):
        if not len(allowed):
            return np.zeros(len(values), dtype=bool)
        value_set = pa.array(allowed.array)
        if isinstance(value_set, pa.ChunkedArray):
            value_set = value_set.combine_chunks()
        return np.asarray(pc.is_in(pa.array(values.array), value_set=value_set), dtype=bool)
    return values.isin(allowed).to_numpy()


def validate_tables(bench: "Benchmark", error: Callable[[str, str | None, str], Exception]) -> None:
    """Raise ``error(table, row, rule)`` for the first rule the benchmark breaks."""
    frames = {
        "documents": bench.arrow("documents", ["doc_id", "n_pages"]).to_pandas(),
        "pages": bench.arrow("pages", ["page_id", "doc_id", "page_index"]).to_pandas(),
        "elements": bench.arrow("elements", ["doc_id", "element_id", "page_index"]).to_pandas(),
        "queries": bench.arrow("queries", ["query_id", "evidence_structure"]).to_pandas(),
        "qrels": bench.arrow("qrels", ["query_id", "page_id", "doc_id", "element_ids"]).to_pandas(),
    }

    def check(table: str, bad: pd.Series | np.ndarray, rule: str, frame: pd.DataFrame | None = None) -> None:
        frame = frames[table] if frame is None else frame
        bad = np.asarray(bad, dtype=bool)
        if bad.any():
            first = frame.index[np.flatnonzero(bad)[0]]
            n_bad = int(bad.sum())
            more = f" ({n_bad} rows break this rule)" if n_bad > 1 else ""
            raise error(table, _row_name(frame, TABLES[table].key, first), rule + more)

    for name, frame in frames.items():
        for column in TABLES[name].key:
            values = frame[column]
            empty = values.isna() | (values.astype("string") == "")
            if empty.any():
                raise error(name, f"row {int(np.flatnonzero(empty.to_numpy())[0])}", f"key column '{column}' is empty")
        check(name, frame.duplicated(list(TABLES[name].key), keep="first"), f"duplicate id {TABLES[name].key}")

    docs, pages, elements, queries, qrels = (frames[n] for n in ("documents", "pages", "elements", "queries", "qrels"))
    n_pages_of = docs.set_index("doc_id")["n_pages"]

    check("documents", docs["n_pages"] < 1, "a document must have at least one page (n_pages >= 1)")
    check("pages", ~_isin(pages["doc_id"], docs["doc_id"]), "page refers to a document missing from 'documents'")
    doc_n_pages = pages["doc_id"].map(n_pages_of)
    check(
        "pages",
        (pages["page_index"] < 0) | (pages["page_index"] >= doc_n_pages),
        "page_index outside 0..n_pages-1 of its document",
    )
    check(
        "pages",
        pages.duplicated(["doc_id", "page_index"]),
        "two pages of one document share a page_index",
    )
    counted = pages.groupby("doc_id").size().reindex(docs["doc_id"], fill_value=0).to_numpy()
    check("documents", counted != docs["n_pages"].to_numpy(), "n_pages differs from the number of pages in 'pages'")

    check("elements", ~_isin(elements["doc_id"], docs["doc_id"]), "element refers to a document missing from 'documents'")
    element_n_pages = elements["doc_id"].map(n_pages_of)
    check(
        "elements",
        (elements["page_index"] < 0) | (elements["page_index"] >= element_n_pages),
        "page_index outside 0..n_pages-1 of its document",
    )

    check(
        "queries",
        ~queries["evidence_structure"].isin(EVIDENCE_STRUCTURES),
        f"evidence_structure must be one of {', '.join(EVIDENCE_STRUCTURES)}",
    )
    check("qrels", ~_isin(qrels["query_id"], queries["query_id"]), "qrel refers to a query missing from 'queries'")
    check("qrels", ~_isin(qrels["page_id"], pages["page_id"]), "qrel refers to a page missing from 'pages'")
    page_doc = pages.set_index("page_id")["doc_id"]
    check("qrels", qrels["doc_id"] != qrels["page_id"].map(page_doc), "qrel doc_id differs from its page's doc_id")

    page_index = pages.set_index("page_id")["page_index"]
    grouped = qrels.assign(page_index=qrels["page_id"].map(page_index)).groupby("query_id")
    evidence = grouped.agg(n_pages=("page_id", "size"), n_docs=("doc_id", "nunique"))
    # max - min per query, vectorised (a Python lambda per query took ~10 s at paper scale)
    evidence["span"] = grouped["page_index"].max() - grouped["page_index"].min()
    per_query = queries.join(evidence, on="query_id")
    structure = per_query["evidence_structure"]
    check("queries", per_query["n_pages"].isna(), "query has no evidence page in 'qrels'", per_query)
    per_query = per_query.fillna({"n_pages": 0, "n_docs": 0, "span": 0})
    check(
        "queries",
        structure.isin(SINGLE_PAGE_STRUCTURES) & (per_query["n_pages"] != 1),
        "page_single/page_multi queries must have evidence on exactly one page",
        per_query,
    )
    check(
        "queries",
        structure.isin(MULTI_PAGE_STRUCTURES) & (per_query["n_pages"] < 2),
        "multi-page structures must have evidence on at least two pages",
        per_query,
    )
    check(
        "queries",
        structure.isin(WITHIN_DOC_STRUCTURES) & (per_query["n_docs"] != 1),
        "doc_adjacent/doc_near/doc_far evidence must lie in one document",
        per_query,
    )
    check(
        "queries",
        (structure == "doc_adjacent") & (per_query["span"] != per_query["n_pages"] - 1),
        "doc_adjacent evidence pages must be consecutive",
        per_query,
    )
    check(
        "queries",
        (structure == "cross_doc") & (per_query["n_docs"] < 2),
        "cross_doc evidence must lie in at least two documents",
        per_query,
    )

    cited = qrels[["query_id", "page_id", "doc_id", "element_ids"]].explode("element_ids").dropna(subset=["element_ids"])
    if len(cited):
        known = pd.MultiIndex.from_frame(elements[["doc_id", "element_id"]])
        wanted = pd.MultiIndex.from_arrays([cited["doc_id"], cited["element_ids"]])
        missing = ~wanted.isin(known)
        if missing.any():
            first = cited.iloc[int(np.flatnonzero(missing)[0])]
            raise error(
                "qrels",
                f"query_id={first['query_id']}, page_id={first['page_id']}",
                f"element id '{first['element_ids']}' is not in 'elements' for document {first['doc_id']}"
                + (f" ({int(missing.sum())} element references break this rule)" if missing.sum() > 1 else ""),
            )

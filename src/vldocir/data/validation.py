"""The rules a benchmark must satisfy, checked on load.

Each rule is vectorised over the key columns and the query texts; image paths are checked with one
directory listing per folder (page texts and inline image bytes are never read here), so a
paper-scale benchmark validates in seconds. The first
broken rule raises an error naming the table, the first offending row and the rule, with the number
of rows that break it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import re
import stat
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from vldocir.data.schema import (
    CORPUS_ONLY_METHOD,
    DECLARED_SOURCES_KEY,
    MULTI_PAGE_STRUCTURES,
    SINGLE_PAGE_STRUCTURES,
    SOURCES,
    STRUCTURE_LABELS,
    TABLES,
    UNKNOWN_DOCUMENTS_STRUCTURE,
    WITHIN_DOC_STRUCTURES,
)

if TYPE_CHECKING:
    from vldocir.data.benchmark import Benchmark


ID_RULE = "an id names files and folders: no '/' or '\\', not '.' or '..', no control character or line break"
"""What :func:`id_problem` enforces, in words (for error messages and docs)."""

_CONTROL_CATEGORIES = ("Cc", "Zl", "Zp")  # control characters (newline, tab, NUL, DEL, C1), line/paragraph separators


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a query, document or element id, or None when it can: the one rule
    for ids from any source (a query file, a document folder or index, an importer's files).

    Ids name files and folders (page images, caches, run files) and are printed one per line, so an
    id may not hold a path separator (``/``, ``\\``), be ``.`` or ``..`` (with no separator, a
    ``..`` inside a name such as ``a..b`` reaches no other folder), or hold a control character
    (newline, tab, NUL, ...) or a Unicode line or paragraph separator; it must not be empty."""
    if not isinstance(value, str):
        return f"is not a string ({type(value).__name__})"
    if not value:
        return "is empty"
    for separator in ("/", "\\"):
        if separator in value:
            return f"holds a path separator {separator!r}"
    if value in (".", ".."):
        return f"is {value!r}, a folder's own name"
    for char in value:
        category = unicodedata.category(char)
        if category in _CONTROL_CATEGORIES:
            line_break = category != "Cc" or char in "\n\r\v\f\x1c\x1d\x1e\x85"
            return f"holds the control character U+{ord(char):04X}" + (" (a line break)" if line_break else "")
    return None


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


Error = Callable[[str, "str | None", str], Exception]


@functools.cache
def rules_digest() -> str:
    """A digest of what decides whether a benchmark is valid: the source of this module, of the
    schema and of the table reader, and the pandas and pyarrow versions. A memo of a past
    validation (:mod:`vldocir.data.fingerprint`) is trusted only under the same rules, so editing a
    rule needs no version to be bumped by hand."""
    digest = hashlib.blake2b(f"pandas {pd.__version__} pyarrow {pa.__version__}".encode(), digest_size=16)
    for module in ("vldocir.data.validation", "vldocir.data.schema", "vldocir.data.tables"):
        digest.update(Path(importlib.import_module(module).__file__).read_bytes())
    return digest.hexdigest()


def validate_tables(bench: Benchmark, error: Error) -> None:
    """Raise ``error(table, row, rule)`` for the first rule the benchmark breaks."""
    frames = {
        "documents": bench.arrow("documents", ["doc_id", "n_pages", "source"]).to_pandas(),
        "pages": bench.arrow("pages", ["page_id", "doc_id", "page_index"]).to_pandas(),
        "elements": bench.arrow("elements", ["doc_id", "element_id", "page_index"]).to_pandas(),
        "queries": bench.arrow("queries", ["query_id", "evidence_structure", "text", "source"]).to_pandas(),
        "qrels": bench.arrow("qrels", ["query_id", "page_id", "doc_id", "element_ids", "grade"]).to_pandas(),
    }

    def check(
        table: str, bad: pd.Series | np.ndarray, rule: str | Callable[[int], str], frame: pd.DataFrame | None = None
    ) -> None:
        """Raise for the first row where ``bad`` holds; ``rule`` may name that row's value
        (a callable given the row's position)."""
        frame = frames[table] if frame is None else frame
        bad = np.asarray(bad, dtype=bool)
        if bad.any():
            position = int(np.flatnonzero(bad)[0])
            n_bad = int(bad.sum())
            more = f" ({n_bad} rows break this rule)" if n_bad > 1 else ""
            text = rule(position) if callable(rule) else rule
            raise error(table, _row_name(frame, TABLES[table].key, frame.index[position]), text + more)

    built = bench.info.get("built_by")
    built_queries = built.get("queries") if isinstance(built, dict) else None
    corpus_only = isinstance(built_queries, dict) and built_queries.get("method") == CORPUS_ONLY_METHOD
    for name, frame in frames.items():
        if not len(frame) and not TABLES[name].may_be_empty and not (corpus_only and name in ("queries", "qrels")):
            raise error(name, None, "the table has no rows; a benchmark needs at least one")
    for name, frame in frames.items():
        for column in TABLES[name].key:
            values = frame[column]
            empty = values.isna() | (values.astype("string") == "")
            if empty.any():
                raise error(name, f"row {int(np.flatnonzero(empty.to_numpy())[0])}", f"key column '{column}' is empty")
        check(name, frame.duplicated(list(TABLES[name].key), keep="first"), f"duplicate id {TABLES[name].key}")
    for name, frame in frames.items():
        for column in TABLES[name].not_null:
            check(name, frame[column].isna(), f"column '{column}' is null")

    docs, pages, elements, queries, qrels = (frames[n] for n in ("documents", "pages", "elements", "queries", "qrels"))
    n_pages_of = docs.set_index("doc_id")["n_pages"]
    # Lookups are cast to float: mapping an empty string column keeps the string dtype, and an
    # unknown id gives NaN, which then fails no comparison (its own rule reports it).

    check("documents", docs["n_pages"] < 1, "a document must have at least one page (n_pages >= 1)")
    check("pages", ~_isin(pages["doc_id"], docs["doc_id"]), "page refers to a document missing from 'documents'")
    doc_n_pages = pages["doc_id"].map(n_pages_of).astype("float64")
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
    _check_images(bench, check)

    check(
        "elements", ~_isin(elements["doc_id"], docs["doc_id"]), "element refers to a document missing from 'documents'"
    )
    element_n_pages = elements["doc_id"].map(n_pages_of).astype("float64")
    check(
        "elements",
        (elements["page_index"] < 0) | (elements["page_index"] >= element_n_pages),
        "page_index outside 0..n_pages-1 of its document",
    )

    check(
        "queries",
        ~queries["evidence_structure"].isin(STRUCTURE_LABELS),
        f"evidence_structure must be one of {', '.join(STRUCTURE_LABELS)}",
    )
    # Retrievers tokenise and encode every query: a missing text would crash one of them late.
    blank = queries["text"].isna() | (queries["text"].astype("string").str.strip() == "")
    check("queries", blank, "query text is null, empty or whitespace only")
    _check_sources(bench.info, docs, queries, check, error)
    if not len(queries) and not len(qrels):
        return  # a corpus without queries (allowed above only when built so): no query rule applies
    check("qrels", ~_isin(qrels["query_id"], queries["query_id"]), "qrel refers to a query missing from 'queries'")
    check("qrels", ~_isin(qrels["page_id"], pages["page_id"]), "qrel refers to a page missing from 'pages'")
    page_doc = pages.set_index("page_id")["doc_id"]
    check("qrels", qrels["doc_id"] != qrels["page_id"].map(page_doc), "qrel doc_id differs from its page's doc_id")

    if not pd.api.types.is_integer_dtype(qrels["grade"]):
        raise error("qrels", None, f"column 'grade' has type {qrels['grade'].dtype}, expected integers")
    check("qrels", qrels["grade"] < 0, "grade is negative (0: not relevant, > 0: evidence, larger is more relevant)")
    qrels = qrels[qrels["grade"] > 0]  # (a grade-0 qrel is not evidence: it shapes no structure)

    page_index = pages.set_index("page_id")["page_index"]
    grouped = qrels.assign(page_index=qrels["page_id"].map(page_index).astype("float64")).groupby("query_id")
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
        (structure.isin(MULTI_PAGE_STRUCTURES) | (structure == UNKNOWN_DOCUMENTS_STRUCTURE))
        & (per_query["n_pages"] < 2),
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

    cited = qrels[["query_id", "page_id", "doc_id", "element_ids"]].explode("element_ids")
    cited = cited.dropna(subset=["element_ids"])
    if len(cited):
        known = pd.MultiIndex.from_frame(elements[["doc_id", "element_id"]])
        wanted = pd.MultiIndex.from_arrays([cited["doc_id"], cited["element_ids"]])
        missing = ~wanted.isin(known)
        if missing.any():
            first = cited.iloc[int(np.flatnonzero(missing)[0])]
            if not len(elements):  # legal on its own, but then no qrel may cite an element
                raise error(
                    "qrels",
                    f"query_id={first['query_id']}, page_id={first['page_id']}",
                    f"cites element id '{first['element_ids']}' but the 'elements' table has no rows"
                    + (f" ({int(missing.sum())} element references break this rule)" if missing.sum() > 1 else ""),
                )
            raise error(
                "qrels",
                f"query_id={first['query_id']}, page_id={first['page_id']}",
                f"element id '{first['element_ids']}' is not in 'elements' for document {first['doc_id']}"
                + (f" ({int(missing.sum())} element references break this rule)" if missing.sum() > 1 else ""),
            )


def _check_sources(info: dict, docs: pd.DataFrame, queries: pd.DataFrame, check: Callable, error: Error) -> None:
    """Documents and queries name a source the benchmark declares (``benchmark.json`` ``sources``;
    none declared: the paper's four). A null source is not checked."""
    declared = info.get(DECLARED_SOURCES_KEY, list(SOURCES))
    if not isinstance(declared, list) or not declared or not all(isinstance(s, str) and s for s in declared):
        raise error("benchmark.json", None, f"'{DECLARED_SOURCES_KEY}' must be a non-empty list of source names")
    allowed = pd.Series(declared, dtype=docs["source"].dtype if len(docs) else None)
    for table, frame in (("documents", docs), ("queries", queries)):
        source = frame["source"]
        unknown = source.notna().to_numpy() & ~_isin(source, allowed.astype(source.dtype))
        check(
            table,
            unknown,
            lambda i, frame=frame: (
                f"source {frame['source'].iloc[i]!r} is not one the benchmark "
                f"declares ({', '.join(declared)}; benchmark.json '{DECLARED_SOURCES_KEY}')"
            ),
        )


# ----------------------------------------------------------------------------------------------
# Page images
# ----------------------------------------------------------------------------------------------

_WINDOWS_ABSOLUTE = re.compile(r"^([A-Za-z]:|[\\/])")

IMAGE_PATH_RULES = {
    "absolute": "is absolute: image paths must be relative to the benchmark directory",
    "outside": "resolves outside the benchmark directory (through '..' or a symbolic link): "
    "image paths must stay inside it",
    "missing": "does not exist: an image path must name a file inside the benchmark directory",
    "not_file": "is not a regular file: an image path must name a file inside the benchmark directory",
    "invalid": "is not a usable file path",
}
"""What can be wrong with an image path, by kind (the kind's rows are counted together)."""


def _check_images(bench: Benchmark, check: Callable) -> None:
    """Every page has an image or none has (text-only benchmarks), and image files read by path
    lie inside the benchmark directory: a path is data from the benchmark's author, and the
    fingerprint, the encoders and the viewer open it."""
    refs = bench.image_refs().to_pandas()
    path = refs["path"]
    has_path = (path.notna() & (path.astype("string") != "")).to_numpy(dtype=bool)
    has_bytes = refs["has_bytes"].to_numpy(dtype=bool)
    has_image = has_bytes | has_path
    if has_image.any():
        check("pages", ~has_image, "page has no image (neither bytes nor a path) while other pages have one", refs)
    from_file = has_path & ~has_bytes  # inline bytes win: then the path is never opened
    files = refs[from_file].reset_index(drop=True)
    kinds = np.array(image_path_problems(bench.root, files["path"].tolist()), dtype=object)
    for kind, text in IMAGE_PATH_RULES.items():
        check("pages", kinds == kind, lambda i, text=text: f"image path {files['path'].iloc[i]!r} {text}", files)


def image_path_problems(root: Path, paths: list[str]) -> list[str | None]:
    """Per path, the kind of problem (a key of :data:`IMAGE_PATH_RULES`) or None when it names a
    regular file inside ``root``, symbolic links resolved (see :func:`allowed_roots`).

    Reads each distinct directory once (``scandir``, whose entry types need no ``stat`` per file)
    and ``lstat``s only each directory component and each symbolic link, so 388,548 pages in 29,641
    document folders check in about a second.
    """
    resolver = _Resolver(os.path.realpath(root), allowed_roots(root))
    files_in = resolver.files_in  # (bound once: the loop below runs once per page)
    problems: list[str | None] = []
    for relative in paths:
        # The common case in a few dict lookups: a plain file listed in a directory inside the root.
        head, _, tail = relative.rpartition("/")
        files = files_in(head)
        if files is not None and tail in files and not relative.startswith(("/", "\\")) and ":" not in relative[:2]:
            problems.append(None)
        else:
            problems.append(_slow_problem(resolver, relative))
    return problems


def _slow_problem(resolver: _Resolver, relative: str) -> str | None:
    if _WINDOWS_ABSOLUTE.match(relative):  # (also catches POSIX absolute paths: a leading '/')
        return "absolute"
    if "\0" in relative:
        return "invalid"
    return resolver.problem(relative)


def allowed_roots(root: Path) -> list[str]:
    """Where image files may resolve to: the benchmark directory and, for a Hugging Face hub
    snapshot (``.../datasets--org--name/snapshots/<rev>/``), its repository's ``blobs/`` folder,
    which the snapshot's files are symbolic links into."""
    real_root = os.path.realpath(root)
    roots = [real_root]
    snapshots = os.path.dirname(real_root)
    if os.path.basename(snapshots) == "snapshots":
        blobs = os.path.join(os.path.dirname(snapshots), "blobs")
        if os.path.isdir(blobs):
            roots.append(os.path.realpath(blobs))
    return roots


def outside_target(path: str | Path, folder: str | Path) -> str | None:
    """Where ``path`` really lies (symbolic links resolved) when that is outside ``folder``'s real
    path, else None: a link that leaves its folder is refused or skipped, never read (a folder
    someone hands you may hold ``evil.html -> /etc/passwd``). Only ``lstat``s, never opens."""
    real = os.path.realpath(path)
    root = os.path.realpath(folder)
    return None if real == root or real.startswith(root.rstrip(os.sep) + os.sep) else real


_FILE, _LINK, _OTHER = 0, 1, 2


class _Resolver:
    """Resolves relative paths under one real (symlink-free) root, caching per directory."""

    def __init__(self, real_root: str, allowed: list[str]):
        self.real_root = real_root
        self.prefixes = tuple(r.rstrip(os.sep) + os.sep for r in allowed)
        self.real_dirs: dict[str, str] = {"": real_root}
        self.listings: dict[str, dict[str, int] | None] = {}
        self.plain_files: dict[str, frozenset[str] | None] = {}

    def inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.prefixes)

    def real_dir(self, head: str) -> str:
        """The real path of directory ``head`` (relative to the root): one ``lstat`` per component
        the first time, as each parent is already known to be real."""
        real = self.real_dirs.get(head)
        if real is None:
            parent, _, name = head.rpartition("/")
            base = self.real_dir(parent)
            if name in ("", "."):
                real = base
            elif name == "..":
                real = os.path.dirname(base)  # base has no symlinks: its lexical parent is real
            else:
                candidate = os.path.join(base, name)
                real = os.path.realpath(candidate) if os.path.islink(candidate) else candidate
            self.real_dirs[head] = real
        return real

    def files_in(self, head: str) -> frozenset[str] | None:
        """Names of the regular files (not links) in directory ``head`` if it lies inside the root."""
        try:
            return self.plain_files[head]
        except KeyError:
            pass
        if head.startswith(("/", "\\")) or ":" in head[:2]:
            files = None  # absolute: the slow path names the rule
        else:
            real = self.real_dir(head)
            listing = self.listing(real) if self.inside(real) else None
            files = frozenset(n for n, kind in listing.items() if kind == _FILE) if listing is not None else None
        self.plain_files[head] = files
        return files

    def listing(self, real_dir: str) -> dict[str, int] | None:
        """Name -> file, link or other, for one directory (None if it cannot be listed)."""
        if real_dir not in self.listings:
            try:
                with os.scandir(real_dir) as entries:
                    self.listings[real_dir] = {
                        e.name: _LINK if e.is_symlink() else _FILE if e.is_file(follow_symlinks=False) else _OTHER
                        for e in entries
                    }
            except OSError:
                self.listings[real_dir] = None
        return self.listings[real_dir]

    def problem(self, relative: str) -> str | None:
        head, _, tail = relative.rpartition("/")
        if tail in ("", ".", ".."):  # names a directory
            return "outside" if not self.inside(self.real_dir(relative)) else "not_file"
        real_dir = self.real_dir(head)
        if not self.inside(real_dir):
            return "outside"
        full = os.path.join(real_dir, tail)
        listing = self.listing(real_dir)
        kind = listing.get(tail) if listing is not None else None
        if kind is None:  # not listed (or a case-insensitive filesystem): ask the file itself
            try:
                info = os.lstat(full)
            except OSError:
                return "missing"
            kind = _LINK if stat.S_ISLNK(info.st_mode) else _FILE if stat.S_ISREG(info.st_mode) else _OTHER
        if kind == _LINK:
            if not self.inside(os.path.realpath(full)):
                return "outside"
            try:
                return None if stat.S_ISREG(os.stat(full).st_mode) else "not_file"
            except OSError:
                return "missing"  # a dangling link
        return None if kind == _FILE else "not_file"

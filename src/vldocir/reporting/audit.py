"""The query audit of App. A.7 (Table 12) and the bounding-box census, for any benchmark.

1. :func:`sample_queries` draws a seeded stratified sample per source x evidence structure (the
   paper: 50 Cross-Doc and 30 of every other structure per source, 800 in all);
2. :func:`export_review` writes it as a review sheet (``sheet.csv``, one row per query with empty
   ``verdict``, ``issue`` and ``comment`` columns) plus ``review/index.html``, which shows each
   query's question, answer and evidence pages with the cited boxes (drawn by the failure viewer);
3. :func:`import_review` validates the filled sheet and reports the accuracy with a Wilson 95%
   interval overall, per stratum, per source and per structure;
4. :func:`census` checks every cited element: spanning rendered pages, a box outside its page, and
   the stored evidence page differing from the page its elements lie on.

``vldocir.apps.audit`` (conf/audit.yaml) is the command; the report is ``report.json`` + ``report.md``.
"""

from __future__ import annotations

import html
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from vldocir.data.benchmark import Benchmark
from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import VldocirError
from vldocir.io import atomic_write_json, atomic_write_text
from vldocir.reporting.viewer import CSS, PageImages, evidence_figure, load_evidence

VERDICTS = ("correct", "incorrect")
ISSUES = {
    "F": "incorrectly formulated or insufficiently identifying query",
    "E": "incorrect evidence",
    "U": "unnecessary evidence page",
    "N": "non-presence query without directly retrievable positive evidence",
}
"""Table 12's issue codes; an ``incorrect`` row may name one in the sheet's ``issue`` column."""
SHEET_COLUMNS = [
    "query_id",
    "source",
    "evidence_structure",
    "domain",
    "question",
    "answer",
    "evidence_pages",
    "verdict",
    "issue",
    "comment",
]
SAMPLE_FILE, SHEET_FILE, REVIEW_DIR = "sample.json", "sheet.csv", "review"


class AuditSheetError(VldocirError, ValueError):
    """The filled review sheet cannot be imported; the message names the file and the rows."""


# -- the Wilson score interval ---------------------------------------------------------------------
def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion ``successes / n``, as fractions in [0, 1].

    ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with ``z`` the normal quantile at
    ``1 - (1 - confidence) / 2``. Unlike the normal (Wald) interval it stays inside [0, 1] and is
    not empty at 0/n or n/n.
    """
    if n <= 0:
        raise ValueError(f"the Wilson interval needs n > 0 trials, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in 0..n, got {successes}/{n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


# -- the stratified sample -------------------------------------------------------------------------
@dataclass(frozen=True)
class Stratum:
    source: str
    evidence_structure: str
    available: int
    requested: int
    taken: int

    @property
    def short(self) -> bool:
        """Fewer queries than requested: the stratum is taken whole."""
        return self.available < self.requested


def _stratum_seed(seed: int, source: str, structure: str) -> list[int]:
    # Each stratum draws from its own stream, so changing one stratum's count leaves the others' samples alone.
    return [int(seed), zlib.crc32(f"{source}/{structure}".encode())]


def sample_queries(queries: pd.DataFrame, counts: Mapping[str, int], seed: int) -> tuple[pd.DataFrame, list[Stratum]]:
    """A seeded stratified sample: ``counts[structure]`` queries of every source x structure.

    ``queries`` needs ``query_id``, ``source`` and ``evidence_structure``. A stratum with fewer
    queries than asked for is taken whole (``Stratum.short``). Structures missing from ``counts``
    are an error; a count of 0 leaves the structure out. Returns the sampled rows (sources sorted,
    structures in the paper's order, query ids sorted within a stratum) and the strata.
    """
    unknown = sorted(set(counts) - set(EVIDENCE_STRUCTURES))
    if unknown:
        raise ValueError(f"counts names unknown evidence structures {unknown}; known: {', '.join(EVIDENCE_STRUCTURES)}")
    present = set(queries["evidence_structure"])
    uncounted = sorted(present - set(counts))
    if uncounted:
        raise ValueError(f"no count given for the benchmark's structures {uncounted} (set 0 to leave one out)")
    picked, strata = [], []
    for source in sorted(queries["source"].astype(str).unique()):
        for structure in EVIDENCE_STRUCTURES:
            requested = int(counts.get(structure, 0))
            if requested < 0:
                raise ValueError(f"count of {structure} must be >= 0, got {requested}")
            group = queries[(queries["source"] == source) & (queries["evidence_structure"] == structure)]
            if group.empty or requested == 0:
                if requested:
                    strata.append(Stratum(source, structure, 0, requested, 0))
                continue
            group = group.sort_values("query_id", kind="stable")
            take = min(requested, len(group))
            rng = np.random.default_rng(_stratum_seed(seed, source, structure))
            chosen = np.sort(rng.choice(len(group), size=take, replace=False))
            picked.append(group.iloc[chosen])
            strata.append(Stratum(source, structure, len(group), requested, take))
    sample = pd.concat(picked, ignore_index=True) if picked else queries.iloc[0:0]
    return sample, strata


# -- export ----------------------------------------------------------------------------------------
AUDIT_CSS = """
.audit-query { border-top: 1px solid #ccc; padding-top: .8rem; margin-top: 1.2rem; }
.stratum { margin-top: 2rem; } .short { color: #a15c00; }
"""


def _evidence_pages(qrels: pd.DataFrame, query_id: str) -> list[str]:
    return list(dict.fromkeys(qrels.loc[qrels["query_id"] == query_id, "page_id"]))


def export_review(bench: Benchmark, out_dir: str | Path, counts: Mapping[str, int], seed: int) -> dict:
    """Sample, then write ``sheet.csv``, ``sample.json`` and ``review/index.html`` (images in
    ``review/img/``) under ``out_dir``. Returns the sample record (what ``sample.json`` holds)."""
    out_dir = Path(out_dir)
    queries = bench.queries
    sample, strata = sample_queries(queries, counts, seed)
    ids = list(sample["query_id"])
    data = load_evidence(bench.root, ids)

    rows = []
    for row in sample.itertuples():
        pages = data.pages
        evidence = [f"{p} (p.{int(pages.loc[p, 'page_index']) + 1})" for p in _evidence_pages(data.qrels, row.query_id)]
        rows.append(
            {
                "query_id": row.query_id,
                "source": row.source,
                "evidence_structure": row.evidence_structure,
                "domain": row.domain,
                "question": row.text,
                "answer": row.answer,
                "evidence_pages": "; ".join(evidence),
                "verdict": "",
                "issue": "",
                "comment": "",
            }
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    sheet = pd.DataFrame(rows, columns=SHEET_COLUMNS)
    atomic_write_text(sheet.to_csv(index=False), out_dir / SHEET_FILE)

    review = out_dir / REVIEW_DIR
    review.mkdir(parents=True, exist_ok=True)
    images = PageImages(data, review)
    body, position = [], 0
    # iter(): a GroupBy has a .keys attribute (the grouping columns), which dict() would take for a mapping's
    by_stratum = dict(iter(sample.groupby(["source", "evidence_structure"], sort=False)))
    for stratum in strata:
        note = (
            f' <span class="short">(only {stratum.available} queries: all taken, {stratum.requested} asked for)</span>'
            if stratum.short
            else ""
        )
        body.append(
            f'<h2 class="stratum">{html.escape(stratum.source)} &middot; {html.escape(stratum.evidence_structure)}: '
            f"{stratum.taken} queries{note}</h2>"
        )
        group = by_stratum.get((stratum.source, stratum.evidence_structure))
        for row in [] if group is None else group.itertuples():
            position += 1
            figures = "".join(
                evidence_figure(data, images, row.query_id, page_id, "")
                for page_id in _evidence_pages(data.qrels, row.query_id)
            )
            body.append(
                f'<section class="audit-query" id="{html.escape(row.query_id)}">'
                f"<h3>{position}. {html.escape(row.query_id)}</h3>"
                f'<p class="meta">{html.escape(str(row.domain))}</p>'
                f'<p class="query"><b>Query:</b> {html.escape(str(row.text))}</p>'
                f'<p class="answer"><b>Answer:</b> {html.escape(str(row.answer))}</p>'
                f'<div class="pages">{figures}</div></section>'
            )
    atomic_write_text(
        f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Query audit: {html.escape(bench.name)}</title>
<style>{CSS}{AUDIT_CSS}</style></head>
<body>
<h1>Query audit: {html.escape(bench.name)}</h1>
<p class="meta">{len(ids)} queries, seed {seed}. Mark each row of {SHEET_FILE} <b>correct</b> or <b>incorrect</b>
(optionally an issue code: {", ".join(f"{k} = {v}" for k, v in ISSUES.items())}). Blue boxes: the cited elements.</p>
{chr(10).join(body)}
</body></html>
""",
        review / "index.html",
    )
    record = {
        "benchmark": bench.name,
        "fingerprint": bench.fingerprint,
        "seed": int(seed),
        "counts": {k: int(v) for k, v in counts.items()},
        "strata": [{**stratum.__dict__, "short": stratum.short} for stratum in strata],
        "query_ids": ids,
    }
    atomic_write_json(record, out_dir / SAMPLE_FILE)
    return record


# -- import ----------------------------------------------------------------------------------------
def read_sheet(path: str | Path, sample: Mapping) -> pd.DataFrame:
    """The filled sheet, checked against the sample: one verdict in {correct, incorrect} per
    sampled query, an optional issue code (F/E/U/N) on incorrect rows only, no other query ids.

    Raises :class:`AuditSheetError` listing every problem with its CSV line (the header is line 1).
    """
    path = Path(path)
    if not path.is_file():
        raise AuditSheetError(f"{path}: no such file (export the sheet first: python -m vldocir.apps.audit)")
    sheet = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    missing = [c for c in ("query_id", "verdict") if c not in sheet.columns]
    if missing:
        raise AuditSheetError(f"{path}: columns {missing} missing (found: {list(sheet.columns)})")
    if "issue" not in sheet.columns:
        sheet["issue"] = ""
    sheet["query_id"] = sheet["query_id"].str.strip()
    sheet["verdict"] = sheet["verdict"].str.strip().str.lower()
    sheet["issue"] = sheet["issue"].str.strip().str.upper()
    sampled = set(sample["query_id"] if isinstance(sample, pd.DataFrame) else sample["query_ids"])
    problems, seen = [], {}
    for i, row in enumerate(sheet.itertuples(index=False)):
        line = i + 2
        where = f"line {line} (query_id {row.query_id or '<empty>'})"
        if row.query_id not in sampled:
            problems.append(f"{where}: query id not in the audit sample")
        elif row.query_id in seen:
            problems.append(f"{where}: query id already on line {seen[row.query_id]}")
        else:
            seen[row.query_id] = line
        if row.verdict == "":
            problems.append(f"{where}: verdict missing (correct or incorrect)")
        elif row.verdict not in VERDICTS:
            problems.append(f"{where}: verdict {row.verdict!r} is not correct or incorrect")
        if row.issue:
            if row.issue not in ISSUES:
                problems.append(f"{where}: issue {row.issue!r} is not one of {', '.join(ISSUES)}")
            elif row.verdict == "correct":
                problems.append(f"{where}: issue {row.issue} given for a correct verdict")
    absent = [
        q
        for q in (sample["query_ids"] if not isinstance(sample, pd.DataFrame) else sample["query_id"])
        if q not in seen
    ]
    if absent:
        problems.append(
            f"{len(absent)} sampled queries have no row: {', '.join(absent[:10])}{' ...' if len(absent) > 10 else ''}"
        )
    if problems:
        shown = problems[:20]
        more = f"; and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise AuditSheetError(f"{path}: {len(problems)} problem(s): " + "; ".join(shown) + more)
    return sheet


def _cell(frame: pd.DataFrame, confidence: float, **key) -> dict:
    n, correct = len(frame), int((frame["verdict"] == "correct").sum())
    low, high = wilson_interval(correct, n, confidence) if n else (float("nan"), float("nan"))
    issues = {code: int((frame["issue"] == code).sum()) for code in ISSUES}
    return {
        **key,
        "correct": correct,
        "total": n,
        "accuracy": correct / n if n else float("nan"),
        "wilson_low": low,
        "wilson_high": high,
        "issues": issues,
    }


def accuracy(sheet: pd.DataFrame, queries: pd.DataFrame, confidence: float = 0.95) -> dict:
    """Accuracy and Wilson intervals of a read sheet: overall, per stratum, per source, per structure.
    Source and structure come from the benchmark's ``queries`` (not from the editable sheet)."""
    frame = sheet[["query_id", "verdict", "issue"]].merge(
        queries[["query_id", "source", "evidence_structure"]], on="query_id", how="left", validate="one_to_one"
    )
    order = {s: i for i, s in enumerate(EVIDENCE_STRUCTURES)}
    strata = sorted(frame.groupby(["source", "evidence_structure"]).groups, key=lambda k: (k[0], order[k[1]]))
    return {
        "confidence": confidence,
        "overall": _cell(frame, confidence),
        "strata": [
            _cell(
                frame[(frame["source"] == s) & (frame["evidence_structure"] == e)],
                confidence,
                source=s,
                evidence_structure=e,
            )
            for s, e in strata
        ],
        "sources": [_cell(frame[frame["source"] == s], confidence, source=s) for s in sorted(frame["source"].unique())],
        "structures": [
            _cell(frame[frame["evidence_structure"] == e], confidence, evidence_structure=e)
            for e in EVIDENCE_STRUCTURES
            if (frame["evidence_structure"] == e).any()
        ],
    }


# -- census ----------------------------------------------------------------------------------------
CENSUS_CHECKS = ("spanning", "out_of_range", "page_mismatch")


def census(bench: Benchmark, structures: Sequence[str] | None = None, examples: int = 5) -> dict:
    """Every element the qrels cite, checked against the rendered pages (the paper's census).

    Per query: ``spanning`` (a cited element runs past its page's bottom: the ``spans_pages`` column
    the renderer records; ``None`` when the elements table has none), ``out_of_range`` (a cited box
    outside ``[0, width] x [0, height]`` of its page, inverted, or missing), ``page_mismatch`` (a
    qrel's stored page differs from the page its cited elements lie on), ``missing`` (a cited element
    or its page absent), ``no_elements`` (a qrel that cites no element: its page cannot be derived).
    ``consistent``: none of these. Counts overall and per structure, and ``examples`` cases each.
    """
    queries = bench.queries[["query_id", "evidence_structure"]]
    if structures:
        queries = queries[queries["evidence_structure"].isin(list(structures))]
    qrels = bench.qrels.merge(queries, on="query_id")
    pages = bench.arrow("pages", ["page_id", "doc_id", "page_index", "width", "height"]).to_pandas()
    element_columns = ["doc_id", "element_id", "page_index", "bbox"]
    has_spans = "spans_pages" in bench.arrow("elements").schema.names
    elements = bench.arrow("elements", element_columns + (["spans_pages"] if has_spans else [])).to_pandas()

    stored = qrels.merge(pages[["page_id", "page_index"]], on="page_id", how="left")
    no_elements = stored["element_ids"].map(lambda ids: ids is None or len(ids) == 0)
    cited = (
        stored.loc[~no_elements, ["query_id", "evidence_structure", "page_id", "doc_id", "page_index", "element_ids"]]
        .rename(columns={"page_index": "stored_page_index"})
        .explode("element_ids")
        .rename(columns={"element_ids": "element_id"})
    )
    cited = cited.merge(elements, on=["doc_id", "element_id"], how="left", indicator=True)
    missing_element = cited["_merge"] == "left_only"
    cited = cited.drop(columns="_merge").merge(
        pages.rename(columns={"page_id": "element_page_id"}), on=["doc_id", "page_index"], how="left"
    )
    missing = missing_element | cited["element_page_id"].isna()

    def outside(box) -> bool:
        return box is None or len(box) != 4 or not all(np.isfinite(box))

    box_bad = cited["bbox"].map(outside)
    box = np.array(
        [list(b) if not bad else [np.nan] * 4 for b, bad in zip(cited["bbox"], box_bad, strict=True)], dtype=float
    ).reshape(-1, 4)
    width, height = cited["width"].to_numpy(float), cited["height"].to_numpy(float)
    with np.errstate(invalid="ignore"):
        out = (
            (box[:, 0] < 0)
            | (box[:, 1] < 0)
            | (box[:, 2] > width)
            | (box[:, 3] > height)
            | (box[:, 2] < box[:, 0])
            | (box[:, 3] < box[:, 1])
        )
    cited["out_of_range"] = ~missing & (box_bad.to_numpy() | out)
    cited["page_mismatch"] = ~missing & (cited["page_index"] != cited["stored_page_index"])
    cited["spanning"] = ~missing & (cited["spans_pages"].fillna(False).astype(bool) if has_spans else False)
    cited["missing"] = missing

    flags = cited.groupby("query_id")[[*CENSUS_CHECKS, "missing"]].any()
    flags["no_elements"] = stored.loc[no_elements].groupby("query_id").size().gt(0)
    flags = flags.reindex(queries["query_id"]).astype("boolean").fillna(False).astype(bool)
    flags["consistent"] = ~flags[[*CENSUS_CHECKS, "missing", "no_elements"]].any(axis=1)
    flags = flags.join(queries.set_index("query_id"))

    def counts(frame: pd.DataFrame) -> dict:
        n = len(frame)
        result = {"queries": n}
        for check in ("consistent", *CENSUS_CHECKS, "missing", "no_elements"):
            value = int(frame[check].sum())
            result[check] = None if check == "spanning" and not has_spans else value
        return result

    details = []
    for check in (*CENSUS_CHECKS, "missing"):
        if check == "spanning" and not has_spans:
            continue
        rows = cited[cited[check]].drop_duplicates("query_id").head(examples)
        for row in rows.itertuples():
            details.append(
                {
                    "check": check,
                    "query_id": row.query_id,
                    "evidence_structure": row.evidence_structure,
                    "doc_id": row.doc_id,
                    "element_id": row.element_id,
                    "stored_page_id": row.page_id,
                    "element_page_id": None if pd.isna(row.element_page_id) else row.element_page_id,
                    "bbox": None
                    if row.bbox is None or (isinstance(row.bbox, float) and math.isnan(row.bbox))
                    else [float(v) for v in row.bbox],
                    "page_size": None if pd.isna(row.width) else [int(row.width), int(row.height)],
                }
            )
    return {
        "structures": list(structures) if structures else None,
        "spans_recorded": has_spans,
        "cited_elements": len(cited),
        "elements": {
            check: int(cited[check].sum()) for check in ("spanning", "out_of_range", "page_mismatch", "missing")
        },
        "overall": counts(flags),
        "by_structure": {
            e: counts(flags[flags["evidence_structure"] == e])
            for e in EVIDENCE_STRUCTURES
            if (flags["evidence_structure"] == e).any()
        },
        "examples": details,
    }


# -- the report ------------------------------------------------------------------------------------
def _pct(value: float) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def format_accuracy(result: Mapping) -> str:
    level = round(100 * result["confidence"])
    head = (
        f"| stratum | correct/total | accuracy (%) | Wilson {level}% (%) | F | E | U | N |\n"
        "|---|---|---|---|---|---|---|---|"
    )

    def line(label: str, cell: Mapping) -> str:
        issues = " | ".join(str(cell["issues"][code]) for code in ISSUES)
        return (
            f"| {label} | {cell['correct']}/{cell['total']} | {_pct(cell['accuracy'])} | "
            f"{_pct(cell['wilson_low'])}–{_pct(cell['wilson_high'])} | {issues} |"
        )

    lines = [head]
    lines += [line(f"{c['source']} · {c['evidence_structure']}", c) for c in result["strata"]]
    lines += [line(f"**{c['source']}**", c) for c in result["sources"]]
    lines += [line(f"**{c['evidence_structure']}**", c) for c in result["structures"]]
    lines.append(line("**Total**", result["overall"]))
    return "\n".join(lines)


def format_census(result: Mapping) -> str:
    checks = ("consistent", *CENSUS_CHECKS, "missing", "no_elements")

    def share(value, n):
        return "not recorded" if value is None else f"{value} ({100 * value / n:.2f}%)" if n else str(value)

    lines = ["| structure | queries | " + " | ".join(checks) + " |", "|---|---|" + "---|" * len(checks)]
    rows = [*result["by_structure"].items(), ("**all**", result["overall"])]
    for name, cell in rows:
        lines.append(
            f"| {name} | {cell['queries']} | " + " | ".join(share(cell[c], cell["queries"]) for c in checks) + " |"
        )
    lines.append("")
    lines.append(
        f"{result['cited_elements']} cited elements: "
        + ", ".join(f"{k} {v}" for k, v in result["elements"].items())
        + ("" if result["spans_recorded"] else " (spanning not recorded: the elements table has no spans_pages column)")
    )
    if result["examples"]:
        lines += [
            "",
            "| check | query | element | stored page | element's page | bbox | page size |",
            "|---|---|---|---|---|---|---|",
        ]
        for ex in result["examples"]:
            lines.append(
                f"| {ex['check']} | {ex['query_id']} | {ex['doc_id']}/{ex['element_id']} | {ex['stored_page_id']} | "
                f"{ex['element_page_id']} | {ex['bbox']} | {ex['page_size']} |"
            )
    return "\n".join(lines)


def write_report(
    out_dir: str | Path, name: str, title: str, sections: Mapping[str, object], markdown: Sequence[str]
) -> tuple[Path, Path]:
    """``<name>.json`` (the sections) and ``<name>.md`` (the title and the Markdown parts) under ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    atomic_write_json(json.loads(json.dumps(sections, default=float)), json_path)
    atomic_write_text(f"# {title}\n\n" + "\n\n".join(markdown) + "\n", md_path)
    return json_path, md_path


def import_review(
    bench: Benchmark,
    out_dir: str | Path,
    sheet_path: str | Path,
    confidence: float = 0.95,
    census_structures: Sequence[str] | None = None,
    examples: int = 5,
) -> dict:
    """Read the filled sheet against ``sample.json`` and write ``report.json`` + ``report.md``
    (accuracy with Wilson intervals, and the census) under ``out_dir``."""
    out_dir = Path(out_dir)
    sample_path = out_dir / SAMPLE_FILE
    if not sample_path.is_file():
        raise AuditSheetError(f"{sample_path} not found: export the sample first (python -m vldocir.apps.audit)")
    sample = json.loads(sample_path.read_text())
    if sample["fingerprint"] != bench.fingerprint:
        raise AuditSheetError(
            f"{sample_path} was drawn from {sample['benchmark']} with fingerprint {sample['fingerprint']}, "
            f"but the benchmark now has {bench.fingerprint}: export a new sample"
        )
    sheet = read_sheet(sheet_path, sample)
    result = {
        "benchmark": bench.name,
        "fingerprint": bench.fingerprint,
        "sheet": str(sheet_path),
        "sample": {k: sample[k] for k in ("seed", "counts", "strata")},
        "accuracy": accuracy(sheet, bench.queries, confidence),
        "census": census(bench, census_structures, examples),
    }
    short = [
        f"{s['source']}·{s['evidence_structure']} ({s['available']} of {s['requested']})"
        for s in sample["strata"]
        if s["short"]
    ]
    notes = f"Sample: seed {sample['seed']}, counts {sample['counts']}." + (
        f" Strata taken whole (fewer queries than asked for): {', '.join(short)}." if short else ""
    )
    write_report(
        out_dir,
        "report",
        f"Query audit: {bench.name}",
        result,
        [
            notes,
            "## Accuracy (App. A.7, Table 12)",
            format_accuracy(result["accuracy"]),
            "## Bounding-box census",
            format_census(result["census"]),
        ],
    )
    return result

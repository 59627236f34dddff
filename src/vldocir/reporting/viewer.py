"""Failure viewer: a static HTML page per query of a stored run (the paper's Fig. 3).

Each query page shows the query and its answer, its evidence pages with the cited elements' boxes
drawn, and the top-k retrieved pages as thumbnails marked correct (an evidence page) or not. An
index page lists the queries with filters by evidence structure, source and solved / unsolved
(solved = RecallAll@k is 1). Everything is plain files with relative links: open ``index.html``
in a browser, no server needed.

    python -m vldocir.reporting.viewer results/runs/vl-docir-mini/dom_bm25/base
    python -m vldocir.reporting.viewer <run dir> --structure cross_doc --failed
    python -m vldocir.reporting.viewer <run dir> --query q0000042 --k 10 --out /tmp/viewer

The run directory is a results-store entry; its ``manifest.json`` names the benchmark directory
(dataset.source) and fingerprint. Pages of rendered benchmarks show their image
(``pages.image.path`` relative to the benchmark directory, or ``image.bytes``), copied downscaled
next to the HTML; pages of text-only benchmarks show their DOM text in a page-shaped box. Element
boxes are in page pixels of width x height, so they are placed as percentages of the page and
line up however much the image was downscaled.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import io
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from vldocir.data.benchmark import table_location
from vldocir.data.evidence import element_boxes
from vldocir.errors import VldocirError
from vldocir.store import MANIFEST_FILE, PER_QUERY_FILE, RUN_FILE, Entry, newest_entry_in

log = logging.getLogger(__name__)

IMAGE_MAX_WIDTH = 800  # pixels of the copied page images (thumbnails are the same files, scaled by CSS)


class ViewerError(VldocirError, ValueError):
    """The run directory cannot be viewed (no manifest, benchmark missing or changed, ...)."""


@dataclass
class EvidenceData:
    """The slices of a benchmark that drawing some queries' evidence pages needs (also the audit's)."""

    bench_root: Path
    queries: pd.DataFrame  # query_id -> text, answer
    qrels: pd.DataFrame  # query_id, page_id, doc_id, element_ids
    pages: pd.DataFrame  # page_id -> doc_id, page_index, image, width, height, dom_text
    elements: pd.DataFrame  # doc_id, element_id, page_index, bbox, element_type
    documents: pd.DataFrame  # doc_id -> title, source


@dataclass
class ViewerData(EvidenceData):
    """The slices of the run and the benchmark that the selected queries need."""

    run_dir: Path
    manifest: dict
    k: int
    per_query: pd.DataFrame  # selected queries, in benchmark order
    top: pd.DataFrame  # query_id, page_id, score, rank (1-based, score desc then page_id asc)


PAGE_COLUMNS = ["page_id", "doc_id", "page_index", "image", "width", "height", "dom_text"]


def load_evidence(root: Path, query_ids: Sequence[str]) -> EvidenceData:
    """What drawing the evidence pages of ``query_ids`` needs, read from the benchmark at ``root``."""
    root = Path(root)
    queries = _read_filtered(root, "queries", "query_id", query_ids, ["query_id", "text", "answer"]).set_index(
        "query_id"
    )
    qrels = _read_filtered(root, "qrels", "query_id", query_ids)
    pages = _read_filtered(root, "pages", "page_id", set(qrels["page_id"]), PAGE_COLUMNS).set_index("page_id")
    documents = _read_filtered(
        root, "documents", "doc_id", set(qrels["doc_id"]), ["doc_id", "title", "source"]
    ).set_index("doc_id")
    elements = _read_filtered(root, "elements", "doc_id", set(qrels["doc_id"]))
    return EvidenceData(root, queries, qrels, pages, elements, documents)


def _read_filtered(
    root: Path, table: str, column: str, values: Iterable[str], columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """Rows of a benchmark table whose ``column`` is in ``values``, without reading the rest."""
    values = sorted(set(values))
    location = table_location(root, table)
    data = pq.read_table(
        location, columns=list(columns) if columns else None, filters=[(column, "in", values)] if values else None
    )
    if not values:
        data = data.slice(0, 0)
    return data.to_pandas()


def benchmark_root(run_dir: Path, manifest: dict, override: Path | None = None) -> Path:
    """The benchmark directory of a run, checked against the fingerprint the run was made on."""
    if override is not None:
        root = Path(override)
    else:
        # benchmark.root: where the pipeline opened it (also a derived one, e.g. the reduced corpus)
        source = (manifest.get("benchmark") or {}).get("root")
        if not source:
            raise ViewerError(f"{run_dir / MANIFEST_FILE} names no benchmark.root; pass --benchmark-dir")
        if str(source).startswith("hf://"):
            raise ViewerError(f"the run was made on {source}; pass its local copy with --benchmark-dir")
        root = Path(source)
    info_path = root / "benchmark.json"
    if not info_path.is_file():
        raise ViewerError(f"benchmark directory {root} not found (from the run's manifest); pass --benchmark-dir")
    expected = manifest.get("benchmark", {}).get("fingerprint")
    found = json.loads(info_path.read_text()).get("fingerprint")
    if expected and found and expected != found:
        raise ViewerError(
            f"{root} has fingerprint {found}, but the run was evaluated on {expected}: the benchmark changed "
            "since; re-run the evaluation or point --benchmark-dir at the original"
        )
    return root


def load(
    run_dir: str | Path,
    *,
    k: int = 5,
    queries: Sequence[str] | None = None,
    structure: str | None = None,
    source: str | None = None,
    solved: bool | None = None,
    limit: int | None = None,
    benchmark_dir: Path | None = None,
) -> ViewerData:
    """Select queries of the run and read what their pages need."""
    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST_FILE).is_file():  # a <benchmark>/<retriever>/<setting> directory: its newest entry at k
        run_dir = newest_entry_in(run_dir, k) or run_dir
    manifest_path = run_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ViewerError(f"{run_dir} is not a results-store entry (no {MANIFEST_FILE}) and holds none")
    problems = Entry(run_dir).problems(full=True)
    if problems:
        raise ViewerError(f"{run_dir} does not verify: {'; '.join(problems)}")
    manifest = json.loads(manifest_path.read_text())
    root = benchmark_root(run_dir, manifest, benchmark_dir)

    per_query = pd.read_parquet(run_dir / PER_QUERY_FILE)
    if f"recallall@{k}" not in per_query.columns:
        ks = sorted(int(c.split("@")[1]) for c in per_query.columns if c.startswith("recallall@"))
        raise ViewerError(f"the run was evaluated at k in {ks}, not {k}: pass --k with one of those")
    selected = per_query
    if queries:
        unknown = sorted(set(queries) - set(per_query["query_id"]))
        if unknown:
            raise ViewerError(f"queries not in the run's benchmark: {', '.join(unknown[:5])}")
        selected = selected[selected["query_id"].isin(queries)]
    if structure:
        selected = selected[selected["evidence_structure"] == structure]
    if source:
        selected = selected[selected["source"] == source]
    if solved is not None:
        selected = selected[(selected[f"recallall@{k}"] == 1) == solved]
    if limit and len(selected) > limit:
        log.warning("%d queries selected; writing the first %d (--limit 0 for all)", len(selected), limit)
        selected = selected.iloc[:limit]
    selected = selected.reset_index(drop=True)
    ids = list(selected["query_id"])

    query_rows = _read_filtered(root, "queries", "query_id", ids, ["query_id", "text", "answer"]).set_index("query_id")
    qrels = _read_filtered(root, "qrels", "query_id", ids)
    run = pq.read_table(run_dir / RUN_FILE, filters=[("query_id", "in", ids)] if ids else None).to_pandas()
    if not ids:
        run = run.iloc[0:0]
    # The evaluation's order (vldocir.evaluation.metrics.rank_run): score descending, then page_id.
    run = run.sort_values(["query_id", "score", "page_id"], ascending=[True, False, True], kind="stable")
    run["rank"] = run.groupby("query_id").cumcount() + 1
    top = run[run["rank"] <= k].reset_index(drop=True)

    page_ids = set(qrels["page_id"]) | set(top["page_id"])
    pages = _read_filtered(root, "pages", "page_id", page_ids, PAGE_COLUMNS).set_index("page_id")
    doc_ids = set(pages["doc_id"]) | set(qrels["doc_id"])
    documents = _read_filtered(root, "documents", "doc_id", doc_ids, ["doc_id", "title", "source"]).set_index("doc_id")
    elements = _read_filtered(root, "elements", "doc_id", set(qrels["doc_id"]))
    return ViewerData(
        bench_root=root,
        queries=query_rows,
        qrels=qrels,
        pages=pages,
        elements=elements,
        documents=documents,
        run_dir=run_dir,
        manifest=manifest,
        k=k,
        per_query=selected,
        top=top,
    )


# -- HTML ------------------------------------------------------------------------------------------

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.1rem; margin-top: 1.5rem; }
.meta { color: #555; font-size: .9rem; }
.badge { display: inline-block; padding: .1rem .5rem; border-radius: .6rem; font-size: .85rem; color: #fff; }
.badge.solved { background: #2e7d32; } .badge.unsolved { background: #c62828; }
.query { font-size: 1.1rem; margin: .6rem 0; } .answer { margin: .3rem 0 1rem; }
.pages { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; }
figure { margin: 0; } figcaption { font-size: .8rem; color: #444; margin-top: .3rem; \
max-width: 100%; overflow-wrap: anywhere; }
.page { position: relative; background: #fff; border: 1px solid #bbb; overflow: hidden; }
.page img { position: absolute; left: 0; top: 0; width: 100%; height: 100%; }
.page-text { position: absolute; inset: 0; padding: 3%; color: #666; overflow: hidden; white-space: pre-wrap; }
.evidence-view { width: 340px; } .evidence-view .page-text { font-size: 9px; }
.thumb { width: 150px; border: 4px solid #c62828; border-radius: 3px; padding: 2px; }
.thumb.correct { border-color: #2e7d32; } .thumb .page-text { font-size: 4px; }
.bbox { position: absolute; border: 2px solid #1f5fd6; background: rgba(31, 95, 214, .15); box-sizing: border-box; }
table { border-collapse: collapse; font-size: .85rem; } \
th, td { border-bottom: 1px solid #ddd; padding: .25rem .5rem; text-align: left; }
.filters { margin: 1rem 0; display: flex; gap: 1rem; align-items: center; }
nav a { margin-right: 1rem; }
"""

INDEX_SCRIPT = """
const selects = Array.from(document.querySelectorAll('.filters select'));
const rows = Array.from(document.querySelectorAll('#queries tbody tr'));
function applyFilters() {
  let shown = 0;
  for (const row of rows) {
    const visible = selects.every(s => s.value === '' || row.dataset[s.name] === s.value);
    row.hidden = !visible;
    if (visible) shown += 1;
  }
  document.getElementById('shown').textContent = shown;
}
selects.forEach(s => s.addEventListener('change', applyFilters));
applyFilters();
"""


def _e(value) -> str:
    return html.escape("" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value))


def query_file_name(query_id: str) -> str:
    """A file name for a query id; ids with other characters get a short hash to stay unique."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", query_id)
    if safe != query_id:
        safe += "-" + hashlib.sha1(query_id.encode()).hexdigest()[:8]
    return f"{safe}.html"


class PageImages:
    """Copies (downscaled) page images next to the HTML, once per page."""

    def __init__(self, data: EvidenceData, out_dir: Path):
        self.data, self.dir = data, out_dir / "img"
        self.done: dict[str, str | None] = {}

    def __call__(self, page_id: str) -> str | None:
        """Path of the page's image relative to the output root, or None for a text-only page."""
        if page_id not in self.done:
            self.done[page_id] = self._copy(page_id)
        return self.done[page_id]

    def _copy(self, page_id: str) -> str | None:
        image = self.data.pages.loc[page_id, "image"]
        if not isinstance(image, dict) or not (image.get("path") or image.get("bytes")):
            return None
        from PIL import Image

        try:
            if image.get("bytes"):
                picture = Image.open(io.BytesIO(image["bytes"]))
            else:
                picture = Image.open(self.data.bench_root / image["path"])
            picture = picture.convert("RGB")
        except (OSError, ValueError) as error:
            log.warning("page %s: image unreadable (%s); showing its text instead", page_id, error)
            return None
        if picture.width > IMAGE_MAX_WIDTH:
            picture = picture.resize((IMAGE_MAX_WIDTH, round(picture.height * IMAGE_MAX_WIDTH / picture.width)))
        self.dir.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", page_id) + ".jpg"
        picture.save(self.dir / name, quality=85)
        return f"img/{name}"


def _boxes(data: EvidenceData, query_id: str, page_id: str) -> list[tuple[float, float, float, float, str]]:
    """The cited elements of ``query_id`` on ``page_id`` (an element split over columns or pages: its
    fragments there): (left, top, width, height) in percent, and a label."""
    rows = data.qrels[(data.qrels["query_id"] == query_id) & (data.qrels["page_id"] == page_id)]
    if rows.empty:
        return []
    page = data.pages.loc[page_id]
    cited = {str(e) for ids in rows["element_ids"] for e in (ids if ids is not None else [])}
    elements = data.elements[(data.elements["doc_id"] == page["doc_id"]) & data.elements["element_id"].isin(cited)]
    width, height = float(page["width"]), float(page["height"])
    boxes = []
    for element in elements.itertuples():
        fragments = getattr(element, "fragments", None)
        on_page = [b for p, b in element_boxes(element.page_index, element.bbox, fragments) if p == page["page_index"]]
        for x0, y0, x1, y1 in on_page:
            boxes.append(
                (
                    100 * x0 / width,
                    100 * y0 / height,
                    100 * (x1 - x0) / width,
                    100 * (y1 - y0) / height,
                    f"{element.element_id} ({element.element_type})",
                )
            )
    return boxes


def _page_html(
    data: EvidenceData,
    images: PageImages,
    query_id: str,
    page_id: str,
    css_class: str,
    prefix: str,
    with_boxes: bool = True,
) -> str:
    page = data.pages.loc[page_id]
    image = images(page_id)
    if image is not None:
        body = f'<img src="{prefix}{_e(image)}" alt="page {_e(page_id)}" loading="lazy">'
    else:
        body = f'<div class="page-text">{_e(page["dom_text"])}</div>'
    boxes = "".join(
        f'<div class="bbox" style="left:{left:.3f}%;top:{top:.3f}%;width:{w:.3f}%;height:{h:.3f}%" '
        f'title="{_e(label)}"></div>'
        for left, top, w, h, label in (_boxes(data, query_id, page_id) if with_boxes else [])
    )
    ratio = f"{int(page['width'])} / {int(page['height'])}"
    return f'<div class="page {css_class}" style="aspect-ratio: {ratio}" data-page="{_e(page_id)}">{body}{boxes}</div>'


def _doc_label(data: EvidenceData, doc_id: str) -> str:
    title = data.documents["title"].get(doc_id, doc_id) if doc_id in data.documents.index else doc_id
    return f"{title} ({doc_id})"


def evidence_figure(
    data: EvidenceData, images: PageImages, query_id: str, page_id: str, prefix: str, note: str | None = None
) -> str:
    """One evidence page of a query with its cited elements' boxes drawn, captioned with its document
    and page (and ``note`` in bold). ``prefix`` leads from the HTML file to the images' root."""
    page = data.pages.loc[page_id]
    caption = f"{_e(_doc_label(data, page['doc_id']))}, page {int(page['page_index']) + 1} &middot; {_e(page_id)}"
    if note:
        caption += f" &middot; <b>{_e(note)}</b>"
    return (
        f'<figure class="evidence">{_page_html(data, images, query_id, page_id, "evidence-view", prefix)}'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def query_page(data: ViewerData, images: PageImages, row, previous: str | None, following: str | None) -> str:
    k = data.k
    query_id = row["query_id"]
    text = data.queries["text"].get(query_id, "")
    answer = data.queries["answer"].get(query_id, "")
    solved = row[f"recallall@{k}"] == 1
    evidence = data.qrels[data.qrels["query_id"] == query_id]
    evidence_pages = list(dict.fromkeys(evidence["page_id"]))
    top = data.top[data.top["query_id"] == query_id]
    rank_of = dict(zip(top["page_id"], top["rank"], strict=True))

    evidence_html = [
        evidence_figure(
            data,
            images,
            query_id,
            page_id,
            "../",
            f"rank {rank_of[page_id]}" if page_id in rank_of else f"not in the top {k}",
        )
        for page_id in evidence_pages
    ]
    thumbs = []
    evidence_set = set(evidence_pages)
    for hit in top.itertuples():
        correct = hit.page_id in evidence_set
        page = data.pages.loc[hit.page_id]
        thumb = _page_html(
            data, images, query_id, hit.page_id, "thumb " + ("correct" if correct else "wrong"), "../", correct
        )
        thumbs.append(
            f'<figure class="retrieved">{thumb}'
            f"<figcaption>#{int(hit.rank)} &middot; {'&#10003; evidence' if correct else '&#10007; not evidence'}"
            f"<br>{_e(_doc_label(data, page['doc_id']))} p.{int(page['page_index']) + 1}"
            f"<br>score {hit.score:.3f}</figcaption></figure>"
        )
    nav = ['<a href="../index.html">index</a>']
    if previous:
        nav.append(f'<a href="{_e(previous)}">&larr; previous</a>')
    if following:
        nav.append(f'<a href="{_e(following)}">next &rarr;</a>')
    metrics = " &middot; ".join(
        f"{name}@{k} {row[f'{name}@{k}']:.2f}" for name in ("recall", "ndcg") if f"{name}@{k}" in row
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(query_id)}: {"solved" if solved else "unsolved"}</title>
<link rel="stylesheet" href="../viewer.css"></head>
<body>
<nav>{"".join(nav)}</nav>
<h1>{_e(query_id)} \
<span class="badge {"solved" if solved else "unsolved"}">{"solved" if solved else "unsolved"} at {k}</span></h1>
<p class="meta">{_e(row["evidence_structure"])} &middot; {_e(row["source"])} &middot; {_e(row["domain"])} \
&middot; generator {_e(row["generator"])}
&middot; {int(row[f"pages_found@{k}"])} of {int(row["n_evidence_pages"])} evidence pages in the top {k} \
&middot; {metrics}</p>
<p class="query"><b>Query:</b> {_e(text)}</p>
<p class="answer"><b>Answer:</b> {_e(answer)}</p>
<h2>Evidence pages ({len(evidence_pages)})</h2>
<div class="pages">{"".join(evidence_html)}</div>
<h2>Top {k} retrieved</h2>
<div class="pages">{"".join(thumbs) or "<p>The run retrieved nothing for this query.</p>"}</div>
</body></html>
"""


def index_page(data: ViewerData, files: list[str]) -> str:
    k = data.k
    frame = data.per_query
    config = data.manifest.get("config", {})
    title = (
        f"{data.manifest.get('benchmark', {}).get('name', '?')} / {config.get('retriever', {}).get('id', '?')} / "
        f"{config.get('setting', {}).get('id', '?')}"
    )

    def options(column: str) -> str:
        return "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in sorted(frame[column].astype(str).unique()))

    rows = []
    for row, file in zip(frame.to_dict("records"), files, strict=True):
        solved = "solved" if row[f"recallall@{k}"] == 1 else "unsolved"
        text = data.queries["text"].get(row["query_id"], "")
        rows.append(
            f'<tr data-structure="{_e(row["evidence_structure"])}" data-source="{_e(row["source"])}" '
            f'data-solved="{solved}">'
            f'<td><a href="q/{_e(file)}">{_e(row["query_id"])}</a></td><td>{_e(row["evidence_structure"])}</td>'
            f"<td>{_e(row['source'])}</td><td>{_e(row['domain'])}</td><td>{solved}</td>"
            f"<td>{int(row[f'pages_found@{k}'])}/{int(row['n_evidence_pages'])}</td><td>{_e(text)}</td></tr>"
        )
    n_solved = int((frame[f"recallall@{k}"] == 1).sum())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Failure viewer: {_e(title)}</title>
<link rel="stylesheet" href="viewer.css"></head>
<body>
<h1>Failure viewer: {_e(title)}</h1>
<p class="meta">{len(frame)} queries shown here, {n_solved} solved at {k} (RecallAll@{k} = 1). \
Run: {_e(data.run_dir)}. Benchmark: {_e(data.bench_root)}.</p>
<div class="filters">
<label>structure <select name="structure"><option value="">all</option>{options("evidence_structure")}</select></label>
<label>source <select name="source"><option value="">all</option>{options("source")}</select></label>
<label>status <select name="solved"><option value="">all</option>\
<option value="solved">solved</option><option value="unsolved">unsolved</option></select></label>
<span><span id="shown">{len(frame)}</span> shown</span>
</div>
<table id="queries"><thead><tr><th>query</th><th>structure</th><th>source</th><th>domain</th><th>status</th>\
<th>evidence in top {k}</th><th>text</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
<script>{INDEX_SCRIPT}</script>
</body></html>
"""


def write_viewer(data: ViewerData, out_dir: str | Path) -> Path:
    """Write ``index.html``, ``viewer.css``, ``q/<query>.html`` and ``img/``; returns the index path."""
    out_dir = Path(out_dir)
    (out_dir / "q").mkdir(parents=True, exist_ok=True)
    for stale in (out_dir / "q").glob("*.html"):  # pages of an earlier selection
        stale.unlink()
    (out_dir / "viewer.css").write_text(CSS)
    images = PageImages(data, out_dir)
    files = [query_file_name(q) for q in data.per_query["query_id"]]
    for i, row in enumerate(data.per_query.to_dict("records")):
        previous = files[i - 1] if i > 0 else None
        following = files[i + 1] if i + 1 < len(files) else None
        (out_dir / "q" / files[i]).write_text(query_page(data, images, row, previous, following))
    index = out_dir / "index.html"
    index.write_text(index_page(data, files))
    return index


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="python -m vldocir.reporting.viewer", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "run_dir",
        type=Path,
        help="a results-store entry, or results/runs/<benchmark>/<retriever>/<setting> for its newest entry",
    )
    p.add_argument("--query", action="append", default=None, help="a query id (repeatable); default: all selected")
    p.add_argument("--structure", default=None, help="only this evidence structure, e.g. cross_doc")
    p.add_argument("--source", default=None, help="only this source, e.g. sec")
    status = p.add_mutually_exclusive_group()
    status.add_argument("--failed", action="store_true", help="only queries not solved at k (RecallAll@k = 0)")
    status.add_argument("--solved", action="store_true", help="only queries solved at k")
    p.add_argument("--k", type=int, default=5, help="cut-off: thumbnails shown and solved/unsolved (default 5)")
    p.add_argument("--limit", type=int, default=1000, help="write at most this many queries (0: no limit)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: <run dir>/viewer)")
    p.add_argument("--benchmark-dir", type=Path, default=None, help="the benchmark, if not where the manifest says")
    args = p.parse_args(argv)
    try:
        data = load(
            args.run_dir,
            k=args.k,
            queries=args.query,
            structure=args.structure,
            source=args.source,
            solved=True if args.solved else False if args.failed else None,
            limit=args.limit or None,
            benchmark_dir=args.benchmark_dir,
        )
    except ViewerError as error:
        p.error(str(error))
    out = args.out or data.run_dir / "viewer"
    index = write_viewer(data, out)
    print(f"{len(data.per_query)} query pages written; open {index.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

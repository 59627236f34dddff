"""What a build did to each document, for the user to see: per-document warnings, stored in
``benchmark.json`` (``built_by.document_warnings``) and printed at the end of
``python -m vldocir.apps.build`` (:func:`summary`).

``document_warnings`` maps a doc id to its warnings, ``[{"kind": str, "detail": str}, ...]``, for
the documents that have any, in the build's document order. The kinds (:data:`WARNING_KINDS`):

- left out of the benchmark (:data:`FAILURE_KINDS`): ``missing_file`` (no HTML or PDF at the index
  row's path), ``empty_document`` (nothing visible: :func:`~vldocir.construction.render.batch.is_blank`),
  ``render_failed`` (a render error or timeout), ``pdf_failed`` (a damaged or unreadable PDF);
- kept, with what the page images lost or changed, read from the document's ``layout.json``:
  ``removed_content`` (a clean-up rule removed tables, figures or formulas; navigation links and the
  like are not reported), ``kept_table`` (a clean-up rule matched elements holding a data table and
  kept them whole, with what the rule meant to remove around the table: a navbox holding a ranked
  table), ``failed_images`` (images that show nothing), ``scaled_content`` (content shrunk to fit the
  page width, ``fit.js``), ``overflow`` (content still reaching past the page's sides,
  ``overflow.js``), ``empty_formulas`` (formulas recorded without text), ``render`` (the
  renderer's other warnings: images still loading, unusable clean-up rules);
- ``no_text_layer`` (a PDF none of whose pages has text: its DOM text is empty) and
  ``unplaced_facts`` (generated documents: planted facts whose element was not recorded).

:func:`ocr_coverage` says which pages were OCRed (``built_by.ocr``; :func:`ocr_summary` prints it):
every page unless ``spec.ocr=false``, and with ``pdf.ocr=false`` not the PDF pages that have a text
layer (their ``ocr_text`` is null).

:func:`sampling_shortfall` adds the evidence-sampling cells that got fewer configurations than
their budget (``built_by.sampling_shortfall``): a source with too few or too short documents builds
what it can and says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from vldocir.construction.render import RenderedDocument, load_layout
from vldocir.construction.render.batch import EMPTY_DOCUMENT
from vldocir.construction.render.cleanup import removed_content
from vldocir.construction.render.records import CONTENT_TYPES, fidelity_warnings, kept_table_warning
from vldocir.queries.evidence_configs import EvidenceSamplingSpec, config_shortfall

FAILURE_KINDS = ("missing_file", "empty_document", "render_failed", "pdf_failed")
"""Warnings that mean the document is not in the benchmark."""
WARNING_KINDS = (
    *FAILURE_KINDS,
    "removed_content",
    "kept_table",
    "failed_images",
    "scaled_content",
    "overflow",
    "empty_formulas",
    "render",
    "no_text_layer",
    "unplaced_facts",
)
SUMMARY_DOCUMENTS = 40
"""Documents the printed summary lists one line each; the rest are counted (all are in benchmark.json)."""
LINE_CHARS = 160


def _warning(kind: str, detail: str) -> dict[str, str]:
    return {"kind": kind, "detail": detail}


def layout_warnings(doc: RenderedDocument) -> list[dict[str, str]]:
    """The warnings of one rendered document, from its records (module doc)."""
    out = []
    for rule in doc.cleanup:
        lost = removed_content([rule], CONTENT_TYPES)
        if lost:
            held = ", ".join(f"{n} {t}" for t in CONTENT_TYPES if (n := int(rule["content"].get(t, 0))))
            sample = next((s for s in rule.get("samples", []) if s.strip()), "")
            out.append(
                _warning(
                    "removed_content",
                    f"{rule['kind']} rule {rule['rule']!r} removed {held}" + (f' ("{sample}")' if sample else ""),
                )
            )
    out += [_warning("kept_table", w) for rule in doc.cleanup if (w := kept_table_warning(rule))]
    failed = doc.images.get("failed", [])
    if failed:
        by_status = Counter(f["status"] for f in failed)
        out.append(
            _warning(
                "failed_images",
                f"{len(failed)} of {doc.images.get('count', len(failed))} image(s) show nothing ("
                + ", ".join(f"{status} {n}" for status, n in sorted(by_status.items()))
                + f"; first: {failed[0]['url'] or '(no URL)'})",
            )
        )
    scaled = doc.fit.get("scaled", [])
    if scaled:
        smallest = min(float(s["scale"]) for s in scaled)
        out.append(
            _warning(
                "scaled_content", f"{len(scaled)} element(s) scaled to fit the page width (down to {smallest:.2f})"
            )
        )
    if doc.overflow:
        beyond = max(float(o["beyond_px"]) for o in doc.overflow)
        dropped = sum(bool(o["dropped"]) for o in doc.overflow)
        out.append(
            _warning(
                "overflow",
                f"{len(doc.overflow)} element(s) reach past the page's sides (up to {beyond:.0f} px; "
                f"{dropped} not on the page at all)",
            )
        )
    empty = sum(e.element_type == "formula" and not e.text.strip() for e in doc.elements)
    if empty:
        out.append(_warning("empty_formulas", f"{empty} formula(s) recorded without text"))
    fidelity = set(fidelity_warnings({"cleanup": doc.cleanup, "overflow": doc.overflow, "images": doc.images}))
    out += [_warning("render", w) for w in doc.warnings if w not in fidelity]
    return out


def document_warnings(
    rendered: Iterable[RenderedDocument | str | Path] = (),
    *,
    left_out: Mapping[str, str] | None = None,
    render_errors: Mapping[str, str] | None = None,
    pdf_failed: Mapping[str, str] | None = None,
    no_text_layer: Iterable[str] = (),
    unplaced_facts: Mapping[str, int] | None = None,
    order: Iterable[str] = (),
) -> dict[str, list[dict[str, str]]]:
    """``{doc_id: [{"kind", "detail"}, ...]}`` for every document with a warning (module doc).

    ``rendered``: the kept HTML documents (renderings or their directories); ``left_out``: doc id ->
    why it was not rendered (no file); ``render_errors``: :attr:`BatchReport.errors` (an
    ``EmptyDocument`` error is an ``empty_document``); ``pdf_failed``, ``no_text_layer``: from
    :class:`~vldocir.construction.pdf.PdfBatchReport`; ``unplaced_facts``: doc id -> facts without
    an element. ``order``: the build's doc ids, which the result follows (others come after)."""
    found: dict[str, list[dict[str, str]]] = {}

    def add(doc_id: str, warnings: list[dict[str, str]]) -> None:
        if warnings:
            found.setdefault(doc_id, []).extend(warnings)

    for doc_id, why in (left_out or {}).items():
        add(doc_id, [_warning("missing_file", why)])
    for doc_id, error in (render_errors or {}).items():
        kind, _, reason = error.partition(": ")
        add(
            doc_id, [_warning("empty_document", reason) if kind == EMPTY_DOCUMENT else _warning("render_failed", error)]
        )
    for doc_id, error in (pdf_failed or {}).items():
        add(doc_id, [_warning("pdf_failed", error)])
    for doc in rendered:
        doc = doc if isinstance(doc, RenderedDocument) else load_layout(doc)
        add(doc.doc_id, layout_warnings(doc))
    for doc_id in no_text_layer:
        add(doc_id, [_warning("no_text_layer", "no page has a text layer: its DOM text is empty, OCR reads it")])
    for doc_id, n in (unplaced_facts or {}).items():
        if n:
            add(doc_id, [_warning("unplaced_facts", f"{n} planted fact(s) have no recorded element: not evidence")])
    rank = {doc_id: i for i, doc_id in enumerate(order)}
    return dict(sorted(found.items(), key=lambda item: rank.get(item[0], len(rank))))


def sampling_shortfall(query_report: Mapping[str, Any], sources: Iterable[str]) -> dict[str, str]:
    """``{"source/structure": "n of budget"}``: the evidence-sampling cells of a generated-queries
    report (``built_by.queries``) below their budget, sources that got none included; ``{}`` for
    other query methods (templates, none), which sample no configurations."""
    if "configs" not in query_report or "sampling" not in query_report:
        return {}
    counts = pd.DataFrame.from_dict(query_report["configs"], orient="index")
    spec = EvidenceSamplingSpec(**query_report["sampling"])
    return {cell: f"{n} of {budget}" for cell, (n, budget) in config_shortfall(counts, spec, sources).items()}


def _line(text: str) -> str:
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1] + "…"


def summary(built_by: Mapping[str, Any], max_documents: int = SUMMARY_DOCUMENTS) -> str:
    """The build report in a few lines: one per document with warnings (its counts per kind; a
    left-out document's reason), the totals per kind, and the evidence-sampling shortfall."""
    warnings: Mapping[str, list[Mapping[str, str]]] = built_by.get("document_warnings") or {}
    shortfall: Mapping[str, str] = built_by.get("sampling_shortfall") or {}
    if not warnings and not shortfall:
        return "build report: no document warnings"
    totals: Counter = Counter()
    lines = []
    left_out = 0
    for doc_id, entries in warnings.items():
        kinds = Counter(w["kind"] for w in entries)
        totals.update(kinds)
        failure = next((w for w in entries if w["kind"] in FAILURE_KINDS), None)
        left_out += failure is not None
        if len(lines) >= max_documents:
            continue
        if failure is not None:
            lines.append(_line(f"  {doc_id}: LEFT OUT, {failure['kind']}: {failure['detail']}"))
        else:
            lines.append(_line(f"  {doc_id}: " + ", ".join(f"{k} {n}" for k, n in _ordered(kinds))))
    if len(warnings) > max_documents:
        lines.append(
            f"  ... and {len(warnings) - max_documents} more document(s) (all in benchmark.json: "
            "built_by.document_warnings)"
        )
    head = f"build report: {len(warnings)} document(s) with warnings, {left_out} left out"
    out = [head, *lines]
    if totals:
        out.append("  totals: " + ", ".join(f"{k} {n}" for k, n in _ordered(totals)))
    if shortfall:
        out.append(
            _line(
                "  evidence sampling below budget (too few or too short documents): "
                + "; ".join(f"{cell} {n}" for cell, n in shortfall.items())
            )
        )
    return "\n".join(out)


SPEC_OCR_OFF = "spec.ocr=false"
PDF_TEXT_LAYER = "pdf.ocr=false: a PDF page with a text layer"


def _index_ranges(indices: Iterable[int]) -> str:
    """``0-3, 7``: sorted page indices as ranges."""
    ranges: list[list[int]] = []
    for i in sorted(indices):
        if ranges and i == ranges[-1][1] + 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def ocr_coverage(pages: pd.DataFrame, not_ocred: Iterable[str | None]) -> dict[str, Any]:
    """``built_by.ocr``: which of ``pages`` (``doc_id``, ``page_index``) were OCRed, ``not_ocred``
    giving per page why not (``None``: OCRed). ``{"pages", "ocred", "not_ocred": {reason: n},
    "documents": {doc_id: {reason: "0-3, 7" | "all"}}}``; ``documents`` lists the documents with
    pages not OCRed, unless no page was (then ``not_ocred`` says it all)."""
    frame = pd.DataFrame(
        {"doc_id": list(pages["doc_id"]), "page_index": list(pages["page_index"]), "why": list(not_ocred)}
    )
    skipped = frame.dropna(subset=["why"])
    documents: dict[str, dict[str, str]] = {}
    if len(skipped) < len(frame):
        sizes = frame.groupby("doc_id", sort=False).size()
        for (doc_id, why), group in skipped.groupby(["doc_id", "why"], sort=False):
            whole = len(group) == sizes[doc_id]
            documents.setdefault(str(doc_id), {})[str(why)] = "all" if whole else _index_ranges(group["page_index"])
    return {
        "pages": len(frame),
        "ocred": len(frame) - len(skipped),
        "not_ocred": {str(k): int(v) for k, v in skipped["why"].value_counts(sort=False).items()},
        "documents": documents,
    }


def ocr_summary(built_by: Mapping[str, Any], max_documents: int = SUMMARY_DOCUMENTS) -> str | None:
    """One line (a few with documents) saying which pages were OCRed; ``None`` for a build that did
    not record it (built before this report existed)."""
    ocr = built_by.get("ocr")
    if not ocr:
        return None
    if not ocr["not_ocred"]:
        return f"OCR: all {ocr['pages']} pages"
    reasons = "; ".join(f"{n} by {why}" for why, n in ocr["not_ocred"].items())
    lines = [f"OCR: {ocr['ocred']} of {ocr['pages']} pages; not OCRed: {reasons}"]
    documents = ocr.get("documents") or {}
    for doc_id, entries in list(documents.items())[:max_documents]:
        lines.append(
            _line(
                f"  {doc_id}: "
                + "; ".join(
                    f"{'all pages' if p == 'all' else 'pages ' + p} not OCRed ({why})" for why, p in entries.items()
                )
            )
        )
    if len(documents) > max_documents:
        lines.append(
            f"  ... and {len(documents) - max_documents} more document(s) (all in benchmark.json: built_by.ocr)"
        )
    return "\n".join(lines)


def _ordered(counts: Counter) -> list[tuple[str, int]]:
    rank = {k: i for i, k in enumerate(WARNING_KINDS)}
    return sorted(counts.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))

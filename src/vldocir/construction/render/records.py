"""What rendering removed, rescaled or could not show, per document (:func:`fidelity_warnings`, the
warnings written to ``layout.json``) and over many documents (:func:`render_report`, a section for a
build report such as ``benchmark.json``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vldocir.construction.render.cleanup import removed_content
from vldocir.construction.render.layout import RenderedDocument, load_layout

CONTENT_TYPES = ("formula", "table", "figure")
"""Content that no clean-up rule may remove (asserted on real pages by the tests)."""


def kept_table_warning(rule: dict[str, Any]) -> str | None:
    """The warning for a clean-up rule that matched elements holding a data table and kept them
    (``kept_table``: with the table, they keep what the rule was written to remove), or None."""
    n = int(rule.get("kept_table", 0))
    if not n:
        return None
    sample = next((s for s in rule.get("kept_samples", []) if s.strip()), "")
    return f"{rule['kind']} rule {rule['rule']!r} kept {n} element(s) holding a data table" + (
        f' ("{sample}")' if sample else ""
    )


def fidelity_warnings(fidelity: dict[str, Any]) -> list[str]:
    """Warnings for one document from its records (``cleanup``, ``fit``, ``overflow``, ``images``)."""
    out = []
    lost = removed_content(fidelity.get("cleanup", []), CONTENT_TYPES)
    if lost:
        out.append(f"clean-up removed {'/'.join(CONTENT_TYPES)} elements: {lost}")
    out += [w for rule in fidelity.get("cleanup", []) if (w := kept_table_warning(rule))]
    over = fidelity.get("overflow", [])
    if over:
        dropped = sum(o["dropped"] for o in over)
        out.append(f"{len(over)} element(s) reach past the page's sides ({dropped} not on the page at all)")
    failed = fidelity.get("images", {}).get("failed", [])
    if failed:
        by = Counter(f["status"] for f in failed)
        out.append(f"{len(failed)} image(s) show nothing: " + ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
    return out


def render_report(docs: Iterable[RenderedDocument | str | Path]) -> dict[str, Any]:
    """Aggregate the records of rendered documents (objects, or their directories) for a build report::

    {"documents": int,
     "cleanup": {"<kind>:<rule>": {"removed", "kept_formula", "kept_table", "changed",
                                   "documents",           # documents where it removed or changed anything
                                   "content": {type: n}}},
     "removed_content": {type: n},          # over all rules; formula/table/figure should be 0
     "formulas": {"elements": int, "empty": int},
     "fit": {"documents": int, "scaled": int, "opened": int},
     "overflow": {"documents": int, "elements": int, "dropped": int, "by_document": {doc_id: n}},
     "images": {"count": int, "resolved_lazy": int, "failed": {status: n},
                "by_document": {doc_id: [{"url", "status", "element_id"}]}}}
    """
    rules: dict[str, dict[str, Any]] = {}
    content: Counter = Counter()
    formulas = empty = 0
    fit = {"documents": 0, "scaled": 0, "opened": 0}
    overflow = {"documents": 0, "elements": 0, "dropped": 0, "by_document": {}}
    images = {"count": 0, "resolved_lazy": 0, "failed": Counter(), "by_document": {}}
    n = 0
    for doc in docs:
        if not isinstance(doc, RenderedDocument):
            doc = load_layout(doc)
        n += 1
        for r in doc.cleanup:
            agg = rules.setdefault(
                f"{r['kind']}:{r['rule']}",
                {"removed": 0, "kept_formula": 0, "kept_table": 0, "changed": 0, "documents": 0, "content": Counter()},
            )
            for count in ("removed", "kept_formula", "kept_table", "changed"):
                agg[count] += int(r.get(count, 0))
            agg["documents"] += bool(r.get("removed") or r.get("changed"))
            agg["content"].update(r.get("content", {}))
            content.update(r.get("content", {}))
        f = [e for e in doc.elements if e.element_type == "formula"]
        formulas += len(f)
        empty += sum(not e.text.strip() for e in f)
        scaled, opened = len(doc.fit.get("scaled", [])), int(doc.fit.get("opened", 0))
        fit["documents"] += bool(scaled or opened)
        fit["scaled"] += scaled
        fit["opened"] += opened
        if doc.overflow:
            overflow["documents"] += 1
            overflow["elements"] += len(doc.overflow)
            overflow["dropped"] += sum(o["dropped"] for o in doc.overflow)
            overflow["by_document"][doc.doc_id] = len(doc.overflow)
        images["count"] += int(doc.images.get("count", 0))
        images["resolved_lazy"] += int(doc.images.get("resolved_lazy", 0))
        failed = doc.images.get("failed", [])
        images["failed"].update(x["status"] for x in failed)
        if failed:
            images["by_document"][doc.doc_id] = [{k: x[k] for k in ("url", "status", "element_id")} for x in failed]
    for agg in rules.values():
        agg["content"] = dict(agg["content"])
    images["failed"] = dict(images["failed"])
    return {
        "documents": n,
        "cleanup": dict(sorted(rules.items())),
        "removed_content": {t: int(content.get(t, 0)) for t in sorted(set(content) | set(CONTENT_TYPES))},
        "formulas": {"elements": formulas, "empty": empty},
        "fit": fit,
        "overflow": overflow,
        "images": images,
    }

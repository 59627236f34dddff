"""Images: lazy images pointed at the document's own files (step 1, :func:`resolve_lazy_images`)
and every image that shows nothing listed with its URL and why (after step 3, :func:`image_report`).

An ``<img>`` that failed is ``complete`` too; what tells is ``naturalWidth == 0``. Why it failed is
read from its URL: outside the document's folder or not a file (``blocked``: the renderer reaches
nothing else), a local file that does not exist (``missing``), one that exists but cannot be decoded
(``broken``), a lazy image whose real source was never set (``lazy``), none at all (``no_source``),
or still loading when the wait ran out (``loading``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from vldocir.construction.render.browser import page_script

_JS_IMAGES = page_script("images.js")


def local_path(url: str, root: Path) -> Path | None:
    """The file a ``file://`` URL names, if it lies under ``root`` (else None)."""
    if not url or not url.startswith("file:"):
        return None
    try:
        path = Path(unquote(urlparse(url).path)).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    root = root.resolve()
    return path if path == root or root in path.parents else None


def _exists(url: str, root: Path) -> bool:
    path = local_path(url, root)
    return path is not None and path.is_file()


def _density(descriptor: str) -> float:
    try:
        return float(descriptor[:-1]) if descriptor[-1:] in ("w", "x") else 1.0
    except ValueError:
        return 1.0


def resolve_lazy_images(page: Any, root: Path) -> int:
    """Point lazy images and ``srcset`` candidates at files under ``root`` where they exist.

    An ``<img>`` with a lazy loader's attribute (``data-src``, ``data-lazy-src``,
    ``data-original``, ``data-srcset``, ``data-lazy-srcset``) whose ``src`` is absent, a ``data:``
    placeholder or not an existing local file gets the first existing ``data-src``-like file, else
    the largest existing ``srcset``-like candidate. ``srcset`` candidates that are no existing
    local file are dropped where something else can show (a browser prefers ``srcset`` to ``src``);
    a ``<picture><source>`` keeps only its existing candidates. Returns the number of images now
    pointed at a local file they did not load before.
    """
    sources = page.evaluate(_JS_IMAGES, ["sources", None, ""])
    changes: list[dict[str, Any]] = []
    resolved = 0
    for s in sources:
        src = s["src"]
        src_file = src is not None and _exists(src, root)
        candidates = [(u, d) for u, d in s["lazy_srcset"] + s["srcset"] if _exists(u, root)]
        change: dict[str, Any] = {"i": s["i"]}
        if s["tag"] == "source":
            lazy = [(u, d) for u, d in s["lazy_srcset"] if _exists(u, root)]
            if lazy or (s["srcset"] and len(candidates) < len(s["srcset"])):
                keep = lazy or [(u, d) for u, d in s["srcset"] if _exists(u, root)]
                change["srcset"] = ", ".join(f"{u} {d}" for u, d in keep) if keep else None
                resolved += bool(lazy)
        else:
            lazy_attrs = bool(s["lazy_src"] or s["lazy_srcset"])
            placeholder = src is None or src.startswith("data:") or not src_file
            if lazy_attrs and placeholder:
                pick = next((u for u in s["lazy_src"] if _exists(u, root)), None)
                if pick is None and candidates:
                    pick = max(candidates, key=lambda c: _density(c[1]))[0]
                if pick is not None:
                    change["src"] = pick
                    change["srcset"] = None
                    resolved += 1
            if "srcset" not in change and s["srcset"]:
                keep = [(u, d) for u, d in s["srcset"] if _exists(u, root)]
                if len(keep) < len(s["srcset"]) and (keep or src_file or (src or "").startswith("data:")):
                    change["srcset"] = ", ".join(f"{u} {d}" for u, d in keep) if keep else None
        if len(change) > 1:
            changes.append(change)
    if changes:
        page.evaluate(_JS_IMAGES, ["apply", changes, ""])
    return resolved


def _status(row: dict[str, Any], root: Path) -> tuple[str, str]:
    url = row["url"] or ""
    if not row["complete"]:
        return "loading", url
    if row["lazy"] and (not url or url.startswith("data:")):
        return "lazy", row["lazy"][0]
    if not url:
        return "no_source", ""
    if url.startswith("data:"):
        return "broken", url[:100]
    if not url.startswith("file:"):
        return "blocked", url
    path = local_path(url, root)
    if path is None:
        return "blocked", url
    return ("broken" if path.is_file() else "missing"), url


def image_report(page: Any, root: Path, id_attribute: str, resolved_lazy: int = 0) -> dict[str, Any]:
    """Every ``<img>`` of the page that shows nothing, after loading and clean-up::

        {"count": int,                 # <img> elements in the cleaned document
         "resolved_lazy": int,         # lazy images pointed at local files (resolve_lazy_images)
         "failed": [{"url": str, "status": "missing" | "blocked" | "broken" | "lazy" | "no_source" | "loading",
                     "element_id": str | None, "alt": str}]}

    ``element_id`` is None for an image that is no recorded element (no area on the page). A lazy
    image still showing its placeholder (a ``data:`` URL, often a transparent pixel) is listed as
    ``lazy`` with the URL it was waiting for.
    """
    rows = page.evaluate(_JS_IMAGES, ["report", None, id_attribute])
    failed = []
    for row in rows:
        placeholder = bool(row["lazy"]) and (not row["url"] or row["url"].startswith("data:"))
        if row["complete"] and row["natural_width"] > 0 and not placeholder:
            continue
        status, url = _status(row, root)
        failed.append({"url": url, "status": status, "element_id": row["element_id"], "alt": row["alt"]})
    return {"count": len(rows), "resolved_lazy": int(resolved_lazy), "failed": failed}

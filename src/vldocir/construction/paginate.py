"""Where to cut a long rendered document into fixed-size pages (pure numpy, no browser).

The renderer looks at one page-sized window of the document at a time. Its nominal end is
``window_top + page_height``; :func:`choose_cut` moves the actual cut up into the band
``[nominal - cut_window, nominal]`` so that it splits neither an atomic element (a paragraph, a
heading, a table row, a figure, ...) nor a line of ink. :func:`assign_elements` then gives every
element its page and its box on that page.

Coordinates are document pixels (device pixels of the full document, ``y`` growing downwards).
A cut ``y`` is the boundary between pixel rows ``y - 1`` and ``y``: the page above holds rows
``[window_top, y)``, the next page starts at row ``y``. A box ``[x0, y0, x1, y1]`` *crosses* the cut
``y`` when ``y0 < y < y1`` (a cut exactly at a box's top or bottom edge does not cross it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["CutDecision", "blank_rows", "crossing_rows", "box_free_runs", "choose_cut", "assign_elements", "Assignment"]


@dataclass(frozen=True)
class CutDecision:
    """The cut chosen for one window.

    ``reason`` is one of

    - ``"end"``: the rest of the document fits on this page; the cut is the document's end;
    - ``"blank"``: a row in the cut band that no atomic box crosses and whose pixels are blank;
    - ``"box_free"``: no such blank row, but a row in the band that no atomic box crosses (e.g.
      between two rows of a bordered table, whose vertical rules make no row blank);
    - ``"push"``: every row of the band is crossed; the cut is moved up to the closest box-free
      row above the band (just above the first crossing element), which pushes that element to
      the next page, leaving the page at least ``min_fill`` full;
    - ``"through"``: nothing better; the cut goes through an element (it is recorded as spanning
      pages) at the blank row of the band closest to nominal (between two lines of text) if there
      is one, else at nominal.
    """

    cut: int
    reason: str


def blank_rows(pixels: np.ndarray, background: Sequence[int] = (255, 255, 255), tolerance: int = 8) -> np.ndarray:
    """Which pixel rows are blank: every pixel within ``tolerance`` of ``background`` on every channel.

    ``pixels``: ``(H, W, C)`` uint8 (C = 3, or 4 whose alpha channel is ignored). Returns ``(H,)`` bool.
    """
    if pixels.ndim != 3 or pixels.shape[2] < 3:
        raise ValueError(f"pixels must be (H, W, 3|4), got shape {pixels.shape}")
    rgb = pixels[:, :, :3]
    bg = np.asarray(background, dtype=np.int16).reshape(1, 1, 3)
    # max |pixel - bg| per row, computed in int16 to avoid uint8 wrap-around.
    dev = np.abs(rgb.astype(np.int16) - bg).max(axis=(1, 2))
    return dev <= tolerance


def crossing_rows(boxes: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """For each integer cut ``y`` in ``[lo, hi]``: is it crossed by any box (``y0 < y < y1``)?

    ``boxes``: ``(N, 4)`` float ``[x0, y0, x1, y1]`` in document pixels (any N, also 0).
    Returns ``(hi - lo + 1,)`` bool.
    """
    n = hi - lo + 1
    if n <= 0:
        return np.zeros(0, dtype=bool)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if len(boxes) == 0:
        return np.zeros(n, dtype=bool)
    # Integer y crosses when floor(y0) + 1 <= y <= ceil(y1) - 1.
    first = np.floor(boxes[:, 1]).astype(np.int64) + 1
    last = np.ceil(boxes[:, 3]).astype(np.int64) - 1
    first = np.maximum(first, lo)
    last = np.minimum(last, hi)
    keep = first <= last
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, first[keep] - lo, 1)
    np.add.at(diff, last[keep] - lo + 1, -1)
    return np.cumsum(diff[:-1]) > 0


def box_free_runs(boxes: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """The runs of consecutive cuts in ``[lo, hi]`` that no box crosses, nearest ``hi`` first.

    ``boxes``: ``(N, 4)`` float. Returns ``[(first, last), ...]`` (inclusive cut positions): the
    renderer probes the pixels of the run nearest the nominal cut before capturing the whole band.
    """
    free = ~crossing_rows(boxes, lo, hi)
    if not free.any():
        return []
    padded = np.concatenate([[False], free, [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    starts, ends = edges[0::2], edges[1::2] - 1
    return [(int(lo + a), int(lo + b)) for a, b in zip(starts[::-1], ends[::-1])]


def choose_cut(
    pixels: np.ndarray | None,
    pixels_top: int,
    window_top: int,
    boxes: np.ndarray,
    *,
    page_height: int,
    doc_height: int,
    cut_window: int = 800,
    min_fill: float = 0.25,
    background: Sequence[int] = (255, 255, 255),
    tolerance: int = 8,
) -> CutDecision:
    """Choose where the page that starts at ``window_top`` ends.

    Args:
        pixels: ``(H, W, 3|4)`` uint8, the rendered pixels of document rows
            ``[pixels_top, pixels_top + H)``: the window, or any part of it that covers the rows
            ``[nominal - cut_window - 1, nominal)`` where blankness is checked (rows outside the
            array count as not blank). ``None`` when no pixels are available (nothing is blank).
        pixels_top: document row of ``pixels[0]``.
        window_top: document row where this page starts.
        boxes: ``(N, 4)`` float ``[x0, y0, x1, y1]``, the atomic elements' boxes in document pixels
            (all of them or only those near the window: others cannot matter).
        page_height: nominal page height in pixels; ``nominal = window_top + page_height``.
        doc_height: the document's height in pixels.
        cut_window: how far above nominal (pixels) a cut is searched for.
        min_fill: a "push" cut must leave at least ``min_fill * page_height`` rows on the page.
        background, tolerance: what a blank row is (see :func:`blank_rows`).

    Returns:
        :class:`CutDecision`, with ``window_top < cut <= min(nominal, doc_height)``.
    """
    nominal = window_top + page_height
    if doc_height <= nominal:
        return CutDecision(int(doc_height), "end")
    lo = max(window_top + 1, nominal - cut_window)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if len(boxes):
        near = (boxes[:, 3] > window_top) & (boxes[:, 1] < nominal)
        boxes = boxes[near]

    crossed = crossing_rows(boxes, lo, nominal)  # index k <-> cut y = lo + k
    # Blankness of the cut y is the blankness of row y - 1, the page's last row.
    blank = np.zeros(nominal - lo + 1, dtype=bool)
    if pixels is not None and len(pixels):
        rows = blank_rows(pixels, background, tolerance)
        ys = np.arange(lo, nominal + 1) - 1 - pixels_top
        inside = (ys >= 0) & (ys < len(rows))
        blank[inside] = rows[ys[inside]]

    free = ~crossed
    good = free & blank
    if good.any():
        return CutDecision(int(lo + np.flatnonzero(good)[-1]), "blank")
    if free.any():
        return CutDecision(int(lo + np.flatnonzero(free)[-1]), "box_free")

    # Every cut in the band crosses a box: look for the closest box-free cut above the band, i.e.
    # just above the first element of the chain of overlapping elements that covers the band.
    min_cut = window_top + int(np.ceil(min_fill * page_height))
    if min_cut < lo:
        above = crossing_rows(boxes, min_cut, lo - 1)
        free_above = np.flatnonzero(~above)
        if len(free_above):
            return CutDecision(int(min_cut + free_above[-1]), "push")
    if blank.any():
        return CutDecision(int(lo + np.flatnonzero(blank)[-1]), "through")
    return CutDecision(int(nominal), "through")


@dataclass(frozen=True)
class Assignment:
    """Elements placed on pages (arrays aligned with the input boxes).

    - ``page_index``: ``(N,)`` int32, the page holding the element's top;
    - ``bbox``: ``(N, 4)`` float32, the box relative to its page: ``y`` minus the page's start, then
      clipped to the page's content (``[0, page_width] x [0, cut - start]``), so it matches the pixels
      of the padded page image;
    - ``spans_pages``: ``(N,)`` bool, the element's bottom passes its page's cut.
    """

    page_index: np.ndarray
    bbox: np.ndarray
    spans_pages: np.ndarray


def assign_elements(boxes: np.ndarray, cuts: Sequence[float], page_width: float | None = None) -> Assignment:
    """Place each element on the page where its top lies.

    Args:
        boxes: ``(N, 4)`` float ``[x0, y0, x1, y1]`` in document pixels.
        cuts: the page boundaries, ``(n_pages + 1,)``: page ``i`` holds rows ``[cuts[i], cuts[i+1])``;
            ``cuts[0]`` is 0 and ``cuts[-1]`` the document's end.
        page_width: clip ``x`` to ``[0, page_width]`` when given.

    An element whose top lies above ``cuts[0]`` goes to page 0, one whose top lies at or below
    ``cuts[-1]`` to the last page.
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    cuts_arr = np.asarray(cuts, dtype=np.float64)
    if cuts_arr.ndim != 1 or len(cuts_arr) < 2 or np.any(np.diff(cuts_arr) <= 0):
        raise ValueError("cuts must be strictly increasing with at least two values")
    n_pages = len(cuts_arr) - 1
    page = np.searchsorted(cuts_arr, boxes[:, 1], side="right") - 1
    page = np.clip(page, 0, n_pages - 1).astype(np.int32)
    start = cuts_arr[page]
    end = cuts_arr[page + 1]
    spans = boxes[:, 3] > end
    rel = boxes.copy()
    rel[:, [1, 3]] -= start[:, None]
    height = (end - start)[:, None]
    rel[:, [1, 3]] = np.clip(rel[:, [1, 3]], 0.0, height)
    if page_width is not None:
        rel[:, [0, 2]] = np.clip(rel[:, [0, 2]], 0.0, float(page_width))
    return Assignment(page_index=page, bbox=rel.astype(np.float32), spans_pages=spans)

"""Where to cut a long rendered document into fixed-size pages (pure numpy, no browser).

The renderer looks at one page-sized window of the document at a time. Its nominal end is
``window_top + page_height``; :func:`choose_cut` moves the actual cut up into the band
``[nominal - cut_window, nominal]`` so that it splits neither an atomic element (a paragraph, a
list item, a heading, a table row, a figure, ...) nor a line of ink, and so that no heading is left
alone at the bottom of a page (:func:`keep_with_next`). :func:`assign_elements` then gives every
element its page and its box on that page, and :func:`split_over_pages` the boxes of an element
drawn in several places (columns, pages) on theirs.

Coordinates are document pixels (device pixels of the full document, ``y`` growing downwards).
A cut ``y`` is the boundary between pixel rows ``y - 1`` and ``y``: the page above holds rows
``[window_top, y)``, the next page starts at row ``y``. A box ``[x0, y0, x1, y1]`` *crosses* the cut
``y`` when ``y0 < y < y1`` (a cut exactly at a box's top or bottom edge does not cross it).

Pixels decide as much as boxes. A cut is *clean* when the rows around it, ``[y - 1 - margin,
y + margin)``, are background (``blank``), or at least hold nothing but vertical strokes (the same
ink in every row, e.g. the vertical rules of a bordered table between two of its rows): a
horizontal rule or a text line is then never split between two pages. Because a table's rule is
drawn across the boundary of two rows' boxes, a clean cut may lie up to ``slack`` pixels inside an
element's box, in its padding (the pixels say that nothing is drawn there);
:func:`assign_elements` then places that element wholly on one page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Assignment",
    "CutDecision",
    "assign_elements",
    "blank_rows",
    "box_free_runs",
    "choose_cut",
    "crossing_rows",
    "ink_rows",
    "keep_with_next",
    "split_over_pages",
]


@dataclass(frozen=True)
class CutDecision:
    """The cut chosen for one window.

    ``reason`` is one of

    - ``"end"``: the rest of the document fits on this page; the cut is the document's end;
    - ``"blank"``: a cut in the band that no atomic box crosses (but for ``slack`` pixels of
      padding) with background rows around it;
    - ``"box_free"``: no such cut, but one in the band that no box crosses whose rows hold only
      vertical strokes (between two rows of a bordered table); or, failing every clean cut here
      and above the band, any cut in the band that no box crosses;
    - ``"push"``: every cut of the band crosses a box (or leaves a heading alone); the cut is moved
      up to the closest clean cut above the band (else the closest box-free one), which pushes the
      element to the next page, leaving the page at least ``min_fill`` full;
    - ``"through"``: nothing better; the cut goes through elements (recorded as spanning pages)
      at a blank row of the band (between two lines of text), through as few list items,
      headings, table rows, images and formulas (``fragile``) as it can, closest to nominal; else
      at nominal.
    """

    cut: int
    reason: str
    clean: bool = False
    """The rows around the cut were seen to be clean (blank, or vertical strokes only)."""


def _ink(pixels: np.ndarray, background: Sequence[int], tolerance: int) -> np.ndarray:
    """``(H, W)`` bool: pixels farther than ``tolerance`` from ``background`` on some channel."""
    if pixels.ndim != 3 or pixels.shape[2] < 3:
        raise ValueError(f"pixels must be (H, W, 3|4), got shape {pixels.shape}")
    # Compared channel by channel in uint8, against bounds computed in Python ints: no widened copy
    # of the pixels (several times faster than |pixel - bg| in int16 on a band of 800 x 2000).
    ink = np.zeros(pixels.shape[:2], dtype=bool)
    for c in range(3):
        channel, b = pixels[:, :, c], int(background[c])
        if b + tolerance < 255:
            ink |= channel > b + tolerance
        if b - tolerance > 0:
            ink |= channel < b - tolerance
    return ink


def blank_rows(pixels: np.ndarray, background: Sequence[int] = (255, 255, 255), tolerance: int = 8) -> np.ndarray:
    """Which pixel rows are blank: every pixel within ``tolerance`` of ``background`` on every channel.

    ``pixels``: ``(H, W, C)`` uint8 (C = 3, or 4 whose alpha channel is ignored). Returns ``(H,)`` bool.
    """
    return ~_ink(pixels, background, tolerance).any(axis=1)


def ink_rows(
    pixels: np.ndarray, background: Sequence[int] = (255, 255, 255), tolerance: int = 8
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``pixels`` (``(H, W, 3|4)`` uint8): ``(blank, same_as_next)``, both ``(H,)`` bool.

    ``blank[r]``: row ``r`` has no ink (see :func:`blank_rows`); ``same_as_next[r]``: row ``r`` has
    ink in exactly the columns where row ``r + 1`` has (``False`` for the last row). A run of rows
    that are all the same holds only vertical strokes (or uniform colour): no line of text and no
    horizontal rule ends or starts in it.
    """
    ink = _ink(pixels, background, tolerance)
    same = np.zeros(len(ink), dtype=bool)
    if len(ink) > 1:
        same[:-1] = (ink[1:] == ink[:-1]).all(axis=1)
    return ~ink.any(axis=1), same


def crossing_rows(boxes: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """For each integer cut ``y`` in ``[lo, hi]``: is it crossed by any box (``y0 < y < y1``)?

    ``boxes``: ``(N, 4)`` float ``[x0, y0, x1, y1]`` in document pixels (any N, also 0).
    Returns ``(hi - lo + 1,)`` bool.
    """
    return crossing_counts(boxes, lo, hi) > 0


def crossing_counts(boxes: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """For each integer cut ``y`` in ``[lo, hi]``: how many boxes cross it. ``(hi - lo + 1,)`` int64."""
    n = hi - lo + 1
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if len(boxes) == 0:
        return np.zeros(n, dtype=np.int64)
    # Integer y crosses when floor(y0) + 1 <= y <= ceil(y1) - 1.
    first = np.floor(boxes[:, 1]).astype(np.int64) + 1
    last = np.ceil(boxes[:, 3]).astype(np.int64) - 1
    first = np.maximum(first, lo)
    last = np.minimum(last, hi)
    keep = first <= last
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, first[keep] - lo, 1)
    np.add.at(diff, last[keep] - lo + 1, -1)
    return np.cumsum(diff[:-1])


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
    return [(int(lo + a), int(lo + b)) for a, b in zip(starts[::-1], ends[::-1], strict=True)]


def _shrunk(boxes: np.ndarray, slack: float) -> np.ndarray:
    """Boxes with ``slack`` pixels taken off their top and bottom (a box keeps at least 2 px)."""
    if slack <= 0 or len(boxes) == 0:
        return boxes
    out = boxes.copy()
    s = np.clip((boxes[:, 3] - boxes[:, 1] - 2.0) / 2.0, 0.0, float(slack))
    out[:, 1] += s
    out[:, 3] -= s
    return out


def keep_with_next(boxes: np.ndarray, is_heading: np.ndarray, max_gap: float, slack: float = 0.0) -> np.ndarray:
    """Boxes that keep each heading on the page of the content that follows it.

    ``boxes``: ``(N, 4)`` float, the atomic elements; ``is_heading``: ``(N,)`` bool. For every
    heading whose next content (the box with the smallest top at or below the heading's bottom)
    starts at most ``max_gap`` pixels below it, returns the box from the heading's top to one
    pixel (plus ``slack``, the cuts' slack: its padding is not content) past that content's top: a
    cut may then come above the heading or below the start of its content, never in between.
    Returns ``(K, 4)`` float64.
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    heads = np.flatnonzero(np.asarray(is_heading, dtype=bool))
    if len(heads) == 0:
        return np.zeros((0, 4))
    tops = boxes[:, 1]
    order = np.argsort(tops, kind="stable")
    sorted_tops = tops[order]
    out = []
    for i in heads:
        bottom = boxes[i, 3]
        k = int(np.searchsorted(sorted_tops, bottom - 1.0, side="left"))
        while k < len(order) and order[k] == i:
            k += 1
        if k == len(order):
            continue  # nothing after it: the document ends
        nxt = sorted_tops[k]
        if nxt - bottom <= max_gap:
            out.append([boxes[i, 0], boxes[i, 1], boxes[i, 2], max(nxt, bottom) + 1.0 + max(slack, 0.0)])
    return np.asarray(out, dtype=np.float64).reshape(-1, 4)


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
    margin: int = 1,
    slack: int = 4,
    keep_boxes: np.ndarray | None = None,
    fragile: np.ndarray | None = None,
) -> CutDecision:
    """Choose where the page that starts at ``window_top`` ends.

    Args:
        pixels: ``(H, W, 3|4)`` uint8, the rendered pixels of document rows
            ``[pixels_top, pixels_top + H)``: the window, or any part of it (rows outside the
            array are unknown: never clean; rows at or below ``doc_height`` are background).
            ``None`` when no pixels are available (then only boxes decide, as ``"box_free"``,
            ``"push"`` or ``"through"`` at nominal).
        pixels_top: document row of ``pixels[0]``.
        window_top: document row where this page starts.
        boxes: ``(N, 4)`` float ``[x0, y0, x1, y1]``, the atomic elements' boxes in document pixels
            (all of them or only those near the window: others cannot matter).
        page_height: nominal page height in pixels; ``nominal = window_top + page_height``.
        doc_height: the document's height in pixels.
        cut_window: how far above nominal (pixels) a cut is searched for before pushing.
        min_fill: a "push" cut must leave at least ``min_fill * page_height`` rows on the page.
        background, tolerance: what a blank pixel is (see :func:`blank_rows`).
        margin: a clean cut ``y`` has clean rows ``[y - 1 - margin, y + margin)`` (the page's last
            row and ``margin`` rows on either side); 0 checks the page's last row only.
        slack: a clean cut may lie this many pixels inside a box's top or bottom edge.
        keep_boxes: ``(K, 4)`` float, boxes no cut may cross, slack or not (:func:`keep_with_next`).
        fragile: ``(N,)`` bool over ``boxes``: elements a ``"through"`` cut avoids crossing.

    Returns:
        :class:`CutDecision`, with ``window_top < cut <= min(nominal, doc_height)``.
    """
    nominal = window_top + page_height
    if doc_height <= nominal:
        return CutDecision(int(doc_height), "end")
    lo = max(window_top + 1, nominal - cut_window)
    min_cut = window_top + int(np.ceil(min_fill * page_height))
    first = min(lo, max(window_top + 1, min_cut))  # cuts [first, nominal] are considered
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    fragile = np.zeros(len(boxes), bool) if fragile is None else np.asarray(fragile, dtype=bool).reshape(-1)
    if len(fragile) != len(boxes):
        raise ValueError("fragile must have one value per box")
    if len(boxes):
        near = (boxes[:, 3] > window_top) & (boxes[:, 1] < nominal)
        boxes, fragile = boxes[near], fragile[near]
    keep = np.zeros((0, 4)) if keep_boxes is None else np.asarray(keep_boxes, dtype=np.float64).reshape(-1, 4)

    n = nominal - first + 1  # index k <-> cut y = first + k
    kept = crossing_rows(keep, first, nominal)
    exact = ~crossing_rows(boxes, first, nominal) & ~kept
    loose = ~crossing_rows(_shrunk(boxes, slack), first, nominal) & ~kept

    # Pixel rows first - 2 - margin .. nominal + margin: blank and same-as-next, where known.
    row0 = first - 2 - margin
    nrows = n + 2 * margin + 3
    blank = np.zeros(nrows, dtype=bool)
    same = np.zeros(nrows, dtype=bool)
    if pixels is not None and len(pixels):
        b, s = ink_rows(pixels, background, tolerance)
        ys = np.arange(row0, row0 + nrows) - pixels_top
        inside = (ys >= 0) & (ys < len(b))
        blank[inside] = b[ys[inside]]
        same[inside] = s[ys[inside]]
    below_end = np.arange(row0, row0 + nrows) >= doc_height
    blank |= below_end
    same |= below_end & np.roll(below_end, -1)

    # Cut y (index k): rows y - 1 - margin .. y + margin - 1 are blank, or those rows and one more on
    # either side are all alike (each row the same as the next).
    win = 2 * margin + 1
    k = np.arange(n)
    lo_row = k + 1  # index of row y - 1 - margin in the row arrays
    cb = np.concatenate([[0], np.cumsum(blank)])
    blank_ok = cb[lo_row + win] - cb[lo_row] == win
    cs = np.concatenate([[0], np.cumsum(same)])
    alike_ok = cs[lo_row - 1 + win + 1] - cs[lo_row - 1] == win + 1  # rows lo_row-1 .. lo_row+win same as next

    in_band = (first + k) >= lo
    above = ~in_band & ((first + k) >= min_cut)

    def nearest(mask: np.ndarray) -> int | None:
        idx = np.flatnonzero(mask)
        return int(first + idx[-1]) if len(idx) else None

    def pick(where: np.ndarray, pixels_ok: np.ndarray) -> int | None:
        # The clean cut nearest nominal, box-free or within slack of a box's edge; but a box-free
        # one when there is one within slack of it (where it was before slack was allowed).
        cut = nearest(where & loose & pixels_ok)
        if cut is None:
            return None
        alt = nearest(where & exact & pixels_ok & (first + k >= cut - slack))
        return cut if alt is None else alt

    tiers = (
        (in_band, blank_ok, "blank"),
        (in_band, alike_ok, "box_free"),
        (above, blank_ok, "push"),
        (above, alike_ok, "push"),
    )
    for where, pixels_ok, reason in tiers:
        cut = pick(where, pixels_ok)
        if cut is not None:
            return CutDecision(cut, reason, clean=True)
    # No clean cut: box-free rows, whatever their pixels (or without pixels), as before.
    for where, reason in ((in_band, "box_free"), (above, "push")):
        cut = nearest(where & exact)
        if cut is not None:
            return CutDecision(cut, reason)

    # Through elements: at blank rows (between two lines of text) crossing the fewest fragile
    # elements (list items, headings, table rows, images, formulas), nearest nominal.
    through = in_band & blank_ok
    if not through.any():
        through = in_band & blank[k + 1 + margin]  # the page's last row alone
    if through.any():
        counts = crossing_counts(boxes[fragile], first, nominal) + crossing_counts(keep, first, nominal)
        best = counts[through].min()
        return CutDecision(nearest(through & (counts == best)), "through", clean=bool(blank_ok[through].any()))
    return CutDecision(int(nominal), "through")


@dataclass(frozen=True)
class Assignment:
    """Elements placed on pages (arrays aligned with the input boxes).

    - ``page_index``: ``(N,)`` int32, the page holding the element's top (or the next page, when
      only ``slack`` pixels of it lie above that page's start);
    - ``bbox``: ``(N, 4)`` float32, the box relative to its page: ``y`` minus the page's start, then
      clipped to the page's content (``[0, page_width] x [0, cut - start]``), so it matches the pixels
      of the padded page image;
    - ``spans_pages``: ``(N,)`` bool, the element's bottom passes its page's cut by more than
      ``slack`` pixels.
    """

    page_index: np.ndarray
    bbox: np.ndarray
    spans_pages: np.ndarray


def assign_elements(
    boxes: np.ndarray, cuts: Sequence[float], page_width: float | None = None, slack: float = 0.0
) -> Assignment:
    """Place each element on the page where its top lies.

    Args:
        boxes: ``(N, 4)`` float ``[x0, y0, x1, y1]`` in document pixels.
        cuts: the page boundaries, ``(n_pages + 1,)``: page ``i`` holds rows ``[cuts[i], cuts[i+1])``;
            ``cuts[0]`` is 0 and ``cuts[-1]`` the document's end.
        page_width: clip ``x`` to ``[0, page_width]`` when given.
        slack: the ``slack`` the cuts were chosen with (:func:`choose_cut`): an element crossing a
            cut with at most this many pixels above it goes to the page below, and one crossing a
            cut with at most this many pixels below it does not span pages. Either way its box is
            clipped to its page, which holds everything it draws.

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
    if slack > 0:
        end = cuts_arr[page + 1]
        down = (boxes[:, 3] > end) & (end - boxes[:, 1] <= slack) & (page < n_pages - 1)
        page[down] += 1
    start = cuts_arr[page]
    end = cuts_arr[page + 1]
    spans = boxes[:, 3] > end + max(slack, 0.0)
    rel = boxes.copy()
    rel[:, [1, 3]] -= start[:, None]
    height = (end - start)[:, None]
    rel[:, [1, 3]] = np.clip(rel[:, [1, 3]], 0.0, height)
    if page_width is not None:
        rel[:, [0, 2]] = np.clip(rel[:, [0, 2]], 0.0, float(page_width))
    return Assignment(page_index=page, bbox=rel.astype(np.float32), spans_pages=spans)


def split_over_pages(
    boxes: Sequence[Sequence[float]], cuts: Sequence[float], page_width: float | None = None, slack: float = 0.0
) -> list[tuple[int, list[float]]]:
    """The boxes of one element (its column fragments, or its one box) cut at the page boundaries.

    Args:
        boxes: ``[x0, y0, x1, y1]`` boxes in document pixels, in flow order.
        cuts: the page boundaries, as for :func:`assign_elements`.
        page_width: clip ``x`` to ``[0, page_width]`` when given.
        slack: a box's part of at most this many rows on a page is dropped, as :func:`assign_elements`
            places an element crossing a cut by at most ``slack`` pixels wholly on one page (a box
            no part of which is taller keeps its tallest part).

    Returns ``[(page_index, [x0, y0, x1, y1]), ...]``, each part relative to its page (``y`` minus the
    page's start), in the order of ``boxes`` then of pages. A box wholly above ``cuts[0]`` or at or
    below ``cuts[-1]`` gives one empty part on the first or last page.
    """
    cuts_arr = np.asarray(cuts, dtype=np.float64)
    if cuts_arr.ndim != 1 or len(cuts_arr) < 2 or np.any(np.diff(cuts_arr) <= 0):
        raise ValueError("cuts must be strictly increasing with at least two values")
    n_pages = len(cuts_arr) - 1
    out: list[tuple[int, list[float]]] = []
    for x0, y0, x1, y1 in (tuple(float(v) for v in b) for b in boxes):
        if page_width is not None:
            x0, x1 = min(max(x0, 0.0), float(page_width)), min(max(x1, 0.0), float(page_width))
        first = int(np.clip(np.searchsorted(cuts_arr, y0, side="right") - 1, 0, n_pages - 1))
        last = int(np.clip(np.searchsorted(cuts_arr, y1, side="left") - 1, first, n_pages - 1))
        parts = []
        for page in range(first, last + 1):
            start, end = cuts_arr[page], cuts_arr[page + 1]
            top, bottom = min(max(y0, start), end), min(max(y1, start), end)
            parts.append((bottom - top, page, [x0, float(top - start), x1, float(bottom - start)]))
        kept = [p for p in parts if p[0] > slack] or [max(parts, key=lambda p: p[0])]
        out += [(page, box) for _, page, box in kept]
    return out

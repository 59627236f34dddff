"""Choosing page cuts and placing elements on pages (pure numpy: synthetic pixels and boxes)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from vldocir.construction.paginate import (
    assign_elements,
    blank_rows,
    box_free_runs,
    choose_cut,
    crossing_rows,
    ink_rows,
    keep_with_next,
)

PAGE_H = 4000
WIDTH = 200  # pixel width of the synthetic windows (the width plays no role in the cut)


def white(rows: int, width: int = WIDTH) -> np.ndarray:
    return np.full((rows, width, 3), 255, dtype=np.uint8)


def window_with_lines(top: int, rows: int, lines: list[tuple[int, int]], colour=(0, 0, 0)) -> np.ndarray:
    """White pixels of document rows [top, top + rows) with ink on the rows [a, b) of ``lines``."""
    px = white(rows)
    for a, b in lines:
        px[max(a - top, 0) : max(b - top, 0), 20:180] = colour
    return px


def crosses(box, y) -> bool:
    return box[1] < y < box[3]


# --- blank_rows / crossing_rows / box_free_runs ------------------------------------------------


def test_blank_rows_tolerance_and_alpha():
    px = white(5)
    px[1, 3] = (250, 250, 250)  # within tolerance 8
    px[2, 3] = (240, 255, 255)  # beyond it
    px[3] = (0, 0, 0)
    assert blank_rows(px).tolist() == [True, True, False, False, True]
    assert blank_rows(px, tolerance=20).tolist() == [True, True, True, False, True]
    rgba = np.concatenate([px, np.zeros((5, WIDTH, 1), np.uint8)], axis=2)  # alpha is ignored
    assert blank_rows(rgba).tolist() == blank_rows(px).tolist()
    grey = np.full((2, 4, 3), 240, np.uint8)
    assert blank_rows(grey, background=(240, 240, 240)).all()
    assert not blank_rows(grey).any()
    with pytest.raises(ValueError, match=r"pixels must be \(H, W, 3\|4\)"):
        blank_rows(np.zeros((3, 3), np.uint8))


def test_crossing_rows_is_strict_at_box_edges():
    boxes = np.array([[0, 10, 5, 20]], dtype=np.float32)
    crossed = crossing_rows(boxes, 5, 25)
    ys = np.arange(5, 26)
    assert ys[crossed].tolist() == list(range(11, 20))  # 10 and 20 (the edges) are free
    # fractional edges: the box paints part of rows 10 and 20, so neither 10.5 < y nor y < 20.25 ...
    frac = crossing_rows(np.array([[0, 10.5, 5, 20.25]]), 5, 25)
    assert ys[frac].tolist() == list(range(11, 21))
    assert not crossing_rows(np.zeros((0, 4)), 0, 9).any()
    assert crossing_rows(boxes, 9, 8).shape == (0,)


def test_box_free_runs_nearest_first():
    boxes = np.array([[0, 0, 1, 10], [0, 12, 1, 20], [0, 25, 1, 40]], dtype=float)
    assert box_free_runs(boxes, 0, 30) == [(20, 25), (10, 12), (0, 0)]
    assert box_free_runs(np.array([[0, 0, 1, 100]]), 10, 50) == []


# --- choose_cut --------------------------------------------------------------------------------


def test_end_when_the_rest_fits():
    d = choose_cut(None, 0, 1000, np.zeros((0, 4)), page_height=PAGE_H, doc_height=4900)
    assert (d.cut, d.reason) == (4900, "end")


def test_blank_box_free_row_closest_to_nominal():
    top = 8000
    nominal = top + PAGE_H
    # paragraphs: boxes whose ink covers them; the gaps between are blank
    paras = [(top + 2800, top + 3300), (top + 3330, top + 3650), (top + 3690, top + 4400)]
    boxes = np.array([[10, a, 190, b] for a, b in paras], dtype=np.float32)
    px = window_with_lines(top, PAGE_H, paras)
    d = choose_cut(px, top, top, boxes, page_height=PAGE_H, doc_height=50_000, cut_window=800)
    assert d.reason == "blank"
    # the gap nearest nominal ends at the third paragraph's top, whose ink starts at once: the
    # first row of the next page must be blank too (margin 1)
    assert d.cut == top + 3689
    assert not any(crosses(b, d.cut) for b in boxes)
    assert top + PAGE_H - 800 <= d.cut <= nominal


def test_blank_row_preferred_over_a_nearer_non_blank_box_free_row():
    top = 0
    # Two rows of a bordered table near nominal (box-free boundary at 3900, but a rule is drawn
    # there), and a blank gap between paragraphs higher up at 3500.
    boxes = np.array([[0, 3300, 200, 3500], [0, 3520, 200, 3900], [0, 3900, 200, 4300]], float)
    px = window_with_lines(top, PAGE_H, [(3300, 3500), (3520, 4000)])
    d = choose_cut(px, top, top, boxes, page_height=PAGE_H, doc_height=10_000)
    assert (d.reason, d.cut) == ("blank", 3519)


def test_box_free_between_table_rows_when_nothing_is_blank():
    top = 4000
    nominal = top + PAGE_H
    # a table taller than the band: rows of 40 px; vertical rules make every pixel row non-blank
    rows = [(y, y + 40) for y in range(top + 2000, top + 6000, 40)]
    boxes = np.array([[0, a, 200, b] for a, b in rows], dtype=float)
    px = white(PAGE_H + 4)  # the margin rows below nominal too
    px[:, 0:2] = 0  # a vertical rule through every row
    d = choose_cut(px, top, top, boxes, page_height=PAGE_H, doc_height=20_000, cut_window=800)
    assert d.reason == "box_free"
    assert d.cut == nominal  # a row boundary falls exactly on nominal here
    assert not any(crosses(b, d.cut) for b in boxes)
    # shift the rows by 17 px: the nearest boundary is 23 px above nominal
    boxes2 = boxes + np.array([0, 17, 0, 17])
    d2 = choose_cut(px, top, top, boxes2, page_height=PAGE_H, doc_height=20_000, cut_window=800)
    assert d2.reason == "box_free" and d2.cut == nominal - 23
    assert not any(crosses(b, d2.cut) for b in boxes2)


def test_push_element_covering_the_band_to_the_next_page():
    top = 0
    # text lines down to 3000, then a figure from 3100 to 4500: it covers the band [3200, 4000]
    boxes = np.array([[0, 100, 200, 3000], [0, 3100, 200, 4500]], dtype=float)
    px = window_with_lines(top, PAGE_H, [(100, 3000), (3100, 4000)], colour=(200, 30, 60))
    d = choose_cut(px, top, top, boxes, page_height=PAGE_H, doc_height=9000, cut_window=800)
    assert (d.reason, d.cut) == ("push", 3099)  # just above the figure (whose first row is ink)
    assert not any(crosses(b, d.cut) for b in boxes)


def test_push_respects_min_fill_else_cut_through():
    top = 0
    # a figure from 500 to 4600: pushing it would leave only 500 rows (12.5%) on the page
    boxes = np.array([[0, 500, 200, 4600]], dtype=float)
    px = window_with_lines(top, PAGE_H, [(500, 4000)])
    d = choose_cut(px, top, top, boxes, page_height=PAGE_H, doc_height=9000, min_fill=0.25)
    assert (d.reason, d.cut) == ("through", PAGE_H)  # no blank row: nominal
    d = choose_cut(px, top, top, boxes, page_height=PAGE_H, doc_height=9000, min_fill=0.1)
    assert (d.reason, d.cut) == ("push", 499)


def test_through_a_long_paragraph_between_two_lines():
    top = 0
    # one paragraph from 100 to 6000 (atomic): lines of 30 px ink with 10 px gaps
    boxes = np.array([[0, 100, 200, 6000]], dtype=float)
    lines = [(y, y + 30) for y in range(100, 6000, 40)]
    px = window_with_lines(top, PAGE_H, lines)
    d = choose_cut(px, top, top, boxes, page_height=PAGE_H, doc_height=9000)
    assert d.reason == "through"
    assert d.cut <= PAGE_H and blank_rows(px)[d.cut - 1]
    assert PAGE_H - d.cut < 40  # the gap between lines nearest nominal


def test_without_pixels_nothing_is_blank():
    boxes = np.array([[0, 0, 200, 3500], [0, 3600, 200, 3950]], dtype=float)
    d = choose_cut(None, 0, 0, boxes, page_height=PAGE_H, doc_height=9000)
    assert (d.reason, d.cut) == ("box_free", PAGE_H)


def test_partial_pixels_cover_only_part_of_the_band():
    # pixels only of rows [3490, 3520): the blank gap at 3500..3510 is seen, the rest is unknown
    boxes = np.array([[0, 0, 200, 3500], [0, 3510, 200, 3900]], dtype=float)
    px = window_with_lines(3490, 30, [(3490, 3500), (3510, 3520)])
    d = choose_cut(px, 3490, 0, boxes, page_height=PAGE_H, doc_height=9000)
    assert (d.reason, d.cut) == ("blank", 3509)


def test_non_white_background():
    grey = (235, 235, 235)
    boxes = np.array([[0, 3000, 200, 3700], [0, 3750, 200, 4500]], dtype=float)
    px = np.full((PAGE_H, WIDTH, 3), grey, dtype=np.uint8)
    px[3000:3700, 20:180] = 0
    px[3750:4000, 20:180] = 0
    assert choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=9000).reason == "box_free"
    d = choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=9000, background=grey)
    assert (d.reason, d.cut) == ("blank", 3749)


@pytest.mark.parametrize("seed", range(40))
def test_invariants_on_random_layouts(seed):
    rng = np.random.default_rng(seed)
    top = int(rng.integers(0, 20_000))
    nominal = top + PAGE_H
    n = int(rng.integers(0, 40))
    y0 = top + rng.uniform(-1000, PAGE_H + 500, size=n)
    h = rng.exponential(300, size=n) + 1
    boxes = np.stack([np.zeros(n), y0, np.full(n, 100.0), y0 + h], axis=1)
    px = white(PAGE_H)
    for b in boxes:
        a, c = int(np.floor(b[1])) - top, int(np.ceil(b[3])) - top
        px[max(a, 0) : max(min(c, PAGE_H), 0), 10:90] = 0
    cut_window = int(rng.integers(100, 1500))
    d = choose_cut(px, top, top, boxes, page_height=PAGE_H, doc_height=nominal + 10_000, cut_window=cut_window)
    assert top < d.cut <= nominal
    band_free = ~crossing_rows(boxes, nominal - cut_window, nominal)
    if band_free.any():
        # a box-free cut existed: the chosen one crosses no box (solid boxes leave no clean
        # padding to cut in), and lies in the band or above it (pushing rather than splitting ink)
        assert d.reason in ("blank", "box_free", "push")
        assert not any(crosses(b, d.cut) for b in boxes)
        assert d.reason == "push" or nominal - cut_window <= d.cut
    if d.reason == "push":
        assert d.cut >= top + 0.25 * PAGE_H
        assert not any(crosses(b, d.cut) for b in boxes)
    if d.reason in ("blank", "push") and d.cut - 2 >= top:
        assert blank_rows(px[d.cut - 2 - top : d.cut + 1 - top]).all()


def test_ink_rows_tells_vertical_strokes_from_horizontal_ink():
    px = white(8)
    px[:, 0:2] = 0  # a vertical rule through every row
    px[3, :] = 0  # a horizontal rule on row 3
    blank, same = ink_rows(px)
    assert not blank.any()
    assert same.tolist() == [True, True, False, False, True, True, True, False]  # last: no next row


def bordered_table(top: int, n_rows: int, row_h: int, rule: int = 2):
    """Boxes and pixels of a border-collapse table: each row's box starts in the middle of the rule
    it shares with the row above (``rule`` rows of ink straddling the boundary), vertical rules at
    the table's sides, a line of text in each row 10 px below its top."""
    bounds = [top + i * row_h for i in range(n_rows + 1)]
    boxes = np.array([[0, a, WIDTH, b] for a, b in pairwise(bounds)], dtype=float)
    end = bounds[-1] + 40
    px = white(end)
    px[top - rule // 2 : bounds[-1] + rule - rule // 2, 0:2] = 0
    px[top - rule // 2 : bounds[-1] + rule - rule // 2, WIDTH - 2 :] = 0
    for b in bounds:
        px[b - rule // 2 : b + rule - rule // 2, :] = 0  # the rule shared by two rows
    for a in bounds[:-1]:
        text_line(px, a + 10, a + row_h - 10)
    return boxes, px


def text_line(px: np.ndarray, a: int, b: int) -> None:
    """Glyph-like ink on rows [a, b): strokes whose columns change from row to row."""
    for r in range(a, b):
        for x in range(20 + (r * 7) % 13, 180, 17):
            px[r, x : x + 3] = 40


def test_a_table_rule_never_lands_on_both_pages():
    top = 100
    boxes, px = bordered_table(top, n_rows=100, row_h=60)
    d = choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=len(px) + 1000, slack=4)
    assert d.reason == "box_free"  # only vertical rules around the cut
    rule = ~blank_rows(px[:, 2:-2])  # ink between the side rules: rules and text
    horizontal = np.array([(px[r, 2:-2] == 0).all() for r in range(len(px))])
    # no rule row within one row of the cut, and no text row either
    assert not horizontal[d.cut - 2 : d.cut + 1].any() and not rule[d.cut - 2 : d.cut + 1].any()
    # the cut lies in a row's padding, at most 4 px inside its box: the row goes to one page
    a = assign_elements(boxes, [0, d.cut, len(px)], slack=4)
    assert not a.spans_pages.any()
    for i, b in enumerate(boxes):
        page = a.page_index[i]
        assert (b[3] <= d.cut + 4) if page == 0 else (b[1] >= d.cut - 4)
    # without slack or margin (the behaviour before): the cut sits on the rule itself
    old = choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=len(px) + 1000, slack=0, margin=0)
    assert old.reason == "box_free" and (horizontal[old.cut - 1] or horizontal[old.cut])


def test_a_short_table_whose_rules_leave_no_clean_cut_is_pushed():
    # rows of 60 px whose text fills them up to the rules: no clean row inside the table
    top = 3000
    boxes, px = bordered_table(top, n_rows=20, row_h=60)
    for a in range(top, top + 20 * 60, 60):
        text_line(px, a + 1, a + 59)
    px = px[: PAGE_H + 4]
    d = choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=10_000)
    assert d.reason == "push" and d.cut < top - 1 and blank_rows(px)[d.cut - 2 : d.cut + 1].all()
    # with no pixels the old rule holds: the box-free row nearest nominal
    assert choose_cut(None, 0, 0, boxes, page_height=PAGE_H, doc_height=10_000).reason == "box_free"


def test_keep_with_next_boxes():
    boxes = np.array(
        [
            [0, 100, 200, 160],  # h2
            [0, 180, 200, 220],  # h3, right below
            [0, 240, 200, 900],  # its paragraph
            [0, 950, 200, 1000],  # a heading at the end of the document
        ],
        dtype=float,
    )
    keep = keep_with_next(boxes, np.array([True, True, False, True]), max_gap=100)
    np.testing.assert_allclose(keep, [[0, 100, 200, 181], [0, 180, 200, 241]])
    assert keep_with_next(boxes, np.array([True, True, False, True]), max_gap=10).shape == (0, 4)
    slack = keep_with_next(boxes, np.array([True, True, False, True]), max_gap=100, slack=4)
    np.testing.assert_allclose(slack[:, 3], [185, 245])


def test_a_heading_is_not_left_alone_at_the_bottom():
    # paragraphs, then a heading right above the nominal cut, then a long paragraph across it
    paras = [(100, 1800), (1840, 3600), (3700, 3760), (3800, 4600)]
    boxes = np.array([[10, a, 190, b] for a, b in paras], dtype=float)
    lines = [(y, y + 30) for a, b in paras for y in range(a + 8, b - 30, 40)]
    px = window_with_lines(0, PAGE_H + 4, lines)
    alone = choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=9000)
    assert alone.reason == "blank" and 3760 < alone.cut <= 3800  # the heading would end the page
    keep = keep_with_next(boxes, np.array([False, False, True, False]), max_gap=800, slack=4)
    d = choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=9000, keep_boxes=keep)
    assert d.reason == "blank" and 3600 < d.cut <= 3700  # above the heading: it moves with its text
    # a heading whose text starts a page-and-more below cannot keep it: the heading still moves
    far = choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=9000, keep_boxes=keep, cut_window=250)
    assert far.reason == "push" and far.cut <= 3700


def test_through_prefers_rows_that_cross_no_fragile_element():
    # a list item and a paragraph side by side cover the whole band; lines every 40 px, but the
    # paragraph's lines are offset by 20 px, so no row is blank across both
    boxes = np.array([[0, 100, 100, 6000], [100, 100, 200, 6000], [0, 3400, 100, 3460]], dtype=float)
    px = white(PAGE_H + 4)
    for y in range(100, PAGE_H + 4, 40):
        px[y : y + 30, 10:90] = 0
    d = choose_cut(px, 0, 0, boxes, page_height=PAGE_H, doc_height=9000)
    assert d.reason == "through" and blank_rows(px)[d.cut - 2 : d.cut + 1].all()
    # the third box (fragile, a list item) is avoided; without the flag the nearest blank row wins
    fragile = np.array([False, False, True])
    f = choose_cut(px, 0, 0, boxes[[0, 1, 2]], page_height=PAGE_H, doc_height=9000, fragile=fragile)
    assert f.reason == "through" and not 3400 < f.cut < 3460
    crossing_list = choose_cut(
        px,
        0,
        0,
        np.array([[0, 100, 200, 6000]] * 1 + [[0, 3200, 100, 4100]]),
        page_height=PAGE_H,
        doc_height=9000,
        fragile=np.array([False, True]),
    )
    assert crossing_list.reason == "through" and blank_rows(px)[crossing_list.cut - 1]


# --- assign_elements ---------------------------------------------------------------------------


def test_assign_elements_pages_spans_and_relative_boxes():
    cuts = [0, 3800, 7700, 9000]
    boxes = np.array(
        [
            [100, 50, 1900, 400],  # page 0
            [100, 3700, 1900, 3900],  # top on page 0, bottom past its cut: spans
            [100, 3800, 1900, 4000],  # exactly at the cut: page 1
            [-20, 7000, 2100, 8000],  # page 1, spans; x clipped to the page width
            [100, 8900, 1900, 9000],  # last page, ends at the document's end
        ],
        dtype=np.float32,
    )
    a = assign_elements(boxes, cuts, page_width=2000)
    assert a.page_index.dtype == np.int32 and a.bbox.dtype == np.float32
    assert a.page_index.tolist() == [0, 0, 1, 1, 2]
    assert a.spans_pages.tolist() == [False, True, False, True, False]
    np.testing.assert_allclose(a.bbox[0], [100, 50, 1900, 400])
    np.testing.assert_allclose(a.bbox[1], [100, 3700, 1900, 3800])  # clipped to the page's content
    np.testing.assert_allclose(a.bbox[2], [100, 0, 1900, 200])
    np.testing.assert_allclose(a.bbox[3], [0, 3200, 2000, 3900])
    np.testing.assert_allclose(a.bbox[4], [100, 1200, 1900, 1300])


def test_assign_elements_with_slack():
    cuts = [0, 3800, 7700]
    boxes = np.array(
        [
            [0, 3797, 100, 3860],  # 3 px above the cut: goes down, its box starts at 0
            [0, 3700, 100, 3803],  # 3 px below the cut: stays, does not span
            [0, 3700, 100, 3900],  # spans
            [0, 3790, 100, 3799],  # small, above the cut: stays
        ],
        dtype=float,
    )
    a = assign_elements(boxes, cuts, slack=4)
    assert a.page_index.tolist() == [1, 0, 0, 0]
    assert a.spans_pages.tolist() == [False, False, True, False]
    np.testing.assert_allclose(a.bbox[0], [0, 0, 100, 60])
    np.testing.assert_allclose(a.bbox[1], [0, 3700, 100, 3800])
    b = assign_elements(boxes, cuts)  # no slack: by the top, as before
    assert b.page_index.tolist() == [0, 0, 0, 0] and b.spans_pages.tolist() == [True, True, True, False]


def test_assign_elements_rejects_bad_cuts():
    with pytest.raises(ValueError, match="cuts must be strictly increasing"):
        assign_elements(np.zeros((1, 4)), [0])
    with pytest.raises(ValueError, match="cuts must be strictly increasing"):
        assign_elements(np.zeros((1, 4)), [0, 100, 100])
    a = assign_elements(np.zeros((0, 4)), [0, 10])
    assert a.page_index.shape == (0,) and a.bbox.shape == (0, 4)

"""Reference notes of real Wikipedia pages (``../shared/real-html/wikipedia-a`` and ``-b``, read where
they lie; ``$VLDOCIR_REAL_HTML`` names another copy) never overlap one another in their recorded
boxes (issue #37, defect 3): a note broken across two CSS columns is recorded as its fragments, not
as the union box that covers the notes beside it.

Each page is rendered as it is and with its reference list in columns as MediaWiki's stylesheet
(absent offline) sets it (``column-width: 30em``), lines free to break between columns
(``orphans``/``widows`` 1), so that a note may start in one column and end in the next
(wikipedia-a's note 3 does, with the Chromium of this project). The copies, in ``tmp_path``, differ
from the pages only by that style and by a ``data-fact`` naming each note on its ``li`` and on its
text. Skipped, saying why, without the pages or without Chromium.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from helpers import CHROMIUM, NO_CHROMIUM_REASON
from vldocir.construction.render import RenderConfig, load_layout, render_batch

REAL = Path(os.environ.get("VLDOCIR_REAL_HTML") or Path(__file__).resolve().parents[3] / "shared" / "real-html")
PAGES = ("wikipedia-a", "wikipedia-b")
COLUMNS = "<style>.mw-references-wrap { column-width: 30em; orphans: 1; widows: 1; }</style>"


def _skip_reason() -> str | None:
    if not any((REAL / p / "index.html").is_file() for p in PAGES):
        return f"the real Wikipedia pages are absent ({REAL}; set $VLDOCIR_REAL_HTML to a copy of ../shared/real-html)"
    return None if CHROMIUM else NO_CHROMIUM_REASON


SKIP = _skip_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]


def _tagged(html: str, columns: bool) -> str:
    """The page with each note's ``li`` and the ``reference-text`` in it named by the note's id."""
    parts = re.split(r'(<li id="cite_note-[^"]*")', html)
    note = None
    for i, part in enumerate(parts):
        opening = re.fullmatch(r'<li id="(cite_note-[^"]*)"', part)
        if opening:
            note = opening.group(1)
            parts[i] = f'{part} data-fact="{note}"'
        elif note:
            parts[i] = part.replace(
                '<span class="reference-text"', f'<span class="reference-text" data-fact="{note}"', 1
            )
    html = "".join(parts)
    return html.replace("</head>", COLUMNS + "</head>", 1) if columns else html


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("real-notes")
    docs = []
    for page in PAGES:
        if not (REAL / page / "index.html").is_file():
            continue
        for columns in (False, True):
            name = page + ("-columns" if columns else "")
            folder = out / "html" / name
            folder.mkdir(parents=True)
            (folder / "index.html").write_text(_tagged((REAL / page / "index.html").read_text(), columns))
            docs.append((name, "wikipedia", folder / "index.html"))
    report = render_batch(docs, out / "rendered", RenderConfig(timeout_s=120), progress=False)
    assert report.failed == [], report.errors
    return {name: load_layout(out / "rendered" / name) for name, _, _ in docs}


def _area(a, b) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _boxes(e) -> list[tuple[int, list[float]]]:
    fragments = getattr(e, "fragments", None)  # (absent from layouts written before they were recorded)
    return [(f["page_index"], f["bbox"]) for f in fragments] if fragments else [(e.page_index, e.bbox)]


def test_no_reference_note_overlaps_another(rendered):
    for name, doc in rendered.items():
        notes = [e for e in doc.elements if (e.fact or "").startswith("cite_note-")]
        assert len({e.fact for e in notes}) >= 5, name
        overlaps = {
            (a.fact, b.fact)
            for i, a in enumerate(notes)
            for b in notes[i + 1 :]
            if a.fact != b.fact and any(p == q and _area(x, y) > 0 for p, x in _boxes(a) for q, y in _boxes(b))
        }
        assert overlaps == set(), (name, sorted(overlaps))
        for e in notes:  # a note split over columns: each fragment within its box on its page
            for page, (x0, y0, x1, y1) in _boxes(e) if len(_boxes(e)) > 1 else []:
                assert page == e.page_index, (name, e)
                assert e.bbox[0] <= x0 < x1 <= e.bbox[2] and e.bbox[1] <= y0 < y1 <= e.bbox[3], (name, e)

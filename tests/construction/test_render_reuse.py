"""A document renders the same after others in a reused browser context and page
(``RenderConfig.context_reuse``, a speed-only setting) as it does alone, in a fresh context.

On real pages (``../shared/real-html``, read where they lie; skipped, saying why, when absent):
wikipedia-a's lines moved by 1-2 px when arxiv-1707.08043 had been rendered just before it in the
same page. On two small documents of its own: a document's scripts read the storage of ``file://``
that an earlier document wrote."""

from __future__ import annotations

import pytest

from helpers import needs_chromium
from test_render_real import REAL, SKIP  # the real pages, and why they cannot be rendered here
from vldocir.construction.render import RenderConfig, load_layout, render_batch
from vldocir.construction.render.renderer import Renderer

pytestmark = pytest.mark.slow

BEFORE = ("arxiv-1707.08043", "arxiv")
DOC = ("wikipedia-a", "wikipedia")


def _rendering(out, doc_id):
    layout = load_layout(out / doc_id)
    boxes = [(e.element_id, e.element_type, e.page_index, e.bbox, e.doc_bbox, e.text) for e in layout.elements]
    images = [(out / doc_id / p.image).read_bytes() for p in layout.pages]
    return layout.document_height, [(p.top, p.content_height) for p in layout.pages], boxes, images


@pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
def test_a_real_page_renders_after_another_in_one_context_as_it_does_alone(tmp_path):
    for name, _ in (BEFORE, DOC):
        if not (REAL / name / "index.html").is_file():
            pytest.skip(f"{REAL / name} is absent")
    docs = [(name, source, REAL / name / "index.html") for name, source in (BEFORE, DOC)]
    with Renderer(RenderConfig(context_reuse=20)) as renderer:
        report = render_batch(docs, tmp_path / "after", progress=False, renderer=renderer)
        assert report.failed == [], report.errors
        assert renderer._session is not None and renderer._session.documents == 2  # one context and page for both
    report = render_batch(docs[1:], tmp_path / "alone", RenderConfig(workers=1, context_reuse=1), progress=False)
    assert report.failed == [], report.errors

    h_after, pages_after, boxes_after, images_after = _rendering(tmp_path / "after", DOC[0])
    h_alone, pages_alone, boxes_alone, images_alone = _rendering(tmp_path / "alone", DOC[0])
    moved = [(a[0], a[4], b[4]) for a, b in zip(boxes_after, boxes_alone, strict=False) if a != b]
    assert moved == [], f"{len(moved)} elements differ after {BEFORE[0]}, e.g. {moved[:3]}"
    assert (h_after, pages_after, len(boxes_after)) == (h_alone, pages_alone, len(boxes_alone))
    assert images_after == images_alone


@needs_chromium
def test_a_document_never_reads_the_storage_of_the_one_before(tmp_path):
    script = {
        "writer": "localStorage.setItem('seen', 'yes'); sessionStorage.setItem('seen', 'yes');",
        "reader": "document.write('<p>local ' + localStorage.getItem('seen') + ', session ' +"
        " sessionStorage.getItem('seen') + '</p>');",
    }
    for name, code in script.items():  # each in its own folder, as documents are
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.html").write_text(f"<!doctype html><p>{name}</p><script>{code}</script>")
    with Renderer(RenderConfig(context_reuse=20)) as renderer:
        for name in script:
            doc = renderer.render(name, "generic", tmp_path / name / "index.html", tmp_path / "out")
        assert renderer._session is not None and renderer._session.documents == 2
    assert [e.text for e in doc.elements] == ["reader", "local null, session null"]

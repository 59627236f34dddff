"""The synthetic generator's OCR text (``SyntheticSpec.ocr_noise``), and the check that a generated
benchmark directory still matches the ``dataset.build`` spec that asks for it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import compose_cfg
from vldocir.config_checks import ConfigError
from vldocir.construction.synthetic import _OCR_CONFUSIONS, SyntheticSpec, generate, ocr_like

TEXT = "Perka section 1 The number of parameters of Perka is 6,940. Lösung — über 80 Beispiele."


def test_ocr_like_misreads_only_look_alike_glyphs_and_drops_only_spaces():
    assert ocr_like(TEXT, np.random.default_rng(0), 0.0) == TEXT
    assert ocr_like("", np.random.default_rng(0), 0.5) == ""
    noisy = ocr_like(TEXT, np.random.default_rng(0), 0.5)
    assert noisy == ocr_like(TEXT, np.random.default_rng(0), 0.5), "seeded: the same text twice"
    assert noisy != TEXT and noisy.count(" ") < TEXT.count(" ")
    # Spaces are only dropped, never added: without them the two texts align character by character.
    original, read = TEXT.replace(" ", ""), noisy.replace(" ", "")
    assert len(original) == len(read)
    for char, got in zip(original, read, strict=True):
        if got != char:
            assert ord(char) < 128 and _OCR_CONFUSIONS[ord(char)] == ord(got), (char, got)
    assert "ö" in noisy and "—" in noisy and "ü" in noisy  # non-ASCII is never touched


def test_ocr_like_every_confusable_glyph_at_rate_one():
    glyphs = bytes(_OCR_CONFUSIONS).decode()
    assert ocr_like(glyphs, np.random.default_rng(1), 1.0) == bytes(_OCR_CONFUSIONS.values()).decode()
    spaced = "a b " * 5000
    dropped = spaced.count(" ") - ocr_like(spaced, np.random.default_rng(1), 0.2).count(" ")
    assert dropped == pytest.approx(0.1 * spaced.count(" "), rel=0.1)  # a space is lost at half the rate


def _small_spec(**changes) -> SyntheticSpec:
    sources = ("wikipedia", "arxiv", "pubmed", "sec")
    base = dict(
        name="ocr-test",
        seed=3,
        documents=dict.fromkeys(sources, 2),
        pages={"wikipedia": (8, 10), "arxiv": (8, 10), "pubmed": (8, 10), "sec": (8, 10)},
        queries={
            s: dict.fromkeys(("page_single", "page_multi", "doc_adjacent", "doc_near", "doc_far", "cross_doc"), 2)
            for s in sources
        },
    )
    return SyntheticSpec(**{**base, **changes})


def test_generated_ocr_text_is_the_dom_text_misread_and_leaves_the_rest_unchanged(tmp_path):
    plain = generate(_small_spec(), tmp_path / "plain")
    noisy = generate(_small_spec(ocr_noise=0.05), tmp_path / "noisy")
    p, n = plain.pages, noisy.pages
    assert p.ocr_text.isna().all() and n.ocr_text.notna().all()
    assert p.dom_text.tolist() == n.dom_text.tolist()  # the OCR draws do not disturb the rest
    assert plain.queries.equals(noisy.queries) and plain.qrels.equals(noisy.qrels)
    confusable = sum(ch.isascii() and ord(ch) in _OCR_CONFUSIONS for t in n.dom_text for ch in t)
    misread = sum(
        a != b
        for d, o in zip(n.dom_text, n.ocr_text, strict=True)
        if len(d) == len(o)
        for a, b in zip(d, o, strict=True)
    )
    assert 0 < misread < 0.15 * confusable  # about 5% of the look-alikes, on pages that lost no space
    built_by = json.loads((tmp_path / "noisy" / "benchmark.json").read_text())["built_by"]
    assert built_by["ocr_noise"] == 0.05 and built_by["spec"]["ocr_noise"] == 0.05 and built_by["spec"]["seed"] == 3
    assert "ocr_noise" not in json.loads((tmp_path / "plain" / "benchmark.json").read_text())["built_by"]


def test_a_build_override_never_silently_reuses_what_another_spec_generated(isolated_paths, caplog):
    from vldocir.pipeline.datasets import _open_source

    first = _open_source(compose_cfg("dataset=synthetic_text").dataset)
    assert (isolated_paths / "data" / "synthetic-text" / "benchmark.json").is_file()
    again = _open_source(compose_cfg("dataset=synthetic_text").dataset)  # the same spec: reused
    assert again.fingerprint == first.fingerprint
    with pytest.raises(ConfigError, match=r"generated from another dataset.build spec \(differs in: ocr_noise, seed\)"):
        _open_source(
            compose_cfg("dataset=synthetic_text", "dataset.build.seed=7", "+dataset.build.ocr_noise=0.1").dataset
        )
    # Its own name: generated beside the first.
    other = _open_source(
        compose_cfg("dataset=synthetic_text", "dataset.name=synthetic-text-seed7", "dataset.build.seed=7").dataset
    )
    assert other.root.name == "synthetic-text-seed7" and other.fingerprint != first.fingerprint
    # A directory from before specs were recorded is used, with a warning.
    info_path = isolated_paths / "data" / "synthetic-text" / "benchmark.json"
    info = json.loads(info_path.read_text())
    del info["built_by"]["spec"]
    info_path.write_text(json.dumps(info))
    with caplog.at_level("WARNING"):
        _open_source(compose_cfg("dataset=synthetic_text", "dataset.build.seed=7").dataset)
    assert "does not record the spec it was generated from" in caplog.text


def test_a_spec_instantiated_by_hydra_is_recorded_as_plain_json():
    from hydra.utils import instantiate

    from vldocir.construction.synthetic import spec_differences, spec_record

    spec = instantiate(compose_cfg("dataset=synthetic_paper_scale").dataset.build)  # dicts arrive as DictConfig
    record = json.loads(json.dumps(spec_record(spec)))
    assert record["documents"]["sec"] == 1992 and record["pages"]["sec"] == [24, 60] and record["ocr_noise"] == 0.03
    assert spec_differences(record, spec) == []
    assert spec_differences({**record, "seed": 1}, spec) == ["seed"]

"""Fixtures of the reporting, viewer and notebook tests: real results stores, built once per session
by the real pipeline (:mod:`report_stores` says what each holds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from report_stores import build_rendered_store, build_stores


@pytest.fixture(scope="session")
def _stores(tmp_path_factory) -> dict[str, Path]:
    return build_stores(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def mini_results(_stores) -> Path:
    """A results store holding the text-only mini benchmark's ``dom_bm25/base`` run, as ``python run.py`` makes it."""
    return _stores["mini"]


@pytest.fixture(scope="session")
def multi_results(_stores) -> Path:
    """That run plus BM25 variants filed under paper row ids (``report_stores.FAKE_RUNS``)."""
    return _stores["multi"]


@pytest.fixture(scope="session")
def text_bench(_stores) -> Path:
    """The text-only mini benchmark the runs were made on."""
    return _stores["bench"]


@pytest.fixture(scope="session")
def rendered_results(tmp_path_factory) -> Path:
    """A results store with one run on a small benchmark with page images (half as paths, half as bytes)."""
    return build_rendered_store(tmp_path_factory.getbasetemp() / "rendered-store")

"""The one id rule (data/validation.py ``id_problem``): query, document and element ids name files
and folders and are printed one per line, so path separators, ``.``/``..``, control characters and
line breaks are refused, by the build's query file and (after issue 35) by the importers."""

from __future__ import annotations

import pytest

from vldocir.data.validation import ID_RULE, id_problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("../../x", "holds a path separator '/'"),
        ("a\\b", "holds a path separator '\\\\'"),
        ("..", "is '..', a folder's own name"),
        (".", "is '.', a folder's own name"),
        ("a b\nc", "holds the control character U+000A (a line break)"),
        ("a\rb", "holds the control character U+000D (a line break)"),
        ("tab\there", "holds the control character U+0009"),
        ("nul\0", "holds the control character U+0000"),
        ("del\x7f", "holds the control character U+007F"),
        ("para\u2029graph", "holds the control character U+2029 (a line break)"),
        ("", "is empty"),
        (7, "is not a string (int)"),
    ],
)
def test_ids_that_could_name_another_file_or_break_a_line_are_refused(value, problem):
    assert id_problem(value) == problem


@pytest.mark.parametrize("value", ["q0000001", "doc-7.v2", "a..b", "...Baby_One_More_Time", "Zürich", "a b", "e00042"])
def test_ordinary_ids_pass(value):
    assert id_problem(value) is None


def test_the_rule_in_words_is_one_line():
    assert "\n" not in ID_RULE and "'..'" in ID_RULE

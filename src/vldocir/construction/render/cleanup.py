"""Step 2 from Python: the clean-up (``clean.js`` with the source's clutter selectors and page
rules, :mod:`.rules`) and the layout of content wider than the viewport (``fit.js``), each
returning its record for ``layout.json``."""

from __future__ import annotations

from typing import Any

from vldocir.construction.render.browser import page_script
from vldocir.construction.render.config import RenderConfig

_JS_CLEAN = page_script("clean.js")
_JS_FIT = page_script("fit.js")


def clean_page(page: Any, cfg: RenderConfig, source: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the clean-up of ``source`` in the loaded page.

    Returns ``(rules, bad)``: the removal record, one entry per rule that matched anything (plus
    the ``fixed`` and ``invisible`` steps, always)::

        {"rule": str, "source": "*" | source,
         "kind": "selector" | "page_rule" | "fixed" | "invisible"
                 | "emptied",       # list items and lists left empty by the removals of the rule
                                    # (or step) named in "rule": a bullet with nothing after it
         "removed": int,            # elements removed
         "kept_formula": int,       # matches kept because they are, hold or lie inside a formula
         "kept_table": int,         # matches kept because they are or hold a data table
                                    # (selectors and page rules; see rules.py)
         "changed": int,            # elements changed rather than removed (page rules)
         "content": {type: int},    # content elements the removals held: formula, table (data
                                    # tables: no layout, navigation or link table), layout_table
                                    # (a table a page rule found to be page furniture), figure,
                                    # image, headline, paragraph
         "samples": [str],          # the texts of its first three removals (80 characters)
         "kept_samples": [str]}     # the texts of its first three kept_table matches

    and the selectors or page rules that could not be used.
    """
    out = page.evaluate(_JS_CLEAN, [cfg.clutter_rules_for(source), cfg.page_rules_for(source), cfg.remove_fixed])
    return list(out["rules"]), list(out["bad_selectors"])


def fit_wide(page: Any, cfg: RenderConfig) -> dict[str, Any]:
    """Lay out content wider than the viewport (see ``fit.js``): ``{"opened": int, "scaled":
    [{"tag", "id", "class", "width_css", "scale"}]}`` (scroll containers opened, elements scaled)."""
    if not cfg.fit_wide:
        return {"opened": 0, "scaled": []}
    return dict(page.evaluate(_JS_FIT, [cfg.fit_min_text_scale]))


def removed_content(
    rules: list[dict[str, Any]], types: tuple[str, ...] = ("formula", "table", "figure")
) -> dict[str, int]:
    """``{rule: n}``: the rules whose removals held content elements of ``types`` (none: ``{}``)."""
    out = {}
    for r in rules:
        n = sum(int(r.get("content", {}).get(t, 0)) for t in types)
        if n:
            out[f"{r['kind']}:{r['rule']}"] = n
    return out

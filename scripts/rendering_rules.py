"""Write the rules table of docs/rendering.md from ``vldocir.construction.render.rules``.

    .venv/bin/python scripts/rendering_rules.py           # rewrite the table between its markers
    .venv/bin/python scripts/rendering_rules.py --check   # exit 1 if the page and the rules differ

``tests/test_docs.py`` fails while they differ, so the page never lists rules the renderer does not run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vldocir.construction.render.rules import rules_table

PAGE = Path(__file__).resolve().parents[1] / "docs" / "rendering.md"
BEGIN = "<!-- rules table: written by scripts/rendering_rules.py from src/vldocir/construction/render/rules.py -->"
END = "<!-- end of rules table -->"


def page_table(text: str) -> str:
    """The table between the markers of ``text``; a page without both markers is an error."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{PAGE.name}: expected one {BEGIN!r} followed by one {END!r}")
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()


def with_table(text: str) -> str:
    """``text`` with the table between its markers replaced by :func:`rules_table`."""
    page_table(text)
    head, tail = text[: text.index(BEGIN) + len(BEGIN)], text[text.index(END) :]
    return f"{head}\n{rules_table()}\n{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if they differ")
    args = parser.parse_args(argv)
    text = PAGE.read_text(encoding="utf-8")
    try:
        current = page_table(text)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    if args.check:
        same = current == rules_table()
        print(f"{PAGE}: {'up to date' if same else 'differs from rules.py'}")
        return 0 if same else 1
    PAGE.write_text(with_table(text), encoding="utf-8")
    print(f"wrote the rules table of {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Markdown and LaTeX (booktabs) renderings of a :class:`~vldocir.reporting.outputs.ReportTable`.

Each cell reads ``reproduced / published (reproduced - published)``. A row without a run shows
*missing* (never a zero); a number the paper does not print shows ``–``. Best / second / third
values are marked within each rank group (``ReportTable.cells.group``), separately among the
reproduced and among the published numbers, the way the paper marks them: ``top3`` tables in
blue / green / bold, ``best`` tables in bold. Ranks compare the printed (rounded) values, so equal
printed numbers get the same mark. A table with a significance test
(:func:`vldocir.reporting.significance_marks.mark_significance`) puts ``▲`` / ``▼`` after a reproduced
value that is significantly higher / lower than its baseline row's (LaTeX: a superscript arrow) and
says in its note how it was tested. :func:`write_tables` writes each table in both forms, with an index.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from vldocir.io import atomic_write_text
from vldocir.reporting.outputs import ReportTable, ignore_generated

LATEX_PREAMBLE = r"""% Needs \usepackage{booktabs,graphicx,xcolor}.
\providecommand{\rankfirst}[1]{\textcolor{blue}{#1}}
\providecommand{\ranksecond}[1]{\textcolor{green!50!black}{#1}}
\providecommand{\rankthird}[1]{\textbf{#1}}
\providecommand{\runmissing}{\textit{missing}}
\providecommand{\sighigher}{\ensuremath{^{\uparrow}}}
\providecommand{\siglower}{\ensuremath{^{\downarrow}}}
"""

MARKDOWN_MARKS = {
    "top3": {1: "**{}**", 2: "<ins>{}</ins>", 3: "*{}*"},
    "best": {1: "**{}**"},
    "none": {},
}
LATEX_MARKS = {
    "top3": {1: r"\rankfirst{{{}}}", 2: r"\ranksecond{{{}}}", 3: r"\rankthird{{{}}}"},
    "best": {1: r"\textbf{{{}}}"},
    "none": {},
}
MARKDOWN_SIGNS = {"▲": "▲", "▼": "▼"}  # significance marks (significance_marks.MARK_HIGHER / MARK_LOWER)
LATEX_SIGNS = {"▲": r"\sighigher{}", "▼": r"\siglower{}"}
MARK_LEGEND = {
    "top3": "best **bold**, second <ins>underlined</ins>, third *italic* (the paper: blue, green, bold)",
    "best": "best in **bold**",
    "none": "",
}


def ranks(cells: pd.DataFrame, column: str) -> pd.Series:
    """Rank (1 = highest) of each cell's printed value within its rank group; NaN where unranked.
    A group needs two values or more to be ranked."""
    out = pd.Series(np.nan, index=cells.index)
    rounded = pd.Series(
        [
            round(v, int(d)) if not math.isnan(v) else np.nan
            for v, d in zip(cells[column], cells["decimals"], strict=True)
        ],
        index=cells.index,
    )
    keyed = cells["group"].map(lambda g: g if g is not None else np.nan)
    for _, index in cells.groupby(keyed, dropna=True, sort=False).groups.items():
        values = rounded.loc[index].dropna()
        if len(values) >= 2:
            out.loc[values.index] = values.rank(ascending=False, method="min")
    return out


def _number(value: float, decimals: int) -> str:
    return f"{value:.{int(decimals)}f}"


def _cell_parts(
    cells: pd.DataFrame, marks: dict[int, str], missing: str, unpublished: str, diff_format, signs: dict[str, str]
) -> list[str]:
    published_ranks = ranks(cells, "published")
    reproduced_ranks = ranks(cells, "reproduced")
    markers = cells["marker"] if "marker" in cells else pd.Series("", index=cells.index)

    def marked(value, rank, decimals):
        text = _number(value, decimals)
        return marks[int(rank)].format(text) if not math.isnan(rank) and int(rank) in marks else text

    texts = []
    for i, cell in cells.iterrows():
        d = cell["decimals"]
        rep = missing if math.isnan(cell["reproduced"]) else marked(cell["reproduced"], reproduced_ranks[i], d)
        rep += signs.get(markers[i], "") if not math.isnan(cell["reproduced"]) else ""
        pub = unpublished if math.isnan(cell["published"]) else marked(cell["published"], published_ranks[i], d)
        text = f"{rep} / {pub}"
        if not math.isnan(cell["reproduced"]) and not math.isnan(cell["published"]):
            difference = round(cell["reproduced"] - cell["published"], int(d)) + 0.0  # no "-0.00"
            text += " " + diff_format(("+" if difference >= 0 else "") + _number(difference, d))
        texts.append(text)
    return texts


def _grid(table, texts: list[str]) -> tuple[list[tuple], dict[tuple, dict[str, str]]]:
    grid: dict[tuple, dict[str, str]] = {}
    for (_, cell), text in zip(table.cells.iterrows(), texts, strict=True):
        grid.setdefault(cell["row"], {})[cell["column"]] = text
    return list(grid), grid


def _row_keys(rows: list[tuple]) -> list[list[str]]:
    """Row labels with leading keys blanked where they repeat the previous row's."""
    shown, previous = [], None
    for row in rows:
        labels = []
        for depth, key in enumerate(row):
            same_prefix = previous is not None and previous[: depth + 1] == row[: depth + 1]
            labels.append("" if same_prefix and depth < len(row) - 1 else ("" if key is None else str(key)))
        shown.append(labels)
        previous = row
    return shown


def describe(table, note: str | None = None) -> str:
    runs = table.n_rows_reproduced
    text = (
        f"Each cell: reproduced / published (reproduced - published). Reproduced values are "
        f"{table.reproduced_from} ({runs} of {len(table.rows)} rows reproduced); *missing* = nothing to reproduce "
        f"it from here (`make check` says what it needs); – = not printed in the paper."
    )
    if MARK_LEGEND.get(table.marks):
        text += f" Marks: {MARK_LEGEND[table.marks]}."
    if table.significance:
        text += f" {table.significance}"
    if note:
        text += f"\n\n> {note}"
    return text


def to_markdown(table, note: str | None = None) -> str:
    texts = _cell_parts(
        table.cells, MARKDOWN_MARKS[table.marks], "missing", "–", lambda signed: f"({signed})", MARKDOWN_SIGNS
    )
    rows, grid = _grid(table, texts)
    header = [*table.index, *table.columns]
    lines = [
        f"## {table.title}",
        "",
        describe(table, note),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join([":--"] * len(table.index) + ["--:"] * len(table.columns)) + "|",
    ]
    for keys, row in zip(_row_keys(rows), rows, strict=True):
        values = [grid[row].get(column, "") for column in table.columns]
        lines.append("| " + " | ".join([*(k.replace("|", "\\|") for k in keys), *values]) + " |")
    return "\n".join(lines) + "\n"


LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "—": "---",
    "−": "-",
    "×": r"$\times$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "Δ": r"$\Delta$",
    **LATEX_SIGNS,
}


def latex_escape(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def to_latex(table, note: str | None = None) -> str:
    texts = _cell_parts(
        table.cells,
        LATEX_MARKS[table.marks],
        r"\runmissing{}",
        "--",
        lambda signed: rf"{{\scriptsize(${signed}$)}}",
        LATEX_SIGNS,
    )
    rows, grid = _grid(table, texts)
    n_keys = len(table.index)
    caption = (
        f"{latex_escape(table.title)}. Each cell: reproduced / published (difference); reproduced values are "
        f"{latex_escape(table.reproduced_from.replace('`', ''))} ({table.n_rows_reproduced} of {len(table.rows)} rows)."
    )
    if table.significance:
        caption += f" {latex_escape(table.significance)}"
    if note:
        caption += f" {latex_escape(note)}."
    lines = [
        (
            f"% {table.name}: generated by vldocir.reporting.tables from the results store and results/paper/; "
            "do not edit."
        ),
        LATEX_PREAMBLE.rstrip("\n"),
        r"\begin{table}[htbp]",
        r"\centering",
        rf"\caption{{{caption}}}",
        rf"\label{{tab:{table.name}}}",
        r"\resizebox{\linewidth}{!}{%",
        rf"\begin{{tabular}}{{{'l' * n_keys}{'r' * len(table.columns)}}}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in [*table.index, *table.columns]) + r" \\",
        r"\midrule",
    ]
    previous = None
    for keys, row in zip(_row_keys(rows), rows, strict=True):
        if previous is not None and n_keys > 1 and row[0] != previous[0]:
            lines.append(r"\midrule")
        values = [grid[row].get(column, "") for column in table.columns]
        lines.append(" & ".join([*(latex_escape(k) for k in keys), *values]) + r" \\")
        previous = row
    lines += [r"\bottomrule", r"\end{tabular}%", "}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_tables(
    tables: dict[str, ReportTable],
    out_dir: Path,
    note: str | None = None,
    entries: list[str] | None = None,
    sections: list[str] | None = None,
) -> list[Path]:
    """Each table as ``<name>.md`` and ``<name>.tex``, plus the index ``README.md`` (the tables,
    the store entries used, then ``sections``: further Markdown lines, e.g. the other runs)."""
    ignore_generated(out_dir)
    written = []
    for name, table in tables.items():
        for suffix, render in ((".md", to_markdown), (".tex", to_latex)):
            path = out_dir / f"{name}{suffix}"
            atomic_write_text(render(table, note=note), path)
            written.append(path)
    index = ["# Paper tables: reproduced / published (difference)", ""]
    if note:
        index += [f"> {note}", ""]
    for name, table in tables.items():
        index.append(
            f"- [{table.title}]({name}.md) ({name}.tex): {table.n_rows_reproduced} of {len(table.rows)} rows reproduced"
        )
    if entries:
        index += ["", "## Store entries used", "", *[f"- {line}" for line in entries]]
    if sections:
        index += ["", *sections]
    atomic_write_text("\n".join(index) + "\n", out_dir / "README.md")
    return written

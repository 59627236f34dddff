"""The documentation stays true to the tree: README.md and docs/*.md (and every README.md of the
repository) link only to files and headings that exist, name only paths, modules, Make targets and
config files that exist, list every retriever, setting, dataset and app the configs define, and
print the mini benchmark's real counts; the rendering rules table is the one ``rules.py`` makes.

Read in process from the files (no subprocess); a broken reference fails with the file and line.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import re
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from helpers import REPO_ROOT
from vldocir.construction.render.rules import rules_table

PACKAGE = REPO_ROOT / "src" / "vldocir"
CONF = REPO_ROOT / "conf"
README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
MINI = REPO_ROOT / "data" / "vl-docir-mini"
MAX_README_LINES = 200
# Written by `make tables` on first use (each ignores itself: vldocir.reporting.outputs.ignore_generated).
REPORT_OUTPUTS = ("results/tables", "results/figures")
# Groups whose `group=name` overrides name a file conf/<group>/<name>.yaml (hydra/launcher also has
# the plugin's own submitit_local, so it is not checked here).
CHECKED_GROUPS = ("dataset", "retriever", "setting", "experiment", "queries", "reranker", "logger", "collect", "eval")
# Phrases that tell the project's history rather than what the code does.
HISTORY = re.compile(
    r"\bthe issue(?:'s|\s+(?:called|named|asked|said))|\bissue #\d|\b(?:this|the) session\b|"
    r"\bpreviously\b|\bformerly\b|\bwas renamed\b|\(was \w|\bbefore this (?:change|branch)\b|"
    r"\bprevious implementation\b",
    re.IGNORECASE,
)


# -- reading markdown ----------------------------------------------------------------------------------
@cache
def gitignore() -> list[tuple[bool, bool, str]]:
    """The root .gitignore as (negated, anchored, pattern), in order (the last match wins)."""
    rules = []
    for line in (REPO_ROOT / ".gitignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        anchored = "/" in pattern
        rules.append((negated, anchored, pattern.lstrip("/")))
    return rules


def ignored(relative: str) -> bool:
    """Whether git ignores ``relative`` (a path from the repository root) or a folder above it."""
    parts = relative.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        state = False
        for negated, anchored, pattern in gitignore():
            hit = fnmatch.fnmatchcase(prefix, pattern) if anchored else fnmatch.fnmatchcase(parts[depth - 1], pattern)
            if hit:
                state = not negated
        if state:
            return True
    return False


@cache
def doc_files() -> tuple[Path, ...]:
    """README.md, docs/*.md and every README.md of the tree outside git-ignored folders."""
    found = {README, *DOCS.glob("*.md")}
    stack = [REPO_ROOT]
    while stack:
        folder = stack.pop()
        for path in folder.iterdir():
            relative = path.relative_to(REPO_ROOT).as_posix()
            if path.name.startswith(".") or ignored(relative):
                continue
            if path.is_dir():
                stack.append(path)
            elif path.name == "README.md":
                found.add(path)
    return tuple(sorted(found))


def split_code(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose lines, fenced code lines) of a markdown text, each as (line number, line)."""
    prose, code, fenced = [], [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        (code if fenced else prose).append((number, line))
    return prose, code


INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def inline_code(path: Path) -> list[tuple[int, str]]:
    prose, _ = split_code(path.read_text(encoding="utf-8"))
    return [(n, span) for n, line in prose for span in INLINE_CODE.findall(line)]


def code_text(path: Path) -> list[tuple[int, str]]:
    """Inline code spans and fenced code lines: where commands and overrides are written."""
    _, fenced = split_code(path.read_text(encoding="utf-8"))
    return inline_code(path) + fenced


def links(path: Path) -> list[tuple[int, str]]:
    prose, _ = split_code(path.read_text(encoding="utf-8"))
    return [(n, target) for n, line in prose for target in LINK.findall(INLINE_CODE.sub("", line))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    prose, _ = split_code(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose:
        if match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return frozenset(out)


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO_ROOT)}:{line}"


# -- what a reference may name ---------------------------------------------------------------------------
def link_problem(source: Path, target: str) -> str | None:
    """Why a markdown link target does not resolve, or None."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
        return None
    file_part, _, anchor = target.partition("#")
    resolved = (source.parent / file_part).resolve() if file_part else source
    if not resolved.exists():
        return f"{target}: no file {resolved}"
    if anchor:
        if resolved.suffix != ".md":
            return f"{target}: an anchor into a file that is not markdown"
        if anchor not in anchors(resolved):
            return f"{target}: no heading #{anchor} in {resolved.name} (headings: {sorted(anchors(resolved))})"
    return None


PATH_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".json", ".csv", ".parquet", ".sh", ".js", ".toml", ".html", ".txt")


def path_problem(token: str) -> str | None:
    """Why a code span that names a path of the repository names none, or None (also for code that
    is no path: options, placeholders, globs, files outside the tree)."""
    token = token.strip()
    if not token or any(c in token for c in " <>*{}$=|,:'\"()") or "..." in token or token.startswith("../"):
        return None
    if "/" not in token and not token.endswith(PATH_SUFFIXES):
        return None
    relative = token.rstrip("/")
    first = relative.split("/")[0]
    roots = [root for root in (REPO_ROOT, PACKAGE) if (root / first).exists()]
    if not roots:
        return None  # not a path of this tree (an output file name, a path inside a benchmark, ...)
    if any((root / relative).exists() for root in roots):
        return None
    if ignored(relative) or any(relative == out or relative.startswith(out + "/") for out in REPORT_OUTPUTS):
        return None  # written by a run into a git-ignored place
    return f"`{token}` names no file in the repository (nor under src/vldocir)"


def _module_file(parts: list[str]) -> Path | None:
    base = REPO_ROOT / "src" / Path(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _bound_names(body: list[ast.stmt]) -> set[str]:
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _bound_names(node.body)
    return names


def dotted_problem(name: str) -> str | None:
    """Why ``vldocir.a.b.C.d`` names no module, or no module-level name / class member, or None."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        module = _module_file(parts[:split])
        if module is None:
            continue
        rest = parts[split:]
        if not rest:
            return None
        body = ast.parse(module.read_text(encoding="utf-8")).body
        if rest[0] not in _bound_names(body):
            return f"{name}: no such module, and {'.'.join(parts[:split])} defines no {rest[0]!r}"
        if len(rest) > 1:
            classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == rest[0]]
            if classes and rest[1] not in _bound_names(classes[0].body):
                return f"{name}: class {rest[0]} has no {rest[1]!r}"
        return None
    return f"{name}: no such module"


@cache
def make_targets() -> frozenset[str]:
    text = (REPO_ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.MULTILINE))


# A value or a sweep list (`a,b,c`), stopping before the next override of a comma-joined list (`a,setting=b`).
OVERRIDE_VALUE = r"[\w'\"-]+(?:,(?![\w'\"-]*=)[\w'\"-]+)*"


def override_problem(group: str, value: str) -> str | None:
    for name in value.strip("'\"").split(","):
        if name and not re.search(r"[<>$.]", name) and not (CONF / group / f"{name}.yaml").is_file():
            return f"{group}={name}: no conf/{group}/{name}.yaml"
    return None


# -- the tests -------------------------------------------------------------------------------------------
def test_readme_is_short_and_the_root_has_no_stray_readmes():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES}): move details to docs/"
    strays = sorted(p.name for p in REPO_ROOT.glob("README-*.md"))
    assert not strays, f"stray README files at the root: {strays}; their text belongs in docs/"
    assert not (REPO_ROOT / "ARCHITECTURE.md").exists(), "the architecture page is docs/architecture.md"


def test_the_docs_cover_the_tree():
    """The walk finds the READMEs of the subfolders, so the link checks below see them."""
    names = {p.relative_to(REPO_ROOT).as_posix() for p in doc_files()}
    assert {"README.md", "docs/architecture.md", "slurm/README.md", "perf/README.md", "conf/local/README.md"} <= names


def test_every_link_resolves():
    problems = [
        f"{where(path, n)}: {problem}"
        for path in doc_files()
        for n, target in links(path)
        if (problem := link_problem(path, target))
    ]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_path_named_in_code_exists():
    problems = [
        f"{where(path, n)}: {problem}"
        for path in doc_files()
        for n, span in inline_code(path)
        if (problem := path_problem(span))
    ]
    assert not problems, "paths that do not exist:\n" + "\n".join(problems)


def test_every_module_make_target_and_config_named_exists():
    problems = []
    groups = "|".join(CHECKED_GROUPS)
    for path in doc_files():
        for n, text in code_text(path):
            for name in re.findall(r"\bvldocir(?:\.[A-Za-z_]\w*)+", text):
                if problem := dotted_problem(name):
                    problems.append(f"{where(path, n)}: {problem}")
            for target in re.findall(r"(?:^|[\s(`])make ([a-z][\w-]*)(?![\w*-])", text):
                if target not in make_targets():
                    problems.append(f"{where(path, n)}: make {target}: no such target in the Makefile")
            for group, value in re.findall(rf"(?<![\w.@/+])({groups})=({OVERRIDE_VALUE})", text):
                if problem := override_problem(group, value):
                    problems.append(f"{where(path, n)}: {problem}")
    assert not problems, "references to nothing:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("group", "pages"),
    [
        ("retriever", ("README.md", "docs/retrieval.md")),
        ("setting", ("README.md", "docs/retrieval.md")),
        ("dataset", ("README.md",)),
        ("experiment", ("docs/retrieval.md",)),
    ],
)
def test_every_config_of_a_group_is_listed(group, pages):
    names = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    for page in pages:
        text = (REPO_ROOT / page).read_text(encoding="utf-8")
        missing = [n for n in names if f"`{n}`" not in text]
        assert not missing, f"{page} does not list conf/{group}/{', '.join(missing)} (write each as `name`)"


def test_every_app_is_in_the_readme():
    """An app is a module of vldocir.apps with a root config of its own (conf/<name>.yaml)."""
    apps = sorted(p.stem for p in (PACKAGE / "apps").glob("*.py") if (CONF / f"{p.stem}.yaml").is_file())
    assert apps, "no apps found"
    text = README.read_text(encoding="utf-8")
    missing = [a for a in apps if f"python -m vldocir.apps.{a}" not in text]
    assert not missing, f"README.md's apps table lacks: {missing}"


def test_readme_prints_the_mini_benchmarks_real_counts():
    """The expected `make run` table counts the shipped mini's queries, overall and per structure."""
    text = README.read_text(encoding="utf-8")
    total = re.search(r"Headline metrics \(percent\), (\d+) queries", text)
    assert total, "README.md shows no `make run` table"
    queries = pd.read_parquet(MINI / "queries.parquet", columns=["evidence_structure"])
    assert int(total.group(1)) == len(queries)
    per_structure = dict(
        re.findall(r"^(page_single|page_multi|doc_adjacent|doc_near|doc_far|cross_doc)\s+(\d+)\s", text, re.MULTILINE)
    )
    expected = queries["evidence_structure"].value_counts().to_dict()
    assert {k: int(v) for k, v in per_structure.items()} == expected


def test_rendering_rules_table_is_generated_from_rules_py():
    spec = importlib.util.spec_from_file_location("rendering_rules", REPO_ROOT / "scripts" / "rendering_rules.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = script.PAGE.read_text(encoding="utf-8")
    assert script.page_table(page) == rules_table(), (
        f"{script.PAGE.relative_to(REPO_ROOT)} lists other rules than rules.py: "
        "run .venv/bin/python scripts/rendering_rules.py"
    )


def test_docs_tell_what_the_code_does_not_its_history():
    problems = [
        f"{where(path, n)}: {line.strip()}"
        for path in doc_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not problems, "history in the docs:\n" + "\n".join(problems)


# -- the checks themselves --------------------------------------------------------------------------------
def test_the_checks_catch_broken_references(tmp_path):
    page = DOCS / "architecture.md"
    assert link_problem(page, "testing.md#layout") is None
    assert link_problem(page, "testing.md#no-such-heading")
    assert link_problem(page, "no-such-page.md")
    assert link_problem(page, "https://example.org/x") is None
    assert path_problem("src/vldocir/pipeline/jobs.py") is None
    assert path_problem("queries/cleaning.py") is None  # relative to src/vldocir
    assert path_problem("tests/test_render.py")
    assert path_problem("construction/queries.py")
    assert path_problem("data/vl-docir-mini-full") is None  # git-ignored output
    assert path_problem("results/tables/") is None
    assert path_problem("results/runs/<benchmark>/") is None  # a placeholder
    assert dotted_problem("vldocir.apps.build") is None
    assert dotted_problem("vldocir.reporting.report_tasks.TablesOnSweepEnd") is None
    assert dotted_problem("vldocir.construction.generation")
    assert dotted_problem("vldocir.manifest.no_such_function")
    assert override_problem("retriever", "colqwen25,dom_bm25") is None
    assert override_problem("retriever", "colqwen99")
    assert slug("Tables, figures and the `make check` (App. A.7)") == "tables-figures-and-the-make-check-app-a7"
    doc = tmp_path / "page.md"
    doc.write_text("# Title\n\nSee [below](#title) and [gone](#nothing).\n\n```\n# not a heading\n```\n")
    assert link_problem(doc, "#title") is None
    assert link_problem(doc, "#nothing")
    assert "not-a-heading" not in anchors(doc)

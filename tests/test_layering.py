"""The package's layering, read from the source with ``ast`` (no imports needed to check it).

Layers, lowest first; a module may import from its own layer or a lower one, never a higher one
(the same numbers as docs/architecture.md, "Layers"):

    0  data, io, cache, leases, manifest, errors, retry, llm, llm_server, threads, subprocesses
       (and ``vldocir`` itself)
    1  queries | retrieval              (which do not import each other)
    2  construction, importers, interop | evaluation
                                        (evaluation and the first two do not import each other;
                                        importers use construction's PDF renderer and OCR, never
                                        the other way round)
    3  pipeline, store, config_checks, launch
    4  reporting, tracking
    5  apps                             (the Hydra apps: nothing imports them)

Every ``vldocir.*`` import counts for the layers: module-level, inside functions, and under
``TYPE_CHECKING``. On top of the layers, the graph of top-level units (packages and modules
directly under ``vldocir``) is acyclic; so is the graph of modules, counting the imports that run
(an import under ``TYPE_CHECKING`` only names a type for an annotation); and every module imports
on its own.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "vldocir"

LAYERS = (
    (
        "vldocir",
        "data",
        "io",
        "cache",
        "leases",
        "manifest",
        "errors",
        "retry",
        "llm",
        "llm_server",
        "threads",
        "subprocesses",
    ),
    ("queries", "retrieval"),
    ("construction", "importers", "interop", "evaluation"),  # importers: theirs -> tables; interop: ours -> theirs
    ("pipeline", "store", "config_checks", "launch"),
    ("reporting", "tracking"),
    ("apps",),
)
LAYER = {unit: level for level, units in enumerate(LAYERS) for unit in units}

# Units of one layer that must not import each other, as (importer, imported) pairs. An exception
# would be listed here as ((importer, imported), "the reason"); there is none.
INDEPENDENT = {
    ("queries", "retrieval"),
    ("retrieval", "queries"),
    ("construction", "evaluation"),
    ("evaluation", "construction"),
    ("importers", "evaluation"),
    ("evaluation", "importers"),
    ("construction", "importers"),
}
JUSTIFIED: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _target(name: str, imported: str | None) -> str:
    """The module that ``from name import imported`` loads (a submodule, else ``name`` itself)."""
    if imported and f"{name}.{imported}" in modules():
        return f"{name}.{imported}"
    return name


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                inside.update(ast.walk(statement))
    return inside


@cache
def imports(runtime_only: bool = False) -> dict[str, dict[str, int]]:
    """{module: {imported vldocir module: first line}} for every module under src/vldocir;
    ``runtime_only``: leave out the imports under ``TYPE_CHECKING``."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules().items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found: dict[str, int] = {}
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_only(tree) if runtime_only else set()
        for node in ast.walk(tree):
            if node in skipped:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [_target(base, alias.name) for alias in node.names]
            for target in targets:
                if target == "vldocir" or target.startswith("vldocir."):
                    assert target in modules(), f"{module}:{node.lineno} imports {target}, which does not exist"
                    if target != module:
                        found.setdefault(target, node.lineno)
        graph[module] = found
    return graph


def unit(module: str) -> str:
    """The top-level package or module under vldocir that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "vldocir"


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def test_find_cycles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_every_unit_has_a_layer():
    missing = sorted({unit(m) for m in modules()} - set(LAYER))
    assert not missing, f"give these a layer in LAYERS (and in docs/architecture.md): {missing}"


def test_no_import_goes_up_a_layer():
    violations = []
    for module, targets in imports().items():
        for target, line in targets.items():
            source, dest = unit(module), unit(target)
            if LAYER[dest] > LAYER[source]:
                violations.append(
                    f"{module}:{line} imports {target} ({dest}, layer {LAYER[dest]} > {source}, layer {LAYER[source]})"
                )
            elif (source, dest) in INDEPENDENT and (source, dest) not in JUSTIFIED:
                violations.append(f"{module}:{line} imports {target}: {source} and {dest} are independent")
    assert not violations, "\n".join(violations)


def test_top_level_units_are_acyclic():
    graph: dict[str, set[str]] = {}
    for module, targets in imports().items():
        graph.setdefault(unit(module), set()).update(unit(t) for t in targets if unit(t) != unit(module))
    cycles = find_cycles(graph)
    assert not cycles, f"top-level units that import each other: {cycles}"


def test_no_module_cycles():
    graph = {module: set(targets) for module, targets in imports(runtime_only=True).items()}
    cycles = find_cycles(graph)
    assert not cycles, f"modules that import each other: {cycles}"


IMPORT_EACH = """
import importlib, json, sys, traceback
failures = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == "vldocir" or m.startswith("vldocir.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:
        failures[name] = traceback.format_exc(limit=-3)
print(json.dumps(failures))
"""


@pytest.mark.slow
def test_every_module_imports_on_its_own():
    """Each module imports with no other vldocir module loaded before it: one interpreter that
    forgets every vldocir module before the next import (third-party packages stay loaded, so the
    whole package takes about 15 s rather than a fresh interpreter per module)."""
    # A __main__ module runs its command when imported (its package is still checked).
    names = [m for m in modules() if not m.endswith(".__main__")]
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=SRC.parent,
    )
    assert result.returncode == 0, result.stderr
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(f"{name}:\n{error}" for name, error in failures.items())

"""The import graph of ``specbound.*``: no cycle, and API first -- :mod:`specbound.api` never reaches
``specbound.commands`` or the CLI, and each command reaches its job through the API (what the layers
may import: tests/test_layering.py).

A static scan (AST, nothing is imported): every ``import``/``from ... import`` of a ``specbound``
module anywhere in a file counts, at module level or inside a function, so a function-local
import cannot hide a cycle.  Relative imports are resolved against the importing module's package.
``from pkg import name`` counts as an import of ``pkg.name`` when that is a module, else of ``pkg``.
Imports under ``if TYPE_CHECKING:`` are skipped (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder of each installed package (pyproject.toml package-dir)
PACKAGE_DIRS = {
    "specbound": ROOT / "specbound",
    "specbound.derivation": ROOT / "derivation",
    "specbound.certified": ROOT / "certified",
    "specbound.numeric": ROOT / "numeric",
}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([pkg, *parts])
            out.setdefault(name, path)
    return out


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                skip.update(id(n) for n in ast.walk(sub))
    return skip


def _resolve(name: str) -> str | None:
    """The longest known module that ``name`` is or lies inside."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_nodes(tree)
    is_pkg = path.name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in MODULES else stem for a in node.names]
        else:
            continue
        for t in targets:
            if t.startswith("specbound"):
                r = _resolve(t)
                if r is not None and r != module:
                    found.add(r)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_scan_sees_the_known_modules():
    # the scan itself can fail: it must find the layer modules and a known edge
    assert "specbound.numeric.planner" in MODULES and "specbound.certified.bound" in MODULES
    assert "specbound.numeric.terms" in GRAPH["specbound.numeric.planner"]


def test_cycle_detector_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_specbound_modules():
    cycles = _cycles(GRAPH)
    assert cycles == [], f"import cycles: {cycles}"



# ------------------------------------------------------------------------------------------------
# API first: the commands call the API, never the other way round


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (lazy imports included)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def _is_shell(module: str) -> bool:
    return module == "specbound.cli" or module == "specbound.commands" or module.startswith("specbound.commands.")


def test_the_reachability_scan_can_fail():
    graph = {"specbound.api": {"specbound.x"}, "specbound.x": {"specbound.commands.proxies"}}
    assert any(_is_shell(m) for m in _reachable(graph, "specbound.api"))
    assert not any(_is_shell(m) for m in _reachable({"specbound.api": {"specbound.x"}}, "specbound.api"))


def test_the_api_never_reaches_the_commands_or_the_cli():
    bad = sorted(m for m in _reachable(GRAPH, "specbound.api") if _is_shell(m))
    assert not bad, f"specbound.api reaches the command line through {bad}"


COMMAND_MODULES = sorted(m for m in MODULES if m.startswith("specbound.commands."))

JOB_MODULES = ("specbound.pipeline", "specbound.verification", "specbound.inspection",
               "specbound.derivation.routes", "specbound.experiments.run", "specbound.experiments.scaling")
"""Where the jobs are computed: a command reaches them through :mod:`specbound.api` only."""


def test_there_are_commands_to_check():
    assert "specbound.commands.certify" in COMMAND_MODULES and len(COMMAND_MODULES) >= 7


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_each_command_calls_the_api_and_not_the_job_itself(module):
    imports = GRAPH[module]
    assert "specbound.api" in imports, f"{module} does not call specbound.api"
    direct = sorted(set(JOB_MODULES) & imports)
    assert not direct, f"{module} computes its job itself through {direct} instead of specbound.api"

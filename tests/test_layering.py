"""Layering: the certified and derivation layers import only what one allow-list names.

A module of ``certified/`` or ``derivation/`` may import the two layers themselves, the shared modules
``specbound.{errors, vocabulary, matrices, plan, dataset, sample_stream, scope, verdict, version}``, numpy, python-flint,
SymPy, mpmath and the standard library -- nothing else of the project (not the pipeline, the
checkpoint loaders, the engine, the adapters, the formats, inspection, the API, the commands...) and
no other third-party package, so that a new application module is outside the layers by default.

Checked statically on the source: every ``import`` statement at any depth (a function-local import
cannot hide a climb), and every ``importlib.import_module`` / ``__import__`` call, whose name must be
a literal (or an f-string whose literal prefix fixes the package).  The shared modules are held to the
same list, so a layer cannot reach the application through them.  Exceptions are listed with their
reason, and each must still be needed.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PACKAGE_DIRS = {
    "specbound": ROOT / "specbound",
    "specbound.certified": ROOT / "certified",
    "specbound.derivation": ROOT / "derivation",
    "specbound.numeric": ROOT / "numeric",
}
"""Source folder of each installed package (pyproject.toml package-dir)."""

LAYERS = ("specbound.certified", "specbound.derivation")
SHARED = ("specbound.errors", "specbound.vocabulary", "specbound.matrices", "specbound.plan",
          "specbound.dataset", "specbound.sample_stream", "specbound.scope", "specbound.verdict",
          "specbound.version")
"""Project modules every layer may import (value types and names, no behaviour of the application)."""
THIRD_PARTY = ("numpy", "flint", "sympy", "mpmath")

EXCEPTIONS: dict[str, dict[str, str]] = {
    "certified/kernels.py": {
        "numba": "compiles loops of numpy programs analysed elsewhere (same operations per entry, the same bits, "
                 "tests/certified/test_kernels.py and test_directed.py); optional: without it the numpy programs run",
    },
    "derivation/backends.py": {
        "torch": "to_torch, the lambdify backend for torch tensors, imports torch inside the function",
    },
    "specbound/plan.py": {
        "specbound.numeric.generated": "BoundSettings.base_c reads the printed beta_c table "
                                       "(numeric/generated.py imports only numpy and the standard library)",
    },
}
"""Relative path -> {imported module: why it is allowed there}."""

DYNAMIC = "<import by a computed name>"
"""What a dynamic import whose target cannot be read from the source is reported as."""


def _project_modules() -> set[str]:
    out = set()
    for package, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.add(".".join([package, *parts]))
    return out


MODULES = _project_modules()


def _module_of(path: Path) -> str:
    for package, folder in PACKAGE_DIRS.items():
        if path.is_relative_to(folder):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join([package, *parts])
    raise ValueError(path)


def _dynamic_target(call: ast.Call, module: str) -> str | None:
    """The module an ``import_module(...)`` / ``__import__(...)`` call in ``module`` names, None when
    the call is not an import.  A computed name counts as ``<package>.<computed>`` when a literal
    prefix fixes the package (``f"specbound.certified.{name}"``), else as :data:`DYNAMIC`."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if name not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
        return arg.value
    if not isinstance(arg, ast.JoinedStr) or not arg.values:
        return DYNAMIC
    head, rest = arg.values[0], arg.values[1:]
    if isinstance(head, ast.FormattedValue) and isinstance(head.value, ast.Name) and head.value.id == "__name__":
        prefix = module + (rest[0].value if rest and isinstance(rest[0], ast.Constant) else "")
    elif isinstance(head, ast.Constant):
        prefix = head.value
    else:
        return DYNAMIC
    package = prefix.rpartition(".")[0]
    return f"{package}.<computed>" if package else DYNAMIC


def imported_modules(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, the code of ``module``.

    ``from P import n`` imports ``P.n`` when that is a project module, else ``P``; relative imports
    are resolved against the module's package; dynamic imports are read from their literal name.
    """
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            out += [(node.lineno, f"{stem}.{a.name}" if f"{stem}.{a.name}" in MODULES else stem)
                    for a in node.names]
        elif isinstance(node, ast.Call):
            target = _dynamic_target(node, module)
            if target is not None:
                out.append((node.lineno, target))
    return out


def is_allowed(name: str) -> bool:
    """Whether the allow-list admits an import of module ``name`` from a layer or shared module."""
    top = name.split(".")[0]
    if top == "specbound":
        return any(name == a or name.startswith(a + ".") for a in LAYERS + SHARED)
    return top in THIRD_PARTY or top in sys.stdlib_module_names


def violations(path: Path, source: str | None = None, module: str | None = None) -> list[str]:
    """``line: module`` for every import of ``path`` (or of ``source`` posing as ``module``) outside
    the allow-list and the file's listed exceptions."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    allowed_here = EXCEPTIONS.get(rel, {})
    module = module or _module_of(path)
    text = path.read_text(encoding="utf-8") if source is None else source
    found = imported_modules(text, module, is_package=path.name == "__init__.py")
    return [f"{line}: {name}" for line, name in found if not is_allowed(name) and name not in allowed_here]


def _checked_files() -> list[Path]:
    layer_files = [p for folder in ("certified", "derivation") for p in (ROOT / folder).rglob("*.py")]
    shared_files = [ROOT / "specbound" / f"{name.rpartition('.')[2]}.py" for name in SHARED]
    return sorted(layer_files + shared_files)


@pytest.mark.parametrize("path", _checked_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_layer_and_shared_modules_import_only_the_allow_list(path):
    bad = violations(path)
    assert not bad, f"{path.relative_to(ROOT)} imports outside the layers' allow-list: {bad}"


def test_the_check_catches_a_planted_violation(tmp_path):
    """The detector can fail: a copy of a real certified module with climbs planted in it (one at
    module level, the others lazy, relative, through the package root or by computed name)."""
    real = ROOT / "certified" / "radii.py"
    planted = {
        "from specbound.engine import Engine": "specbound.engine",
        "    from ..adapters import detect": "specbound.adapters",
        "    from ..formats.gguf_file import open_gguf": "specbound.formats.gguf_file",
        "    from .. import inspection": "specbound.inspection",
        "    from specbound import certify": "specbound",
        "    import specbound.api": "specbound.api",
        "    import torch": "torch",
        "    importlib.import_module('specbound.pipeline')": "specbound.pipeline",
        "    __import__(name)": DYNAMIC,
    }
    body = "\n".join(line for line in planted if not line.startswith(" "))
    body += "\n\ndef _lazy(name):\n    import importlib\n" + "\n".join(l for l in planted if l.startswith(" ")) + "\n"
    fake = tmp_path / "radii.py"
    fake.write_text(real.read_text(encoding="utf-8") + "\n" + body, encoding="utf-8")
    assert not violations(real), "the unplanted module must pass"
    found = {v.split(": ", 1)[1] for v in violations(fake, module="specbound.certified.radii")}
    assert found == set(planted.values())


def test_what_the_layers_may_import_passes_the_check(tmp_path):
    fake = tmp_path / "probe.py"
    fake.write_text(
        "import json\nimport numpy as np\nfrom flint import arb\nimport sympy as sp\nimport mpmath\n"
        "from .. import errors\nfrom ..vocabulary import MATRIX_KINDS\nfrom specbound.plan import BoundPlan\n"
        "from specbound.derivation import theorem\nfrom . import arb as arb_module\n"
        "def f(m):\n    import importlib\n    return importlib.import_module(f'specbound.certified.{m}')\n",
        encoding="utf-8")
    assert violations(fake, module="specbound.certified.probe") == []


@pytest.mark.parametrize("rel", sorted(EXCEPTIONS))
def test_every_exception_is_still_needed(rel):
    path = ROOT / rel
    names = {name for _, name in imported_modules(path.read_text(encoding="utf-8"), _module_of(path))}
    stale = sorted(set(EXCEPTIONS[rel]) - names)
    assert not stale, f"{rel} no longer imports {stale}: drop the exception"


def test_the_excepted_generated_table_imports_only_numpy_and_the_standard_library():
    path = ROOT / "numeric" / "generated.py"
    names = [name for _, name in imported_modules(path.read_text(encoding="utf-8"), _module_of(path))]
    assert all(n.split(".")[0] in ("numpy", *sys.stdlib_module_names) for n in names), names


def test_the_vocabulary_imports_nothing_from_the_project():
    path = ROOT / "specbound" / "vocabulary.py"
    names = [name for _, name in imported_modules(path.read_text(encoding="utf-8"), "specbound.vocabulary")]
    assert not [n for n in names if n.startswith("specbound")], names

"""The repository stands alone: no tracked text file refers to the contributor inputs outside it
(the theory overview is proofs_notes/theory.md, the design is docs/design.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = (".py", ".md", ".toml", ".txt", ".tex", ".cfg", ".ini", ".json", ".yaml", ".yml")
FORBIDDEN = re.compile(r"THEORY\.md|SPEC\.md|SPEC section|SPEC §")


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.splitlines() if line.endswith(TEXT_SUFFIXES)]


def test_no_file_refers_to_the_contributor_inputs():
    offenders = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        for k, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{k}")
    assert not offenders, "references to files outside the repository:\n" + "\n".join(offenders)


def test_the_pattern_catches_each_form():
    for text in ("see THEORY.md section 6", "SPEC.md", "SPEC section 6", "(SPEC §6)"):
        assert FORBIDDEN.search(text), text
    assert not FORBIDDEN.search("proofs_notes/theory.md section 6; docs/design.md section 6")


# --------------------------------------------------------------------------- modules and dependencies


LAYER_PACKAGES = ("specbound", "specbound.certified", "specbound.numeric", "specbound.derivation")
"""The installed packages whose folders live apart (pyproject's package-dir): each is walked itself."""


def _modules() -> list[str]:
    import importlib
    import pkgutil

    names = set(LAYER_PACKAGES)
    for root in LAYER_PACKAGES:
        package = importlib.import_module(root)
        names |= {m.name for m in pkgutil.walk_packages(package.__path__, root + ".")}
    return sorted(n for n in names if not n.endswith("__main__"))


@pytest.mark.parametrize("name", _modules())
def test_every_name_in_a_modules_all_exists(name):
    # regression: certified.ramp_loss listed three functions it does not have, so `import *` raised
    import importlib

    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:  # an optional third-party package (an extra) is not installed
        if (exc.name or "").startswith("specbound"):
            raise
        pytest.skip(f"{name} needs {exc.name}")
    names = getattr(module, "__all__", None)
    if names is None:
        return
    assert all(isinstance(n, str) for n in names)
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what the module lacks: {missing}"
    exec(f"from {name} import *", {})  # noqa: S102 - the statement a user would write


# import name -> distribution name, where they differ
_DISTRIBUTIONS = {"flint": "python-flint", "distributed": "dask", "yaml": "pyyaml"}


def _declared(extra: str) -> set[str]:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(project["dependencies"]) + list(project["optional-dependencies"][extra])
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def test_every_package_the_tests_import_unconditionally_is_declared():
    # regression: tests/properties imported scipy, which neither the dependencies nor the test extra list.
    # Imports at a test module's top level (not inside a function, a try block or importorskip) must be
    # installable from `pip install .[test]`.
    import ast
    import sys

    declared = _declared("test")
    missing = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top in ("specbound", "tests"):
                    continue
                dist = _DISTRIBUTIONS.get(top, top).lower().replace("_", "-")
                if dist not in declared:
                    missing.setdefault(dist, str(path.relative_to(ROOT)))
    assert not missing, f"imported by the tests but not in dependencies or the test extra: {missing}"

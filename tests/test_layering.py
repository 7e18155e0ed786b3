"""Layering: the certified and derivation layers import nothing from the application.

Checked statically on the source (every ``import`` statement, at any depth, including function-local
ones), so a lazy import cannot hide a climb from a lower layer into the application.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LOWER_LAYERS = ("certified", "derivation")
"""Folders installed as specbound.certified and specbound.derivation."""

APPLICATION = ("pipeline", "checkpoint", "data_file", "commands", "cli", "experiment", "experiments",
               "output", "report", "train", "tasks", "model", "verification", "empirical")
"""Modules (and packages) of the application layer, under ``specbound.``."""


def _imported_modules(path: Path, package: str | None = None) -> list[str]:
    """Absolute names of every module an ``import`` statement in ``path`` names (relative imports
    resolved against ``package``, by default the file's package ``specbound.<layer>``)."""
    if package is None:
        package = "specbound." + path.parent.relative_to(ROOT).as_posix().replace("/", ".")
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append(mod)
            out += [f"{mod}.{a.name}" for a in node.names]
    return out


def _is_application(name: str) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == "specbound" and parts[1] in APPLICATION


def _lower_layer_files() -> list[Path]:
    return sorted(p for layer in LOWER_LAYERS for p in (ROOT / layer).rglob("*.py"))


@pytest.mark.parametrize("path", _lower_layer_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_lower_layers_import_nothing_from_the_application(path):
    climbs = sorted({m for m in _imported_modules(path) if _is_application(m)})
    assert not climbs, f"{path.relative_to(ROOT)} imports application modules: {climbs}"


def test_the_check_catches_a_climb(tmp_path):
    """The detector itself can fail: a lazy import of the pipeline is reported."""
    fake = tmp_path / "probe.py"
    fake.write_text("def f():\n    from specbound.pipeline import certify\n    from ..checkpoint import x\n")
    found = {m for m in _imported_modules(fake, "specbound.certified") if _is_application(m)}
    assert "specbound.pipeline" in found and "specbound.checkpoint" in found


def test_the_vocabulary_imports_nothing_from_the_project():
    names = _imported_modules(ROOT / "specbound" / "vocabulary.py")
    assert not [n for n in names if n.startswith("specbound")], names

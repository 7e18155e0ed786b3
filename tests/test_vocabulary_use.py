"""The vocabulary's concepts are spelled once: no module but specbound/vocabulary.py lists model
variants or names a read-out mode by its literal.

A literal tuple, list or set of two or more model-variant names (``("ls", "ls_residual")``) is a
second definition of a vocabulary group (``LS_VARIANTS``, ``RESIDUAL_VARIANTS``,
``BIDIRECTIONAL_VARIANTS``, ``MODEL_VARIANTS``), and ``variant.startswith("ls")`` the same test by
prefix; the string ``"trained"`` or ``"fixed"`` is ``READOUT_TRAINED`` / ``READOUT_FIXED`` retyped.
Checked statically over the package sources (tests are exempt: they spell inputs out on purpose).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specbound.vocabulary import MODEL_VARIANTS, READOUTS

ROOT = Path(__file__).resolve().parents[1]
SOURCE_FOLDERS = ("specbound", "certified", "derivation", "numeric", "scripts", "benchmarks")
VOCABULARY = ROOT / "specbound" / "vocabulary.py"

PENDING: dict[str, str] = {}
"""Files still to be converted by the work that owns them, with what they spell; each entry must
still be needed (drop it when the file is clean)."""


def literal_spellings(source: str) -> list[str]:
    """``line: what`` for every retyped vocabulary concept in ``source``: a tuple/list/set of at least
    two string constants that are all model variants, a ``.startswith(prefix)`` whose prefix begins
    two or more variant names, and a string constant equal to a read-out mode."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
            values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(values) == len(node.elts) and all(v in MODEL_VARIANTS for v in values):
                found.append(f"{node.lineno}: variant list {tuple(values)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and sum(v.startswith(node.args[0].value) for v in MODEL_VARIANTS) >= 2):
            found.append(f"{node.lineno}: variant prefix {node.args[0].value!r}")
        elif isinstance(node, ast.Constant) and node.value in READOUTS:
            found.append(f"{node.lineno}: read-out mode {node.value!r}")
    return found


def _sources() -> list[Path]:
    paths = [p for folder in SOURCE_FOLDERS for p in (ROOT / folder).rglob("*.py")]
    return sorted(p for p in paths if p != VOCABULARY and ".venv" not in p.parts)


def _clean_sources() -> list[Path]:
    return [p for p in _sources() if p.relative_to(ROOT).as_posix() not in PENDING]


@pytest.mark.parametrize("path", _clean_sources(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_retypes_a_vocabulary_group(path):
    found = literal_spellings(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} spells out what specbound/vocabulary.py defines: {found}"


@pytest.mark.parametrize("rel", sorted(PENDING))
def test_every_pending_file_still_needs_its_entry(rel):
    assert literal_spellings((ROOT / rel).read_text(encoding="utf-8")), f"{rel} is clean: drop it from PENDING"


def test_the_check_flags_each_planted_spelling():
    planted = (
        'def f(variant, readout="trained"):\n'
        '    if variant in ("ls", "ls_residual"):\n'
        '        return ["plain", "causal"]\n'
        '    if variant.startswith("ls"):\n'
        '        return {"residual", "ls_residual"}\n'
        '    return readout == "fixed"\n'
    )
    found = literal_spellings(planted)
    assert sorted(int(f.split(":")[0]) for f in found) == [1, 2, 3, 4, 5, 6], found


def test_the_check_passes_what_is_not_a_spelled_group():
    fine = (
        '"""A docstring may say the read-out is fixed or trained, and name ls and ls_residual."""\n'
        'from specbound.vocabulary import LS_VARIANTS, READOUT_FIXED\n'
        'suffix = "" if model == "ls" else "_R"\n'
        'key = ("centred", "gelu", "ls", False)\n'
        'pair = ("plain", "gelu")\n'
        'ok = name.startswith("layers") or mode == "fixedpoint" or readout == READOUT_FIXED\n'
    )
    assert literal_spellings(fine) == []


def test_the_vocabulary_groups_are_model_variants():
    from specbound import vocabulary as v

    for group in (v.LS_VARIANTS, v.RESIDUAL_VARIANTS, v.BIDIRECTIONAL_VARIANTS):
        assert group and set(group) <= set(v.MODEL_VARIANTS), group
    # the groups the code relies on: LS covers the LS kinds, the bidirectional ones are read at CLS
    assert set(v.LS_VARIANTS) == {m for m in v.MODEL_VARIANTS if m.startswith("ls")}
    assert not set(v.BIDIRECTIONAL_VARIANTS) & (set(v.LS_VARIANTS) | {"causal"})

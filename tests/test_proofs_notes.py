"""The proof notes: one Markdown note per lemma of proofs_notes/theory.md section 8, plus an index.

These are documentation checks: every machine name of the lemma register has a note with the
required sections, the note names its lemma, and the index links every note.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.derivation.test_register import ALL_ENTRIES

NOTES = Path(__file__).resolve().parents[1] / "proofs_notes"

#: The machine names of the lemma register (entries 1-32), in register order.
MACHINE_NAMES = tuple(ALL_ENTRIES)

REQUIRED_SECTIONS = ("Statement", "Assumptions", "Proof", "Constants", "Implementation hazards",
                     "References")


def _read(name: str) -> str:
    return (NOTES / f"{name}.md").read_text(encoding="utf-8")


def _sections(text: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^##\s+(.+)$", text, flags=re.MULTILINE)]


@pytest.mark.parametrize("name", MACHINE_NAMES)
def test_every_lemma_has_a_note_named_by_its_machine_name(name):
    assert (NOTES / f"{name}.md").is_file()


@pytest.mark.parametrize("name", MACHINE_NAMES)
def test_note_has_the_required_sections_in_order(name):
    found = _sections(_read(name))
    positions = []
    for section in REQUIRED_SECTIONS:
        hits = [i for i, title in enumerate(found) if title.startswith(section)]
        assert hits, f"{name}.md lacks a '## {section}' section"
        positions.append(hits[0])
    assert positions == sorted(positions), f"{name}.md sections out of order: {found}"


@pytest.mark.parametrize("name", MACHINE_NAMES)
def test_note_mentions_its_machine_name_and_code_symbols(name):
    text = _read(name)
    assert f"`{name}`" in text.splitlines()[0], "the title line names the lemma"
    assert "Symbols in code:" in text


@pytest.mark.parametrize("name", MACHINE_NAMES)
def test_proof_section_is_not_empty(name):
    text = _read(name)
    proof = text.split("## Proof", 1)[1].split("\n## ", 1)[0]
    assert len(proof.strip()) > 100


def test_readme_indexes_every_note():
    index = (NOTES / "README.md").read_text(encoding="utf-8")
    for name in MACHINE_NAMES:
        assert f"({name}.md)" in index, f"README.md does not link {name}.md"
    assert "(paper_comparison.md)" in index


def test_paper_comparison_covers_the_listed_differences():
    text = (NOTES / "paper_comparison.md").read_text(encoding="utf-8")
    for topic in ("dimension", "depth factor", r"L_\varphi", r"\gamma_{M_{\rm out}}", "C_{\\rm sm}",
                  r"\sqrt L", "numerical rank", "union bound"):
        assert topic in text, topic


def test_main_theorem_and_balance_use_the_centred_defaults():
    assert r"\frac{a_j}{2n}" in _read("main_theorem") or "a_j/(2n)" in _read("main_theorem")
    assert "a_j/(2n)" in _read("balance_single_scale")
    assert r"\int_\alpha^{1/4}" in _read("dudley")

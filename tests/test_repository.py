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

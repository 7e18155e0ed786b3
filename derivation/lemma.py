"""The lemma record: one object per entry of the lemma register (proofs_notes/theory.md section 8)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import sympy as sp


@dataclass(frozen=True)
class Lemma:
    """One proved (or cited) lemma.

    * ``name``: the machine name of proofs_notes/theory.md section 8 (also the proof note's file stem).
    * ``assumptions``: the hypotheses, in words, exactly as needed by the proof.
    * ``statement``: the inequality as a SymPy ``Relational`` where one is meaningful, else ``None``
      (e.g. a lemma whose content is a construction).
    * ``constants``: named constants and formulas, name -> SymPy expression over
      :mod:`~specbound.derivation.symbols`.  The theorem is assembled from these, never retyped.
    * ``covering``: the log-covering-number bound (entropy) for covering lemmas, else ``None``.
    * ``proof_note``: repository-relative path of the proof note (default
      ``proofs_notes/<name>.md``).
    * ``source``: where the argument comes from (ours, or a citation).
    """

    name: str
    assumptions: tuple[str, ...]
    statement: sp.Basic | None
    constants: Mapping[str, sp.Expr] = field(default_factory=dict)
    covering: sp.Expr | None = None
    source: str = "ours (proofs_notes/theory.md)"
    proof_note: str = ""

    def __post_init__(self) -> None:
        # Freeze the mapping too: a Lemma is a value, shared by the registry and every Theorem.
        object.__setattr__(self, "constants", MappingProxyType(dict(self.constants)))
        object.__setattr__(self, "assumptions", tuple(self.assumptions))
        if not self.proof_note:
            object.__setattr__(self, "proof_note", f"proofs_notes/{self.name}.md")

    def __hash__(self) -> int:
        return hash(self.name)

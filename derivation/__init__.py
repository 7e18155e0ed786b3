"""specbound.derivation: the single source of truth (SymPy lemma objects and the assembled theorem).

Public entry points: :func:`assemble` -> :class:`Theorem`, :data:`REGISTRY` (machine name ->
:class:`Lemma`), :func:`diff_report`; backends in :mod:`specbound.derivation.backends`; renderings in
:mod:`specbound.derivation.render`; the paper side-by-side in :mod:`specbound.derivation.comparison`.
"""

from .lemma import Lemma
from .theorem import OVERRIDABLE, REGISTRY, DerivationError, Theorem, assemble, diff_report

__all__ = ["Lemma", "Theorem", "REGISTRY", "OVERRIDABLE", "DerivationError", "assemble", "diff_report"]

"""How the bound's parts are put together, shared by the certified (Arb) and the fast (torch) layers.

For each model variant (vocabulary.MODEL_VARIANTS) a :class:`Layout` says which covered matrix
kind feeds which symbol of the theorem's Lipschitz and sensitivity expressions
(``Theorem.head_summand``, ``Theorem.layer_lipschitz``, ``Theorem.gamma``), and which of the
theorem's sensitivities applies to each kind.  Both evaluation layers read this table; neither
retypes a formula.  This module imports neither torch nor flint: both layers build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Mapping

import sympy as sp

from specbound.vocabulary import LS_MATRIX_KINDS, LS_VARIANTS, MATRIX_KINDS, kv_group  # noqa: F401  (re-exported: the one group map)

from . import modern_blocks, symbols
from .symbols import c_A, c_D, c_G, c_in, c_K, c_out, c_Q, c_U, c_V, group_sum

GAMMA_KEY = {"QK": "A", "V_tilde": "V", "M_in": "M_in", "M_out": "M_out"}
"""Theorem's sensitivity key (``Theorem.gamma``) of each matrix type of the plain kinds."""

GROUP_SUMMAND = c_V * c_Q
"""One head's summand of ``Sigma_g = sum_{h in g} ||V~_h|| ||Q_h||`` (ls_model, proofs_notes/ls_model.md)."""


@dataclass(frozen=True)
class Layout:
    """Which kind feeds which theorem symbol in one variant.

    ``head``: symbol -> kind of a per-head matrix (radius of head h's matrix; for the shared key
    matrix ``K`` the matrix of head h's key/value group); ``layer``: symbol -> kind of a per-layer
    matrix; ``gamma_key``: kind -> key of ``Theorem.gamma``; ``shared``: the kind indexed by the
    key/value group rather than the head (its sensitivity takes ``Sigma_g``).
    """

    kinds: tuple[str, ...]
    head: Mapping[sp.Symbol, str]
    layer: Mapping[sp.Symbol, str]
    gamma_key: Mapping[str, str]
    shared: str | None = None


_PLAIN = Layout(MATRIX_KINDS, MappingProxyType({c_A: "QK", c_V: "V_tilde"}),
                MappingProxyType({c_in: "M_in", c_out: "M_out"}), MappingProxyType(GAMMA_KEY))
_LS = Layout(LS_MATRIX_KINDS, MappingProxyType({c_Q: "Q", c_K: "K", c_V: "V_tilde"}),
             MappingProxyType({c_G: "G", c_U: "U", c_D: "D"}),
             MappingProxyType(dict(zip(LS_MATRIX_KINDS, modern_blocks.LS_MATRIX_KINDS))), shared="K")


def layout(model: str) -> Layout:
    """The :class:`Layout` of a model variant ("plain", "residual", "causal": the plain kinds)."""
    return _LS if model in LS_VARIANTS else _PLAIN


def beta_c_expression(model: str) -> sp.Expr:
    """The recommended spectral grid base as an expression in the depth ``L`` (symbols.L): 1 + 1/(16L)
    for the plain kinds (four norms in a layer product, so beta_c^(4L) <= e^(1/4)), the ls_model's
    ``beta_c`` = 1 + 1/(24L) for the LS variants (six norms); proofs_notes/sharpenings.md S2.  Printed
    into numeric/generated.py for the run paths."""
    if model in LS_VARIANTS:
        expr = modern_blocks.ls_model.constants["beta_c"]
        return expr.xreplace({next(iter(expr.free_symbols)): symbols.L})
    return 1 + 1 / (16 * symbols.L)


def default_beta_c(num_layers: int, model: str) -> Fraction:
    """:func:`beta_c_expression` at ``L = num_layers``, as an exact fraction."""
    value = sp.Rational(beta_c_expression(model).subs(symbols.L, num_layers))
    return Fraction(int(value.p), int(value.q))

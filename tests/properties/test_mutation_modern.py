"""Mutation tests for the modern-block constants (register entries 24-30): shrink one constant and
the property strategies of ``test_modern_blocks`` must FIND a case violating the mutated inequality
while the derived one still holds on that very case (the style of ``test_mutation.py``).
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st

from specbound.derivation import REGISTRY

from . import modern_cases as mc
from .modern_constants import DERIVED, ModernConstants
from .test_modern_blocks import (
    _silu_d1, _silu_t_star, gated_sides, gqa_sides, masked_softmax_sides, rope_sides, violated,
)


def search_settings(max_examples: int = 300) -> settings:
    return settings(max_examples=max_examples, database=None, derandomize=True, deadline=None,
                    phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def M(activation="silu", **kw) -> ModernConstants:
    return ModernConstants(activation, **kw)


#: name -> (sides, strategy, mutated constants); the derived constants are DERIVED[activation]
MUTATIONS = {
    "masked_softmax C_sm x0.9": (
        masked_softmax_sides, st.one_of(mc.masked_softmax_cases(), mc.masked_softmax_witnesses()),
        M(scale=((("masked_softmax", "C_sm"), 0.9),))),
    "rope_attention C_sm x0.9": (
        rope_sides, st.one_of(mc.rope_cases(), mc.rope_witnesses()), M(symbols=(("C_sm", 0.9),))),
    "rope_attention rho_R x0.9": (
        rope_sides, st.one_of(mc.rope_cases(), mc.rope_witnesses()), M(symbols=(("rho_R", 0.9),))),
    "shared_matrix_sensitivity: one head instead of the group sum": (
        gqa_sides, mc.gqa_cases(), M(group="one_head")),
    "gated_ff (a) (B_phi + L_phi) x0.9": (
        gated_sides, st.one_of(mc.gated_cases(), mc.gated_witnesses(whiches=("input",))),
        M(scale=((("gated_ff", "input"), 0.9),))),
    "gated_ff (b) L_phi x0.9": (
        gated_sides, st.one_of(mc.gated_cases(), mc.gated_witnesses(whiches=("G",))),
        M(scale=((("gated_ff", "G"), 0.9),))),
    "gated_ff (c) B_phi x0.9": (
        gated_sides, st.one_of(mc.gated_cases(), mc.gated_witnesses(whiches=("U",))),
        M(scale=((("gated_ff", "U"), 0.9),))),
    "gated_ff (d) B_phi x0.9": (
        gated_sides, st.one_of(mc.gated_cases(), mc.gated_witnesses(whiches=("D",))),
        M(scale=((("gated_ff", "D"), 0.9),))),
    "silu_constants L_phi x0.999 (SwiGLU (b))": (
        gated_sides, mc.gated_witnesses(activations=("silu",), whiches=("G",)),
        M(symbols=(("L_phi", 0.999),))),
}


def _with_activation(K: ModernConstants, act: str) -> ModernConstants:
    return ModernConstants(act, K.rho_R, K.symbols, K.scale, K.group)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutation_is_caught(name):
    sides, strategy, mutated = MUTATIONS[name]

    def caught(case):
        act = case[1] if sides is gated_sides else "silu"
        return violated(sides, case, _with_activation(mutated, act)) and \
            not violated(sides, case, DERIVED[act])

    case = find(strategy, caught, settings=search_settings())
    assert caught(case)


def _silu_bound_holds(L: Fraction) -> bool:
    """The tight check of test_silu_L_phi_is_a_tight_upper_bound for a candidate L."""
    with mpmath.workdps(50):
        return _silu_d1(_silu_t_star()) <= mpmath.mpf(L.numerator) / L.denominator


def test_silu_L_phi_shrunk_by_one_unit_in_the_17th_digit_is_caught():
    L = Fraction(str(REGISTRY["silu_constants"].constants["L_phi"]))
    assert _silu_bound_holds(L)
    assert not _silu_bound_holds(L - Fraction(1, 10**17))  # 1.09983932012886691 < sup

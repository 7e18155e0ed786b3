"""Mutation tests: shrink one derived constant and the property suite must FIND a counterexample.

A property test that cannot fail proves nothing.  For each constant of the chain we build a
mutated :class:`constants.Constants` (the constant times 0.9, or the companion code's smaller
value, or a one-off error in a formula) and run ``hypothesis.find`` over the same strategies the
property tests use (generic cases plus the targeted near-extremal ones).  Each search must return a
case that violates the mutated inequality (confirmed in mpmath) while the derived constant still
holds on that very case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st

from . import cases
from . import checks as C
from .constants import COMPANION, DERIVED, REGISTRY, Constants
from .test_covering import (
    schatten_cover_cases, schatten_truncation_sides, stechkin_cases, stechkin_sides, volumetric_cases,
    volumetric_sides,
)
from .test_posthoc import (
    allocation_cases, allocation_closed, allocation_objective, prior_partial_sum, rounded_exponent,
    ss_cases, ss_closed, ss_numerical_min,
)
from .test_rademacher import dudley_sides, finite_classes, massart_sides


def search_settings(max_examples: int = 300) -> settings:
    return settings(
        max_examples=max_examples, database=None, derandomize=True, deadline=None,
        phases=[Phase.generate], suppress_health_check=list(HealthCheck),
    )


@dataclass(frozen=True)
class Mutation:
    """One wrong constant, the strategy to search, and how a case exposes it."""

    name: str
    strategy: st.SearchStrategy
    caught: Callable  # case -> True when the mutated inequality fails on it
    sound: Callable  # case -> True when the derived (correct) inequality holds on it
    max_examples: int = 300


def sides_mutation(name, sides, strategy, mutated: Constants, derived: Constants = DERIVED, **kw) -> Mutation:
    return Mutation(
        name, strategy,
        caught=lambda case: C.violated(sides, case, mutated),
        sound=lambda case: not C.violated(sides, case, derived, rtol=1e-9),
        **kw,
    )


def exact_mutation(name, sides, strategy, mutated: Constants, rtol: float = 1e-9, **kw) -> Mutation:
    """For sides functions that are already exact (mpmath) and take (case, K)."""

    def fails(K):
        return lambda case: (lambda lr: lr[0] > lr[1] * (1 + rtol))(sides(case, K))

    return Mutation(name, strategy, caught=fails(mutated), sound=lambda case: not fails(DERIVED)(case), **kw)


def network_mutation(name, kind, replace=None, scale=None, overrides=None, residual=False) -> Mutation:
    """Search scalar nets perturbing the mutated matrix type (GELU: where L_phi matters), then random nets."""
    strategy = st.one_of(
        cases.scalar_network_cases(residual=residual, kinds=(kind,), activations=("gelu",)),
        cases.network_cases(residual=residual, kinds=(kind,)),
    )

    def K(case, mutated):
        act = case[0].activation
        return Constants(act, overrides=overrides, replace=replace, scale=scale) if mutated else Constants(act)

    return Mutation(
        name, strategy,
        caught=lambda case: C.violated(C.network_sides, case, K(case, True)),
        sound=lambda case: not C.violated(C.network_sides, case, K(case, False), rtol=1e-9),
    )


def _stechkin_exponent_times(factor) -> sp.Expr:
    rhs = REGISTRY["stechkin_tail"].statement.rhs  # (S_p/(r+1))^(1/p)
    return sp.Pow(rhs.base, rhs.exp * factor)


def _literal(expr: sp.Expr, old: int, new) -> sp.Expr:
    return expr.xreplace({sp.Integer(old): sp.sympify(new)})


PI_Z = REGISTRY["posthoc_union"].constants["pi_Z"]
R_P = REGISTRY["schatten_cover"].constants["r_p"]
VOLUMETRIC_K1 = _literal(REGISTRY["volumetric_cover"].covering, 2, 1)  # (1 + c/delta)^D
STECHKIN_11 = _stechkin_exponent_times(sp.Rational(11, 10))


def _companion(field: str) -> dict:
    return {("theorem", field): COMPANION[("theorem", field)]}


def _ramp_sides(case, K):
    a, b, rho = case
    lhs = abs(C.ref.ramp(a, rho) - C.ref.ramp(b, rho))
    return lhs, K("ramp_loss_cover", "loss_scale", epsilon=abs(a - b), rho=rho)


def _round_down_misused_as_up(case) -> bool:
    x, beta = sp.Rational(case[0]), case[1]
    return beta ** rounded_exponent(x, beta, "round_down") < x


def _round_up_sound(case) -> bool:
    x, beta = sp.Rational(case[0]), case[1]
    return beta ** rounded_exponent(x, beta) >= x


def _attained(case) -> float:
    """The allocation objective at the derivation's own minimiser direction."""
    b, kappa, eps = case
    direction = np.array([float(DERIVED("allocation_23", "minimiser_proportional_to", b_j=bj, kappa_j=kj))
                          for bj, kj in zip(b, kappa)])
    w = kappa * direction
    return allocation_objective(w / w.sum(), case)


ALLOC_09 = Constants(scale={("allocation_23", "minimum"): 0.9})
SS_09 = Constants(scale={("theorem", "ss_closed"): 0.9})

def _dudley_cases() -> st.SearchStrategy:
    """(vectors, alpha): finite classes with Dudley lower limits from tiny to the largest, 1/4."""
    return st.tuples(finite_classes().map(lambda case: case[0]), st.sampled_from((1e-3, 1e-2, 0.1, 0.25)))


MUTATIONS = [
    sides_mutation("C_sm x0.9 (softmax)", C.softmax_sides,
                   st.one_of(cases.softmax_witnesses(), cases.softmax_cases()),
                   Constants(overrides={"C_sm": 0.9})),
    sides_mutation("C_sm x0.9 (attention QK)", C.attn_qk_sides,
                   st.one_of(cases.attn_qk_witnesses(), cases.attn_qk_cases()),
                   Constants(overrides={"C_sm": 0.9})),
    sides_mutation("head summand x0.9 (attention input)", C.attn_input_sides,
                   st.one_of(cases.attn_input_witnesses(), cases.attn_input_cases()),
                   Constants(scale={("attn_input_lipschitz", "head_summand"): 0.9})),
    sides_mutation("gamma_head_V x0.9 (attention V)", C.attn_v_sides, cases.attn_v_cases(),
                   Constants(scale={("attn_v_lipschitz", "gamma_head_V"): 0.9})),
    sides_mutation("Lip(Pi) x0.9", C.proj_sides, cases.proj_cases(),
                   Constants(scale={("proj_unit_ball", "Lip_Pi"): 0.9})),
    sides_mutation("L_phi -> 1 in ff (a)", C.ff_input_sides,
                   st.one_of(cases.ff_input_witnesses(), cases.ff_input_cases()),
                   Constants(overrides={"L_phi": 1})),
    sides_mutation("L_phi -> 1 in ff (b)", C.ff_min_sides,
                   st.one_of(cases.ff_min_witnesses(), cases.ff_min_cases()),
                   Constants(overrides={"L_phi": 1})),
    sides_mutation("companion gamma_M_in = ||M_out|| in ff (b)", C.ff_min_sides,
                   st.one_of(cases.ff_min_witnesses(), cases.ff_min_cases()),
                   Constants(replace={("ff_lipschitz", "M_in"): COMPANION[("ff_lipschitz", "M_in")]})),
    sides_mutation("B_phi x0.9 in ff (c)", C.ff_mout_sides,
                   st.one_of(cases.ff_mout_witnesses(), cases.ff_mout_cases()),
                   Constants(overrides={"B_phi": 0.9})),
    sides_mutation("companion gamma_M_out = 1 in ff (c)", C.ff_mout_sides,
                   st.one_of(cases.ff_mout_witnesses(), cases.ff_mout_cases()),
                   Constants(replace={("ff_lipschitz", "M_out"): COMPANION[("ff_lipschitz", "M_out")]})),
    network_mutation("gamma_A x0.9 (network)", "A", scale={("theorem", "gamma.A"): 0.9}),
    network_mutation("companion gamma_V (network)", "V", replace=_companion("gamma.V")),
    network_mutation("companion gamma_M_in (network)", "M_in", replace=_companion("gamma.M_in")),
    network_mutation("companion gamma_M_out (network)", "M_out", replace=_companion("gamma.M_out")),
    network_mutation("gamma^R_V x0.9 (residual network)", "V", scale={("theorem", "gamma.V"): 0.9},
                     residual=True),
    exact_mutation("Stechkin exponent 1/p -> 1.1/p", stechkin_sides, stechkin_cases(),
                   Constants(replace={("stechkin_tail", "statement_rhs"): STECHKIN_11}), rtol=1e-12),
    exact_mutation("Schatten truncation rank r_p - 1", schatten_truncation_sides, schatten_cover_cases(),
                   Constants(replace={("schatten_cover", "r_p"): R_P - 1}), rtol=1e-12),
    exact_mutation("volumetric 2c/delta -> c/delta", volumetric_sides, volumetric_cases(),
                   Constants(replace={("volumetric_cover", "covering"): VOLUMETRIC_K1}), rtol=1e-12),
    exact_mutation("Massart coefficient x0.6", massart_sides, finite_classes(),
                   Constants(scale={("massart_single_scale", "coefficient"): 0.6})),
    # Dudley's chaining bound is loose on finite classes small enough for an exact E max (the exact
    # ratio stays below ~0.5 except at alpha = 1/4), so only large shrinks are detectable by sampling.
    exact_mutation("Dudley alpha coefficient x0.4", dudley_sides, _dudley_cases(),
                   Constants(scale={("dudley", "alpha_coeff"): 0.4})),
    exact_mutation("Dudley integral coefficient x0.15", dudley_sides, _dudley_cases(),
                   Constants(scale={("dudley", "integral_coeff"): 0.15})),
    exact_mutation("ramp Lipschitz 1/rho x0.9", _ramp_sides,
                   st.tuples(st.floats(-2, 2), st.floats(-2, 2), st.floats(0.1, 3.0)),
                   Constants(scale={("ramp_loss_cover", "loss_scale"): 0.9})),
    Mutation("prior normalisation 2/3 -> 11/15", st.integers(0, 200),
             caught=lambda K: prior_partial_sum(K, PI_Z * sp.Rational(11, 10)) > 1,
             sound=lambda K: prior_partial_sum(K, PI_Z) <= 1, max_examples=100),
    Mutation("rounding ceil -> floor (beta^k >= x)",
             st.tuples(st.floats(1e-300, 1e300), st.sampled_from([sp.Integer(2), sp.Rational(5, 4)])),
             caught=_round_down_misused_as_up, sound=_round_up_sound, max_examples=50),
    Mutation("allocation_23 minimum x0.9", allocation_cases(),
             caught=lambda case: _attained(case) > allocation_closed(case, ALLOC_09) * (1 + 1e-6),
             sound=lambda case: _attained(case) <= allocation_closed(case, DERIVED) * (1 + 1e-9)),
    Mutation("balance_single_scale closed form x0.9", ss_cases(),
             caught=lambda case: ss_numerical_min(case, DERIVED, starts=1) > ss_closed(case, SS_09) * (1 + 1e-6),
             sound=lambda case: ss_numerical_min(case, DERIVED, starts=1) <= ss_closed(case, DERIVED) * (1 + 1e-9),
             max_examples=60),
]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_mutation_is_caught(mutation: Mutation):
    case = find(mutation.strategy, mutation.caught, settings=search_settings(mutation.max_examples))
    assert mutation.sound(case), f"the derived constant also fails on {case!r}: the lemma itself is wrong"

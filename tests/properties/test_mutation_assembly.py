"""Mutation tests for the lemmas whose constants reach the bound through the assembly.

Each test below *applies* one mutation to a lemma object of the registry (a shrunken constant, a
one-off error in a formula; :func:`mutated`), re-assembles the theorem, runs the catching test (or
its property search) against the mutant and asserts that it FAILS; then, with the registry
restored, that the same check passes (the lemma itself is sound on that case).

mutant                                                  -> catching test
------------------------------------------------------  -----------------------------------------------------------------
gelu_constants: L_phi x 0.999 (erf GELU)                -> properties/test_lipschitz.py::test_gelu_constants_on_a_dense_grid,
                                                           certified/test_hand_bound.py (via gamma)
gelu_tanh: L_phi 113/100 -> 1128/1000                   -> properties/test_lipschitz.py::test_gelu_tanh_constants_on_a_dense_grid
layer_lipschitz: L_l x 0.9                              -> properties/test_lipschitz.py::test_changing_one_matrix_moves_f_by_at_most_Bw_alpha_gamma
                                                           (network_sides; found on two-layer scalar witnesses)
layer_lipschitz: alpha_step x 0.9                       -> certified/test_bound.py::test_certified_bound_contains_the_mpmath_reference
residual_variant: layer^R x 0.9                         -> properties/test_lipschitz.py::test_residual_variant_changing_one_matrix
                                                           (network_sides; two-layer residual witnesses)
residual_variant: gamma^R_A x 0.9                       -> properties/test_lipschitz.py::test_residual_variant_changing_one_matrix
                                                           (scalar residual cases)
lowrank_cover: log(1 + 4c/eps) -> log(1 + 3c/eps)       -> properties/test_covering.py::test_lowrank_cover_radii_give_an_eps_cover,
                                                           ::test_lowrank_entropy_is_the_sum_of_two_volumetric_covers
rank_cover: K 4 -> 3 (entropy and closed form)          -> properties/test_covering.py::test_rank_cover_is_the_lowrank_cover_at_the_proven_rank,
                                                           certified/test_hand_bound.py
schatten_cover: factor 8 -> 7 (entropy and closed form) -> properties/test_covering.py::test_schatten_entropy_is_the_lowrank_cover_of_the_truncation_at_half_eps,
                                                           certified/test_hand_bound.py
network_cover: read-out N log(1 + 2B_w/eps) -> 1 B_w    -> certified/test_hand_bound.py
rademacher_generalization: factor 2 -> 9/5              -> certified/test_hand_bound.py
rademacher_generalization: factor 3 -> 27/10            -> certified/test_hand_bound.py
posthoc_union: log(2m+1) -> log(2m)                     -> certified/test_hand_bound.py
posthoc_union: log(r_max+1) -> log(r_max)               -> certified/test_hand_bound.py
posthoc_union: lambda(k) without its 3/2                -> certified/test_hand_bound.py,
                                                           properties/test_posthoc.py::test_lambda_is_minus_log_of_the_prior
main_theorem: factor 2 on min(SS, DD) -> 9/5            -> derivation/test_theorem.py::test_bound_is_built_from_the_main_theorem_and_rademacher_lemmas
main_theorem: confidence 3 -> 27/10                     -> derivation/test_theorem.py::test_bound_is_built_from_the_main_theorem_and_rademacher_lemmas
"""

from __future__ import annotations

import dataclasses
import sys
from contextlib import contextmanager
from types import MappingProxyType

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st

import specbound.certified.bound as certified_bound
import specbound.derivation.theorem as TH
from specbound.derivation import symbols as sym

from . import cases
from . import checks as C
from . import constants as PC
from . import reference as ref
from . import strategies as S
from . import test_covering, test_lipschitz, test_posthoc
from ..certified import test_bound, test_hand_bound
from ..derivation import test_theorem

ORIGINAL = TH.REGISTRY


def _clear_caches() -> None:
    TH._assemble.cache_clear()
    certified_bound._CACHE.clear()
    PC.theorem.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Every test here starts from theorems assembled from the original registry: a cache filled
    by an earlier test (of another module, under a patched constant) must not decide a verdict."""
    _clear_caches()
    yield
    _clear_caches()


@contextmanager
def mutated(lemma: str, constants: dict | None = None, covering=None, statement=None):
    """The registry with one lemma replaced by a mutant, in every loaded module that holds it."""
    old = ORIGINAL[lemma]
    changes = {}
    if constants:
        changes["constants"] = {**old.constants, **constants}
    if covering is not None:
        changes["covering"] = covering
    if statement is not None:
        changes["statement"] = statement
    registry = MappingProxyType(dict(ORIGINAL) | {lemma: dataclasses.replace(old, **changes)})
    holders = [m for m in list(sys.modules.values()) if getattr(m, "REGISTRY", None) is ORIGINAL]
    for mod in holders:
        mod.REGISTRY = registry
    _clear_caches()
    try:
        yield registry[lemma]
    finally:
        # also modules first imported during the mutation (they picked up the mutant)
        for mod in holders + [m for m in list(sys.modules.values())
                              if getattr(m, "REGISTRY", None) is registry]:
            mod.REGISTRY = ORIGINAL
        _clear_caches()


def fails(test, *args) -> bool:
    """True when the test function raises AssertionError."""
    try:
        test(*args)
    except AssertionError:
        return True
    return False


def search(strategy, predicate, max_examples: int = 300):
    return find(strategy, predicate, settings=settings(
        max_examples=max_examples, database=None, derandomize=True, deadline=None,
        phases=[Phase.generate], suppress_health_check=list(HealthCheck)))


def _lit(expr: sp.Expr, old, new) -> sp.Expr:
    out = expr.xreplace({sp.sympify(old): sp.sympify(new)})
    assert out != expr, f"mutation {old} -> {new} did not apply to {expr}"
    return out


HAND = test_hand_bound.test_the_certified_bound_equals_the_hand_computation_to_many_digits


def test_the_catching_tests_pass_unmutated():
    assert not fails(HAND)
    assert not fails(test_lipschitz.test_gelu_constants_on_a_dense_grid, ref.phi_gelu, ref.dphi_gelu)
    assert not fails(test_covering.test_rank_cover_is_the_lowrank_cover_at_the_proven_rank)
    assert not fails(test_covering.test_schatten_entropy_is_the_lowrank_cover_of_the_truncation_at_half_eps)
    assert not fails(test_theorem.test_bound_is_built_from_the_main_theorem_and_rademacher_lemmas)


# ---------------------------------------------------------------- gelu_constants


def test_gelu_L_phi_shrunk_is_caught():
    L = ORIGINAL["gelu_constants"].constants["L_phi"]
    with mutated("gelu_constants", constants={"L_phi": L * sp.Rational(999, 1000)}):
        assert fails(test_lipschitz.test_gelu_constants_on_a_dense_grid, ref.phi_gelu, ref.dphi_gelu)
        assert fails(HAND)


def test_gelu_tanh_113_100_shrunk_is_caught(monkeypatch):
    tanh = TH.lipschitz.gelu_tanh_constants
    assert tanh["L_phi"] == sp.Rational(113, 100)
    monkeypatch.setattr(TH.lipschitz, "gelu_tanh_constants", {**tanh, "L_phi": sp.Rational(1128, 1000)})
    _clear_caches()
    try:
        assert fails(test_lipschitz.test_gelu_tanh_constants_on_a_dense_grid)
    finally:
        monkeypatch.undo()
        _clear_caches()
    assert not fails(test_lipschitz.test_gelu_tanh_constants_on_a_dense_grid)


# ---------------------------------------------------------------- layer_lipschitz, residual_variant


def _signed(gen, lo, hi):
    return float(gen.choice((1.0, -1.0)) * gen.uniform(lo, hi))


def _layer(x, y, t, z, a, activation, residual):
    """A width-1 one-head layer with input x (T = 1) and internal values y (attention, projected),
    t = y M_in (pre-activation) and z (output), no projection active."""
    v = (y / x - 1.0) if residual else y / x
    m_in = t / y
    phi_t = float(ref.ACTIVATIONS[activation](np.array(t)))
    m_out = ((z - y) if residual else z) / phi_t
    s = lambda q: np.array([[q]])  # noqa: E731
    return ref.Layer([s(a)], [s(v)], s(m_in), s(m_out))


@st.composite
def two_layer_witnesses(draw, residual: bool = False):
    """Two width-1 layers: layer 0's M_out is perturbed where gamma_M_out = ||M_in|| is nearly attained
    (y ~ 1, t large so Phi(t) ~ 1), and layer 1 amplifies it by nearly its constant L_1 (t ~ sqrt 2,
    where the GELU slope is L_phi; scores ~ 0; for (R): same signs, so |1 + v| = 1 + |v|)."""
    gen = S.rng(draw(S.seeds))
    a0, a1 = _signed(gen, 1e-6, 1e-4), _signed(gen, 1e-6, 1e-4)
    x1 = gen.uniform(0.2, 0.4)
    lay0 = _layer(1.0, gen.uniform(0.97, 0.995), gen.uniform(2.5, 4.0), x1, a0, "gelu", residual)
    if residual:
        y1, z1 = gen.uniform(0.45, 0.6), gen.uniform(0.8, 0.95)
    else:
        y1, z1 = gen.uniform(0.1, 0.9), gen.uniform(0.1, 0.9)
    lay1 = _layer(x1, y1, gen.uniform(1.38, 1.45), z1, a1, "gelu", residual)
    net = ref.Net([lay0, lay1], np.array([1.0]), "gelu", residual)
    old = lay0.m_out
    return net, np.array([[1.0]]), 0, ("M_out", -1), old + _signed(gen, 1e-6, 1e-4)


def _network_mutation_is_caught(lemma, name, strategy, factor=sp.Rational(9, 10)):
    expr = ORIGINAL[lemma].constants[name]
    with mutated(lemma, constants={name: expr * factor}):
        case = search(strategy, lambda case: C.violated(C.network_sides, case, PC.Constants(case[0].activation)))
    # the derived constants hold on that very case
    assert not C.violated(C.network_sides, case, PC.Constants(case[0].activation), rtol=1e-9)
    return case


def test_layer_lipschitz_L_l_shrunk_is_caught():
    case = _network_mutation_is_caught("layer_lipschitz", "layer", two_layer_witnesses())
    assert len(case[0].layers) == 2 and case[2] == 0  # caught through alpha, not gamma
    # the catching property test accepts the unmutated case (and would reject the mutant's)
    C.holds(C.network_sides, case, PC.Constants("gelu"))


def test_layer_lipschitz_alpha_step_shrunk_is_caught():
    reference = test_bound.test_certified_bound_contains_the_mpmath_reference
    if fails(reference, "ones"):  # seen once in a full run: report instead of a misleading verdict
        pytest.fail("the catching test fails before any mutation (state left by an earlier test)")
    step = ORIGINAL["layer_lipschitz"].constants["alpha_step"]
    with mutated("layer_lipschitz", constants={"alpha_step": step * sp.Rational(9, 10)}):
        assert fails(test_bound.test_certified_bound_contains_the_mpmath_reference, "ones")
    assert not fails(test_bound.test_certified_bound_contains_the_mpmath_reference, "ones")


def test_residual_layer_shrunk_is_caught():
    case = _network_mutation_is_caught("residual_variant", "layer", two_layer_witnesses(residual=True))
    assert case[0].residual and case[2] == 0


def test_residual_gamma_A_shrunk_is_caught():
    strategy = cases.scalar_network_cases(residual=True, kinds=("A",), activations=("gelu",))
    case = _network_mutation_is_caught("residual_variant", "A", strategy)
    assert case[0].residual and case[3][0] == "A"


# ---------------------------------------------------------------- covers


def test_lowrank_K_4_to_3_is_caught():
    cov = ORIGINAL["lowrank_cover"].covering
    bad = _lit(cov, 4, 3)
    K_bad = test_covering.lowrank_K(bad)

    def caught(case):
        err, eps = test_covering.lowrank_sides(case, K_bad)
        return err > eps * (1 + 1e-6)

    case = search(st.one_of(test_covering.lowrank_witnesses(), test_covering.lowrank_cases()), caught)
    err, eps = test_covering.lowrank_sides(case)
    assert err <= eps * (1 + 1e-9) + 1e-12
    with mutated("lowrank_cover", covering=bad):
        assert fails(test_covering.test_lowrank_entropy_is_the_sum_of_two_volumetric_covers)


def test_rank_cover_K_shrunk_is_caught():
    lem = ORIGINAL["rank_cover"]
    with mutated("rank_cover", covering=_lit(lem.covering, 4, 3), constants={"K_rank": sp.Integer(3)}):
        assert fails(test_covering.test_rank_cover_is_the_lowrank_cover_at_the_proven_rank)
        assert fails(HAND)
    # each half alone is caught as well
    with mutated("rank_cover", constants={"K_rank": sp.Integer(3)}):
        assert fails(test_covering.test_rank_cover_is_the_lowrank_cover_at_the_proven_rank)
        assert fails(HAND)
    with mutated("rank_cover", covering=_lit(lem.covering, 4, 3)):
        # the hand network's p = 0 matrix is at its full rank cap, where the volumetric cover (sharpenings
        # S1) is the smaller entropy: the covering test catches the entropy, HAND the closed form above
        assert fails(test_covering.test_rank_cover_is_the_lowrank_cover_at_the_proven_rank)


def test_schatten_factor_8_shrunk_is_caught():
    lem = ORIGINAL["schatten_cover"]
    with mutated("schatten_cover", covering=_lit(lem.covering, 8, 7), constants={"K_schatten": sp.Integer(7)}):
        assert fails(test_covering.test_schatten_entropy_is_the_lowrank_cover_of_the_truncation_at_half_eps)
        assert fails(HAND)
    with mutated("schatten_cover", constants={"K_schatten": sp.Integer(7)}):
        assert fails(test_covering.test_schatten_entropy_is_the_lowrank_cover_of_the_truncation_at_half_eps)
        assert fails(HAND)


def test_network_cover_readout_term_shrunk_is_caught():
    lem = ORIGINAL["network_cover"]
    read = lem.constants["readout_entropy"]
    with mutated("network_cover", constants={"readout_entropy": _lit(read, 2, 1)}):
        assert fails(HAND)


# ---------------------------------------------------------------- Rademacher, post hoc, main theorem


def test_rademacher_factor_2_shrunk_is_caught():
    with mutated("rademacher_generalization", constants={"rademacher_coeff": sp.Rational(9, 5)}):
        assert fails(HAND)


def test_rademacher_factor_3_shrunk_is_caught():
    conf = ORIGINAL["rademacher_generalization"].constants["confidence"]
    with mutated("rademacher_generalization", constants={"confidence": conf * sp.Rational(9, 10)}):
        assert fails(HAND)


@pytest.mark.parametrize("name, old, new", [
    ("log_grid", 2 * sym.m_grid + 1, 2 * sym.m_grid),
    ("log_rank_prior", sym.r_max + 1, sym.r_max),
])
def test_posthoc_lambda_composition_shrunk_is_caught(name, old, new):
    expr = ORIGINAL["posthoc_union"].constants[name]
    with mutated("posthoc_union", constants={name: _lit(expr, old, new)}):
        assert fails(HAND)


def test_posthoc_lambda_k_shrunk_is_caught():
    lam = ORIGINAL["posthoc_union"].constants["lambda"]
    k = next(s for s in lam.free_symbols if s.name == "k")
    smaller = sp.log((sp.Abs(k) + 1) * (sp.Abs(k) + 2))  # the prior's 3/2 dropped
    assert sp.simplify(lam - smaller - sp.log(sp.Rational(3, 2))) == 0
    with mutated("posthoc_union", constants={"lambda": smaller}):
        assert fails(HAND)
        assert fails(test_posthoc.test_lambda_is_minus_log_of_the_prior)


@pytest.mark.parametrize("what", ["factor 2", "confidence 3"])
def test_main_theorem_constants_shrunk_are_caught(what):
    bound = ORIGINAL["main_theorem"].constants["bound"]
    if what == "factor 2":
        mm = next(a for a in sp.preorder_traversal(bound) if isinstance(a, sp.Min))
        bad = bound.xreplace({2 * mm: sp.Rational(9, 5) * mm})
    else:  # 3 sqrt((log(2/delta) + Lambda) / (2n)) -> 2.7 sqrt(...)
        tail = next(a for a in bound.args if a.has(sym.delta))
        bad = bound - tail + tail * sp.Rational(9, 10)
    assert bad != bound
    with mutated("main_theorem", constants={"bound": bad}):
        assert fails(test_theorem.test_bound_is_built_from_the_main_theorem_and_rademacher_lemmas)

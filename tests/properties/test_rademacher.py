"""Rademacher step (proofs_notes/theory.md sections 4-5 and 10; register 16-18) against exact expectations.

For a finite set of vectors in [0,1]^n with n <= 10 the empirical Rademacher complexity is an
average over all 2^n sign vectors, computed exactly (:func:`reference.rademacher_exact`).  Covers
are greedy and internal, so their sizes are >= the covering numbers: a valid (if weaker) test.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import sympy as sp
from hypothesis import given, target
from hypothesis import strategies as st

from . import reference as ref
from . import strategies as S
from .constants import DERIVED, REGISTRY
from specbound.derivation import symbols as sym

# ---------------------------------------------------------------- ramp_loss_cover


@given(st.floats(-20, 20), st.floats(-20, 20), st.floats(1e-3, 10.0))
def test_ramp_loss_is_lipschitz_with_the_derived_scale(a, b, rho):
    lhs = abs(ref.ramp(a, rho) - ref.ramp(b, rho))
    rhs = DERIVED("ramp_loss_cover", "loss_scale", epsilon=abs(a - b), rho=rho)
    assert lhs <= rhs * (1 + 1e-12) + 1e-15


@given(st.floats(-20, 20), st.floats(1e-3, 10.0), st.floats(1.0, 10.0))
def test_ramp_loss_dominates_the_01_loss_and_grows_with_rho(u, rho, factor):
    assert (1.0 if u <= 0 else 0.0) <= ref.ramp(u, rho) <= 1.0
    assert ref.ramp(u, rho) <= ref.ramp(u, rho * factor)


def test_derivation_ramp_is_the_reference_ramp():
    ramp = REGISTRY["ramp_loss_cover"].constants["ramp"]
    a = next(s for s in ramp.free_symbols if s.name == "a")
    for u, rho in [(-1.0, 0.5), (0.2, 0.5), (0.7, 0.5), (0.25, 1.0)]:
        assert float(ramp.subs({a: u, sym.rho: rho})) == ref.ramp(u, rho)


# ---------------------------------------------------------------- massart_single_scale


@st.composite
def finite_classes(draw, n_max: int = 10, size_max: int = 12):
    """(vectors, u): a finite class in [0,1]^n, binary or continuous, and a cover scale u."""
    n = draw(st.integers(1, n_max))
    size = draw(st.integers(1, size_max))
    gen = S.rng(draw(S.seeds))
    kind = draw(st.sampled_from(("binary", "uniform", "clustered", "cube")))
    if kind == "binary":
        v = (gen.uniform(size=(size, n)) < 0.5).astype(float)
    elif kind == "uniform":
        v = gen.uniform(size=(size, n))
    elif kind == "clustered":
        v = np.clip(gen.uniform(size=(1, n)) + 0.05 * gen.standard_normal((size, n)), 0, 1)
    else:  # the binary cube itself (up to 2^n <= 1024 points): Massart's sharpest finite case
        n = min(n, 6)
        v = np.array(np.meshgrid(*[[0.0, 1.0]] * n)).reshape(n, -1).T
    u = draw(st.sampled_from((0.0, 0.0, 0.05, 0.2, 0.5)))
    return np.unique(v, axis=0), u


def linf_cover_size(vectors: np.ndarray, u: float) -> int:
    """Greedy internal u-cover in L_inf(S) (centres are class members, so lie in [0,1]^n)."""
    centres: list[np.ndarray] = []
    for v in vectors:
        if not any(np.max(np.abs(v - c)) <= u for c in centres):
            centres.append(v)
    return len(centres)


def massart_form_matches_statement():
    """The statement is u + sqrt(coefficient * log N): the form the variants share."""
    lem = REGISTRY["massart_single_scale"]
    coeff = lem.constants["coefficient"]
    return sp.simplify(lem.statement.rhs - (sym.u + sp.sqrt(coeff * sp.log(sym.card)))) == 0


def test_massart_statement_has_the_shared_form():
    assert massart_form_matches_statement()


def massart_sides(case, K, variant: str = "coefficient"):
    """R_hat(G) <= u + sqrt(c_M log N(G, u, L_inf)) with c_M the derived coefficient."""
    vectors, u = case
    n = vectors.shape[1]
    lhs = ref.rademacher_exact(vectors)
    coeff = K("massart_single_scale", variant, n=n)
    size = linf_cover_size(vectors, u)
    return lhs, u + mpmath.sqrt(coeff * mpmath.log(size))


@given(finite_classes())
def test_massart_centred_against_exact_rademacher(case):
    lhs, rhs = massart_sides(case, DERIVED, "coefficient")
    assert lhs <= rhs * (1 + 1e-12) + 1e-15
    target(float(lhs / rhs) if rhs > 0 else 0.0)


@given(finite_classes())
def test_massart_uncentred_against_exact_rademacher(case):
    lhs, rhs = massart_sides(case, DERIVED, "coefficient_uncentred")
    assert lhs <= rhs * (1 + 1e-12) + 1e-15


# ---------------------------------------------------------------- dudley


def dudley_form(K, upper_name: str):
    """(coefficient of alpha, coefficient of the integral / sqrt(n) at n=1, upper limit)."""
    c = REGISTRY["dudley"].constants
    rhs = REGISTRY["dudley"].statement.rhs
    integral = next(iter(rhs.atoms(sp.Integral)))
    _, lower, upper = integral.limits[0]
    # the statement is alpha_coeff * alpha + integral_coeff / sqrt(n) * Integral(...)
    assert sp.simplify(rhs - (c["alpha_coeff"] * lower + c["integral_coeff"] / sp.sqrt(sym.n) * integral)) == 0
    return float(K("dudley", "alpha_coeff")), float(K("dudley", "integral_coeff")), float(K("dudley", upper_name))


def dudley_sides(case, K, upper_name: str = "upper"):
    vectors, alpha = case
    n = vectors.shape[1]
    lhs = ref.rademacher_exact(vectors)
    a_coeff, i_coeff, upper = dudley_form(K, upper_name)
    cuts, sizes = ref.greedy_cover_sizes(vectors, lambda d: np.linalg.norm(d) / math.sqrt(n))
    integral = ref.integral_sqrt_log_step(cuts, sizes, alpha, upper)
    return lhs, a_coeff * alpha + i_coeff / math.sqrt(n) * integral


@given(finite_classes(size_max=10), st.floats(1e-3, 0.25))
def test_dudley_against_exact_rademacher(case, alpha):
    vectors, _ = case
    for upper in ("upper", "upper_uncentred"):
        lhs, rhs = dudley_sides((vectors, alpha), DERIVED, upper)
        assert lhs <= rhs * (1 + 1e-12) + 1e-15

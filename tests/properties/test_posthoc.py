"""Post hoc union bound and the closed forms (proofs_notes/theory.md sections 6-7; register 20-22).

The prior is summed in exact rationals, the rounding rule is evaluated exactly by SymPy, and the
closed forms are compared with direct numerical minimisation of the objectives they bound.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings, target
from hypothesis import strategies as st
from scipy.optimize import minimize

from . import strategies as S
from .constants import DERIVED, REGISTRY
from specbound.derivation import symbols as sym

# ---------------------------------------------------------------- posthoc_union: the prior


def prior_partial_sum(K: int, pi_z: sp.Expr) -> Fraction:
    """sum_{|k| <= K} pi_Z(k), exactly."""
    total = Fraction(0)
    for i in range(-K, K + 1):
        value = pi_z.xreplace({sym.k: sp.Integer(i)})  # a SymPy Rational: exact
        assert value.is_Rational, value
        total += Fraction(int(value.p), int(value.q))
    return total


@given(st.integers(0, 200))
def test_prior_partial_sums_never_exceed_one(K):
    total = prior_partial_sum(K, REGISTRY["posthoc_union"].constants["pi_Z"])
    assert total <= 1
    # and they approach 1: the telescoping tail is 4 / (3 (K + 2))
    assert total == 1 - Fraction(4, 3 * (K + 2))


@given(st.integers(-10**6, 10**6))
def test_lambda_is_minus_log_of_the_prior(k):
    c = REGISTRY["posthoc_union"].constants
    with mpmath.workdps(30):
        lam = DERIVED.evaluate(c["lambda"], k=k)
        pi = DERIVED.evaluate(c["pi_Z"], k=k)
        assert abs(lam + mpmath.log(pi)) <= mpmath.mpf(10) ** -25 * lam


# ---------------------------------------------------------------- posthoc_union: rounding onto beta^k

BASES = [sp.Integer(2), sp.Rational(5, 4), sp.Rational(9, 8), sp.Rational(13, 12), sp.Rational(3, 2)]


def rounded_exponent(x: sp.Rational, beta: sp.Rational, which: str = "round_up") -> int:
    k = REGISTRY["posthoc_union"].constants[which].subs({sym.x: x, sym.beta: beta})
    assert k.is_Integer, k
    return int(k)


@settings(max_examples=min(settings().max_examples, 60))  # exact SymPy logs: ~30 ms each
@given(
    st.one_of(
        st.floats(min_value=5e-324, max_value=1e300, allow_subnormal=True),
        st.sampled_from([5e-324, 2.0**-1074 * 3, 2.0**-1022, 1.0, 2.0**-1023, 1e-310]),
    ),
    st.sampled_from(BASES),
)
def test_round_up_gives_a_grid_radius_at_least_x(x, beta):
    xq = sp.Rational(x)  # the exact binary64 value
    k = rounded_exponent(xq, beta)
    assert beta**k >= xq
    assert beta ** (k - 1) < xq  # and the smallest such grid point


@given(st.integers(-60, 60), st.sampled_from(BASES))
def test_round_up_at_exact_powers(j, beta):
    assert rounded_exponent(beta**j, beta) == j  # x = beta^j is its own radius, not beta^(j+1)
    assert rounded_exponent(beta**j, beta, "round_down") == j


@given(st.floats(min_value=1e-300, max_value=1e300), st.sampled_from(BASES))
def test_round_down_gives_a_margin_at_most_rho(rho, beta):
    k = rounded_exponent(sp.Rational(rho), beta, "round_down")
    assert beta**k <= sp.Rational(rho) < beta ** (k + 1)


# ---------------------------------------------------------------- allocation_23


@st.composite
def allocation_cases(draw):
    J = draw(st.integers(1, 5))
    gen = S.rng(draw(S.seeds))
    b = 10.0 ** gen.uniform(-3, 3, J)
    kappa = 10.0 ** gen.uniform(-2, 2, J)
    eps = 10.0 ** draw(st.floats(-2, 1))
    return b, kappa, eps


def allocation_closed(case, K):
    b, kappa, eps = case
    summand = sum(K("allocation_23", "summand", b_j=bj, kappa_j=kj) for bj, kj in zip(b, kappa))
    return float(K("allocation_23", "minimum", **{"Sigma_j_(kappa^2 b)^(1/3)": summand, "epsilon": eps}))


def allocation_objective(weights, case):
    """sum_j b_j / eps_j^2 with eps_j = eps w_j / kappa_j on the simplex (sum kappa_j eps_j = eps)."""
    b, kappa, eps = case
    e = eps * weights / kappa
    return float(np.sum(b / e**2))


def allocation_numerical_min(case) -> float:
    b, kappa, eps = case

    def obj(z):
        with np.errstate(all="ignore"):  # far-off trial points underflow a weight: treat as +huge
            w = np.exp(z - z.max())
            value = allocation_objective(w / w.sum(), case)
        return value if np.isfinite(value) else 1e300

    best = min(
        minimize(obj, z0, method="BFGS", options={"gtol": 1e-12, "maxiter": 2000}).fun
        for z0 in (np.zeros(len(b)), np.log(np.maximum(b, 1e-300)) / 3)
    )
    return best


@given(allocation_cases())
def test_allocation_23_closed_form_is_attained_and_minimal(case):
    b, kappa, eps = case
    closed = allocation_closed(case, DERIVED)
    # attained at the derivation's minimiser direction eps_j ~ (b_j / kappa_j)^(1/3)
    direction = np.array([float(DERIVED("allocation_23", "minimiser_proportional_to", b_j=bj, kappa_j=kj))
                          for bj, kj in zip(b, kappa)])
    w = kappa * direction
    attained = allocation_objective(w / w.sum(), case)
    assert attained == pytest.approx(closed, rel=1e-10)
    # and no feasible point found numerically does better
    assert allocation_numerical_min(case) >= closed * (1 - 1e-9)


# ---------------------------------------------------------------- balance_single_scale


@st.composite
def ss_cases(draw):
    """A tiny theorem instance: 1..3 matrices (p on P_m, incl. p = 0) plus the read-out."""
    J = draw(st.integers(1, 3))
    m = draw(st.integers(1, 4))
    mats = []
    for _ in range(J):
        p = float(draw(st.sampled_from(S.grid(m))))
        r_max = draw(st.integers(1, 8))
        mats.append(dict(
            p=p,
            s=float(draw(st.integers(0, r_max))) if p == 0 else 10.0 ** draw(st.floats(-1, 2)),
            c=10.0 ** draw(st.floats(-1, 1)),
            r_max=r_max,
            d=draw(st.integers(2, 32)),
            kappa=10.0 ** draw(st.floats(-1, 2)),
        ))
    n = int(10.0 ** draw(st.floats(1, 6)))
    readout = dict(N=draw(st.integers(1, 16)), B_w=10.0 ** draw(st.floats(-1, 1)), rho=10.0 ** draw(st.floats(-2, 0)))
    return mats, readout, n


def ss_closed(case, K) -> float:
    mats, readout, n = case
    terms = []
    for mtx in mats:
        vals = {k_: v for k_, v in mtx.items() if k_ != "p"} | {"n": n}
        if mtx["p"] == 0:
            if mtx["s"] == 0:  # rank 0: H_j = 0, the term is u_j -> 0 (floored at 1/n)
                terms.append(1.0 / n)
                continue
            terms.append(K.assembled("ss_matrix_term_rank", **vals))
        else:
            terms.append(K.assembled("ss_matrix_term", p=mtx["p"], **vals))
    return float(K.assembled("ss_closed", T_sum=mpmath.fsum(terms), n=n, **readout))


def ss_objective_fn(case, K):
    """log-u -> the exact single-scale objective, built from the derivation's fields (float64)."""
    mats, readout, n = case
    th = K.theorem()
    # every matrix m x n_c with m + n_c = d (the volumetric cover of sharpenings.md S1 needs the shape)
    shape = {sym.m_rows: sp.floor(sym.d / 2), sym.n_cols: sym.d - sp.floor(sym.d / 2)}
    ent = sp.lambdify([sym.u, sym.s, sym.c, sym.p, sym.r_max, sym.d, sym.kappa],
                      th.ss_matrix_entropy.subs(shape), "mpmath")
    ent0 = sp.lambdify([sym.u, sym.s, sym.c, sym.r_max, sym.d, sym.kappa], th.ss_matrix_entropy_rank.subs(shape),
                       "mpmath")
    ent_w = sp.lambdify([sym.u_w, sym.N, sym.B_w, sym.rho], th.ss_readout_entropy, "mpmath")
    obj = sp.lambdify([sym.U_total, sym.H_total, sym.n], th.ss_objective, "mpmath")

    def f(logu):
        u = np.exp(logu)
        H = []
        for uj, mtx in zip(u[:-1], mats):
            if mtx["p"] == 0:
                H.append(0 if mtx["s"] == 0 else ent0(uj, mtx["s"], mtx["c"], mtx["r_max"], mtx["d"], mtx["kappa"]))
            else:
                H.append(ent(uj, mtx["s"], mtx["c"], mtx["p"], mtx["r_max"], mtx["d"], mtx["kappa"]))
        H.append(ent_w(u[-1], readout["N"], readout["B_w"], readout["rho"]))
        return float(obj(float(np.sum(u)), mpmath.fsum(H), n))

    return f


def ss_numerical_min(case, K, starts: int = 3) -> float:
    mats, readout, n = case
    f = ss_objective_fn(case, K)
    gen = np.random.default_rng(0)
    x0s = [np.full(len(mats) + 1, np.log(1.0 / n))] + [
        gen.uniform(np.log(1.0 / n) - 2, 0, len(mats) + 1) for _ in range(starts - 1)
    ]
    return min(
        minimize(f, x0, method="Nelder-Mead", options={"maxiter": 300 * (len(mats) + 1), "xatol": 1e-6}).fun
        for x0 in x0s
    )


@settings(max_examples=min(settings().max_examples, 15))  # each case runs Nelder-Mead on a ceil objective
@given(ss_cases())
def test_balance_closed_form_dominates_numerically_minimised_single_scale(case):
    closed = ss_closed(case, DERIVED)
    found = ss_numerical_min(case, DERIVED)
    assert found <= closed * (1 + 1e-9)
    target(found / closed)


# ---------------------------------------------------------------- the certified rounding (code under test)

FRACTION_BASES = [Fraction(2), Fraction(5, 4), Fraction(9, 8), Fraction(13, 12), Fraction(3, 2)]
positive_floats = st.one_of(
    st.floats(min_value=5e-324, max_value=1e300, allow_subnormal=True),
    st.sampled_from([5e-324, 2.0**-1074 * 3, 2.0**-1022, 2.0**-1023, 1e-310, 1.0, 2.0**1000]),
)


@given(positive_floats, st.sampled_from(FRACTION_BASES))
def test_certified_index_up_is_the_smallest_dominating_grid_point(x, beta):
    radii = pytest.importorskip("specbound.certified.radii")
    flint = pytest.importorskip("flint")
    k = radii.index_up(flint.arb(x), beta)  # a point ball: exact binary64 value
    xq = Fraction(x)
    assert beta**k >= xq > beta ** (k - 1)


@given(st.integers(-80, 80), st.sampled_from([Fraction(2), Fraction(5, 4), Fraction(3, 2)]))
def test_certified_index_up_and_down_at_exact_powers(j, beta):
    radii = pytest.importorskip("specbound.certified.radii")
    flint = pytest.importorskip("flint")
    q = beta**j
    ball = flint.arb(flint.fmpq(q.numerator, q.denominator))
    if ball.is_exact():  # dyadic powers are exact points: the index is j itself
        assert radii.index_up(ball, beta) == j
        assert radii.index_down(ball, beta) == j
    else:  # a non-dyadic power is enclosed by a ball around it: still dominated / below
        assert beta ** radii.index_up(ball, beta) >= q
        assert beta ** radii.index_down(ball, beta) <= q


@given(positive_floats, st.floats(0, 1e-3), st.sampled_from(FRACTION_BASES))
def test_certified_index_up_dominates_every_point_of_a_ball(mid, rel, beta):
    radii = pytest.importorskip("specbound.certified.radii")
    flint = pytest.importorskip("flint")
    rad = mid * rel
    k = radii.index_up(flint.arb(mid, rad), beta)
    assert beta**k >= Fraction(mid) + Fraction(rad)


@given(positive_floats, st.sampled_from(FRACTION_BASES))
def test_certified_index_down_is_the_largest_grid_point_below(x, beta):
    radii = pytest.importorskip("specbound.certified.radii")
    flint = pytest.importorskip("flint")
    k = radii.index_down(flint.arb(x), beta)
    assert beta**k <= Fraction(x) < beta ** (k + 1)

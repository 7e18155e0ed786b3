"""The certified binomial inversion: never below the true BinInv, close to it, in log space.

References are 60-digit mpmath roots written here from the definitions in
proofs_notes/binomial_inversion.md (no import of the code under test): the root of
``log P(Bin(n, p) <= k) = -C`` (the binomial sum in log space, exact up to 60 digits) and the root of
``kl(k/n || p) = C/n``.  Mutants of the implementation (rounded down, certificate direction flipped,
lower end of C, the remainder dropped, nearest rounding of the closed form) must fail the same checks.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb
from hypothesis import given, settings
from hypothesis import strategies as st

from specbound.certified import binomial
from specbound.certified.binomial import bininv_upper, invert, kl_inv_upper, log_cdf, tail_inv_upper

DPS = 60


# ------------------------------------------------------------------------------- references (mpmath)


@functools.lru_cache(maxsize=None)
def _ref_log_binomials(n: int, k: int) -> tuple:
    return tuple(mpmath.log(mpmath.binomial(n, i)) for i in range(k + 1))


def _ref_log_cdf(n: int, k: int, p) -> mpmath.mpf:
    """log sum_{i<=k} binom(n,i) p^i (1-p)^(n-i), every one of the k + 1 terms summed in log space
    (mpmath has no exponent limit)."""
    p = mpmath.mpf(p)
    lp, lq = mpmath.log(p), mpmath.log1p(-p)
    logs = [lb + i * lp + (n - i) * lq for i, lb in enumerate(_ref_log_binomials(n, k))]
    top = max(logs)
    return top + mpmath.log(mpmath.fsum(mpmath.exp(v - top) for v in logs))


def _bracketed_root(g, dg, lo, hi, x, rel=mpmath.mpf(10) ** -45):
    """The root of the decreasing ``g`` in [lo, hi] (g(lo) > 0 >= g(hi)) from the guess ``x``: Newton
    steps in log p, a bisection in log p whenever a step leaves the bracket; the final bracket (a
    relative width of 1e-45) is what the answer rests on, not the steps."""
    lo, hi = mpmath.mpf(lo), mpmath.mpf(hi)
    for _ in range(600):
        gx, slope = g(x), x * dg(x)  # slope: d g / d log p
        if gx > 0:
            lo = x
        else:
            hi = x
        if hi / lo - 1 < rel:
            return hi
        step = x * mpmath.exp(-gx / slope) if slope < 0 else hi
        x = step if lo < step < hi else mpmath.sqrt(lo * hi)
    raise AssertionError("reference root did not converge")


@functools.lru_cache(maxsize=None)
def ref_bininv(n: int, k: int, C) -> mpmath.mpf:
    """BinInv(n, k, e^-C) to ~45 digits (k < n); k = 0 by its closed form.  Bracketed between a tiny p
    and the kl root (note (d2): g <= 0 there); d/dp P(Bin(n,p) <= k) = -n binom(n-1,k) p^k (1-p)^(n-1-k)
    only guides the steps."""
    with mpmath.workdps(DPS):
        C = mpmath.mpf(C)
        if k == 0:
            return -mpmath.expm1(-C / n)
        log_dens = mpmath.log(n) + mpmath.log(mpmath.binomial(n - 1, k))

        def g(p):
            return _ref_log_cdf(n, k, p) + C

        def dg(p):
            return -mpmath.exp(log_dens + k * mpmath.log(p) + (n - 1 - k) * mpmath.log1p(-p) - _ref_log_cdf(n, k, p))

        hi = min(ref_klinv(n, k, C) * (1 + mpmath.mpf(10) ** -50), 1 - mpmath.mpf(10) ** -(DPS - 5))
        return _bracketed_root(g, dg, mpmath.mpf(10) ** -(DPS - 5), hi, hi)


@functools.lru_cache(maxsize=None)
def ref_klinv(n: int, k: int, C) -> mpmath.mpf:
    """klInv(k/n, C/n) to ~60 digits (k < n)."""
    with mpmath.workdps(DPS):
        q, c = mpmath.mpf(k) / n, mpmath.mpf(C) / n

        def f(p):
            kl = (q * mpmath.log(q / p) if q else 0) + (1 - q) * mpmath.log((1 - q) / (1 - p))
            return c - kl

        lo, hi = q, 1 - mpmath.mpf(10) ** -(DPS - 5)
        for _ in range(200):  # bisection: f(lo) > 0 >= f(hi)
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
        return hi


def _value(x: arb) -> mpmath.mpf:
    assert x.rad() == 0, "a bound is an exact point"
    man, exp = x.mid().man_exp()
    with mpmath.workdps(DPS):
        return mpmath.mpf(int(man)) * mpmath.mpf(2) ** int(exp)


def _contains(ball: arb, ref) -> bool:
    """The ball's endpoints, read exactly, enclose the mpmath number ``ref``."""
    return _value(ball.lower()) <= ref <= _value(ball.upper())


def _rel_gap(ours: arb, ref) -> float:
    with mpmath.workdps(DPS):
        return float((_value(ours) - ref) / ref)


# ------------------------------------------------------------------------------- fixed and random cases

#: (n, k, C): moderate n, the embedded default's regime (n = 1e6, C ~ 1e4), tiny and large C/n
CASES = [
    (1, 0, 0.5), (1, 0, 40.0), (2, 1, 1.0), (10, 3, 2.0), (100, 5, 3.0), (100, 50, 0.1), (1000, 10, 20.0),
    (300, 299, 5.0), (10**4, 37, 1e-3), (10**6, 100, 50.0), (10**6, 1000, 1e4), (10**6, 0, 1e4),
    (10**9, 0, 1e-3), (10**9, 1, 1e-3), (10**9, 10, 1e-3), (10**9, 300, 1e4), (10**9, 200, 1e12),
]


@pytest.mark.parametrize("n,k,C", CASES)
def test_bininv_is_never_below_the_60_digit_root_and_within_1e_9_of_it(n, k, C):
    ref = ref_bininv(n, k, C)
    ours = bininv_upper(n, k, C)
    assert _value(ours) >= ref, (n, k, C, ours, ref)
    assert _rel_gap(ours, ref) <= 1e-9


@pytest.mark.parametrize("n,k,C", [c for c in CASES if c[1] > 0])
def test_kl_form_is_never_below_the_kl_root_nor_below_bininv(n, k, C):
    ref = ref_klinv(n, k, C)
    ours = kl_inv_upper(n, k, C)
    assert _value(ours) >= ref
    assert _rel_gap(ours, ref) <= 1e-9 or _value(ours) == 1
    assert ref >= ref_bininv(n, k, C)  # note (d2): BinInv <= klInv


@settings(max_examples=15)
@given(n=st.integers(1, 3000), k_frac=st.floats(0, 1), log_c=st.floats(-12, 3), data=st.data())
def test_random_cases_are_never_below_and_tight(n, k_frac, log_c, data):
    k = min(n, int(k_frac * n), 60)  # the reference sums k + 1 terms
    C = n * 10.0**log_c  # C/n from 1e-12 to 1e3
    ours = bininv_upper(n, k, C)
    if k == n:
        assert ours == 1
        return
    ref = ref_bininv(n, k, C)
    assert _value(ours) >= ref
    assert _rel_gap(ours, ref) <= 1e-9 or _value(ours) == 1


@pytest.mark.parametrize("n", [1, 7, 10**3, 10**9])
@pytest.mark.parametrize("c", [1e-12, 1e-6, 1e-2, 1.0, 1e3])
def test_edges_k_zero_and_k_n_for_every_n_and_c(n, c):
    C = n * c
    zero = bininv_upper(n, 0, C)
    with mpmath.workdps(DPS):
        exact = -mpmath.expm1(-mpmath.mpf(C) / n)
    assert _value(zero) >= exact and (_value(zero) - exact) / exact < 1e-15  # the closed form, rounded up
    assert bininv_upper(n, n, C) == 1
    assert invert(n, 0, C).method == "closed"


def test_n_one_is_the_closed_form_one_minus_d():
    d = Fraction(1, 20)
    ours = bininv_upper(1, 0, float(math.log(20)))
    assert _value(ours) >= 1 - mpmath.mpf(d.numerator) / d.denominator - mpmath.mpf(10) ** -15
    assert bininv_upper(1, 1, 3.0) == 1


def test_zero_mass_gives_zero_below_n():
    assert bininv_upper(50, 7, 0) == 0 and bininv_upper(50, 0, 0) == 0


def test_monotone_in_the_count_and_in_the_mass():
    values = [bininv_upper(500, k, 12.5) for k in range(0, 40, 3)]
    assert all(a <= b for a, b in zip(values, values[1:]))
    by_c = [bininv_upper(500, 9, c) for c in (0.5, 2.0, 8.0, 32.0, 128.0)]
    assert all(a <= b for a, b in zip(by_c, by_c[1:]))


def test_a_ball_of_c_is_taken_at_its_upper_end():
    wide = arb(10, 2)  # [8, 12]
    assert bininv_upper(1000, 20, wide) >= bininv_upper(1000, 20, 12.0)
    assert _value(bininv_upper(1000, 20, wide)) >= ref_bininv(1000, 20, 12)


@pytest.mark.parametrize("bad", [(0, 0, 1.0), (5, 6, 1.0), (5, -1, 1.0)])
def test_bad_counts_are_refused(bad):
    with pytest.raises(ValueError):
        bininv_upper(*bad)


@pytest.mark.parametrize("C", [-1.0, float("inf"), float("nan"), arb(0, 1)])
def test_bad_masses_are_refused(C):
    with pytest.raises(ValueError):
        bininv_upper(10, 2, C)


def test_non_integer_counts_are_refused():
    with pytest.raises(TypeError):
        bininv_upper(10.0, 2, 1.0)
    with pytest.raises(TypeError):
        bininv_upper(10, True, 1.0)


# ------------------------------------------------------------------------------- the CDF enclosure


@pytest.mark.parametrize("n,k,p", [(100, 5, 0.1), (1000, 10, 0.03), (10**6, 1000, 0.0135), (10**9, 10, 3.5e-9),
                                   (50, 20, 0.2), (10**6, 100, 0.9)])
@pytest.mark.parametrize("max_terms", [binomial.MAX_TERMS, 3])
def test_log_cdf_encloses_the_60_digit_sum_even_when_truncated_early(n, k, p, max_terms):
    ball = log_cdf(n, k, p, max_terms=max_terms)
    with mpmath.workdps(DPS):
        ref = _ref_log_cdf(n, k, mpmath.mpf(p))
        assert _contains(ball, ref), (ball, ref)
    if max_terms == binomial.MAX_TERMS:
        assert ball.rad() < 1e-9 * max(1.0, abs(float(ref)))


def test_log_cdf_reaches_below_the_binary64_range():
    ball = log_cdf(10**6, 1000, 0.5)  # about -6.7e4 nats: e^x underflows binary64
    assert ball.upper() < -700 and ball.is_finite()


# ------------------------------------------------------------------------------- mutants must fail


def _violations(fn, cases) -> int:
    return sum(1 for n, k, C in cases if _value(fn(n, k, C)) < ref_bininv(n, k, C))


MUTANT_CASES = [(100, 5, 3.0), (1000, 10, 20.0), (10**6, 1000, 1e4), (10**9, 10, 1e-3), (10**6, 0, 1e4),
                (1, 0, 0.5), (10**4, 0, 7.0), (10**9, 0, 1e-3)]


def test_the_reference_check_passes_on_the_implementation():
    assert _violations(bininv_upper, MUTANT_CASES) == 0


def test_mutant_rounded_down_fails(monkeypatch):
    def bisect_down(holds, lo, hi):
        while hi - lo > binomial.SEARCH_REL * hi:
            mid = lo + (hi - lo) / 2
            lo, hi = (lo, mid) if holds(mid) else (mid, hi)
        return lo  # the mutant returns the uncertified end of the bracket

    monkeypatch.setattr(binomial, "_bisect", bisect_down)
    assert _violations(bininv_upper, MUTANT_CASES) > 0


def test_mutant_kl_root_on_the_wrong_side_fails(monkeypatch):
    # kl(q || .) is decreasing below q: without "p >= k/n" a search from 0 certifies the lower root
    monkeypatch.setattr(binomial, "_q_below", lambda n, k: 0.0)
    monkeypatch.setattr(binomial, "_kl_certifies", lambda q, p, c: p >= 1.0 or bool(binomial.kl(q, arb(p)) >= c))
    assert _violations(kl_inv_upper, [c for c in MUTANT_CASES if c[1] > 0]) > 0


def test_mutant_tail_certificate_direction_flipped_fails(monkeypatch):
    monkeypatch.setattr(binomial, "_tail_certifies",
                        lambda n, k, p, c: p >= 1.0 or bool(log_cdf(n, k, p) >= -c))
    assert _violations(lambda n, k, C: tail_inv_upper(n, k, C), [c for c in MUTANT_CASES if c[1] > 0]) > 0


def test_mutant_lower_end_of_the_mass_fails(monkeypatch):
    monkeypatch.setattr(binomial, "mass_upper", lambda C: arb(C).lower())
    wide = [(n, k, arb(C, C / 4)) for n, k, C in MUTANT_CASES if C > 0.1]
    count = sum(1 for n, k, C in wide if _value(bininv_upper(n, k, C)) < ref_bininv(n, k, float(C.upper().mid())))
    assert count > 0


def test_mutant_remainder_dropped_fails(monkeypatch):
    real = binomial._cdf_sum
    monkeypatch.setattr(binomial, "_cdf_sum", lambda n, k, p, m: (lambda lo_hi: (lo_hi[0], lo_hi[0]))(real(n, k, p, m)))
    ball = log_cdf(1000, 10, 0.03, max_terms=3)
    with mpmath.workdps(DPS):
        ref = _ref_log_cdf(1000, 10, mpmath.mpf(0.03))
        assert not _contains(ball, ref)


def test_mutant_closed_form_rounded_to_nearest_fails(monkeypatch):
    monkeypatch.setattr(binomial, "_closed_k0", lambda n, c: arb(float(-(-c / n).expm1().mid())))
    cases = [(n, 0, C) for n in (3, 7, 1000, 10**6) for C in (0.3, 1.1, 2.9, 7.7, 13.0, 55.5)]
    assert _violations(bininv_upper, cases) > 0


# ------------------------------------------------------------------------------- Monte Carlo: the Occam union


def _occam_failure_rate(bound_of, errors, n, draws, seed) -> float:
    """Fraction of simulated samples on which some classifier's true error exceeds its bound.

    Classifier j errs exactly on X < errors[j] (X uniform on [0, 1]); its count on a sample of size n is
    binomial, and the counts of the nested classifiers are dependent, as in a real sample."""
    rng = np.random.default_rng(seed)
    x = rng.random((draws, n))
    counts = (x[:, :, None] < np.asarray(errors)[None, None, :]).sum(axis=1)  # (draws, M)
    table = {k: float(bound_of(k).mid()) for k in np.unique(counts).tolist()}
    bounds = np.vectorize(table.__getitem__)(counts)
    return float(np.mean((np.asarray(errors)[None, :] > bounds).any(axis=1)))


ERRORS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.45)
DELTA = 0.2
N_MC, DRAWS = 60, 4000


def test_occam_bound_holds_on_at_least_one_minus_delta_of_simulated_samples():
    # union over M classifiers with the uniform prior: C = log M + log(1/delta)
    C = math.log(len(ERRORS)) + math.log(1 / DELTA)
    rate = _occam_failure_rate(lambda k: bininv_upper(N_MC, k, C), ERRORS, N_MC, DRAWS, seed=1)
    slack = 3 * math.sqrt(DELTA * (1 - DELTA) / DRAWS)
    assert rate <= DELTA + slack, rate


def test_occam_monte_carlo_can_fail_without_the_union_price():
    # the same check at the level of one classifier (no log M for the union over six): must fail
    C = math.log(1 / DELTA)
    rate = _occam_failure_rate(lambda k: bininv_upper(N_MC, k, C), ERRORS, N_MC, DRAWS, seed=1)
    assert rate > DELTA + 3 * math.sqrt(DELTA * (1 - DELTA) / DRAWS), rate


# ------------------------------------------------------------------------------- the verifier's check


@pytest.mark.parametrize("n,k,C", CASES)
def test_certifies_accepts_the_returned_bound_and_refuses_a_point_below_the_true_value(n, k, C):
    """``certifies`` proves a given point is >= BinInv: it accepts what ``bininv_upper`` returned, and no
    certificate can hold for a point below the 60-digit root (it would prove a false statement)."""
    from specbound.certified.binomial import certifies

    ours = bininv_upper(n, k, C)
    assert certifies(n, k, C, ours) is not None
    ref = ref_bininv(n, k, C)
    below = float(ref * (1 - mpmath.mpf(10) ** -6))
    if below > 0:
        assert certifies(n, k, C, below) is None, (n, k, C)
    assert certifies(n, k, C, 1.0) == "closed"
    assert certifies(n, k, C, float("nan")) is None and certifies(n, k, C, -0.5) is None

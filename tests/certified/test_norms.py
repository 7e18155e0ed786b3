"""Specification of certified.norms: every ball contains the value computed independently by mpmath
(50 digits) from the exact matrix or the exact product."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb

from specbound.certified.enclosure import enclose_singular_values
from specbound.certified.factored import enclose_factored
from specbound.certified.norms import (
    entry_norms,
    frobenius_norm,
    norm_11,
    norm_21,
    nuclear_norm,
    proven_rank,
    rank_bounds,
    schatten_power,
    spectral_norm,
    spectral_norm_upper,
)
from specbound.matrices import NamedMatrix

DPS = 50
RNG = np.random.default_rng(11)


def mp_matrix(w):
    return mpmath.matrix([[mpmath.mpf(float(x)) for x in row] for row in w])


def mp_singular_values(a):
    with mpmath.workdps(DPS):
        return sorted((abs(x) for x in mpmath.svd_r(a, compute_uv=False)), reverse=True)


def assert_in(ball: arb, value, rel=mpmath.mpf(10) ** -35) -> None:
    """``value`` (an mpf, accurate to ~1e-45 relative) as a small ball meets ``ball``."""
    with mpmath.workdps(DPS):
        tol = abs(value) * rel + mpmath.mpf(10) ** -300
        lo = arb(mpmath.nstr(value - tol, 45, min_fixed=1, max_fixed=0))
        hi = arb(mpmath.nstr(value + tol, 45, min_fixed=1, max_fixed=0))
    assert ball.lower() <= hi.upper() and lo.lower() <= ball.upper(), (ball, value)


def mp_schatten(sv, p):
    with mpmath.workdps(DPS):
        return mpmath.fsum(s**p for s in sv)


CASES = {
    "random 7x5": RNG.standard_normal((7, 5)),
    "clustered": np.diag([3.0, 3, 3, 3, 1]) @ np.linalg.qr(RNG.standard_normal((5, 5)))[0],
    "tiny scale": RNG.standard_normal((4, 6)) * 1e-300,
    "huge scale": RNG.standard_normal((4, 6)) * 1e300,
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("p", [0.5, 1, 2, Fraction(1, 3), 1.75])
def test_schatten_powers_contain_mpmath(name, p):
    w = CASES[name]
    enc = enclose_singular_values(w)
    sv = mp_singular_values(mp_matrix(w))
    pm = mpmath.mpf(p.numerator) / p.denominator if isinstance(p, Fraction) else mpmath.mpf(p)
    assert_in(schatten_power(enc, p), mp_schatten(sv, pm), rel=mpmath.mpf(10) ** -30)


@pytest.mark.parametrize("name", sorted(CASES))
def test_spectral_frobenius_nuclear_contain_mpmath(name):
    w = CASES[name]
    enc = enclose_singular_values(w)
    sv = mp_singular_values(mp_matrix(w))
    assert_in(spectral_norm(enc), sv[0])
    assert spectral_norm(enc).upper() >= spectral_norm_upper(enc) >= sv[0] * (1 - mpmath.mpf(10) ** -40)
    with mpmath.workdps(DPS):
        fro = mpmath.sqrt(mpmath.fsum(mpmath.mpf(float(x)) ** 2 for x in w.ravel()))
    assert_in(frobenius_norm(enc), fro)
    assert_in(nuclear_norm(enc), mpmath.fsum(sv))


def test_schatten_of_structurally_low_rank_product_skips_the_exact_zero_tail():
    f, g = RNG.standard_normal((9, 2)), RNG.standard_normal((2, 8))
    enc = enclose_factored(f, g)
    with mpmath.workdps(DPS):
        sv = mp_singular_values(mp_matrix(f) * mp_matrix(g))[:2]  # the rest are exactly 0
    assert_in(schatten_power(enc, 0.25), mp_schatten(sv, mpmath.mpf(0.25)), rel=mpmath.mpf(10) ** -30)
    # 0**p would be 0 anyway, but the tail must contribute nothing to the *upper* endpoint either
    assert schatten_power(enc, 0.25).upper() < mp_schatten(sv, mpmath.mpf(0.25)) * (1 + 1e-10)


def test_p_zero_is_the_proven_rank():
    f, g = RNG.standard_normal((9, 3)), RNG.standard_normal((3, 8))
    r = schatten_power(enclose_factored(f, g), 0)
    assert r.upper() == 3 and r.lower() == 3
    assert rank_bounds(enclose_singular_values(f @ g)) == (3, 8)  # float matrix: no structural proof
    assert proven_rank(enclose_singular_values(np.zeros((3, 3)))).upper() == 0


def test_entry_norms_contain_mpmath():
    for w in [RNG.standard_normal((6, 9)), RNG.standard_normal((5, 3)) * 1e-305, RNG.standard_normal((3, 4)) * 1e305]:
        with mpmath.workdps(DPS):
            cols = [mpmath.sqrt(mpmath.fsum(mpmath.mpf(float(x)) ** 2 for x in w[:, j])) for j in range(w.shape[1])]
            n21 = mpmath.fsum(cols)
            n11 = mpmath.fsum(abs(mpmath.mpf(float(x))) for x in w.ravel())
        assert_in(norm_21(w), n21)
        assert_in(norm_11(w), n11)


def test_entry_norms_of_the_exact_product():
    f, g = RNG.standard_normal((5, 2)), RNG.standard_normal((2, 7))
    n21, n11 = entry_norms(NamedMatrix(layer=0, head=0, kind="V_tilde", left=f, right=g))
    with mpmath.workdps(DPS):
        p = mp_matrix(f) * mp_matrix(g)
        ref21 = mpmath.fsum(mpmath.sqrt(mpmath.fsum(p[i, j] ** 2 for i in range(5))) for j in range(7))
        ref11 = mpmath.fsum(abs(p[i, j]) for i in range(5) for j in range(7))
    assert_in(n21, ref21)
    assert_in(n11, ref11)


def test_negative_schatten_index_is_rejected():
    with pytest.raises(ValueError):
        schatten_power(enclose_singular_values(np.eye(2)), -1)

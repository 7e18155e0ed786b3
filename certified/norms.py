"""Certified matrix norms: from a singular-value enclosure, or directly from the exact entries.

Every function returns an Arb ball that contains the true real value (for a float64 matrix taken as
exact, or the exact product of float64 factors).  Schatten powers use the *proven* zero tail and the
*proven* rank (proofs_notes/structural_rank.md section 3).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from flint import arb

from specbound.certified.arb import (
    WORK_PREC,
    check_finite,
    interval,
    pow2,
    precision,
    scale_exponent,
    scaled_by_pow2,
    to_arb_mat,
)
from specbound.certified.enclosure import SingularValueEnclosure, sum_nonneg_lower, sum_nonneg_upper
from specbound.certified.factors import scale_ball
from specbound.matrices import NamedMatrix


def _as_arb(p) -> arb:
    if isinstance(p, arb):
        return p
    if isinstance(p, Fraction):
        return arb(p.numerator) / arb(p.denominator)
    return arb(p)  # int or float: exact


def _pow(x: arb, p: arb) -> arb:
    """x**p for an exact x >= 0 and p > 0 (0**p = 0)."""
    if x == 0:
        return arb(0)
    return x**p


def spectral_norm(enc: SingularValueEnclosure) -> arb:
    """Ball containing ||W||_2 = sigma_1."""
    if enc.k == 0:
        return arb(0)
    return enc.ball(0)


def spectral_norm_upper(enc: SingularValueEnclosure) -> arb:
    """Exact number >= ||W||_2."""
    return arb(0) if enc.k == 0 else enc.upper[0].upper()


def rank_bounds(enc: SingularValueEnclosure) -> tuple[int, int]:
    """(lower, upper) proven bounds on rank(W): #{lower_i > 0} and min(structural cap, #not proven 0)."""
    return enc.rank_lower, enc.rank_upper


def proven_rank(enc: SingularValueEnclosure) -> arb:
    """Ball containing rank(W): exact when the bounds meet, else [rank_lower, rank_upper]."""
    lo, hi = rank_bounds(enc)
    return arb(hi) if lo == hi else interval(arb(lo), arb(hi))


def schatten_power(enc: SingularValueEnclosure, p) -> arb:
    """Ball containing S_p(W) = sum_i sigma_i**p for p > 0, and rank(W) for p = 0.

    ``p``: int, float (taken exact), Fraction or arb, p >= 0.  The proven zero tail contributes 0; every
    other index contributes [lower_i**p, upper_i**p].  Its upper endpoint is the certified upper bound.
    """
    pa = _as_arb(p)
    if pa == 0:
        return proven_rank(enc)
    if not pa > 0:
        raise ValueError(f"Schatten index must be >= 0, got {p!r}")
    with precision(WORK_PREC):
        lo = arb(0)
        hi = arb(0)
        for i in range(enc.k - enc.zero_count):
            lo += _pow(enc.lower[i].lower(), pa)
            hi += _pow(enc.upper[i].upper(), pa)
        return interval(lo.lower(), hi.upper())


def frobenius_norm(enc: SingularValueEnclosure) -> arb:
    """Ball containing ||W||_F = sqrt(S_2)."""
    s2 = schatten_power(enc, 2)
    return interval(s2.lower().sqrt().lower() if s2.lower() > 0 else arb(0), s2.upper().sqrt().upper())


def nuclear_norm(enc: SingularValueEnclosure) -> arb:
    """Ball containing ||W||_* = S_1."""
    return schatten_power(enc, 1)


# ---- directly from entries ---------------------------------------------------------------------


def _sum_ball(fl_sum: float, n: int) -> arb:
    return interval(sum_nonneg_lower(fl_sum, n), sum_nonneg_upper(fl_sum, n))


def norm_21(w: np.ndarray) -> arb:
    """Ball containing ||W||_{2,1} = sum_j ||W[:, j]||_2 (sum of column l2 norms) of a dense float
    matrix taken as exact.  Float column sums of squares with the rigorous error model
    (proofs_notes/svd_enclosure.md section 4), square roots and the outer sum in Arb."""
    w = check_finite(w)
    m, n = w.shape
    if w.size == 0 or not np.any(w):
        return arb(0)
    t = scale_exponent(w)
    y, inexact = scaled_by_pow2(w, t)
    col = np.einsum("ij,ij->j", y, y)
    with precision(WORK_PREC):
        slack = 3 * inexact * pow2(-1075)  # crude but valid per column (all lost bits counted)
        total = arb(0)
        for c in col.tolist():
            lo = sum_nonneg_lower(c, m) - slack
            hi = sum_nonneg_upper(c, m) + slack
            lo = lo if lo > 0 else arb(0)
            total += interval(lo.lower().sqrt().lower(), hi.upper().sqrt().upper())
        return total * pow2(t)


def norm_11(w: np.ndarray) -> arb:
    """Ball containing ||W||_{1,1} = sum_ij |W_ij| (dense float matrix taken as exact)."""
    w = check_finite(w)
    if w.size == 0 or not np.any(w):
        return arb(0)
    t = scale_exponent(w)
    y, inexact = scaled_by_pow2(w, t)
    with precision(WORK_PREC):
        ball = _sum_ball(float(np.abs(y).sum()), y.size)
        if inexact:
            ball = interval((ball.lower() - inexact * pow2(-1075)).max(arb(0)), ball.upper() + inexact * pow2(-1075))
        return ball * pow2(t)


def _exact_product_entries(f: np.ndarray, g: np.ndarray) -> tuple[list, int, int]:
    with precision(WORK_PREC):
        prod = to_arb_mat(check_finite(f)) * to_arb_mat(check_finite(g))
    return prod.entries(), prod.nrows(), prod.ncols()


def entry_norms(matrix: NamedMatrix) -> tuple[arb, arb]:
    """((2,1) norm, (1,1) norm) balls of a covered matrix; factored matrices use the exact product
    formed in Arb (m x r x n ball products; no float rounding of the product).  Both norms are
    absolutely homogeneous, so a left-over score scale ``sqrt(scale_sq)`` multiplies them."""
    n21, n11 = _entry_norms_unscaled(matrix)
    if matrix.scale_sq == 1:
        return n21, n11
    with precision(WORK_PREC):
        c = scale_ball(matrix.scale_sq)
        return n21 * c, n11 * c


def _entry_norms_unscaled(matrix: NamedMatrix) -> tuple[arb, arb]:
    if not matrix.is_factored:
        return norm_21(matrix.left), norm_11(matrix.left)
    entries, m, n = _exact_product_entries(matrix.left, matrix.right)
    with precision(WORK_PREC):
        n21 = arb(0)
        n11 = arb(0)
        for j in range(n):
            col = arb(0)
            for i in range(m):
                x = entries[i * n + j]
                col += x * x
                n11 += abs(x)
            n21 += col.sqrt() if col > 0 else interval(arb(0), col.upper().sqrt())
        return n21, n11

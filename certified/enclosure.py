"""Certified enclosures of all singular values of a float64 matrix taken as exact.

Theorem, floating-point model and every inequality used here: ``proofs_notes/svd_enclosure.md``.
Floats (LAPACK SVD, dgemm) only *choose* the approximate factors U, s, V and compute quantities whose
rounding errors are then bounded rigorously; every number returned is an endpoint of an Arb ball.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from flint import arb, arb_mat

from specbound.certified.arb import (
    WORK_PREC,
    check_finite,
    float_lower,
    float_upper,
    interval,
    pow2,
    precision,
    scale_exponent,
    scaled_by_pow2,
    to_arb_mat,
)
from specbound.certified.factors import scale_ball
from specbound.errors import CertificationError

# Floating-point model (proofs_notes/svd_enclosure.md section 4).
UNIT_ROUNDOFF = 2.0**-53
ETA_EXP = -1021  # ETA = 2**-1021 covers gradual underflow and flush-to-zero per operation

METHODS = ("eft", "arb")


# --------------------------------------------------------------------------------------------------
# The record


@dataclass(frozen=True, eq=False)
class SingularValueEnclosure:
    """Certified enclosure of sigma_1 >= ... >= sigma_k of an exact real m x n matrix, k = min(m, n).

    Guarantee: for every i, ``lower[i] <= sigma_{i+1}(W) <= upper[i]`` where ``lower``/``upper`` are exact
    Arb numbers (radius 0), both non-increasing in i.  ``zero_count`` trailing singular values are
    *proven* exactly zero (then lower = upper = 0 for them).  ``delta``, ``eta_u``, ``eta_v`` are the
    proven bounds of the theorem, in the units of W (``delta``) or dimensionless (``eta``); they are
    informational (None for the zero matrix).  ``method`` names the route: "eft", "arb", "gram"
    (factored), "zero", or "fallback" (the always-valid [0, ||W||_F]).
    """

    shape: tuple[int, int]
    lower: tuple[arb, ...]
    upper: tuple[arb, ...]
    zero_count: int
    method: str
    delta: arb | None = None
    eta_u: arb | None = None
    eta_v: arb | None = None
    rank_cap: int | None = None

    @property
    def k(self) -> int:
        return len(self.upper)

    def ball(self, i: int) -> arb:
        """Ball containing sigma_{i+1}(W) (0-based i)."""
        return interval(self.lower[i], self.upper[i])

    def balls(self) -> tuple[arb, ...]:
        return tuple(self.ball(i) for i in range(self.k))

    @property
    def rank_upper(self) -> int:
        """Proven upper bound on rank(W): structural cap and count of values not proven zero."""
        cap = self.k if self.rank_cap is None else self.rank_cap
        return min(cap, self.k - self.zero_count)

    @property
    def rank_lower(self) -> int:
        """Proven lower bound on rank(W): number of values whose lower endpoint is > 0."""
        return sum(1 for lo in self.lower if lo > 0)

    def lower_floats(self) -> np.ndarray:
        """float64 numbers guaranteed <= sigma_i (directed rounding)."""
        return np.array([float_lower(x) for x in self.lower], dtype=np.float64)

    def upper_floats(self) -> np.ndarray:
        """float64 numbers guaranteed >= sigma_i (directed rounding; inf beyond DBL_MAX)."""
        return np.array([float_upper(x) for x in self.upper], dtype=np.float64)

    def contains(self, i: int, value) -> bool:
        """True if the real ``value`` (float, str or arb) lies in the i-th enclosure (for tests)."""
        v = value if isinstance(value, arb) else arb(value)
        return bool(self.lower[i] <= v) and bool(v <= self.upper[i])


# --------------------------------------------------------------------------------------------------
# Rigorous bounds for float reductions (proofs_notes/svd_enclosure.md section 4)


def _u() -> arb:
    return pow2(-53)


def _eta() -> arb:
    return pow2(ETA_EXP)


def gamma(n: int) -> arb:
    """Upper bound (as an exact-input Arb expression) of gamma_n = n u / (1 - n u)."""
    nu = arb(int(n)) * _u()
    if not nu < 1:
        raise CertificationError(f"dimension {n} too large for the float error model")
    return nu / (1 - nu)


def sum_nonneg_upper(fl_sum: float, n: int) -> arb:
    """Upper bound of an exact sum of n >= 1 nonnegative terms whose float evaluation (any order,
    terms possibly rounded products) gave ``fl_sum``."""
    if not math.isfinite(fl_sum):
        raise CertificationError("overflow in a float reduction")
    return (arb(fl_sum) + 2 * int(n) * _eta()) / (1 - gamma(n))


def sum_nonneg_lower(fl_sum: float, n: int) -> arb:
    """Lower bound (possibly 0) of the same exact sum."""
    if not math.isfinite(fl_sum):
        raise CertificationError("overflow in a float reduction")
    lo = (arb(fl_sum) - 2 * int(n) * _eta()) / (1 + gamma(n))
    return lo if lo > 0 else arb(0)


def sum_of_squares_bounds(a: np.ndarray) -> tuple[arb, arb, int]:
    """(lower, upper, t): the exact sum of squares of the float array ``a`` lies in
    ``[lower * 4**t, upper * 4**t]``.  The array is scaled by 2**-t so its max is < 1 (exact when
    scaling up; when scaling down, the at most 2**-1075 per-entry loss is folded in)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    n = a.size
    if n == 0:
        return arb(0), arb(0), 0
    t = scale_exponent(a)
    y, inexact = scaled_by_pow2(a, t)
    ss = float(np.dot(y, y))
    lo = sum_nonneg_lower(ss, n)
    hi = sum_nonneg_upper(ss, n)
    if inexact:
        # |y_exact| <= |y| + 2^-1075 and |y| < 1: y_exact^2 <= y^2 + 3 * 2^-1075; symmetric below.
        slack = 3 * inexact * pow2(-1075)
        hi = hi + slack
        lo = lo - slack
        lo = lo if lo > 0 else arb(0)
    return lo, hi, t


def fro_upper(a: np.ndarray) -> arb:
    """Exact Arb number >= ||a||_F for a float array taken as exact."""
    _, hi, t = sum_of_squares_bounds(a)
    return (hi.sqrt() * pow2(t)).upper()


def _rowsum_norm_upper(absa: np.ndarray, axis: int) -> arb:
    """Upper bound of || exact sums of the nonnegative array along ``axis`` ||_2."""
    n = absa.shape[axis]
    sums = absa.sum(axis=axis)
    if not np.all(np.isfinite(sums)):
        raise CertificationError("overflow in a float reduction")
    # each exact sum <= (fl + 2 n ETA) / (1 - gamma_n); then the triangle inequality for the 2-norm
    count = sums.size
    return ((fro_upper(sums) + arb(count).sqrt() * 2 * n * _eta()) / (1 - gamma(n))).upper()


def _absmax_norm(absa: np.ndarray, axis: int) -> arb:
    """|| max along ``axis`` ||_2 upper bound (the max itself is exact)."""
    return fro_upper(absa.max(axis=axis))


def fro_arb_mat(m: arb_mat) -> arb:
    """Ball containing the Frobenius norm of an Arb matrix."""
    total = arb(0)
    for x in m.entries():
        total += x * x
    return total.nonnegative_part().sqrt() if hasattr(total, "nonnegative_part") else total.sqrt()


# --------------------------------------------------------------------------------------------------
# Error-free transformations


def two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's TwoProduct: a*b = x + y exactly (round to nearest; no overflow in 2**27 a, 2**27 b;
    every nonzero |a*b| >= 2**-969).  The caller guarantees the ranges."""
    x = a * b
    c = 134217729.0  # 2**27 + 1, Veltkamp splitter
    ca = c * a
    ah = ca - (ca - a)
    al = a - ah
    cb = c * b
    bh = cb - (cb - b)
    bl = b - bh
    y = al * bl - (((x - ah * bh) - al * bh) - ah * bl)
    return x, y


def split_beta(inner: int) -> int:
    """Ozaki's beta for inner dimension ``inner``: inner * 2**(2 beta) <= 2**53."""
    return (53 - math.ceil(math.log2(max(int(inner), 1)))) // 2


def ozaki_split(a: np.ndarray, axis: int, beta: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Split ``a = a1 + arem`` exactly, per slice along ``axis`` (axis=1: each row gets its own grid;
    axis=0: each column).  ``a1`` lies on the grid 2**(tau - beta) with integer multipliers <= 2**beta.
    Returns (a1, arem, tau) with tau the per-slice exponent (0 for zero slices), or None if the a
    posteriori grid check fails."""
    mx = np.max(np.abs(a), axis=axis, keepdims=True)
    tau = np.frexp(mx)[1].astype(np.int64)  # 2**tau > max (frexp(0) gives exponent 0)
    sigma = np.ldexp(0.75, tau - beta + 53)
    a1 = (a + sigma) - sigma
    arem = a - a1
    ints = np.ldexp(a1, beta - tau)
    if not (np.all(ints == np.round(ints)) and np.all(np.abs(ints) <= 2.0**beta)):
        return None
    tau = np.where(mx > 0, tau, 10**6)  # zero slices never constrain the underflow check
    return a1, arem, tau


# --------------------------------------------------------------------------------------------------
# Choosing the approximate factors


def approximate_svd(ws: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """LAPACK thin SVD, then the range-keeping alterations of proofs_notes section 3 (allowed: the
    theorem holds for arbitrary factors).  None if LAPACK fails or returns non-finite values."""
    try:
        u, s, vt = np.linalg.svd(ws, full_matrices=False)
    except np.linalg.LinAlgError:
        return None
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(s)) and np.all(np.isfinite(vt))):
        return None
    return clean_factors(u, s, vt)


def clean_factors(u, s, vt):
    """|s|, flush tiny s (< 2**-500), tiny factor entries (< 2**-200) and products |u s| < 2**-300."""
    s = np.abs(np.asarray(s, dtype=np.float64))
    s = np.where(s < 2.0**-500, 0.0, s)
    u = np.where(np.abs(u) < 2.0**-200, 0.0, u)
    u = np.where(np.abs(u * s) < 2.0**-300, 0.0, u)
    vt = np.where(np.abs(vt) < 2.0**-200, 0.0, vt)
    return u, s, vt


# --------------------------------------------------------------------------------------------------
# Method C: residual and orthogonality bounds with one exact (Ozaki) GEMM each


def _chain_error(u_fac: arb, norms: list[arb]) -> arb:
    total = arb(0)
    for x in norms:
        total += x
    return u_fac * total


def residual_bound_eft(ws: np.ndarray, u: np.ndarray, s: np.ndarray, vt: np.ndarray) -> arb | None:
    """Exact number >= ||ws - u diag(s) vt||_F (ws, u, s, vt taken as exact); None if a check fails."""
    m, n = ws.shape
    k = s.size
    phi, plo = two_product(u, s[None, :])
    beta = split_beta(k)
    sa = ozaki_split(phi, axis=1, beta=beta)
    sb = ozaki_split(vt, axis=0, beta=beta)
    if sa is None or sb is None:
        return None
    a1, arem, tau = sa
    b1, brem, rho = sb
    if int(tau.min()) + int(rho.min()) - 2 * beta < -1000 and tau.min() < 10**6 and rho.min() < 10**6:
        return None
    c11 = a1 @ b1  # exact (proofs_notes section 4)
    r1 = ws - c11
    r2 = r1 - a1 @ brem
    r3 = r2 - arem @ vt
    rt = r3 - plo @ vt
    if not np.all(np.isfinite(rt)):
        return None
    uf = _u() / (1 - _u())
    mn_sqrt = arb(m * n).sqrt()
    delta = fro_upper(rt) + _chain_error(uf, [fro_upper(r1), fro_upper(r2), fro_upper(r3), fro_upper(rt)])
    delta += 4 * mn_sqrt * _eta()
    abs_vt = np.abs(vt)
    tail = _rowsum_norm_upper(np.abs(a1), axis=1) * _absmax_norm(np.abs(brem), axis=0)
    tail += (_absmax_norm(np.abs(arem), axis=1) + _absmax_norm(np.abs(plo), axis=1)) * _rowsum_norm_upper(
        abs_vt, axis=0
    )
    delta += gamma(k) * tail + 6 * k * mn_sqrt * _eta()
    return delta.upper()


def orthogonality_bound_eft(q: np.ndarray) -> arb | None:
    """Exact number >= ||q^T q - I||_F (q taken as exact); None if a check fails."""
    p, r = q.shape
    beta = split_beta(p)
    sp = ozaki_split(q, axis=0, beta=beta)
    if sp is None:
        return None
    q1, qrem, tau = sp
    if int(tau.min()) < 10**6 and 2 * int(tau.min()) - 2 * beta < -1000:
        return None
    h0 = q1.T @ q1  # exact
    e1 = h0 - np.eye(r)
    e2 = e1 + q1.T @ qrem
    et = e2 + qrem.T @ q
    if not np.all(np.isfinite(et)):
        return None
    uf = _u() / (1 - _u())
    eta = fro_upper(et) + _chain_error(uf, [fro_upper(e1), fro_upper(e2), fro_upper(et)]) + 3 * r * _eta()
    abs_rem = np.abs(qrem)
    tail = (_rowsum_norm_upper(np.abs(q1), axis=0) + _rowsum_norm_upper(np.abs(q), axis=0)) * _absmax_norm(
        abs_rem, axis=0
    )
    eta += gamma(p) * tail + 4 * p * r * _eta()
    return eta.upper()


# --------------------------------------------------------------------------------------------------
# Method A: everything in Arb (reference / cross-check; O(mnk) Arb work, small matrices only)


def bounds_arb(ws: np.ndarray, u: np.ndarray, s: np.ndarray, vt: np.ndarray) -> tuple[arb, arb, arb]:
    with precision(WORK_PREC):
        k = s.size
        wa, ua, va = to_arb_mat(ws), to_arb_mat(u), to_arb_mat(vt)
        d = arb_mat(k, k)
        for j in range(k):
            d[j, j] = arb(float(s[j]))
        resid = wa - ua * d * va
        eye = arb_mat(k, k)
        for j in range(k):
            eye[j, j] = arb(1)
        delta = fro_arb_mat(resid).upper()
        eta_u = fro_arb_mat(ua.transpose() * ua - eye).upper()
        eta_v = fro_arb_mat(va * va.transpose() - eye).upper()
    return delta, eta_u, eta_v


# --------------------------------------------------------------------------------------------------
# Assembly


def enclosure_from_bounds(
    shape, s: np.ndarray, delta: arb, eta_u: arb, eta_v: arb, scale_exp: int, method: str, k: int,
    zero_count: int = 0, rank_cap: int | None = None,
) -> SingularValueEnclosure | None:
    """Apply the theorem (proofs_notes/svd_enclosure.md section 1) to the sorted |s| (q = len(s) <= k),
    scale back by 2**scale_exp; indices q..k-zero_count get [0, delta], the last ``zero_count`` exactly 0.
    None if eta_u or eta_v is not certainly < 1."""
    if not (eta_u < 1 and eta_v < 1):
        return None
    with precision(WORK_PREC):
        c_lo = ((1 - eta_u) * (1 - eta_v)).sqrt()
        c_hi = ((1 + eta_u) * (1 + eta_v)).sqrt()
        scale = pow2(scale_exp)
        sv = sorted((abs(float(x)) for x in s), reverse=True)
        lower, upper = [], []
        for x in sv:
            lo = (c_lo * arb(x) - delta).lower()
            lower.append((lo * scale) if lo > 0 else arb(0))
            upper.append(((c_hi * arb(x) + delta) * scale).upper())
        d_up = (delta * scale).upper()
        free = k - zero_count - len(sv)
        lower += [arb(0)] * free
        upper += [d_up] * free
        lower += [arb(0)] * zero_count
        upper += [arb(0)] * zero_count
        # Sortedness: both endpoint sequences are non-increasing by construction except possibly the
        # [0, delta] block after tiny s; enforce monotone envelopes (still valid, see proof note).
        upper = _non_increasing_upper(upper)
        return SingularValueEnclosure(
            shape=tuple(shape), lower=tuple(lower), upper=tuple(upper), zero_count=zero_count,
            method=method, delta=d_up, eta_u=eta_u, eta_v=eta_v, rank_cap=rank_cap,
        )


def _non_increasing_upper(upper: list[arb]) -> list[arb]:
    """Replace upper[i] by max_{j >= i} upper[j]: sigma_i >= sigma_j for j > i, so this stays valid."""
    out = list(upper)
    for i in range(len(out) - 2, -1, -1):
        if out[i + 1] > out[i]:
            out[i] = out[i + 1]
    return out


def zero_enclosure(shape, method: str = "zero", rank_cap: int | None = None) -> SingularValueEnclosure:
    k = min(shape)
    z = tuple(arb(0) for _ in range(k))
    return SingularValueEnclosure(tuple(shape), z, z, k, method, arb(0), arb(0), arb(0), rank_cap)


def fallback_enclosure(shape, fro: arb, zero_count: int = 0, rank_cap: int | None = None) -> SingularValueEnclosure:
    """sigma_i in [0, ||W||_F] for every i not proven zero (always valid)."""
    k = min(shape)
    hi = fro.upper()
    upper = tuple([hi] * (k - zero_count) + [arb(0)] * zero_count)
    lower = tuple(arb(0) for _ in range(k))
    return SingularValueEnclosure(tuple(shape), lower, upper, zero_count, "fallback", None, None, None, rank_cap)


def scaled_enclosure(enc: SingularValueEnclosure, scale_sq) -> SingularValueEnclosure:
    """Enclosure of the singular values of ``c W`` from one of ``W``, for ``c = sqrt(scale_sq) > 0``
    (``scale_sq`` an exact positive rational).

    Proof: sigma_i(c W) = c sigma_i(W) for c > 0 (the SVD of W scaled by c), so
    lower_i * c <= sigma_i(cW) <= upper_i * c; Arb encloses c, and taking the lower endpoint of the
    lower product and the upper endpoint of the upper one keeps both sides valid and exact (radius
    0).  Multiplying by c > 0 keeps both sequences non-increasing, exact zeros zero, and the ranks.
    """
    if scale_sq == 1:
        return enc
    if scale_sq <= 0:
        raise CertificationError(f"score scale squared {scale_sq} must be positive")
    with precision(WORK_PREC):
        c = scale_ball(scale_sq)
        lower = tuple(arb(0) if lo == 0 else (lo * c).lower() for lo in enc.lower)
        upper = tuple(arb(0) if up == 0 else (up * c).upper() for up in enc.upper)
        delta = None if enc.delta is None else (enc.delta * c).upper()
    return SingularValueEnclosure(
        shape=enc.shape, lower=lower, upper=upper, zero_count=enc.zero_count, method=enc.method,
        delta=delta, eta_u=enc.eta_u, eta_v=enc.eta_v, rank_cap=enc.rank_cap,
    )


def enclose_singular_values(w: np.ndarray, *, method: str = "eft") -> SingularValueEnclosure:
    """Certified enclosure of every singular value of the float64 matrix ``w`` taken as exact.

    ``method``: "eft" (default; BLAS with one error-free split per product, cost ~2x a thin SVD) or
    "arb" (residual and Grams in Arb; slow, a reference for small matrices).  Non-finite input raises
    :class:`~specbound.errors.NonFiniteError`; a failed float step never fails the call: it returns the
    wider, always-valid ``[0, ||W||_F]`` enclosure (method "fallback").
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    w = check_finite(w)
    if w.ndim != 2:
        raise CertificationError(f"expected a 2-D matrix, got shape {w.shape}")
    m, n = w.shape
    k = min(m, n)
    if k == 0 or not np.any(w):
        return zero_enclosure((m, n))
    e = scale_exponent(w)
    ws, inexact = scaled_by_pow2(w, e)
    scale_slack = arb(inexact).sqrt() * pow2(-1074)  # ||2^-e W - ws||_F (proof note section 2)
    factors = approximate_svd(ws)
    result = None
    if factors is not None:
        u, s, vt = factors
        if method == "eft":
            delta = residual_bound_eft(ws, u, s, vt)
            eta_u = orthogonality_bound_eft(u)
            eta_v = orthogonality_bound_eft(vt.T)
        else:
            delta, eta_u, eta_v = bounds_arb(ws, u, s, vt)
        if delta is not None and eta_u is not None and eta_v is not None:
            delta = (delta + scale_slack).upper()
            result = enclosure_from_bounds((m, n), s, delta, eta_u, eta_v, e, method, k)
    if result is None:
        fro = (fro_upper(ws) + scale_slack) * pow2(e)
        result = fallback_enclosure((m, n), fro)
    return result

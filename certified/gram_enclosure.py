"""Certified singular values of many covered matrices at once, through Gram matrices (method "gram-eig").

Proof of every step (floating-point model, product error bounds, the Gram/Cholesky route for
factored heads, the certified symmetric eigenvalue enclosure, outward rounding, prescaling, accuracy
limits and fallback policy): ``proofs_notes/gram_enclosure.md``.  Floats (LAPACK Cholesky and eigh,
dgemm) only *choose* the approximate quantities; every bound is assembled in binary64 with outward
rounding by ``np.nextafter`` (valid under round-to-nearest, checked at import).  Factored matrices of
one shape are stacked and processed together (batched r x r cores); dense matrices use the Gram on
their small side.  At large sizes (eigenvector matrices from p = 1024, factor Grams from inner
dimension 2048) the products whose worst-case rounding would dominate the width are formed through an
exact split of one factor (proof note section 5b).  Whenever a check fails the matrix goes to
:func:`specbound.certified.factored.enclose`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flint import arb

from specbound.certified.arb import check_finite, pow2
from specbound.certified.enclosure import (
    SingularValueEnclosure,
    ozaki_split,
    scaled_enclosure,
    split_beta,
    zero_enclosure,
)
from specbound.certified.factored import enclose as enclose_residual
from specbound.certified.float_environment import rounds_to_nearest
from specbound.errors import CertificationError
from specbound.matrices import NamedMatrix

METHOD = "gram-eig"
ROUTES = (METHOD, "eft", "arb")
"""Routes of :func:`enclose_matrices`: the batched Gram/eigen route (default), or the older per-matrix
residual routes of :func:`specbound.certified.factored.enclose` (dense: "eft" or "arb")."""
UNIT_ROUNDOFF = 2.0**-53
ETA = 2.0**-1021  # per-operation absolute underflow loss (gradual underflow and flush-to-zero)
GROWTH = 1.0 + 2.0**-50  # >= 1 + 2u (exact float): inflation for one rounded subtraction or sum
DEFAULT_MAX_RELATIVE_WIDTH = 1e-9
# Prescaling by a power of two only when the largest entry leaves [2**-SAFE_EXP, 2**SAFE_EXP]: inside
# it no float step below can overflow and underflow terms stay negligible (proof note section 2).
SAFE_EXP = 200
# From this size of the eigenvector matrix Z (p x p) on, ||Z^T Z - I|| is bounded through an exact
# split product (proof note section 5b) instead of one float product, whose rounding term
# gamma_p ||Z||_F^2 ~ p^2 u (1.2e-10 at p = 1024, 1.9e-9 at p = 4096) alone would exceed the
# default width limit times the spread and send every large feed-forward matrix to the residual route.
SPLIT_ORTHOGONALITY_FROM = 1024
# Likewise from this inner dimension m on, the r x r Grams of a factored head's factors are formed
# through the exact split: their rounding term gamma_m ||F||_F^2 ||G||_F^2 is what limits the width
# of a head's sigma_1 (8e-10 of the 1e-9 limit for Llama-7B's value-output heads, N = 4096).
SPLIT_GRAM_FROM = 2048


def _check_rounding_mode() -> None:
    """Refuse to run unless binary64 arithmetic rounds to nearest (ties to even)."""
    if not rounds_to_nearest():
        raise CertificationError("binary64 rounding is not round-to-nearest; gram enclosures disabled")


_check_rounding_mode()


# --------------------------------------------------------------------------------------------------
# Outward-rounded float arithmetic (proof note section 1)


def _up(x):
    return np.nextafter(x, np.inf)


def _dn(x):
    return np.nextafter(x, -np.inf)


def _gamma(n: int) -> float:
    """Float >= gamma_n = n u / (1 - n u); n u and 1 - n u are exact for n < 2**52."""
    nu = n * UNIT_ROUNDOFF
    if not nu < 0.5:
        raise CertificationError(f"dimension {n} too large for the float error model")
    return float(_up(nu / (1.0 - nu)))


def _tiny(rows: int, cols: int, inner: int) -> float:
    """Frobenius bound of the underflow terms of a rows x cols result whose entries each took at most
    2 inner + 4 operations: rows * cols * (2 inner + 4) * ETA (rounded up)."""
    return float(_up(float(rows * cols * (2 * inner + 4)) * ETA))


def _fro_up(x: np.ndarray) -> np.ndarray:
    """Per batch member (last two axes), a float >= the Frobenius norm of the float array x."""
    n = x.shape[-1] * x.shape[-2]
    ss = np.einsum("...ij,...ij->...", x, x)
    c = _up(1.0 + _up(2.0 * _gamma(n)))  # >= 1 / (1 - gamma_n)
    hi = _up(_up(ss * c) + _up(2.0 * n * ETA * c))
    return _up(np.sqrt(hi))


def _sq_up(x):
    return _up(x * x)


def _symmetrized(s: np.ndarray) -> np.ndarray:
    """Upper triangle mirrored: exactly symmetric, every entry one of the computed entries (``s``
    itself when it is exactly symmetric already, as a Gram from BLAS syrk is)."""
    if np.array_equal(s, np.swapaxes(s, -1, -2)):
        return s
    return np.triu(s) + np.swapaxes(np.triu(s, 1), -1, -2)


# --------------------------------------------------------------------------------------------------
# Certified eigenvalues of exactly symmetric float matrices (proof note section 5)


def _eigen_square_bounds(s: np.ndarray, eps0: np.ndarray):
    """For a stack s (B, p, p) of exactly symmetric float matrices and floats eps0 (B,) bounding
    ||s - X|| for exact symmetric X: returns (lo, hi, ok) with lo[b, i] <= lambda_{i+1}(X_b) <= hi[b, i]
    (decreasing order) where ok[b]."""
    d, z = np.linalg.eigh(s)
    eps_e, delta = _eigen_error(s, d, z)
    eps = _up(eps0 + eps_e)
    ds = d[:, ::-1]
    lo = _dn(ds - eps[:, None])
    hi = _up(ds + eps[:, None])
    ok = (delta < 0.5) & np.isfinite(eps) & np.all(np.isfinite(d), axis=-1)
    return lo, hi, ok


def _eigen_error(s: np.ndarray, d: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(eps_e, delta) of proof note section 5 per batch member: for any floats z (B, p, p) and d (B, p),
    ``|lambda_i(s) - d_(i)| <= eps_e`` whenever ``delta < 1`` (outward rounded).  delta bounds
    ||Z^T Z - I||_F through the exact split of section 5b from p = SPLIT_ORTHOGONALITY_FROM on."""
    p = s.shape[-1]
    r = s @ z
    for j in range(0, p, 512):  # R = S Z - Z diag(d), by column blocks (no p x p temporary)
        r[:, :, j:j + 512] -= z[:, :, j:j + 512] * d[:, None, j:j + 512]
    g = _gamma(p)
    fz = _fro_up(z)
    tiny = _tiny(p, p, p)
    dmax = np.abs(d).max(axis=-1)
    rn = _up(_up(_fro_up(r) * GROWTH) + _up(_up(g * _fro_up(s)) * fz))
    rn = _up(_up(rn + _up(_up(4.0 * UNIT_ROUNDOFF * fz) * dmax)) + tiny)
    del r
    delta = _orthogonality_split(z) if p >= SPLIT_ORTHOGONALITY_FROM else None
    if delta is None:
        delta = _orthogonality_float(z, fz)
    spread = _up(d[:, -1] - d[:, 0])
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = _dn(np.sqrt(_dn(1.0 - delta)))
        eps_e = _up(_up(_up(delta * spread) + rn) / denom)
    return eps_e, delta


def _orthogonality_float(z: np.ndarray, fz: np.ndarray) -> np.ndarray:
    """Floats (B,) >= ||Z^T Z - I||_F from one float product (proof note section 5); ``fz`` bounds ||Z||_F."""
    p = z.shape[-1]
    e = np.swapaxes(z, -1, -2) @ z
    idx = np.arange(p)
    e[:, idx, idx] -= 1.0
    return _up(_up(_up(_fro_up(e) * GROWTH) + _up(_gamma(p) * _sq_up(fz))) + _tiny(p, p, p))


def _split_columns(z: np.ndarray, beta: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Z = Z1 + Z2 exactly, column by column (proof note section 5b, Ozaki's split of
    :func:`~specbound.certified.enclosure.ozaki_split`): with 2^(t-1) <= max|column| < 2^t, Z1 lies on the
    grid 2^(t - beta) with |Z1| <= 2^t and Z2 = Z - Z1.  Returns (Z1, Z2, t), zero columns with
    t = 10**6, or None when a column's grid would near the subnormal range (t - beta < -500), its
    products could overflow (t > 500), an entry is not finite, or the a-posteriori grid check fails."""
    mx = np.maximum(z.max(axis=-2), -z.min(axis=-2))
    if not np.all(np.isfinite(mx)):
        return None
    t = np.frexp(mx)[1][mx > 0]
    if t.size and (int(t.min()) - beta < -500 or int(t.max()) > 500):
        return None
    return ozaki_split(z, axis=-2, beta=beta)


def _orthogonality_split(z: np.ndarray) -> np.ndarray | None:
    """Floats (B,) >= ||Z^T Z - I||_F through the exact split Z = Z1 + Z2 (proof note section 5b), or
    None when a column's grid would leave the normal range or its products overflow (then the caller
    uses :func:`_orthogonality_float`)."""
    p = z.shape[-1]
    split = _split_columns(z, split_beta(p))
    if split is None:
        return None
    z1, z2, _ = split
    zt1 = np.swapaxes(z1, -1, -2)
    e = zt1 @ z1  # exact (section 5b)
    idx = np.arange(p)
    e[:, idx, idx] -= 1.0  # E0 = Z1^T Z1 - I
    c = zt1 @ z2  # C ~ Z1^T Z2
    del zt1
    gp = _gamma(p)
    f1, f2 = _fro_up(z1), _fro_up(z2)
    del z1
    norms = _fro_up(e)
    e += c  # E1 = E0 + C
    norms = _up(norms + _fro_up(e))
    e += np.swapaxes(c, -1, -2)  # E2 = E1 + C^T
    norms = _up(norms + _fro_up(e))
    np.matmul(np.swapaxes(z2, -1, -2), z2, out=c)  # Z2^T Z2
    e += c  # E = E2 + Z2^T Z2
    fe = _fro_up(e)
    sums = _up(_up(norms + fe) * (4.0 * UNIT_ROUNDOFF))
    products = _up(_up(2.0 * gp * _up(f1 * f2)) + _up(gp * _sq_up(f2)))
    return _up(_up(_up(fe + sums) + products) + 3.0 * _tiny(p, p, p))


def _square_root_bounds(lo2: np.ndarray, hi2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Outward-rounded square roots of [max(lo2, 0), max(hi2, 0)] (proof note section 6)."""
    with np.errstate(invalid="ignore"):
        lo = np.where(lo2 > 0, _dn(np.sqrt(np.maximum(lo2, 0.0))), 0.0)
        hi = _up(np.sqrt(np.maximum(hi2, 0.0)))
    return np.maximum(lo, 0.0), hi


# --------------------------------------------------------------------------------------------------
# Squared singular values of stacks (proof note sections 3 and 4)


def _dense_square_bounds(w: np.ndarray):
    """w (B, m, n) prescaled: bounds of sigma_i(w_b)^2, i <= min(m, n)."""
    if w.shape[1] > w.shape[2]:
        w = np.swapaxes(w, -1, -2)
    _, p, n = w.shape
    s = _symmetrized(w @ np.swapaxes(w, -1, -2))
    eps_g = _up(_up(_gamma(n) * _sq_up(_fro_up(w))) + _tiny(p, p, n))
    return _eigen_square_bounds(s, eps_g)


def _cholesky_factors(gy: np.ndarray) -> np.ndarray:
    """Any float L with L L^T ~ gy (the bounds never trust it): Cholesky, else an eigh factor."""
    try:
        return np.linalg.cholesky(gy)
    except np.linalg.LinAlgError:
        pass
    out = np.empty_like(gy)
    for b in range(gy.shape[0]):
        try:
            out[b] = np.linalg.cholesky(gy[b])
        except np.linalg.LinAlgError:
            lam, v = np.linalg.eigh(gy[b])
            out[b] = v * np.sqrt(np.maximum(lam, 0.0))
    return out


def _column_gram(x: np.ndarray, tiny: float) -> tuple[np.ndarray, np.ndarray]:
    """(Gs, eps): an exactly symmetric float Gs (B, r, r) and floats eps (B,) >= ||Gs - X^T X||_F for
    the stack x (B, m, r), where ``tiny`` >= tiny(r, r, m) covers one product's underflow: one float
    product (sections 3, 4), or from m >= SPLIT_GRAM_FROM the exact split of section 5b
    (Gs = X1^T X1 + (C + C^T) + X2^T X2, error ~ u ||X^T X|| instead of m u ||X||_F^2)."""
    m = x.shape[1]
    split = _split_columns(x, split_beta(m)) if m >= SPLIT_GRAM_FROM else None
    if split is None:
        return _symmetrized(np.swapaxes(x, -1, -2) @ x), _up(_up(_gamma(m) * _sq_up(_fro_up(x))) + tiny)
    x1, x2, _ = split
    x1t = np.swapaxes(x1, -1, -2)
    c = x1t @ x2
    g = c + np.swapaxes(c, -1, -2)  # exactly symmetric (fl is commutative)
    s1 = x1t @ x1 + g  # X1^T X1 is exact and symmetric
    # mirrored after the last sum: the error bound below uses the mirrored Gram's norm (section 5b)
    gs = _symmetrized(s1 + np.swapaxes(x2, -1, -2) @ x2)
    gm = _gamma(m)
    f1, f2 = _fro_up(x1), _fro_up(x2)
    sums = _up(_up(_up(_fro_up(g) + _fro_up(s1)) + _fro_up(gs)) * (4.0 * UNIT_ROUNDOFF))
    products = _up(_up(2.0 * gm * _up(f1 * f2)) + _up(gm * _sq_up(f2)))
    return gs, _up(_up(sums + products) + 3.0 * tiny)


def _factored_square_bounds(f: np.ndarray, g: np.ndarray):
    """f (B, m, r), g (B, r, n) prescaled: bounds of the r eigenvalues of Gx^1/2 Gy Gx^1/2, whose
    top min(m, n, r) are sigma_i(f_b g_b)^2."""
    _, m, r = f.shape
    n = g.shape[2]
    gr = _gamma(r)
    tiny = _tiny(r, r, max(m, n, r))
    gx, eps_x = _column_gram(f, tiny)  # F^T F
    gy, eps_y = _column_gram(np.swapaxes(g, -1, -2), tiny)  # G G^T
    lf = _cholesky_factors(gy)
    fl = _fro_up(lf)
    fl2 = _sq_up(fl)
    delta_y = lf @ np.swapaxes(lf, -1, -2) - gy
    eps_delta = _up(_up(_up(_fro_up(delta_y) * GROWTH) + _up(gr * fl2)) + _up(eps_y + tiny))
    norm_gx = _up(_fro_up(gx) + eps_x)
    mt = gx @ lf
    t = np.swapaxes(lf, -1, -2) @ mt
    ts = _symmetrized(t)
    eps_t = _up(_up(gr * fl) * _fro_up(mt))
    eps_t = _up(eps_t + _up(fl2 * _up(_up(gr * _fro_up(gx)) + eps_x)))
    eps_t = _up(eps_t + _up(_up(_fro_up(t - np.swapaxes(t, -1, -2)) * GROWTH) + 3.0 * tiny))
    eps0 = _up(eps_t + _up(norm_gx * eps_delta))
    return _eigen_square_bounds(ts, eps0)


# --------------------------------------------------------------------------------------------------
# Prescaling (proof note section 2)


def _prescale(stack: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scaled stack, exponents e (B,), exact (B,)): scaled_b = 2**-e_b stack_b; e_b = 0 unless the
    largest entry leaves [2**-SAFE_EXP, 2**SAFE_EXP]."""
    mx = np.maximum(stack.max(axis=(1, 2)), -stack.min(axis=(1, 2)))  # max |entry|, without an |stack| copy
    _, e = np.frexp(mx)
    need = (mx > 0) & ((e > SAFE_EXP) | (e < -SAFE_EXP))
    e = np.where(need, e, 0).astype(np.int64)
    exact = np.ones(stack.shape[0], dtype=bool)
    if not np.any(need):
        return stack, e, exact
    out = stack.copy()
    for b in np.nonzero(need)[0]:
        out[b] = np.ldexp(stack[b], -int(e[b]))
        exact[b] = bool(np.array_equal(np.ldexp(out[b], int(e[b])), stack[b]))
    return out, e, exact


# --------------------------------------------------------------------------------------------------
# Records


def _record(shape, lo: np.ndarray, hi: np.ndarray, exp: int, q: int, rank_cap) -> SingularValueEnclosure:
    """Enclosure of sigma_1..sigma_k from scaled float bounds of sigma_1..sigma_q (q <= k); the rest
    exactly 0 (structural rank).  Scaling by 2**exp is exact in Arb."""
    k = min(shape)
    zero = arb(0)
    scale = pow2(exp) if exp else None

    def conv(x: float) -> arb:
        if x == 0.0:
            return zero
        a = arb(float(x))
        return a * scale if scale is not None else a

    lower = tuple(conv(x) for x in lo[:q]) + (zero,) * (k - q)
    upper = tuple(conv(x) for x in hi[:q]) + (zero,) * (k - q)
    return SingularValueEnclosure(
        shape=tuple(shape), lower=lower, upper=upper, zero_count=k - q, method=METHOD, rank_cap=rank_cap,
    )


def _acceptable(lo: np.ndarray, hi: np.ndarray, max_relative_width: float) -> bool:
    if not (np.all(np.isfinite(hi)) and hi[0] > 0):
        return False
    return bool((hi[0] - lo[0]) <= max_relative_width * hi[0])


# --------------------------------------------------------------------------------------------------
# Public entry point


def enclose_batch(
    matrices: Sequence[NamedMatrix], *, max_relative_width: float = DEFAULT_MAX_RELATIVE_WIDTH,
    small_values: bool = False,
) -> list[SingularValueEnclosure]:
    """Certified enclosures of all singular values of every covered matrix, in input order.

    Contract (same as :func:`specbound.certified.factored.enclose`): for each exact real matrix W
    (``left`` if dense, the exact product ``left @ right`` if factored) and each i,
    ``lower[i] <= sigma_{i+1}(W) <= upper[i]``; values beyond the structural rank cap are exactly 0.
    Method "gram-eig" (proofs_notes/gram_enclosure.md); a matrix whose Gram route fails a check, or
    whose sigma_1 relative width exceeds ``max_relative_width``, or every matrix when
    ``small_values`` is set (tiny singular values then need absolute accuracy ~1e-14 sigma_1), goes
    to the residual route (method "gram", "eft" or "fallback").  Non-finite entries raise
    :class:`~specbound.errors.NonFiniteError`.
    """
    out: list[SingularValueEnclosure | None] = [None] * len(matrices)
    for mat in matrices:
        check_finite(mat.left, "left factor" if mat.is_factored else "matrix")
        if mat.is_factored:
            check_finite(mat.right, "right factor")
    if small_values:
        return [enclose_residual(mat) for mat in matrices]
    groups: dict[tuple, list[int]] = {}
    for idx, mat in enumerate(matrices):
        key = ("f", mat.left.shape, mat.right.shape) if mat.is_factored else ("d", idx)
        groups.setdefault(key, []).append(idx)
    for key, members in groups.items():
        if key[0] == "f":
            _enclose_factored_group([matrices[i] for i in members], members, out, max_relative_width)
        else:
            out[members[0]] = _enclose_dense(matrices[members[0]], max_relative_width)
    for idx, mat in enumerate(matrices):
        if out[idx] is None:
            out[idx] = enclose_residual(mat)  # applies a left-over score scale itself
        else:  # the Gram route enclosed left (@ right); a left-over score scale multiplies it
            out[idx] = scaled_enclosure(out[idx], mat.scale_sq)
    return out  # type: ignore[return-value]


def _enclose_dense(mat: NamedMatrix, max_relative_width: float) -> SingularValueEnclosure | None:
    w = np.asarray(mat.left, dtype=np.float64)
    if w.ndim != 2:
        raise CertificationError(f"matrix {mat.name} is not 2-D")
    shape = (int(w.shape[0]), int(w.shape[1]))
    k = min(shape)
    if k == 0 or not np.any(w):
        return zero_enclosure(shape)
    ws, e, exact = _prescale(w[None])
    if not exact[0]:
        return None
    with np.errstate(all="ignore"):
        lo2, hi2, ok = _dense_square_bounds(ws)
    if not ok[0]:
        return None
    lo, hi = _square_root_bounds(lo2[0], hi2[0])
    if not _acceptable(lo, hi, max_relative_width):
        return None
    return _record(shape, lo, hi, int(e[0]), k, None)


def _enclose_factored_group(mats: list[NamedMatrix], members: list[int], out: list, max_relative_width: float) -> None:
    m, r = mats[0].left.shape
    n = mats[0].right.shape[1]
    shape = (int(m), int(n))
    k = min(shape)
    q = min(k, r)
    live = []
    for mat, idx in zip(mats, members):
        if q == 0 or not np.any(mat.left) or not np.any(mat.right):
            out[idx] = zero_enclosure(shape, rank_cap=q)
        else:
            live.append((mat, idx))
    if not live:
        return
    f = np.stack([np.asarray(mat.left, dtype=np.float64) for mat, _ in live])
    g = np.stack([np.asarray(mat.right, dtype=np.float64) for mat, _ in live])
    fs, ef, exf = _prescale(f)
    gs, eg, exg = _prescale(g)
    with np.errstate(all="ignore"):
        lo2, hi2, ok = _factored_square_bounds(fs, gs)
        lo, hi = _square_root_bounds(lo2, hi2)
    for b, (_, idx) in enumerate(live):
        if not (ok[b] and exf[b] and exg[b]) or not _acceptable(lo[b], hi[b], max_relative_width):
            continue
        out[idx] = _record(shape, lo[b], hi[b], int(ef[b] + eg[b]), q, q)


def enclose_matrices(matrices: Sequence[NamedMatrix], *, method: str = METHOD) -> list[SingularValueEnclosure]:
    """Certified enclosures of every matrix, in input order, by one route of :data:`ROUTES`.

    ``"gram-eig"`` (default): :func:`enclose_batch` (batched over heads; matrices it cannot certify
    tightly go to the residual route).  ``"eft"`` / ``"arb"``: the per-matrix residual route
    (:func:`specbound.certified.factored.enclose`), kept selectable as the independent cross-check.
    Every route has the same contract: ``lower[i] <= sigma_{i+1}(W) <= upper[i]``.
    """
    if method not in ROUTES:
        raise ValueError(f"unknown enclosure route {method!r}; expected one of {ROUTES}")
    if method == METHOD:
        return enclose_batch(matrices)
    return [enclose_residual(mat, method=method) for mat in matrices]

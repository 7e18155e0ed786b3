"""Certified singular values of an exact product W = F G (structural rank <= inner dimension).

Proof: ``proofs_notes/structural_rank.md`` (exact zeros, Gram identity for the residual) together with
the theorem of ``proofs_notes/svd_enclosure.md``.  No m x n matrix is formed in Arb; the float steps
(QR of the factors, SVD of an r x r core) only choose the approximate factors.
"""

from __future__ import annotations

import numpy as np
from flint import arb, arb_mat

from specbound.certified.arb import (
    WORK_PREC,
    check_finite,
    pow2,
    precision,
    scale_exponent,
    scaled_by_pow2,
    to_arb_mat,
)
from specbound.certified.enclosure import (
    SingularValueEnclosure,
    clean_factors,
    enclose_singular_values,
    enclosure_from_bounds,
    fallback_enclosure,
    scaled_enclosure,
    zero_enclosure,
)
from specbound.errors import CertificationError
from specbound.matrices import NamedMatrix


def _exact_scaled_arb(a: np.ndarray, e: int) -> arb_mat:
    """Exact Arb matrix of 2**-e a (done in Arb when the float scaling would lose subnormal bits)."""
    s, inexact = scaled_by_pow2(a, e)
    if not inexact:
        return to_arb_mat(s)
    return to_arb_mat(a) * pow2(-e)


def _approximate_factors(fs: np.ndarray, gs: np.ndarray, q: int):
    """Float choice of U (m x q), s (q), V^T (q x n) with U diag(s) V^T ~ fs @ gs; None on failure."""
    m, r = fs.shape
    n = gs.shape[1]
    try:
        if r < min(m, n):
            qf, rf = np.linalg.qr(fs)
            qg, rg = np.linalg.qr(gs.T)
            uk, s, vkt = np.linalg.svd(rf @ rg.T)
            u, vt = qf @ uk, (qg @ vkt.T).T
        else:
            u, s, vt = np.linalg.svd(fs @ gs, full_matrices=False)
            u, s, vt = u[:, :q], s[:q], vt[:q, :]
    except np.linalg.LinAlgError:
        return None
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(s)) and np.all(np.isfinite(vt))):
        return None
    return clean_factors(u, s, vt)


def _dot_entries(a: list, b: list) -> arb:
    total = arb(0)
    for x, y in zip(a, b):
        total += x * y
    return total


def _gram_minus_identity_fro(g: arb_mat) -> arb:
    q = g.nrows()
    total = arb(0)
    for i in range(q):
        for j in range(q):
            x = g[i, j] - 1 if i == j else g[i, j]
            total += x * x
    return total.sqrt()


def enclose_factored(f: np.ndarray, g: np.ndarray) -> SingularValueEnclosure:
    """Certified enclosure of the singular values of the **exact** product ``f @ g``.

    ``f`` is m x r, ``g`` is r x n (finite float64, taken as exact).  sigma_{q+1..k} = 0 exactly
    (q = min(m, n, r), k = min(m, n)) and is reported as ``zero_count = k - q``; sigma_1..sigma_q are
    enclosed from the r x r core (method "gram"), or [0, ||FG||_F] (method "fallback").
    """
    f = check_finite(f, "left factor")
    g = check_finite(g, "right factor")
    if f.ndim != 2 or g.ndim != 2 or f.shape[1] != g.shape[0]:
        raise CertificationError(f"factor shapes {f.shape} and {g.shape} do not multiply")
    m, r = f.shape
    n = g.shape[1]
    k = min(m, n)
    q = min(k, r)
    if k == 0 or q == 0 or not np.any(f) or not np.any(g):
        return zero_enclosure((m, n), rank_cap=q)
    a, b = scale_exponent(f), scale_exponent(g)
    fs, gs = scaled_by_pow2(f, a)[0], scaled_by_pow2(g, b)[0]
    factors = _approximate_factors(fs, gs, q)
    with precision(WORK_PREC):
        fa, ga = _exact_scaled_arb(f, a), _exact_scaled_arb(g, b)
        ftf = fa.transpose() * fa
        ggt = ga * ga.transpose()
        fro2 = _dot_entries(ftf.entries(), ggt.entries())  # ||Fs Gs||_F^2 exactly (in a ball)
        result = None
        if factors is not None:
            u, s, vt = factors
            ua, va = to_arb_mat(u), to_arb_mat(vt.T)
            sa = [arb(float(x)) for x in s]
            ftu = (fa.transpose() * ua).entries()  # r x q, row-major
            gv = (ga * va).entries()  # r x q
            utu = ua.transpose() * ua  # q x q
            vtv = va.transpose() * va
            cross = arb(0)
            for idx, (x, y) in enumerate(zip(ftu, gv)):
                cross += x * sa[idx % q] * y
            utu_e, vtv_e = utu.entries(), vtv.entries()
            last = arb(0)
            for idx, (x, y) in enumerate(zip(utu_e, vtv_e)):
                last += sa[idx // q] * x * sa[idx % q] * y
            delta2 = fro2 - 2 * cross + last
            delta = delta2.upper()
            delta = delta.sqrt().upper() if delta > 0 else arb(0)
            if not delta.is_finite():
                delta = None
            if delta is not None:
                eta_u = _gram_minus_identity_fro(utu).upper()
                eta_v = _gram_minus_identity_fro(vtv).upper()
                result = enclosure_from_bounds(
                    (m, n), s, delta, eta_u, eta_v, a + b, "gram", k, zero_count=k - q, rank_cap=q
                )
        if result is None:
            fro = fro2.upper().sqrt() * pow2(a + b)
            result = fallback_enclosure((m, n), fro, zero_count=k - q, rank_cap=q)
    return result


def enclose(matrix: NamedMatrix, *, method: str = "eft") -> SingularValueEnclosure:
    """Certified singular values of a covered matrix: factored -> :func:`enclose_factored` of the exact
    product; dense -> :func:`~specbound.certified.enclosure.enclose_singular_values` (``method``);
    a score scale left over (``matrix.scale_sq != 1``) by
    :func:`~specbound.certified.enclosure.scaled_enclosure`."""
    if matrix.is_factored:
        enc = enclose_factored(matrix.left, matrix.right)
    else:
        enc = enclose_singular_values(matrix.left, method=method)
    return scaled_enclosure(enc, matrix.scale_sq)

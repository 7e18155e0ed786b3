"""The exact factors of a covered matrix: the one way certified code reads a weight matrix.

A :class:`~specbound.matrices.NamedMatrix` stands for the exact real matrix
``W = sqrt(scale_sq) * left [@ right]`` (``scale_sq`` an exact positive rational, ``right`` optional).
Its :meth:`~specbound.matrices.NamedMatrix.dense` is a float rounding of ``W`` -- another matrix --
so the certified forward passes never use it.  They read ``W`` here:

* :func:`arb_factors` (the Arb passes): balls ``(L, R)`` with ``W = L_exact R`` for a real
  ``L_exact`` inside the balls ``L`` and ``R`` exact; ``sqrt(scale_sq)`` is multiplied into one factor
  as an Arb ball, never as a float.  With ``scale_sq == 1`` both are the stored floats, radius 0.
* :func:`float_factors` (the binary64 fast pass): float arrays whose exact real product *is* ``W``,
  with ``sqrt(scale_sq)`` folded in only when the fold is exact (a power of two, no bit lost);
  otherwise :class:`InexactScale` is raised and the caller uses the Arb pass.
* :func:`scale_ball`: the one enclosure of ``sqrt(scale_sq)``, also used by the singular-value and
  entry-norm enclosures (:mod:`specbound.certified.enclosure`, :mod:`specbound.certified.norms`).

Proof: proofs_notes/certified_forward.md section 2 (Arb) and proofs_notes/fast_forward.md step 11
(binary64).

Public API: :func:`scale_ball`, :func:`arb_factors`, :func:`float_factors`, :func:`exact_mat`,
:class:`InexactScale`.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from flint import arb, arb_mat

from specbound.certified.arb import precision
from specbound.errors import CertificationError, LayoutError
from specbound.matrices import NamedMatrix

SCALE_PREC = 128
"""Arb bits for ``sqrt(scale_sq)`` and the scaled factor (their radii only, never validity)."""

SIDES = ("left", "right")


class InexactScale(CertificationError):
    """``sqrt(scale_sq)`` cannot be folded into binary64 factors exactly."""


def exact_mat(a: np.ndarray, what: str = "") -> arb_mat:
    """``arb_mat`` equal (radius 0) to a finite 2-D float64 array (``what`` names it in errors)."""
    a = np.asarray(a, dtype=np.float64)
    where = f"{what}: " if what else ""
    if a.ndim != 2:
        raise LayoutError(f"{where}expected a 2-D array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise LayoutError(f"{where}array has NaN/Inf entries")
    m, n = a.shape
    return arb_mat(m, n, a.ravel().tolist())


def _scale_sq_of(matrix: NamedMatrix) -> Fraction:
    s = Fraction(matrix.scale_sq)
    if s <= 0:
        raise LayoutError(f"{matrix.name}: score scale squared {s} must be positive")
    return s


def scale_ball(scale_sq: Fraction) -> arb:
    """A ball containing ``sqrt(scale_sq)`` for an exact positive rational ``scale_sq`` (exact, radius 0,
    when ``scale_sq == 1``)."""
    s = Fraction(scale_sq)
    if s <= 0:
        raise LayoutError(f"score scale squared {s} must be positive")
    if s == 1:
        return arb(1)
    with precision(SCALE_PREC):
        return (arb(s.numerator) / arb(s.denominator)).sqrt()


def arb_factors(matrix: NamedMatrix, scale_on: str = "left") -> tuple[arb_mat, arb_mat | None]:
    """Balls ``(L, R)`` of ``W = sqrt(scale_sq) * left [@ right]``: ``R`` is ``right`` (None for a dense
    matrix) and the scale multiplies the factor named by ``scale_on`` ("left" or "right").

    Contract: every entry of the scaled factor's ball contains the exact real entry
    ``sqrt(scale_sq) * x`` (Arb inclusion of one product of balls), the other factor is exact; so a
    ball product with ``L`` then ``R`` contains the product with the exact ``W``.  ``scale_sq == 1``
    returns the stored floats exactly (radius 0).
    """
    if scale_on not in SIDES:
        raise ValueError(f"scale_on must be one of {SIDES}, got {scale_on!r}")
    s = _scale_sq_of(matrix)
    left = exact_mat(matrix.left, matrix.name)
    right = None if matrix.right is None else exact_mat(matrix.right, matrix.name)
    if s == 1:
        return left, right
    c = scale_ball(s)
    with precision(SCALE_PREC):
        if scale_on == "right" and right is not None:
            return left, right * c
        if scale_on == "right":
            raise LayoutError(f"{matrix.name}: a dense matrix has no right factor to scale")
        return left * c, right


def _dyadic_sqrt(s: Fraction) -> int | None:
    """``k`` with ``sqrt(s) = 2**k`` exactly, or None when ``sqrt(s)`` is not a power of two."""
    p, q = s.numerator, s.denominator
    if p & (p - 1) or q & (q - 1):  # numerator and denominator must be powers of two
        return None
    e = p.bit_length() - q.bit_length()  # s = 2**e
    return None if e % 2 else e // 2


def float_factors(matrix: NamedMatrix) -> tuple[np.ndarray, np.ndarray | None]:
    """Binary64 ``(L, R)`` (``R`` None for a dense matrix) whose exact real product ``L [@ R]`` equals
    ``W = sqrt(scale_sq) * left [@ right]``.

    ``scale_sq == 1``: the stored floats.  ``sqrt(scale_sq) = 2**k``: ``L = ldexp(left, k)``, accepted
    only when scaling back returns ``left`` and every entry is finite (no bit fell below 2**-1074, no
    overflow), so ``L`` is exactly ``2**k left``.  Any other scale raises :class:`InexactScale`.
    """
    s = _scale_sq_of(matrix)
    left = np.asarray(matrix.left, dtype=np.float64)
    right = None if matrix.right is None else np.asarray(matrix.right, dtype=np.float64)
    for a in (left, right):
        if a is not None and not np.isfinite(a).all():
            raise LayoutError(f"{matrix.name}: weights contain NaN or Inf")
    if s == 1:
        return left, right
    k = _dyadic_sqrt(s)
    if k is None:
        raise InexactScale(f"{matrix.name}: sqrt({s}) is not a power of two; the float factors cannot carry it "
                           "exactly")
    scaled = np.ldexp(left, k)
    if not (np.isfinite(scaled).all() and np.array_equal(np.ldexp(scaled, -k), left)):
        raise InexactScale(f"{matrix.name}: folding 2^{k} into the factor loses bits")
    return scaled, right


__all__ = ("InexactScale", "arb_factors", "exact_mat", "float_factors", "scale_ball")

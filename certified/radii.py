"""Rounding certified norms onto the post hoc grids of proofs_notes/theory.md section 6.

A grid radius is ``beta**k`` for an exact rational base ``beta > 1`` and an integer ``k``.  The
functions here choose ``k`` from an Arb ball and *check the choice exactly*: the comparison
``beta**k >= x`` is made between exact rationals (the ball's upper endpoint is a dyadic rational), so
a rounding error in the float estimate of ``log_beta x`` can only cost a few extra comparisons,
never validity.

Guarantees (``x`` an Arb ball, ``beta`` a ``Fraction`` > 1):

* :func:`index_up` returns the smallest integer ``k`` with ``beta**k >= upper(x)``; so ``beta**k``
  is >= every point of ``x`` (used for ``k_c``, ``k_s``, ``k_w``).
* :func:`index_down` returns the largest ``k`` with ``beta**k <= lower(x)`` (used for the margin:
  ``rho~ <= rho`` so ``l_rho~ <= l_rho``).
* :func:`round_matrix` applies the rules of section 6 to one matrix: a proven zero matrix gets
  ``p = 0``, rank 0 and ``k_c = 0``; ``p = 0`` uses the proven rank bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from flint import arb, fmpq

from specbound.certified.arb import WORK_PREC, precision
from specbound.certified.enclosure import SingularValueEnclosure
from specbound.certified.norms import schatten_power, spectral_norm
from specbound.errors import CertificationError


def exact_value(point: arb) -> Fraction:
    """The exact rational value of a radius-0 ball (e.g. an endpoint from ``upper()``)."""
    if not point.is_exact():
        raise ValueError("exact_value needs a ball of radius 0")
    man, exp = point.mid().man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def power(beta: Fraction, k: int) -> Fraction:
    """beta**k as an exact rational."""
    return Fraction(beta) ** int(k)


def power_ball(beta: Fraction, k: int) -> arb:
    """A ball containing beta**k (exact when beta**k is dyadic; else rounded outward)."""
    q = power(beta, k)
    with precision(WORK_PREC):
        return arb(fmpq(q.numerator, q.denominator))


def _log_estimate(x: Fraction, beta: Fraction) -> float:
    # float estimate of log_beta(x) without overflow/underflow: logs of numerator and denominator.
    lx = _log_fraction(x)
    return lx / _log_fraction(beta)


def _log_fraction(q: Fraction) -> float:
    def lg(v: int) -> float:
        b = v.bit_length()
        shift = max(0, b - 60)
        return math.log(v >> shift) + shift * math.log(2.0)

    return lg(q.numerator) - lg(q.denominator)


def _checked_base(beta) -> Fraction:
    b = Fraction(beta)
    if b <= 1:
        raise ValueError(f"a grid base must be > 1, got {beta}")
    return b


def index_up(x: arb, beta) -> int:
    """Smallest integer k with beta**k >= every point of ``x`` (0 if ``x <= 0`` entirely).

    The answer is decided by exact rational comparisons against ``upper(x)``; a non-finite ball
    raises :class:`CertificationError` (no finite radius dominates it).
    """
    beta = _checked_base(beta)
    if not x.is_finite():
        raise CertificationError("cannot round an unbounded enclosure onto the grid")
    hi = exact_value(x.upper())
    if hi <= 0:
        return 0  # every beta**k > 0 dominates a nonpositive value; 0 is the cheapest index
    k = math.ceil(_log_estimate(hi, beta))
    while power(beta, k) < hi:
        k += 1
    while power(beta, k - 1) >= hi:
        k -= 1
    return k


def index_down(x: arb, beta) -> int:
    """Largest integer k with beta**k <= every point of ``x``; needs ``lower(x) > 0``."""
    beta = _checked_base(beta)
    lo = exact_value(x.lower())
    if not lo > 0:
        raise CertificationError("the margin must be certainly positive to round it onto the grid")
    k = math.floor(_log_estimate(lo, beta))
    while power(beta, k) > lo:
        k -= 1
    while power(beta, k + 1) <= lo:
        k += 1
    return k


def dominates(beta, k: int, x: arb) -> bool:
    """True iff beta**k >= upper(x) (exact comparison); the check a verifier repeats."""
    if not x.is_finite():
        return False
    return power(Fraction(beta), k) >= exact_value(x.upper())


@dataclass(frozen=True)
class MatrixRounding:
    """The grid point of one matrix (proofs_notes/theory.md section 6).

    ``p``: the Schatten index actually used (0 for the rank form, forced for a proven zero matrix);
    ``k_c``: c~ = beta_c**k_c >= ||W||; ``k_s``: s~ = beta_s**k_s >= S_p(W) (None when p = 0);
    ``rank``: a proven upper bound on rank(W) (the s of the rank form); ``spectral``/``schatten``:
    the certified balls the radii were rounded from (``schatten`` is the rank ball when p = 0).
    """

    p: Fraction
    k_c: int
    k_s: int | None
    rank: int
    spectral: arb
    schatten: arb
    zero: bool


def round_matrix(enc: SingularValueEnclosure, p, beta_c, beta_s) -> MatrixRounding:
    """Round one certified enclosure at the requested index ``p`` (a Fraction on P_m).

    A matrix whose rank is proven 0 (W = 0) gets p = 0, rank 0 and k_c = 0 whatever was asked.
    """
    p = Fraction(p)
    rank = enc.rank_upper
    spectral = spectral_norm(enc)
    if rank == 0:
        return MatrixRounding(Fraction(0), 0, None, 0, spectral, arb(0), True)
    k_c = index_up(spectral, beta_c)
    if p == 0:
        return MatrixRounding(p, k_c, None, rank, spectral, schatten_power(enc, 0), False)
    sp_ball = schatten_power(enc, p)
    return MatrixRounding(p, k_c, index_up(sp_ball, beta_s), rank, spectral, sp_ball, False)

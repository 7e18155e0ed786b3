"""Certified one-sided binomial inversion in log space (proofs_notes/binomial_inversion.md).

    ``BinInv(n, k, d) = max{p in [0, 1] : P(Bin(n, p) <= k) >= d}``,   ``C = log(1/d)``.

The Occam route (proofs_notes/occam_route.md) needs BinInv at levels ``d = delta pi e^(-H)`` with ``H``
from 10^4 to 10^7 nats: ``d`` underflows binary64, so it is never formed.  Every function here takes the
mass ``C`` (an Arb ball or an exact number; its *upper* endpoint is used, BinInv being nondecreasing in
``C``) and returns an exact binary64 point ``p^`` (as a radius-0 ``arb``) with a certificate checked in Arb:

* kl form, any ``n`` (note (d2)): ``p^ >= k/n`` and ``kl(k/n || p^) >= C/n``;
* tail form (note (d1), (e)): ``log P(Bin(n, p^) <= k) <= -C``, with the CDF bounded above by a few
  terms summed downward from ``i = k`` plus a certified geometric remainder, ``log binom(n, k)`` from
  log-gamma (exact to the working precision for ``n`` up to 10^9 and beyond);
* ``k = 0``: the upper endpoint of ``-expm1(-C/n)`` (exact formula); ``k = n``: 1; ``C = 0``, ``k < n``: 0.

Floats only *choose* ``p^`` (bisection over binary64 numbers); a point whose certificate cannot be
proven is never returned, and 1 is always valid.  Both forms are valid, so :func:`bininv_upper` returns
the smaller.  Nothing here returns a value below the true BinInv (tests/certified/test_binomial.py
checks this against 60-digit mpmath roots, with mutants that must fail).

Public API: :func:`bininv_upper`, :func:`invert` (-> :class:`Inversion`, both forms), :func:`kl_inv_upper`,
:func:`tail_inv_upper`, :func:`log_cdf`, :func:`kl`, :func:`certifies` (a verifier's check of a given point).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from flint import arb, fmpq

from specbound.certified.arb import float_lower, float_upper, precision

WORK_BITS = 192
"""Arb precision of every evaluation here (C up to 1e12 nats keeps 150 bits below the unit)."""

REMAINDER_TOL = 2.0**-40
"""The downward sum stops once its certified remainder is below this fraction of the sum (tightness only)."""

MAX_TERMS = 4096
"""At most this many terms per CDF evaluation; beyond it the (valid, looser) remainder bound is kept, and
the tail form is not attempted when its root would need more (see :func:`_affordable`)."""

SEARCH_REL = 2.0**-46
"""Bisection stops when the bracket is below this fraction of its upper end (tightness only)."""

Mass = arb | fmpq | Fraction | int | float


@dataclass(frozen=True)
class Inversion:
    """Both certified upper bounds of ``BinInv(n, k, e^(-C))`` and the reported (smaller) one.

    ``value``: the reported bound (an exact point); ``kl``: the kl form's bound; ``tail``: the tail form's
    bound, or ``None`` where it was not attempted (``k = 0`` and ``k = n`` are closed forms); ``method``:
    which one ``value`` is ("closed", "kl" or "tail")."""

    value: arb
    kl: arb
    tail: arb | None
    method: str


# ------------------------------------------------------------------------------- inputs


def _counts(n: int, k: int) -> tuple[int, int]:
    for name, v in (("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"binomial inversion: {name} must be an int, got {type(v).__name__}")
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"binomial inversion needs n >= 1 and 0 <= k <= n, got n={n}, k={k}")
    return n, k


def mass_upper(C: Mass) -> arb:
    """An exact point ``>= C`` (the upper endpoint of a ball; exact numbers as they are); refuses a mass
    that is not certainly finite and ``>= 0`` (``C = log(1/d)`` with ``0 < d <= 1``)."""
    if isinstance(C, bool):
        raise TypeError("the mass C must be a number, got a bool")
    if isinstance(C, float) and not math.isfinite(C):
        raise ValueError(f"the mass C must be finite, got {C!r}")
    with precision(WORK_BITS):
        if isinstance(C, Fraction):
            ball = arb(fmpq(C.numerator, C.denominator))
        elif isinstance(C, (arb, fmpq, int, float)):
            ball = arb(C)
        else:
            raise TypeError(f"the mass C must be an arb, fmpq, Fraction, int or float, got {type(C).__name__}")
        if not ball.is_finite() or not ball.lower() >= 0:
            raise ValueError(f"the mass C must be certainly finite and >= 0, got {C!r}")
        return ball.upper()


# ------------------------------------------------------------------------------- kl form


def kl(q: arb, p: arb) -> arb:
    """A ball containing ``kl(q || p) = q log(q/p) + (1-q) log((1-q)/(1-p))`` for ``q`` in [0, 1),
    ``p`` in (0, 1) (``0 log 0 = 0``: an exact ``q = 0`` gives ``-log(1-p)``)."""
    with precision(WORK_BITS):
        one_q = 1 - q
        tail = one_q * (one_q / (1 - p)).log()
        if q.is_zero():
            return tail
        return q * (q / p).log() + tail


def _kl_certifies(q: arb, p: float, c: arb) -> bool:
    """Arb proves ``p >= q`` and ``kl(q || p) >= c`` (note (d2)); ``p = 1`` is always valid."""
    if p >= 1.0:
        return True
    pb = arb(p)
    if not pb >= q:  # arb comparison: True only when certain
        return False
    return bool(kl(q, pb) >= c)


def _bisect(holds: Callable[[float], bool], lo: float, hi: float) -> float:
    """The upper end of a bracket ``[lo, hi]`` of binary64 numbers where ``holds(hi)`` is certified (the
    caller's invariant), shrunk until ``hi - lo <= SEARCH_REL * hi``.  Returns ``hi``: only points where
    the certificate was proven are ever returned."""
    while hi - lo > SEARCH_REL * hi:
        mid = lo + (hi - lo) / 2
        if not lo < mid < hi:
            break
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _q_below(n: int, k: int) -> float:
    """A binary64 number ``<= k/n``."""
    return float_upper(-arb(fmpq(k, n))) * -1.0


def kl_inv_upper(n: int, k: int, C: Mass) -> arb:
    """An exact point ``p^ >= klInv(k/n, C/n) >= BinInv(n, k, e^(-C))`` (note (d2)), certified by Arb:
    ``p^ >= k/n`` and ``kl(k/n || p^) >= C/n``; any ``n``."""
    n, k = _counts(n, k)
    c_hi = mass_upper(C)
    if k == n:
        return arb(1)
    with precision(WORK_BITS):
        q = arb(fmpq(k, n))
        c = c_hi / n
        if c.is_zero():
            return arb(float_upper(q))  # kl(q || q) = 0 >= 0 at any point >= q
        return arb(_bisect(lambda p: _kl_certifies(q, p, c), _q_below(n, k), 1.0))


# ------------------------------------------------------------------------------- tail form


def _log_choose(n: int, k: int) -> arb:
    return (arb(n + 1).lgamma() - arb(k + 1).lgamma()) - arb(n - k + 1).lgamma()


def _cdf_sum(n: int, k: int, p: arb, max_terms: int) -> tuple[arb, arb]:
    """``(lower, upper)`` balls with ``lower <= F_n(k; p) / t_k <= upper`` (note (e)): the terms
    ``t_k, t_(k-1), ...`` relative to ``t_k``, summed downward until the certified geometric remainder
    is below :data:`REMAINDER_TOL` of the sum, all ``k + 1`` terms are in, or ``max_terms`` is reached
    (then the remainder bound is kept if its ratio is certainly < 1, else ``upper`` is infinite)."""
    a = (1 - p) / p  # rho_i = a * i / (n - i + 1)
    s = arb(1)  # t_k / t_k
    u = arb(1)  # t_i / t_k for the current index i
    i = k
    steps = 0
    while i > 0:
        u = u * a * i / (n - i + 1)  # now t_(i-1) / t_k
        i -= 1
        steps += 1
        if i == 0:
            s = s + u
            return s, s  # every term is in
        r = a * i / (n - i + 1)  # rho_i: ratio t_(i-1) / t_i, largest of all ratios still to come
        if r < 1:
            rem = u / (1 - r)  # t_i + t_(i-1) + ... <= t_i / (1 - rho_i)
            if rem <= REMAINDER_TOL * s or steps >= max_terms:
                return s + u, s + rem
        elif steps >= max_terms:
            return s + u, arb.pos_inf()
        s = s + u
    return s, s  # k = 0: F = t_0


def log_cdf(n: int, k: int, p: arb | float | Fraction, max_terms: int = MAX_TERMS) -> arb:
    """A ball containing ``log P(Bin(n, p) <= k)`` (``-inf`` endpoint possible only at ``p = 1``), for
    ``0 <= p <= 1``; the upper endpoint is what certifies the tail form.  ``max_terms`` caps the work
    (a smaller cap gives a wider, still valid, ball)."""
    n, k = _counts(n, k)
    with precision(WORK_BITS):
        pb = arb(fmpq(p.numerator, p.denominator)) if isinstance(p, Fraction) else arb(p)
        if not (pb >= 0 and pb <= 1):
            raise ValueError(f"log_cdf needs 0 <= p <= 1 certainly, got {p!r}")
        if k == n or pb.is_zero():
            return arb(0)
        if pb == 1:
            return arb.neg_inf()
        log_tk = _log_choose(n, k) + k * pb.log() + (n - k) * (-pb).log1p()
        lo, hi = _cdf_sum(n, k, pb, max_terms)
        upper = (log_tk + hi.log()).upper() if hi.is_finite() else arb(0)
        if not upper.is_finite() or upper > 0:
            upper = arb(0)  # F <= 1
        return (log_tk + lo.log()).union(upper)


def _tail_certifies(n: int, k: int, p: float, c_hi: arb) -> bool:
    """Arb proves ``log F_n(k; p) <= -C`` (note (d1)); ``p = 1`` is always valid."""
    if p >= 1.0:
        return True
    return bool(log_cdf(n, k, p) <= -c_hi)


def _affordable(n: int, k: int, start: float) -> bool:
    """Float estimate (a choice only): all ``k + 1`` terms fit in :data:`MAX_TERMS`, or the downward sum
    near a root below ``start`` needs at most about ``MAX_TERMS / 4`` terms (they shrink by
    ``rho_k ~ q (1 - p) / (p (1 - q))`` per step at ``p``)."""
    q = k / n
    if start >= 1.0 or k + 1 <= MAX_TERMS:
        return True
    if start <= q:
        return False
    rho = q * (1 - start) / (start * (1 - q))
    return rho <= 0 or math.log(REMAINDER_TOL) / math.log(rho) <= MAX_TERMS / 4


def tail_inv_upper(n: int, k: int, C: Mass, start: float | None = None) -> arb:
    """An exact point ``p^ >= BinInv(n, k, e^(-C))`` certified by the tail form (note (d1), (e)):
    bisection between ``k/n`` and ``start``, returning ``start`` or a point where ``log F_n(k; p^) <= -C``
    was proven.  ``start`` must itself be a certified upper bound (default 1; :func:`invert` passes the
    kl form's bound)."""
    n, k = _counts(n, k)
    c_hi = mass_upper(C)
    if k == n:
        return arb(1)
    if c_hi.is_zero():
        return arb(0)
    hi = 1.0 if start is None else float(start)
    if not _affordable(n, k, hi):
        return arb(hi)
    with precision(WORK_BITS):
        lo = _q_below(n, k)
        if lo >= hi or _tail_certifies(n, k, lo, c_hi):
            if k + 1 > MAX_TERMS:  # the root lies below k/n (tiny C), where every term is needed
                return arb(hi)
            hi, lo = min(hi, lo), 0.0
        return arb(_bisect(lambda p: _tail_certifies(n, k, p, c_hi), lo, hi))


# ------------------------------------------------------------------------------- the reported bound


def _closed_k0(n: int, c_hi: arb) -> arb:
    """``-expm1(-C/n)`` (BinInv at k = 0, note (c)) rounded up to an exact binary64 point."""
    with precision(WORK_BITS):
        return arb(float_upper(-(-c_hi / n).expm1()))


def invert(n: int, k: int, C: Mass) -> Inversion:
    """Both certified upper bounds of ``BinInv(n, k, e^(-C))`` and the smaller as the reported value."""
    n, k = _counts(n, k)
    c_hi = mass_upper(C)
    if k == n:
        return Inversion(arb(1), arb(1), None, "closed")
    if k == 0:
        closed = _closed_k0(n, c_hi)
        return Inversion(closed, kl_inv_upper(n, k, c_hi), None, "closed")
    by_kl = kl_inv_upper(n, k, c_hi)
    by_tail = tail_inv_upper(n, k, c_hi, start=float(by_kl.mid()))
    if by_tail < by_kl:
        return Inversion(by_tail, by_kl, by_tail, "tail")
    return Inversion(by_kl, by_kl, by_tail, "kl")


def certifies(n: int, k: int, C: Mass, p: arb | float | Fraction) -> str | None:
    """The certificate that the number ``p`` is ``>= BinInv(n, k, e^(-C))`` for every ``C`` in the ball, or
    None when none is proven: "closed" (``p >= 1``; ``k = 0`` and ``p >= -expm1(-C/n)``; ``C = 0``), "kl"
    (``p >= k/n`` and ``kl(k/n || p) >= C/n``, note (d2)) or "tail" (``log P(Bin(n, p) <= k) <= -C``, note
    (d1)), each checked in Arb at the upper endpoint of ``C`` and at a binary64 number ``<= p`` (BinInv being
    a maximum, a certificate at a smaller point carries over).  A verifier's check of a recorded bound: it
    proves the given point, it does not search for one."""
    n, k = _counts(n, k)
    c_hi = mass_upper(C)
    with precision(WORK_BITS):
        pb = arb(fmpq(p.numerator, p.denominator)) if isinstance(p, Fraction) else arb(p)
        if not pb.is_finite() or not pb >= 0:
            return None
        if pb >= 1:
            return "closed"
        if k == n:
            return None
        if c_hi.is_zero() or (k == 0 and bool(pb >= -(-c_hi / n).expm1())):
            return "closed"
        below = float_lower(pb)  # a binary64 number <= every point of p
        if below <= 0:
            return None
        if _kl_certifies(arb(fmpq(k, n)), below, c_hi / n):
            return "kl"
        if _affordable(n, k, below) and _tail_certifies(n, k, below, c_hi):
            return "tail"
    return None


def bininv_upper(n: int, k: int, C: Mass) -> arb:
    """An exact point ``>= BinInv(n, k, e^(-C)) = max{p : P(Bin(n, p) <= k) >= e^(-C)}``, never below it,
    for integers ``n >= 1``, ``0 <= k <= n`` and a mass ``C >= 0`` (ball or exact; its upper endpoint is
    used).  The smaller of the certified kl and tail forms (closed forms at k = 0 and k = n)."""
    return invert(n, k, C).value


__all__ = ("Inversion", "bininv_upper", "certifies", "invert", "kl", "kl_inv_upper", "log_cdf", "mass_upper",
           "tail_inv_upper")

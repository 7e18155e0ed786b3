"""Exact wire form of Arb balls and singular-value enclosures (for results crossing processes).

``arb`` objects do not pickle, and a decimal string would round.  A ball is sent as its midpoint and
radius, each an exact binary number ``man * 2**exp`` with Python integers (``arb.mid().man_exp()``,
``arb.rad().man_exp()``); non-finite parts are sent as the text Arb prints for them.  Rebuilding
works at a precision at least the mantissa's bit length, so nothing is rounded: the round trip is
bit-identical (same midpoint, same radius), which makes a result computed in a worker process the
same object as the one computed in process.

Public API: :func:`arb_to_wire`, :func:`arb_from_wire`, :func:`enclosure_to_wire`,
:func:`enclosure_from_wire`.
"""

from __future__ import annotations

from flint import arb, ctx, fmpz

from specbound.certified.enclosure import SingularValueEnclosure

MAG_BITS = 30
"""Bits of an Arb radius's mantissa (``mag_t``)."""

Wire = tuple
"""A ball on the wire: ``(mid_man, mid_exp, rad_man, rad_exp)`` of ints, or ``("text", str)``."""


def _exact(man: int, exp: int) -> arb:
    """The exact binary number ``man * 2**exp`` as a radius-0 ball."""
    if man == 0:
        return arb(0)
    with ctx.workprec(max(64, abs(int(man)).bit_length() + 8)):
        return arb(fmpz(int(man))) * arb(2) ** int(exp)  # a power of two: the product is exact


def arb_to_wire(x: arb) -> Wire:
    """The exact midpoint and radius of ``x`` as integer mantissa/exponent pairs."""
    mid, rad = x.mid(), x.rad()
    if not (mid.is_finite() and rad.is_finite()):
        return ("text", x.str(radius=True))
    mm, me = mid.man_exp()
    rm, re = rad.man_exp()
    return (int(mm), int(me), int(rm), int(re))


def arb_from_wire(w: Wire) -> arb:
    """The ball :func:`arb_to_wire` described: same midpoint and radius, bit for bit."""
    if w[0] == "text":
        return arb(w[1])
    mm, me, rm, re = (int(v) for v in w)
    mid = _exact(mm, me)
    if rm == 0:
        return mid
    # Arb stores a radius with a 30-bit mantissa M and rounds a given radius v up to its top 30 bits
    # plus one unit; handing it v = (2M - 1) 2^(E-1) therefore gives back exactly M 2^E.
    shift = MAG_BITS - rm.bit_length()
    big, exp = rm << shift, re - shift  # rm 2^re = big 2^exp with big of exactly MAG_BITS bits
    with ctx.workprec(max(64, abs(mm).bit_length() + 8)):
        out = arb(mid, _exact(2 * big - 1, exp - 1))
    if out.mid().man_exp() != mid.mid().man_exp() or out.rad().man_exp() != _odd_form(rm, re):
        raise ValueError("ball could not be rebuilt exactly")  # pragma: no cover - Arb's radius rule changed
    return out


def _odd_form(man: int, exp: int) -> tuple[int, int]:
    """``man 2^exp`` with an odd mantissa (the form ``arb.rad().man_exp()`` returns)."""
    while man and man % 2 == 0:
        man, exp = man // 2, exp + 1
    return (man, exp)


def _maybe(x: arb | None) -> Wire | None:
    return None if x is None else arb_to_wire(x)


def _maybe_back(w: Wire | None) -> arb | None:
    return None if w is None else arb_from_wire(w)


def enclosure_to_wire(enc: SingularValueEnclosure) -> dict:
    """A :class:`SingularValueEnclosure` as plain picklable values (ints, strings, tuples)."""
    return {"shape": tuple(int(s) for s in enc.shape), "lower": tuple(arb_to_wire(x) for x in enc.lower),
            "upper": tuple(arb_to_wire(x) for x in enc.upper), "zero_count": int(enc.zero_count),
            "method": str(enc.method), "delta": _maybe(enc.delta), "eta_u": _maybe(enc.eta_u),
            "eta_v": _maybe(enc.eta_v), "rank_cap": enc.rank_cap}


def enclosure_from_wire(d: dict) -> SingularValueEnclosure:
    """The enclosure :func:`enclosure_to_wire` described, every ball bit-identical."""
    return SingularValueEnclosure(
        shape=tuple(int(s) for s in d["shape"]), lower=tuple(arb_from_wire(w) for w in d["lower"]),
        upper=tuple(arb_from_wire(w) for w in d["upper"]), zero_count=int(d["zero_count"]),
        method=str(d["method"]), delta=_maybe_back(d["delta"]), eta_u=_maybe_back(d["eta_u"]),
        eta_v=_maybe_back(d["eta_v"]), rank_cap=None if d["rank_cap"] is None else int(d["rank_cap"]))


__all__ = ["arb_from_wire", "arb_to_wire", "enclosure_from_wire", "enclosure_to_wire"]

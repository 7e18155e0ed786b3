"""What a certified number is: a bound or not, proven or not, vacuous or not -- decided once.

A :class:`Verdict` is computed once per result (:func:`verdict_of`) from the exact upper endpoints and
two facts (every lemma constant at or above its proven value; the empirical term certified), and
every output reads it: the certificate's ``result`` block and scope block, the ``certify`` table,
``verify`` and the API.  Nothing else composes these words.

It fails closed: a result of which it is not known that every constant is proven is *not proven*
(:func:`proven_in` reads a scope block that way), and a number that is not a bound on the 0-1 risk
is never headed "certified bound".
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Context, Decimal
from fractions import Fraction
from typing import Mapping

NOT_PROVEN = "NOT A PROVEN BOUND"
"""The label of a result built with a lemma constant below its proven value (an unproven claim)."""

VACUOUS = "vacuous"
"""The word printed next to a value >= 1: a bound on a probability that says nothing."""

NOT_A_BOUND = "NOT A BOUND (no empirical term)"
"""The label of complexity + confidence without an empirical term: a part of a bound, not a bound."""

USER_EMPIRICAL = "empirical term user-supplied, NOT certified"
"""What qualifies a bound whose empirical term is the user's number (it is not certified)."""

CERTIFIED_BOUND = "certified bound"
"""The label of a proven bound with a certified empirical term, below 1."""

HEADLINE_DIGITS = 6
"""Significant digits of the number in a headline (rounded up: the printed value is >= the bound)."""


def is_vacuous(upper) -> bool:
    """A value on the 0-1 risk is vacuous when its upper endpoint is >= 1 (any risk is <= 1)."""
    return upper >= 1


def decimal_up(value: Fraction, digits: int = HEADLINE_DIGITS) -> str:
    """A decimal string >= ``value`` with ``digits`` significant digits (rounded toward +inf)."""
    value = Fraction(value)
    ctx = Context(prec=digits, rounding=ROUND_CEILING)
    return str(ctx.divide(Decimal(value.numerator), Decimal(value.denominator)))


def proven_in(block: Mapping | None) -> bool:
    """Whether a scope block says every lemma constant is proven; False when the block or its
    ``proven`` key is missing or not ``True`` (fail closed: an unknown claim is not a proven one)."""
    return isinstance(block, Mapping) and block.get("proven") is True


@dataclass(frozen=True)
class Verdict:
    """The one account of what a certified result is.

    ``is_bound``: an empirical term is present, so the value is a bound on the 0-1 risk (else it is
    complexity + confidence only).  ``proven``: every lemma constant is at or above its proven value.
    ``vacuous``: the value is >= 1 -- for a bound, the bound; without an empirical term, the partial
    value, since any bound built on it is at least that large; None when there is no bound and the
    partial value is below 1 (whether a bound would be vacuous is not known).
    ``empirical_certified``: the empirical term was certified (False without one, or when the user
    supplied it).  ``label``: the short verdict written into the certificate.  ``headline``: the line
    that states the number (``value``, rounded up) with every qualification it needs.
    """

    is_bound: bool
    proven: bool
    vacuous: bool | None
    empirical_certified: bool
    label: str
    headline: str
    value: str


def label_of(*, is_bound: bool, proven: bool, vacuous: bool | None, empirical_certified: bool) -> str:
    """The short verdict: every qualification that applies, joined by "; ", else "certified bound"."""
    words = []
    if not proven:
        words.append(NOT_PROVEN)
    if not is_bound:
        words.append(NOT_A_BOUND)
    elif not empirical_certified:
        words.append(f"bound ({USER_EMPIRICAL})")
    if vacuous:
        words.append(f"{VACUOUS} (>= 1)")
    return "; ".join(words) or CERTIFIED_BOUND


def headline_of(*, is_bound: bool, proven: bool, vacuous: bool | None, empirical_certified: bool,
                value: str) -> str:
    """The line stating the number: "certified" only for a proven bound with a certified empirical
    term (or the certified parts of a partial result), every qualification in parentheses."""
    qualifiers = [NOT_PROVEN] if not proven else []
    if is_bound:
        subject = "bound on the 0-1 risk"
        if not empirical_certified:
            qualifiers.append(USER_EMPIRICAL)
    else:
        subject = "complexity + confidence"
        qualifiers.append("NOT a bound: no empirical term")
    certified = proven and (empirical_certified or not is_bound)
    head = ("certified " if certified else "") + subject
    if qualifiers:
        head += f" ({'; '.join(qualifiers)})"
    return f"{head}: {value}" + (f"  {VACUOUS} (>= 1)" if vacuous else "")


def verdict_of(*, bound_upper: Fraction | None, partial_upper: Fraction, proven: bool,
               empirical_certified: bool) -> Verdict:
    """The verdict of a result whose bound has the exact upper endpoint ``bound_upper`` (None: no
    empirical term, no bound) and whose complexity + confidence has ``partial_upper``."""
    is_bound = bound_upper is not None
    shown = bound_upper if is_bound else partial_upper
    if is_bound:
        vacuous: bool | None = bool(is_vacuous(bound_upper))
    else:
        # no bound yet, but every bound built on this part is >= it
        vacuous = True if is_vacuous(partial_upper) else None
    empirical_certified = bool(empirical_certified) and is_bound
    facts = dict(is_bound=is_bound, proven=bool(proven), vacuous=vacuous, empirical_certified=empirical_certified)
    value = decimal_up(shown)
    return Verdict(**facts, label=label_of(**facts), headline=headline_of(**facts, value=value), value=value)

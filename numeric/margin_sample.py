"""A sample of float margins held compactly: sorted values with integer multiplicities.

The float planner and evaluation read a sample's margins ``y_i f(X_i)`` in three ways only: their
range (the margin windows), the mean ramp loss at a margin (the Rademacher route's empirical term) and
the count ``#{i : y_i f(X_i) <= gamma}`` (the Occam route's K).  A :class:`MarginSample` answers the
three for a sample of size ``n`` in which ``values[j]`` occurs ``counts[j]`` times, without holding n
numbers.  Its one use: the sample-size planner (:mod:`specbound.planning`) asks "what would the
estimate be at n examples whose margins are distributed as a pilot sample's?", and
:func:`MarginSample.expanded` is that sample, exactly and for any n.

A plain array stays what it is everywhere (:func:`numeric.terms.as_margins`): the helpers
:func:`values_of`, :func:`count_at` and :func:`mean_over` compute on it exactly as before.  Floats
only: these are estimates for *choosing* (the certified count and ramp loss come from certified
margin enclosures, never from here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbound.errors import SpecboundError


@dataclass(frozen=True, eq=False)
class MarginSample:
    """The sample of size ``n = counts.sum()`` in which ``values[j]`` occurs ``counts[j]`` times.

    ``values`` (D,): finite float64, strictly increasing; ``counts`` (D,): int64 >= 1."""

    values: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        v = np.asarray(self.values, dtype=np.float64).reshape(-1)
        c = np.asarray(self.counts).reshape(-1)
        if v.size == 0 or v.shape != c.shape or not np.all(np.isfinite(v)):
            raise SpecboundError("a margin sample needs as many finite values as counts, at least one")
        if not np.issubdtype(c.dtype, np.integer) or np.any(c < 1):
            raise SpecboundError("a margin sample's counts must be integers >= 1")
        if np.any(np.diff(v) <= 0):
            raise SpecboundError("a margin sample's values must be strictly increasing")
        object.__setattr__(self, "values", v)
        object.__setattr__(self, "counts", c.astype(np.int64))

    @property
    def n(self) -> int:
        """The size of the sample held."""
        return int(self.counts.sum())

    @classmethod
    def expanded(cls, margins, n: int) -> MarginSample:
        """The sample of size ``n`` whose i-th smallest margin is ``q[floor(i m / n)]``, i = 0..n-1,
        where ``q`` are the ``m`` given margins sorted (an array, or a :class:`MarginSample` of size m):
        the pilot's empirical distribution spread over n examples (``n = m`` gives the margins back,
        ``n = r m`` repeats each r times).

        In exact integers: the value whose pilot ranks are ``[a, b)`` occurs ``ceil(b n / m) - ceil(a n / m)``
        times, so the count at any gamma is ``ceil(n c / m)`` where ``c`` is the pilot's count."""
        if isinstance(margins, MarginSample):
            values, counts = margins.values, margins.counts
        else:
            q = np.asarray(margins, dtype=np.float64).reshape(-1)
            if q.size == 0 or not np.all(np.isfinite(q)):
                raise SpecboundError("margins must be a non-empty array of finite numbers")
            values, counts = np.unique(q, return_counts=True)
        n = int(n)
        if n < 1:
            raise SpecboundError(f"a margin sample needs n >= 1, got {n}")
        ranks = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        m = int(ranks[-1])
        if m * n < 2**62:
            ends = -((-ranks * n) // m)  # ceil(rank n / m), exact in int64
        else:  # rank n may exceed 2^63: Python integers (one per distinct value)
            ends = np.array([-((-int(r) * n) // m) for r in ranks], dtype=object)
        per = np.asarray(ends[1:] - ends[:-1]).astype(np.int64)
        keep = per > 0
        return cls(values[keep], per[keep])

    def count_at(self, gammas) -> np.ndarray:
        """``#{i : margin_i <= gamma}`` for each gamma (int64, same shape)."""
        g = np.asarray(gammas, dtype=np.float64)
        cum = np.concatenate([[0], np.cumsum(self.counts)])
        return cum[np.searchsorted(self.values, g, side="right")]

    def mean(self, per_value: np.ndarray) -> np.ndarray:
        """The sample mean of a function of the margin, given its values at ``values`` on the last axis."""
        return (np.asarray(per_value, dtype=np.float64) * self.counts).sum(axis=-1) / float(self.n)


def values_of(margins) -> np.ndarray:
    """The margins' values (each distinct value once for a :class:`MarginSample`): their range is what
    the margin windows read."""
    return margins.values if isinstance(margins, MarginSample) else margins


def count_at(margins, gammas) -> np.ndarray:
    """``#{i : margin_i <= gamma}`` for each gamma, for an array or a :class:`MarginSample`."""
    if isinstance(margins, MarginSample):
        return margins.count_at(gammas)
    if np.ndim(gammas) == 0:
        return np.count_nonzero(margins <= gammas)
    return np.searchsorted(np.sort(margins), gammas, side="right")


def mean_over(margins, field) -> np.ndarray:
    """The sample mean of ``field(a)`` (a function of the margins broadcast on a new last axis), for an
    array or a :class:`MarginSample`."""
    if isinstance(margins, MarginSample):
        return margins.mean(field(margins.values))
    return field(margins).mean(-1)

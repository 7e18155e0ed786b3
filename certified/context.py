"""Arithmetic contexts: what a number and a vector of numbers are in one evaluation of the bound.

The bound's driver (:func:`specbound.certified.evaluation.evaluate`) is written once against a
context ``ctx``, the way mpmath writes a quadrature once against its mp, fp and iv contexts.  A
context fixes the arithmetic; the driver fixes the algorithm.  Two contexts exist:

* :class:`ArbContext` (here): numbers are Arb balls, a vector is a numpy *object* array of balls,
  one per matrix, and every operation encloses the exact result;
* ``specbound.numeric.context.NumpyContext``: numbers are float64, a vector is a float64 array; no
  error bounds (the fast path).

Masks (which matrices a formula applies to) are numpy boolean arrays in both, computed from exact
integers, so both contexts take the same branches.

The operations, with the contract every context meets (``x`` stands for the exact real value that
the Arb result encloses and the float result approximates):

``zero``, ``one``
    the numbers 0 and 1, exactly.
``exact(q)`` / ``exact_vector(qs)``
    an exact rational (``int`` or ``Fraction``) as a number: Arb, the ball of ``q`` (exact when
    ``q`` is dyadic); numpy, ``q`` rounded to float64.
``vector(items)``, ``broadcast(x, shape)``
    a vector of numbers; a number or vector broadcast to ``shape``.
``field(name, where=None, **values)``
    the theorem's field ``name`` (:class:`specbound.certified.compiled.CompiledTheorem`) applied
    elementwise with broadcasting.  ``where`` (a mask) says where the result will be used: Arb
    evaluates only there (``None`` elsewhere: a formula outside its domain is never formed); numpy
    evaluates everywhere and the caller's :meth:`select` discards the rest.
``select(mask, a, b)``
    ``a`` where ``mask``, else ``b``.
``vanish(mask, x)``
    where ``mask``, ``x`` is a value proven to be exactly 0 (e.g. an integral over an empty range):
    numpy writes 0 (no cancellation residue); Arb keeps its ball after checking that it contains 0
    (a ball that does not is an error, never silently replaced).
``sum(x, axis=None)``, ``group_sum(x, group, size)``, ``min(a, b)``
    sums (Arb: from an exact 0, in index order, rounded outward) and the minimum.
``bininv(n, k, C)``
    the one-sided binomial inversion ``BinInv(n, k, e^-C)`` for integers ``n >= 1``, ``0 <= k <= n`` and a
    mass ``C >= 0`` (proofs_notes/binomial_inversion.md), as an object with ``.value`` and ``.method``:
    Arb, an exact point never below the true value for any ``C`` in the ball
    (:func:`specbound.certified.binomial.invert`); numpy, a float estimate (for choosing).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Iterable, Sequence

import numpy as np
from flint import arb, fmpq

from specbound.certified.binomial import Inversion, invert
from specbound.certified.compiled import CompiledTheorem
from specbound.errors import CertificationError


def _item(v):
    # numpy scalars (int64, float64, bool_) as the Python numbers the Arb functions take exactly
    return v.item() if isinstance(v, np.generic) else v


def _objects(items: Sequence, shape=None) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for i, v in enumerate(items):
        out[i] = v
    return out if shape is None else out.reshape(shape)


class ArbContext:
    """Ball arithmetic (python-flint ``arb``) at the caller's precision, one ball per matrix.

    The caller sets the working precision (``specbound.certified.arb.precision``) around the whole
    evaluation; every operation here is exact or rounds outward at that precision.
    """

    name = "arb"

    def __init__(self, theorem: CompiledTheorem):
        if theorem.backend != "arb":
            raise ValueError(f"ArbContext needs the Arb theorem, got the {theorem.backend} one")
        self.theorem = theorem

    @property
    def zero(self) -> arb:
        return arb(0)

    @property
    def one(self) -> arb:
        return arb(1)

    def exact(self, q) -> arb:
        f = Fraction(q)
        return arb(fmpq(f.numerator, f.denominator))

    def exact_vector(self, qs: Iterable) -> np.ndarray:
        return _objects([self.exact(q) for q in qs])

    def vector(self, items: Sequence) -> np.ndarray:
        return _objects(list(items))

    def broadcast(self, x, shape) -> np.ndarray:
        if isinstance(x, np.ndarray):
            return np.broadcast_to(x, shape)
        out = np.empty(shape, dtype=object)
        out.fill(x)
        return out

    def field(self, name: str, where=None, **values):
        fn, names = self.theorem.function(name)
        try:
            args = [values[a] for a in names]
        except KeyError as exc:
            raise TypeError(f"{name} needs {list(names)}, missing {exc}") from None
        shapes = [a.shape for a in args if isinstance(a, np.ndarray)]
        if where is not None:
            shapes.append(np.shape(where))
        if not shapes:
            return fn(*(_item(a) for a in args))
        shape = np.broadcast_shapes(*shapes)
        args = [np.broadcast_to(a, shape) if isinstance(a, np.ndarray) else _item(a) for a in args]
        mask = None if where is None else np.broadcast_to(where, shape)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(shape):
            if mask is None or mask[idx]:
                out[idx] = fn(*(_item(a[idx]) if isinstance(a, np.ndarray) else a for a in args))
        return out

    def select(self, mask, a, b):
        mask = np.asarray(mask, dtype=bool)
        shapes = [mask.shape] + [x.shape for x in (a, b) if isinstance(x, np.ndarray)]
        shape = np.broadcast_shapes(*shapes)
        a, b = self.broadcast(a, shape), self.broadcast(b, shape)
        mask = np.broadcast_to(mask, shape)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(shape):
            out[idx] = a[idx] if mask[idx] else b[idx]
        return out

    def vanish(self, mask, x):
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(x))
        for idx in np.ndindex(np.shape(x)):
            if mask[idx] and not x[idx].contains(0):
                raise CertificationError(f"a term proven to vanish evaluated to {x[idx]}, which excludes 0")
        return x

    def sum(self, x, axis=None):
        if axis is None:
            total = arb(0)
            for v in np.asarray(x, dtype=object).ravel():
                total += v
            return total
        moved = np.moveaxis(np.asarray(x, dtype=object), axis, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        return _objects([self.sum(row) for row in flat], moved.shape[:-1])

    def group_sum(self, x, group: np.ndarray, size: int) -> np.ndarray:
        """``out[..., g]`` = the sum of ``x[..., h]`` over the ``h`` with ``group[h] == g``, in order of ``h``."""
        x = np.asarray(x, dtype=object)
        out = self.broadcast(arb(0), x.shape[:-1] + (size,)).copy()
        for h, g in enumerate(np.asarray(group).tolist()):
            for idx in np.ndindex(x.shape[:-1]):
                out[idx + (g,)] = out[idx + (g,)] + x[idx + (h,)]
        return out

    def min(self, a, b):
        return arb.min(a, b)

    def bininv(self, n: int, k: int, C: arb) -> Inversion:
        return invert(int(n), int(k), C)

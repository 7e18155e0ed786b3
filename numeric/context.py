"""The float64 arithmetic context of the bound's driver (numpy arrays, one entry per matrix).

The contract of every operation is stated in :mod:`specbound.certified.context`; this context meets
it in plain float64: no error bounds, each value the correctly rounded result of a short chain of
operations.  :func:`specbound.certified.evaluation.evaluate` run with it is the fast evaluation; run
with ``ArbContext`` it is the certified one.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Iterable, Sequence

import numpy as np

from specbound.certified.compiled import CompiledTheorem

from .binomial import FloatInversion, bininv_estimate


class NumpyContext:
    """float64 numpy arithmetic; a formula is evaluated over whole arrays (a ``where`` mask only says
    which entries the caller keeps: the others may be inf or nan, and floating point warnings are off)."""

    name = "numpy"

    def __init__(self, theorem: CompiledTheorem):
        if theorem.backend != "numpy":
            raise ValueError(f"NumpyContext needs the numpy theorem, got the {theorem.backend} one")
        self.theorem = theorem

    zero = np.float64(0.0)
    one = np.float64(1.0)

    def exact(self, q) -> float:
        return float(Fraction(q)) if isinstance(q, Fraction) else float(q)

    def exact_vector(self, qs: Iterable) -> np.ndarray:
        return np.array([self.exact(q) for q in qs], dtype=np.float64)

    def vector(self, items: Sequence) -> np.ndarray:
        return np.stack(list(items))

    def broadcast(self, x, shape) -> np.ndarray:
        return np.broadcast_to(x, shape)

    def field(self, name: str, where=None, **values) -> np.ndarray:
        with np.errstate(all="ignore"):  # entries outside ``where`` may leave a formula's domain
            return self.theorem(name, **values)

    def select(self, mask, a, b) -> np.ndarray:
        return np.where(mask, a, b)

    def vanish(self, mask, x) -> np.ndarray:
        return np.where(mask, 0.0, x)

    def sum(self, x, axis=None):
        return np.asarray(x).sum(axis=axis)

    def group_sum(self, x, group: np.ndarray, size: int) -> np.ndarray:
        """``out[..., g]`` = the sum of ``x[..., h]`` over the ``h`` with ``group[h] == g``, in order of ``h``."""
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros(x.shape[:-1] + (size,), dtype=np.float64)
        np.add.at(out, (slice(None),) * (x.ndim - 1) + (group,), x)
        return out

    def min(self, a, b):
        return np.minimum(a, b)

    def bininv(self, n: int, k: int, C) -> FloatInversion:
        """A float estimate of ``BinInv(n, k, e^-C)`` (numeric/binomial.py; for choosing only)."""
        return bininv_estimate(int(n), int(k), float(C))

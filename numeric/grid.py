"""The Schatten-index grid ``P_m = {0, 1/m, 2/m, ..., 2}`` (docs/design.md section 6, proofs_notes/theory.md section 6).

Both the paper's proxy and our post hoc union bound choose each matrix's Schatten index ``p`` from
this grid *after* training; the union bound pays ``log(2m + 1)`` per matrix for that freedom, so the
grid must be fixed from the architecture alone.  The recommended (and the paper's) size is
``m = ceil(L + ln N)`` for depth ``L`` and width ``N``.

One source of truth: the size (``grid_size``, re-exported) and the points ``GRID_POINT = i/m`` live in
``specbound.derivation.posthoc``; this module only evaluates the points exactly.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp

from specbound.derivation.posthoc import GRID_POINT, grid_size
from specbound.derivation.symbols import m_grid

__all__ = ["architecture_grid", "grid_size", "schatten_grid"]

_INDEX = next(iter(GRID_POINT.free_symbols - {m_grid}))
"""The grid index ``i`` of ``GRID_POINT`` (i = 0..2m)."""


@lru_cache(maxsize=None)
def _points(m: int) -> tuple[float, ...]:
    # Each point is the exact rational i/m rounded once to float64 (not an accumulated step).
    return tuple(float(sp.Rational(GRID_POINT.subs({_INDEX: i, m_grid: m}))) for i in range(2 * m + 1))


def schatten_grid(m: int) -> np.ndarray:
    """The ``2m + 1`` points ``i/m`` for ``i = 0..2m``, float64, increasing, first 0, last 2.

    Each point is the correctly rounded value of the rational ``i/m``, so the endpoints are exactly
    0 and 2 and ``1`` is exact.
    """
    if m < 1:
        raise ValueError(f"the grid needs m >= 1, got {m}")
    return np.array(_points(int(m)), dtype=np.float64)


def architecture_grid(num_layers: int, width: int) -> np.ndarray:
    """``P_m`` with ``m = ceil(L + ln N)``: the grid the proxies and the bound minimise over."""
    return schatten_grid(grid_size(num_layers, width))

"""The Schatten-index grid ``P_m = {0, 1/m, 2/m, ..., 2}`` (docs/design.md section 6, proofs_notes/theory.md section 6).

Both the paper's proxy and our post hoc union bound choose each matrix's Schatten index ``p`` from
this grid *after* training; the union bound pays ``log(2m + 1)`` per matrix for that freedom, so the
grid must be fixed from the architecture alone.  The recommended (and the paper's) size is
``m = ceil(L + ln N)`` for depth ``L`` and width ``N``.

One source of truth: the size (``grid_size``, re-exported) and the points ``GRID_POINT = i/m`` live in
``specbound.derivation.posthoc``; this module evaluates them through ``numeric/generated.py``, code
printed from those SymPy expressions by scripts/generate_derived.py (no SymPy import on the float
paths; tests/derivation/test_generated.py keeps the file equal to a fresh generation).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import generated

__all__ = ["architecture_grid", "grid_size", "schatten_grid"]

NEAR_INTEGER = 1e-9
"""When ``L + ln N`` lies this close to an integer the float ceiling could be wrong (``math.log`` is
within an ulp or so): the exact SymPy evaluation decides instead."""


@lru_cache(maxsize=None)
def grid_size(num_layers: int, width: int) -> int:
    """``m = ceil(L + ln N)`` for ``L, N >= 1``: exactly ``specbound.derivation.posthoc.grid_size``.

    Evaluated through the code generated from ``posthoc.M_DEFAULT`` (no SymPy import); near an
    integer, where a float could round across it, the exact SymPy ceiling is taken.
    """
    if num_layers < 1 or width < 1:
        raise ValueError(f"grid_size needs L >= 1 and N >= 1, got L={num_layers}, N={width}")
    x = math.log(int(width))
    if abs(x - round(x)) < NEAR_INTEGER and width != 1:
        from specbound.derivation.posthoc import grid_size as exact

        return exact(num_layers, width)
    return int(generated.grid_size_float(int(num_layers), int(width)))


@lru_cache(maxsize=None)
def _points(m: int) -> tuple[float, ...]:
    # Each point is the exact rational i/m rounded once to float64 (Python's int / int is correctly
    # rounded), not an accumulated step.
    return tuple(float(generated.grid_point(i, m)) for i in range(2 * m + 1))


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

"""The binary64 environment the float routes of the certified layer assume, tested at run time.

The fast forward pass (proofs_notes/fast_forward.md, assumption F1) and the Gram enclosures
(proofs_notes/gram_enclosure.md section 1) bound rounding errors by ``u = 2**-53`` per operation and
build directed bounds with ``nextafter``: both need IEEE round-to-nearest and gradual underflow.  A
process can change either (``fesetround``, flush-to-zero flags set by a library), so they are probed
on the code paths used -- numpy arrays and numpy scalars, both signs.

Public API: :func:`rounds_to_nearest`, :func:`has_gradual_underflow`.
"""

from __future__ import annotations

import numpy as np

_U = 2.0**-53


def rounds_to_nearest() -> bool:
    """True iff binary64 addition rounds to nearest (ties to even), on arrays and scalars.

    ``1 + u`` is a tie (nearest-even gives 1; upward gives ``1 + 2u``) and ``1 + 1.5u`` lies above the
    tie (nearest gives ``1 + 2u``; downward and toward zero give 1).  The negated sums tell upward from
    downward rounding on the other side.  So every non-nearest IEEE mode fails one of the four.
    """
    signs = np.array([1.0, -1.0])
    tie = signs + signs * _U
    above = signs + signs * (1.5 * _U)
    up = signs * (1.0 + 2.0 * _U)
    if not (np.array_equal(tie, signs) and np.array_equal(above, up)):
        return False
    for s in (np.float64(1.0), np.float64(-1.0)):
        if s + s * np.float64(_U) != s or s + s * np.float64(1.5 * _U) != s * np.float64(1.0 + 2.0 * _U):
            return False
    return True


def has_gradual_underflow() -> bool:
    """True iff subnormal results and operands are kept (no flush-to-zero / denormals-are-zero)."""
    tiny = np.array([2.0**-1022, 2.0**-1074, 1.0, 1.0], dtype=np.float64)
    half = tiny * np.array([0.5, 1.0, 1.0, 1.0])
    return bool(half[0] == 2.0**-1023 and (tiny[1:2] * 1.0)[0] == 2.0**-1074)


__all__ = ("has_gradual_underflow", "rounds_to_nearest")

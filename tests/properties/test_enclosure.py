"""Property: the default certified singular-value route (batched Gram/eigen, with its residual-route
fallback) encloses the singular values of the exact matrix, computed independently by mpmath at
``MP_DPS`` digits, on every drawn singular-value profile (flat, power, clustered, rank-deficient,
near zero, huge, random), for dense matrices and exact products of factors."""

from __future__ import annotations

import mpmath
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from . import reference as ref
from . import strategies as S
from specbound.certified.gram_enclosure import enclose_matrices
from specbound.matrices import NamedMatrix


def _assert_encloses(enc, exact) -> None:
    with mpmath.workdps(ref.MP_DPS):
        tol = mpmath.mpf(10) ** -(ref.MP_DPS - 10) * (exact[0] if exact else 0)
        for i, v in enumerate(exact):
            lo = mpmath.mpf(enc.lower_floats()[i])
            hi = mpmath.mpf(enc.upper_floats()[i])
            assert lo <= v + tol and v - tol <= hi, (i, lo, v, hi)


@given(S.matrices(max_dim=6, scales=(1e-3, 1e3)))
def test_default_route_encloses_dense_singular_values(w):
    (enc,) = enclose_matrices([NamedMatrix(0, -1, "M_in", w)])
    _assert_encloses(enc, ref.mp_singular_values(w))


@given(st.data())
def test_default_route_encloses_exact_product_singular_values(data):
    r = data.draw(st.integers(1, 3))
    f = data.draw(S.matrices(n=r, max_dim=6, scales=(1e-3, 1e3)))
    g = data.draw(S.matrices(m=r, max_dim=6, scales=(1e-3, 1e3)))
    heads = [NamedMatrix(0, h, "QK", f * 2.0**h, g) for h in range(2)]  # batched: one shape, two heads
    for h, enc in enumerate(enclose_matrices(heads)):
        with mpmath.workdps(ref.MP_DPS):
            prod = ref.to_mp(f * 2.0**h) @ ref.to_mp(g)  # the exact product, not its float rounding
            s = mpmath.svd_r(mpmath.matrix(prod.tolist()), compute_uv=False)
            exact = sorted((s[i] for i in range(min(prod.shape))), reverse=True)
        _assert_encloses(enc, exact)

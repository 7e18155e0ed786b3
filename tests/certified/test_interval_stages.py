"""The binary64 programs of certified/interval_stages.py compute exactly the programs the proof analyses
(proofs_notes/interval_forward.md), bit for bit, where the code takes a faster but equivalent route."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specbound.certified.interval_stages import _rotated

FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64) | st.sampled_from([0.0, -0.0, 5e-324, -1e308])


@st.composite
def rotations(draw):
    B, T, G = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    d = 2 * draw(st.integers(1, 4))
    x = draw(arrays(np.float64, (B, T, G, d), elements=FLOATS))
    cos = draw(arrays(np.float64, (T, d // 2), elements=FLOATS))
    sin = draw(arrays(np.float64, (T, d // 2), elements=FLOATS))
    return x, cos, sin


@settings(max_examples=300, deadline=None)
@given(rotations())
def test_the_whole_row_rotation_is_the_half_row_program_bit_for_bit(case):
    # step 3's program: (a c - b s, a s + b c) on the halves (a, b) of each row, position by position
    x, cos, sin = case
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    with np.errstate(all="ignore"):
        want = np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
        got = _rotated(x, cos, sin)
    same = (want.view(np.int64) == got.view(np.int64)) | (np.isnan(want) & np.isnan(got))
    assert same.all()


@settings(max_examples=200, deadline=None)
@given(rotations())
def test_the_whole_row_transposed_rotation_is_the_half_row_program_bit_for_bit(case):
    # the adjoint's transposed rotation (interval_adjoint.md): (ga c + gb s, gb c - ga s) on rows (B, G, T, d)
    from types import SimpleNamespace

    from specbound.certified.interval_adjoint import _rotate_back

    x, cos, sin = case
    x = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[None, None], sin[None, None]
    with np.errstate(all="ignore"):
        want = np.concatenate([a * c + b * s, b * c - a * s], axis=-1)
        got = _rotate_back(x, SimpleNamespace(cos=cos, sin=sin), 0)
    same = (want.view(np.int64) == got.view(np.int64)) | (np.isnan(want) & np.isnan(got))
    assert same.all()

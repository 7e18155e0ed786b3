"""The rotary tables' exact norm bound (certified/forward_ls.py ``rope_norm_bound``) against a brute-force
maximum in rationals over every entry, including tables so small that their float squares underflow."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from specbound.certified.forward_ls import rope_norm_bound


def _brute_max(cos: np.ndarray, sin: np.ndarray) -> Fraction:
    return max(Fraction(float(c)) ** 2 + Fraction(float(s)) ** 2 for c, s in zip(cos.ravel(), sin.ravel()))


def test_tables_below_1e_323_keep_their_true_argmax():
    # regression: the float sums of squares (2 ulp and 1 ulp of 2**-1074) ranked the entries in the
    # reverse order of their real values (1.40 and 1.45 ulp), and the filter dropped the true maximum
    c1, c2 = math.sqrt(0.70) * 2.0**-537, math.sqrt(1.45) * 2.0**-537
    cos, sin = np.array([[c1, c2]]), np.array([[c1, 0.0]])
    assert (cos * cos + sin * sin)[0, 0] > (cos * cos + sin * sin)[0, 1]  # the floats misrank them
    assert rope_norm_bound(cos, sin) == _brute_max(cos, sin) == Fraction(c2) ** 2


@pytest.mark.parametrize("scale", [1.0, 0.3, 1e-160, 1e-300, 2.0**-1070, 1e150, 1e200])
def test_the_bound_is_the_exact_maximum_at_every_scale(scale):
    rng = np.random.default_rng(int(-math.log2(scale)) % 1000)
    angles = rng.random((5, 3)) * 6.3
    cos, sin = np.cos(angles) * scale, np.sin(angles) * scale
    cos[2, 1], sin[2, 1] = np.nextafter(cos[1, 1], np.inf), sin[1, 1]  # near ties
    assert rope_norm_bound(cos, sin) == _brute_max(cos, sin)


def test_empty_and_zero_tables_give_zero():
    assert rope_norm_bound(np.zeros((0, 2)), np.zeros((0, 2))) == 0
    assert rope_norm_bound(np.zeros((2, 2)), np.zeros((2, 2))) == 0

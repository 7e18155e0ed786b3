"""numeric/generated.py is exactly what scripts/generate_derived.py prints from the SymPy source
today (it cannot drift from derivation/), and its functions agree with the exact SymPy evaluation."""

from __future__ import annotations

import importlib.util
import os
from fractions import Fraction

import pytest

from specbound.derivation.posthoc import grid_size as exact_grid_size
from specbound.numeric import generated
from specbound.numeric.grid import grid_size, schatten_grid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _generator():
    spec = importlib.util.spec_from_file_location("generate_derived", os.path.join(ROOT, "scripts", "generate_derived.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_checked_in_module_equals_a_fresh_generation():
    with open(os.path.join(ROOT, "numeric", "generated.py")) as fh:
        assert fh.read() == _generator().source(), "run scripts/generate_derived.py"


@pytest.mark.parametrize("layers", [1, 2, 6, 12, 48])
@pytest.mark.parametrize("width", [1, 2, 3, 7, 8, 20, 21, 64, 384, 403, 768, 1096, 1097, 4096, 10**6])
def test_grid_size_equals_the_exact_sympy_ceiling(layers, width):
    assert grid_size(layers, width) == exact_grid_size(layers, width)


@pytest.mark.parametrize("m", [1, 3, 7, 10, 13])
def test_grid_points_are_the_correctly_rounded_rationals(m):
    pts = schatten_grid(m)
    assert [Fraction(float(x)) for x in pts] == [Fraction(float(Fraction(i, m))) for i in range(2 * m + 1)]
    assert pts[0] == 0 and pts[-1] == 2 and generated.grid_point(m, m) == 1

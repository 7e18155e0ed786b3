"""The Schatten-index grid P_m = {0, 1/m, ..., 2} with m = ceil(L + ln N) (docs/design.md section 6)."""

from fractions import Fraction

import mpmath
import pytest

from specbound.numeric.grid import architecture_grid, grid_size, schatten_grid


def test_minilm_grid_size_is_twelve():
    # L = 6, N = 384: 6 + ln 384 = 11.95...
    assert grid_size(6, 384) == 12


@pytest.mark.parametrize("L", [1, 2, 3, 6, 12, 24])
@pytest.mark.parametrize("N", [1, 2, 3, 7, 20, 21, 128, 384, 768, 1024, 4096])
def test_grid_size_matches_high_precision_ceiling(L, N):
    with mpmath.workdps(50):
        expected = int(mpmath.ceil(L + mpmath.log(N)))
    assert grid_size(L, N) == expected


def test_grid_size_rejects_empty_architectures():
    with pytest.raises(ValueError):
        grid_size(0, 10)
    with pytest.raises(ValueError):
        grid_size(2, 0)


@pytest.mark.parametrize("m", [1, 3, 7, 12, 19])
def test_grid_points_are_correctly_rounded_k_over_m(m):
    grid = schatten_grid(m)
    assert len(grid) == 2 * m + 1
    assert [float(Fraction(k, m)) for k in range(2 * m + 1)] == grid.tolist()
    assert grid[0] == 0.0 and grid[-1] == 2.0 and grid[m] == 1.0
    assert (grid[1:] > grid[:-1]).all()


def test_schatten_grid_rejects_m_below_one():
    with pytest.raises(ValueError):
        schatten_grid(0)


def test_architecture_grid_is_grid_of_grid_size():
    assert architecture_grid(2, 32).tolist() == schatten_grid(grid_size(2, 32)).tolist()


def test_one_grid_size_for_all_layers():
    # certified grid_m, the numeric grid size and the theorem's m all evaluate the one definition
    from specbound.certified.bound import grid_m
    from specbound.derivation import posthoc
    from specbound.plan import BoundSettings

    # numeric's grid size is generated from the SymPy source (numeric/generated.py): same values
    assert all(grid_size(L, N) == posthoc.grid_size(L, N) for L in (1, 2, 6, 48) for N in (2, 32, 384, 4096))
    w = type("W", (), {"num_layers": 6, "width": 384})()
    assert grid_m(BoundSettings(n=10), w) == 12 == grid_size(6, 384)
    assert grid_m(BoundSettings(n=10, grid_m=5), w) == 5

"""Post hoc union bound over the grid (proofs_notes/theory.md section 6)."""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .lemma import Lemma
from .symbols import L, N, beta, delta, k, m_grid, n, r_max, x

#: the prior on Z: pi_Z(k) = 2 / (3 (|k|+1)(|k|+2)); sums to 1 (telescoping).
PI_Z = sp.Rational(2, 3) / ((sp.Abs(k) + 1) * (sp.Abs(k) + 2))
#: lambda(k) = log(1/pi_Z(k)) = log(3 (|k|+1)(|k|+2) / 2)
LAMBDA_K = sp.log(sp.Rational(3, 2) * (sp.Abs(k) + 1) * (sp.Abs(k) + 2))
#: grid resolution m = ceil(L + log N); P_m = {0, 1/m, ..., 2} has 2m + 1 points.
M_DEFAULT = sp.ceiling(L + sp.log(N))
_i = sp.Symbol("i", integer=True, nonnegative=True)
GRID_POINT = _i / m_grid  # i = 0..2m
LOG_GRID = sp.log(2 * m_grid + 1)
LOG_RANK_PRIOR = sp.log(r_max + 1)
#: rounding onto a grid beta^k: ceil for radii (beta^k >= x), floor for the margin (beta^k <= rho).
ROUND_UP = sp.ceiling(sp.log(x) / sp.log(beta))
ROUND_DOWN = sp.floor(sp.log(x) / sp.log(beta))

_Lam = sp.Symbol("Lambda_theta", nonnegative=True)
posthoc_union = Lemma(
    name="posthoc_union",
    assumptions=(
        "architecture, phi, n, delta, m, the bases beta_c, beta_s, beta_w, beta_rho (beta_gamma) > 1 fixed in advance",
        "rademacher_generalization applied to each G_theta at level delta pi(theta)",
    ),
    statement=sp.Eq(sp.Sum(2 * PI_Z.subs(k, _i), (_i, 1, sp.oo)) + PI_Z.subs(k, 0), 1, evaluate=False),
    constants={
        "pi_Z": PI_Z,
        "lambda": LAMBDA_K,
        "m": M_DEFAULT,
        "grid_point": GRID_POINT,
        "log_grid": LOG_GRID,
        "log_rank_prior": LOG_RANK_PRIOR,
        "round_up": ROUND_UP,
        "round_down": ROUND_DOWN,
        "confidence": sp.sqrt((sp.log(1 / delta) + _Lam) / (2 * n)),  # one McDiarmid step (sharpenings S3)
    },
)

LEMMAS = (posthoc_union,)


@lru_cache(maxsize=None)
def grid_size(num_layers: int, width: int) -> int:
    """``m = ceil(L + ln N)`` (:data:`M_DEFAULT`) for depth ``L >= 1`` and width ``N >= 1``, exactly.

    SymPy evaluates the ceiling of ``L + log(N)`` with as much precision as it needs, so the result
    is the exact integer ceiling (no float rounding near an integer).  The one definition of the
    grid size: the certified layer, the planner and the proxies all call this.
    """
    if num_layers < 1 or width < 1:
        raise ValueError(f"grid_size needs L >= 1 and N >= 1, got L={num_layers}, N={width}")
    return int(M_DEFAULT.subs({L: int(num_layers), N: int(width)}))


def chosen_grid_size(chosen: int | None, num_layers: int, width: int) -> int:
    """m of P_m in force: the user's fixed ``chosen`` m (any m fixed in advance is valid), else
    :func:`grid_size`."""
    return int(chosen) if chosen is not None else grid_size(num_layers, width)

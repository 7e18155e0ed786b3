"""k-class margins as a lemma object (register entry 33, proofs_notes/k_class.md).

A k-row read-out ``W`` (rows ``w_0..w_{k-1}``) and labels ``y in {0..k-1}``; the margin is
``M_y(f(X)) = f_y(X) - max_{c != y} f_c(X)``.  What changes against the binary theorem, each a named
constant the assembly (derivation/theorem.py, derivation/routes.py with ``classes="k"``) reads:

* ``margin_lipschitz``: ``M_y`` is 2-Lipschitz in the sup norm over the outputs (exact constant);
* ``readout_entropy``: the read-out cover over ``W`` in ``k N`` dimensions, each row in the Euclidean ball
  of radius ``B_w`` = the *largest* row norm (rounded onto the grid);
* ``ramp_lipschitz``: the ramp after the margin operator is ``2/rho``-Lipschitz (Rademacher route), so
  ``kappa_j = 2 B_w alpha gamma / rho`` and the read-out scale is ``rho u_w / 2``;
* ``cover_radius`` / ``eps_matrix`` / ``eps_readout``: the Occam route's output cover at ``gamma/4``;
* ``weight_readout``: the read-out's allocation weight ``k N``.
"""

from __future__ import annotations

import sympy as sp

from .lemma import Lemma
from .symbols import B_w, N, alpha, gamma, gamma_m, k_cls, rho, vartheta, vartheta_w

_v = sp.Symbol("v_y", real=True)  # the output of the label's row
_vmax = sp.Symbol("v_max", real=True)  # the largest other output
_dist = sp.Symbol("Delta_inf", nonnegative=True)  # ||v - v'||_inf over the k outputs
_M = sp.Symbol("M_y", real=True)
_M2 = sp.Symbol("M_y_prime", real=True)
_eps_w = sp.Symbol("epsilon_w", positive=True)
_lo_y, _hi_y = sp.Symbol("lo_y", real=True), sp.Symbol("hi_y", real=True)
_max_lo, _max_hi = sp.Symbol("max_other_lo", real=True), sp.Symbol("max_other_hi", real=True)

MARGIN_LIPSCHITZ = sp.Integer(2)
"""|M_y(v) - M_y(v')| <= 2 ||v - v'||_inf, attained for every k >= 2 (k_class.md (a))."""

#: H_W(eps_w) = k N log(1 + 2 B_w / eps_w): k rows, each in the ball of radius B_w (the largest row norm)
READOUT_ENTROPY = k_cls * N * sp.log(1 + 2 * B_w / _eps_w)

k_class = Lemma(
    name="k_class",
    assumptions=(
        "a read-out of k >= 2 rows W (k, N), labels y in {0..k-1}, k fixed before S",
        "margin M_y(f) = f_y - max_{c != y} f_c; the error event M_y(f(X)) <= 0 (ties are errors)",
        "B_w >= max_c ||w_c|| (the largest row norm, rounded up onto the grid)",
        "network_cover with the read-out covered over W", "ramp_loss_cover", "occam_route",
    ),
    statement=sp.Le(sp.Abs(_M - _M2), MARGIN_LIPSCHITZ * _dist),
    constants={
        "margin_lipschitz": MARGIN_LIPSCHITZ,
        "readout_dimension": k_cls * N,
        "readout_entropy": READOUT_ENTROPY,
        "ramp_lipschitz": MARGIN_LIPSCHITZ / rho,
        "cover_radius": gamma_m / (2 * MARGIN_LIPSCHITZ),
        "eps_matrix": vartheta * gamma_m / (2 * MARGIN_LIPSCHITZ * B_w * alpha * gamma),
        "eps_readout": vartheta_w * gamma_m / (2 * MARGIN_LIPSCHITZ),
        "weight_readout": k_cls * N,
        "margin_lower": _lo_y - _max_hi,
        "margin_upper": _hi_y - _max_lo,
    },
    covering=READOUT_ENTROPY,
    source="ours (proofs_notes/k_class.md); Bartlett-Foster-Telgarsky 2017 Lemma A.3 (the factor 2)",
)

LEMMAS = (k_class,)

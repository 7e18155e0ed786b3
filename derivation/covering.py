"""Covering lemmas in operator norm (proofs_notes/theory.md section 3); data-independent entropies.

``H(eps)`` below is an upper bound on ``log N(K, eps)`` in spectral norm, with spectrally internal
centres.  Generic per-matrix symbols: ``s`` (Schatten radius or rank bound), ``c`` (spectral radius),
``p``, ``r_max``, ``d = m + n``.
"""

from __future__ import annotations

import sympy as sp

from .lemma import Lemma
from .symbols import S_p, c, card, d, eps, m_rows, n_cols, p, r, r_max, s, sigma_next, tau

_delta_v = sp.Symbol("delta_v", positive=True)
_dim = sp.Symbol("D", positive=True, integer=True)

volumetric_cover = Lemma(
    name="volumetric_cover",
    assumptions=("K a symmetric convex body in R^D", "centres in cK (internal)"),
    statement=sp.Le(card, (1 + 2 * c / _delta_v) ** _dim),
    constants={"K_vol": sp.Integer(2)},
    covering=_dim * sp.log(1 + 2 * c / _delta_v),
    source="Vershynin, HDP Cor. 4.2.13",
)

lowrank_cover = Lemma(
    name="lowrank_cover",
    assumptions=("W in R^{m x n_c}, rank W <= r, ||W|| <= c", "volumetric_cover"),
    statement=sp.Le(sp.log(card), r * (m_rows + n_cols) * sp.log(1 + 4 * c / eps)),
    constants={
        "K_lowrank": sp.Integer(4),
        "unconstrained": m_rows * n_cols * sp.log(1 + 2 * c / eps),
    },
    covering=r * d * sp.log(1 + 4 * c / eps),
)

stechkin_tail = Lemma(
    name="stechkin_tail",
    assumptions=("p > 0", "r >= 0 an integer"),
    statement=sp.Le(sigma_next, (S_p / (r + 1)) ** (1 / p)),
)

#: r_p(eps) = max(0, ceil(s (2/eps)^p) - 1): the truncation rank of the Schatten cover.
R_P = sp.Max(0, sp.ceiling(s * (2 / eps) ** p) - 1)
#: its ceiling-free upper bound s 2^p eps^-p
R_P_BOUND = s * 2**p * eps ** (-p)
SCHATTEN_ENTROPY = sp.Min(R_P, r_max) * d * sp.log(1 + 8 * c / eps)

schatten_cover = Lemma(
    name="schatten_cover",
    assumptions=(
        "p > 0 (the grid uses p in (0, 2])",
        "S_p(W) <= s, ||W|| <= c, rank W <= r_max",
        "stechkin_tail",
        "lowrank_cover",
    ),
    statement=sp.Le(sp.log(card), SCHATTEN_ENTROPY),
    constants={
        "r_p": R_P,
        "r_p_bound": R_P_BOUND,
        "K_schatten": sp.Integer(8),
        # any split eps = tau + (eps - tau) is also valid:
        "split_entropy": sp.Min(sp.Max(0, sp.ceiling(s * tau ** (-p)) - 1), r_max)
        * d
        * sp.log(1 + 4 * c / (eps - tau)),
    },
    covering=SCHATTEN_ENTROPY,
)

RANK_ENTROPY = sp.Min(s, r_max) * d * sp.log(1 + 4 * c / eps)
rank_cover = Lemma(
    name="rank_cover",
    assumptions=("p = 0: s is a PROVEN rank bound (structural cap or certified count)", "lowrank_cover"),
    statement=sp.Le(sp.log(card), RANK_ENTROPY),
    constants={"K_rank": sp.Integer(4)},
    covering=RANK_ENTROPY,
)

#: the volumetric cover of the spectral ball of R^{m x n_c} (proofs_notes/sharpenings.md S1): valid for
#: every covered matrix, smaller than the rank cover at a full rank cap; entropies take the minimum
VOLUMETRIC_ENTROPY = lowrank_cover.constants["unconstrained"]

LEMMAS = (volumetric_cover, lowrank_cover, stechkin_tail, schatten_cover, rank_cover)

# -- network_cover (proofs_notes/theory.md section 4) ----------------------------------------------------------
from .symbols import B_w, N, alpha, gamma  # noqa: E402  (kept next to the lemma that uses them)

_eps_w = sp.Symbol("epsilon_w", positive=True)
_sum_aged = sp.Symbol("Sigma_j_alpha_gamma_eps", positive=True)  # sum_j alpha_l(j) gamma_j eps_j
_sum_H = sp.Symbol("Sigma_j_H_j", nonnegative=True)  # sum_j H_j(eps_j)

#: H_w(eps_w) = N log(1 + 2 B_w / eps_w): the volumetric cover of the read-out ball.
READOUT_ENTROPY = N * sp.log(1 + 2 * B_w / _eps_w)

network_cover = Lemma(
    name="network_cover",
    assumptions=(
        "W_j in S_{p_j}(s_j, c_j, r_max_j), ||w|| <= B_w",
        "per-matrix covers internal in spectral norm",
        "B_w sum_j alpha_l(j) gamma_j eps_j + eps_w <= eps (alpha, gamma from the radii)",
        "layer_lipschitz", "sensitivity_gamma", "schatten_cover", "rank_cover", "volumetric_cover",
    ),
    statement=sp.Le(sp.log(card), _sum_H + READOUT_ENTROPY),
    constants={
        "condition": sp.Le(B_w * _sum_aged + _eps_w, eps),
        "matrix_loss_sensitivity": B_w * alpha * gamma,  # per matrix: d f / d W_j at most this
        "readout_entropy": READOUT_ENTROPY,
    },
    covering=_sum_H + READOUT_ENTROPY,
)

LEMMAS = LEMMAS + (network_cover,)

"""The Occam route as lemma objects (register entries 31-32).

proofs_notes/occam_route.md: a union bound over the centres of the data-independent sup-norm cover
(`network_cover` at radius gamma/2), each centre a fixed classifier, with the one-sided binomial
inversion of proofs_notes/binomial_inversion.md:

    P(y f(X) <= 0) <= BinInv(n, K^, e^-C) <= klInv(K^/n, C/n),   C = H_theta(gamma) + Lambda + lambda(k) + log(1/delta).

The lemmas are registered in theorem.py's ``REGISTRY``; derivation/routes.py assembles them into the
Occam theorem variant (:class:`~specbound.derivation.routes.OccamTheorem`) and into both routes with
delta split between them.
"""

from __future__ import annotations

import sympy as sp

from .lemma import Lemma
from .symbols import (
    B_w, C_mass, H_theta, K_hat, Lambda, N, Omega, P_err, alpha, beta, d, delta, gamma, gamma_m, k_gamma, m_rows,
    n, n_cols, omega, r_max, s, vartheta, vartheta_w, x,
)

#: BinInv(n, K, d) = max{t : P(Bin(n, t) <= K) >= d}; klInv(q, c) = max{t >= q : kl(q || t) <= c}
BinInv = sp.Function("BinInv")
klInv = sp.Function("klInv")

_q = sp.Symbol("q", nonnegative=True)  # an empirical frequency K/n
_t = sp.Symbol("t", positive=True)  # a probability (the argument of the binomial tail)
_d = sp.Symbol("d", positive=True)  # a level in (0, 1]

#: kl(q || t) = q log(q/t) + (1 - q) log((1 - q)/(1 - t))
KL = _q * sp.log(_q / _t) + (1 - _q) * sp.log((1 - _q) / (1 - _t))

binomial_inversion = Lemma(
    name="binomial_inversion",
    assumptions=(
        "n >= 1 and 0 <= K <= n integers, C = log(1/d) >= 0",
        "test-set lemma: K ~ Bin(n, q) for a classifier fixed before S gives P(q > BinInv(n, K, d)) <= d",
        "BinInv is nondecreasing in K and in C",
        "Chernoff: P(Bin(n, t) <= K) <= exp(-n kl(K/n || t)) for t >= K/n",
    ),
    statement=sp.Le(BinInv(n, K_hat, sp.exp(-C_mass)), klInv(K_hat / n, C_mass / n)),
    constants={
        "kl": KL,
        "level": sp.Eq(C_mass, sp.log(1 / _d)),
        "chernoff": sp.exp(-n * KL.xreplace({_q: K_hat / n})),
        "bininv_k0": 1 - sp.exp(-C_mass / n),
        "bininv_k0_bound": C_mass / n,
        "bininv_kn": sp.Integer(1),
        "tail_ratio": K_hat * (1 - _t) / ((n - K_hat + 1) * _t),  # t_(K-1) / t_K, increasing in K
        "kl_loss_nats": sp.log(8 * K_hat * (1 - _q)) / 2,  # the kl form at C is BinInv at C + this
    },
    source="Clopper & Pearson 1934; Langford JMLR 2005 Thm 3.3; Chernoff 1952 (proofs_notes/binomial_inversion.md)",
)

_yf = sp.Symbol("y_f", real=True)  # y f(X) of a network
_yfc = sp.Symbol("y_hat_f", real=True)  # y f^(X) of its centre

#: the scale of matrix j at margin gamma_m: kappa_j with rho replaced by gamma_m, times the share
EPS_MATRIX = vartheta * gamma_m / (2 * B_w * alpha * gamma)
EPS_READOUT = vartheta_w * gamma_m / 2
#: the allocation rule (a function of the grid point only): r_j d_j, the rank cap for p_j > 0, and
#: at most the dimension m_j n_j of the volumetric cover (proofs_notes/sharpenings.md S1)
WEIGHT = r_max * d
WEIGHT_RANK = sp.Min(s, r_max) * d
WEIGHT_VOLUMETRIC = m_rows * n_cols
WEIGHT_READOUT = N

occam_route = Lemma(
    name="occam_route",
    assumptions=(
        "C1 network_cover in sup norm over every input of every length (Pi after every block)",
        "C2 centres fixed before S: scales from the grid radii, gamma_m and the allocation rule only",
        "C3 union accounted: Lambda(theta) + lambda(k_gamma), the posthoc_union prior with k_gamma for k_rho",
        "C4 hat_K >= #{i : y_i f(X_i) <= gamma_m} for the exact network (certified upper count)",
        "C5 H_theta(gamma_m) >= log(number of centres): upper enclosures, ceilings on upper endpoints",
        "C6 S i.i.d. of a size n fixed in advance, labels +-1, ties count as errors",
        "network_cover", "posthoc_union", "binomial_inversion",
    ),
    statement=sp.Le(P_err, BinInv(n, K_hat, sp.exp(-C_mass))),
    constants={
        "cover_radius": gamma_m / 2,
        "eps_matrix": EPS_MATRIX,
        "eps_readout": EPS_READOUT,
        "budget_matrix": sp.Eq(B_w * alpha * gamma * EPS_MATRIX, vartheta * gamma_m / 2, evaluate=False),
        "weight": WEIGHT,
        "weight_rank": WEIGHT_RANK,
        "weight_volumetric": WEIGHT_VOLUMETRIC,
        "weight_readout": WEIGHT_READOUT,
        "share": omega / Omega,
        "transfer_error": sp.Implies(sp.Le(_yf, 0), sp.Le(_yfc, gamma_m / 2)),
        "transfer_count": sp.Implies(sp.Le(_yfc, gamma_m / 2), sp.Le(_yf, gamma_m)),
        "confidence_mass": H_theta + Lambda + sp.log(1 / delta),
        "route_split": sp.log(2),
        "margin_grid": beta**k_gamma,
        "margin_round": sp.floor(sp.log(x) / sp.log(beta)),
    },
    source="ours (proofs_notes/occam_route.md); Langford JMLR 2005 Thm 4.1; Anthony & Bartlett 1999 ch. 10",
)

LEMMAS = (binomial_inversion, occam_route)

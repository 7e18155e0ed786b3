"""The float choices of the Occam route (:class:`specbound.plan.OccamPlan`), made in numpy.

proofs_notes/occam_route.md: the route holds simultaneously for every grid point theta and every margin
``gamma_k = beta_gamma^k``, so *any* choice of ``(p_j)`` and ``k`` is valid; the planner only tries to make
``BinInv(n, K(gamma_k), e^-C)`` small.  What is chosen, and how:

- ``k_gamma``: every margin grid point in a window over the sample's float margins is compared (a float
  margin is always rounded *down* onto the grid, :func:`numeric.terms.grid_down`, and the count is taken
  at ``gamma_k`` itself, as the certified count is);
- ``p_j``: at each margin, the grid point of P_m minimising the matrix's entropy at the route's scale plus
  its price in Lambda, ``H_j(eps_j(p)) + lambda_j(p)``.  The allocation rule is *not* a choice (it is fixed
  in advance, condition C2); its weights do not depend on p (the float facts' rank bound at p = 0 is the
  structural cap, so ``min(r d, m n)`` is the same at every p), so this separates over matrices.

The count and the inversion are float estimates (the float margins, numeric/binomial.py); the chosen
plan's estimate is then the driver's Occam route in the numpy context
(:func:`specbound.certified.evaluation.occam`), the same function the certified layer runs in Arb.
"""

from __future__ import annotations

import math

import numpy as np

from specbound.certified.evaluation import evaluate, occam
from specbound.plan import BoundSettings, OccamPlan
from specbound.vocabulary import READOUT_TRAINED

from .binomial import bininv_estimate
from .context import NumpyContext
from .evaluation import FloatFacts
from .margin_sample import count_at, values_of
from .terms import (
    CompiledTheorem, NetworkFacts, as_margins, grid_down, grid_up, power, row_blocks, schatten_table, sensitivities,
)

OCCAM_WINDOW = 512
"""Most margin grid points compared (the largest ones are kept: tiny margins make the entropy explode)."""


def _margin_window(margins: np.ndarray, beta: float) -> list[int]:
    """Grid exponents k to compare: from below the smallest positive float margin (K = 0 there) to just
    above the largest one."""
    pos = margins[margins > 0]
    if pos.size == 0:
        return [0]
    lo = grid_down(float(pos.min()), beta) - 2
    hi = grid_down(float(pos.max()), beta) + 2
    if hi - lo + 1 > OCCAM_WINDOW:
        lo = hi - OCCAM_WINDOW + 1
    return list(range(lo, hi + 1))


def plan_occam(ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, margins, m: int) -> OccamPlan:
    """An :class:`OccamPlan` for the network of ``facts`` from the float margins ``y_i f(X_i)`` of the
    sample (module docstring says how).  Deterministic: ties go to the first minimiser."""
    marg = as_margins(margins)
    ks = np.array(_margin_window(values_of(marg), settings.beta_gamma), dtype=np.float64)
    gammas = power(settings.beta_gamma, ks)  # (G,)
    sens = sensitivities(ct, facts, settings, gammas)  # kappa^gamma (G, J)
    trained = sens.readout == READOUT_TRAINED
    ps = np.arange(2 * m + 1, dtype=np.float64) / m
    S = schatten_table(facts.values, ps)
    k_s = grid_up(S, settings.beta_s)
    s = power(settings.beta_s, k_s)  # (J, P)
    st = facts.structure
    J, P, G = s.shape[0], ps.shape[0], gammas.shape[0]
    zero = (facts.proven_rank == 0) | (facts.spectral == 0)
    shape = dict(d=facts.dims, m=st.rows.astype(np.float64), n_c=st.cols.astype(np.float64), r_max=facts.rank_cap)

    # the rule's weights and shares (the same at every p and every gamma)
    with np.errstate(all="ignore"):
        weight = np.where(zero, 0.0, ct("occam_weight_rank", s=facts.proven_rank, **shape))
    N = float(facts.width)
    Omega = weight.sum() + (N if trained else 0.0)
    share = weight / Omega
    share_w = N / Omega if trained else 0.0

    # per matrix and p: entropy at the route's scale + price, at every margin
    lam_pos = ct("lambda_matrix", k_c=sens.k_c[:, None], k_s=k_s, m_grid=float(m))
    lam_rank = ct("lambda_matrix_rank", k_c=sens.k_c[:, None], m_grid=float(m), r_max=facts.rank_cap[:, None])
    lam = np.where(ps == 0, np.broadcast_to(lam_rank, lam_pos.shape), lam_pos)  # (J, P)
    cost = np.empty((G, J, P), dtype=np.float64)
    col = {k: v[:, None] for k, v in shape.items()}
    for b in row_blocks(J, G * P):
        kap = sens.kappa[:, b, None]  # (G, b, 1)
        with np.errstate(all="ignore"):
            pos = ct("occam_entropy_matrix", c=sens.c[b, None], kappa=kap, p=np.where(ps == 0, 1.0, ps),
                     s=s[b], vartheta=share[b, None], **{k: v[b] for k, v in col.items()})
            rank = ct("occam_entropy_matrix_rank", c=sens.c[b, None], kappa=kap, s=facts.proven_rank[b, None],
                      vartheta=share[b, None], **{k: v[b] for k, v in col.items()})
        ent = np.where(ps == 0, rank, np.where(zero[b, None], np.inf, pos))
        ent = np.where(zero[b, None] & (ps == 0), 0.0, ent)
        cost[:, b] = np.where(np.isfinite(ent), ent, np.inf) + lam[b]
    choice = np.argmin(cost, axis=-1)  # (G, J)
    total = np.take_along_axis(cost, choice[..., None], axis=-1)[..., 0].sum(axis=-1)  # H_sum + Lambda_sum
    if trained:
        with np.errstate(all="ignore"):
            H_w = ct("occam_entropy_readout", B_w=sens.B_w, N=N, gamma_m=gammas, vartheta_w=share_w)
        lam_total = ct("occam_Lambda_total", Lambda_sum=0.0, k_gamma=ks, k_w=float(sens.k_w))
    else:
        H_w = np.zeros_like(gammas)
        lam_total = ct("occam_Lambda_total_fixed", Lambda_sum=0.0, k_gamma=ks)
    level = float(settings.route_level())
    mass = np.asarray(ct("occam_confidence_mass", H_theta=total + H_w, Lambda=lam_total, delta=level), dtype=np.float64)
    n = int(settings.n)
    counts = count_at(marg, gammas)  # #{margins <= gamma_k}
    best, best_value = 0, math.inf
    for g in range(G):
        if not math.isfinite(float(mass[g])):
            continue
        value = bininv_estimate(n, min(int(counts[g]), n), float(mass[g])).value
        if value < best_value:
            best, best_value = g, value
    plan = OccamPlan(m=m, p_index=tuple(int(i) for i in choice[best].tolist()), k_gamma=int(ks[best]))
    ev = evaluate(NumpyContext(ct), FloatFacts(facts, settings, marg), plan, route=occam)
    t = ev.terms
    notes = {"planner": "margin grid window x per-matrix argmin of entropy + price; allocation by the rule",
             "estimate": float(t.bound), "count": int(t.count), "H": float(t.H), "C": float(t.mass),
             "gamma": float(t.gamma)}
    return OccamPlan(m=m, p_index=plan.p_index, k_gamma=plan.k_gamma, notes=notes)

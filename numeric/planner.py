"""The float choices of a bound evaluation (:class:`specbound.plan.BoundPlan`), made in numpy.

proofs_notes/theory.md sections 6-7: the theorem holds simultaneously for every grid point and every loss
scale, Dudley weight and lower limit, so *any* plan is valid; the planner only tries to make the
bound small.  All choices are deterministic (ties go to the first minimiser) and vectorised over
matrices and the whole grid P_m.

What is chosen, and how:

- ``p_index[j]``, first pass: the grid point minimising ``2 * term_j(p) + slope * lambda_j(p)``,
  where ``term_j`` is the closed-form single-scale term (``ss_matrix_term``, rank form at p = 0,
  with the float radii c~, s~ rounded on the grids of section 6), ``lambda_j`` its share of
  Lambda and ``slope`` the derivative of the confidence term in Lambda (a linearisation; the
  confidence term is concave in Lambda, so this overstates the cost a little; the derivative is the
  theorem's own ``confidence_dLambda``, differentiated symbolically in derivation/).  A structurally
  zero matrix gets p = 0.
- ``u[j]``: the exact minimiser u* of the balance step (``balance_single_scale``) at b = c_M a_j,
  floored at 1/n (1/n at p = 0); ``u_w = 1/n``.
- Refinement: (p_j, u_j, u_w) are then re-chosen on the *exact* single-scale objective
  U + sqrt(c_M H(u)) by majorise-minimise over P_m x a log grid of u (see
  :func:`_exact_single_scale`); the refined plan is kept only if it is better.
- ``k_rho``: ``floor(log_beta_rho margin)`` when ``settings.margin`` is given; otherwise every
  grid point in a window around the data's margins is ranked by the closed-form bound (empirical
  ramp loss + 2 SS closed + confidence), and the best ``MARGIN_FINALISTS`` are planned in full
  and compared on the whole bound.
- ``alpha_D``, ``vartheta``: the smallest Dudley closed form over a log grid of alpha in
  (0, upper] and a few weight profiles (uniform, powers of the per-matrix pieces, the Lagrange
  point of ``sum_j w_j vartheta_j^(-p_j/2)``), all evaluated in one tensor; the weights are scaled
  by ``WEIGHT_SAFETY`` so their exact sum is <= 1.
- ``occam`` (when ``settings.routes`` lists the Occam route and margins are given): the Occam route's
  own p_j and margin gamma, chosen post hoc by :func:`numeric.occam_plan.plan_occam`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights
from specbound.plan import BoundPlan, BoundSettings, OccamPlan
from specbound.vocabulary import READOUT_TRAINED, ROUTE_OCCAM

from .evaluation import evaluate_facts
from .grid import grid_size, schatten_grid
from .margin_sample import mean_over, values_of
from .occam_plan import plan_occam
from .terms import (
    CompiledTheorem, NetworkFacts, as_margins, compiled_theorem, dd_closed, enclosure_midpoints, grid_down,
    grid_terms, grid_up, lambda_total, network_facts, power, row_blocks, sensitivities, ss_closed,
)

ALPHA_POINTS = 64
"""Points of the log grid of the Dudley lower limit alpha."""

MARGIN_FINALISTS = 6
"""Margins (best by the closed form) that are planned in full and compared on the whole bound."""

MARGIN_WINDOW = 64
"""Most margin grid points the planner compares when the margin is not given."""

WEIGHT_SAFETY = 1.0 - 1e-9
"""Dudley weights are scaled by this so that their exact sum stays <= 1 despite float rounding."""


def _margin_candidates(settings: BoundSettings, margins: np.ndarray | None) -> list[int]:
    """Grid exponents k_rho to compare (one when the margin is given)."""
    if settings.margin is not None:
        return [grid_down(settings.margin, settings.beta_rho)]
    if margins is None:
        raise SpecboundError("choose_plan needs settings.margin or the margins y_i f(X_i) to choose it")
    values = values_of(margins)
    mags = np.abs(values[np.isfinite(values)])
    mags = mags[mags > 0]
    if mags.size == 0:
        return [0]
    lo = grid_down(float(mags.min()), settings.beta_rho) - 1
    hi = int(grid_up(np.array([float(mags.max())]), settings.beta_rho)[0]) + 4
    if hi - lo + 1 > MARGIN_WINDOW:  # keep the large end: tiny margins make the complexity explode
        lo = hi - MARGIN_WINDOW + 1
    return list(range(lo, hi + 1))


def _dudley_choice(ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, sens, p, s,
                   rho: float) -> tuple[float, np.ndarray, float]:
    """(alpha_D, vartheta (J,), vartheta_w) minimising the Dudley closed form over a small family."""
    n = float(settings.n)
    J = p.shape[0]
    trained = sens.readout == READOUT_TRAINED
    upper = float(ct.dd_upper)
    alphas = np.logspace(math.log10(upper / (64.0 * n)), math.log10(upper), ALPHA_POINTS)

    def pieces(alpha, theta, theta_w):
        # alpha (A,1,1), theta (A,T,J): per-matrix Dudley pieces, then the closed form (A,T)
        kap, c, d = sens.kappa, sens.c, facts.dims
        p_mid = np.where((p > 0) & (p < 2), p, 1.0)
        with np.errstate(all="ignore"):
            mid = ct("dd_matrix_piece", alpha_D=alpha, c=c, d=d, kappa=kap, p=p_mid, s=s, vartheta=theta)
            top = ct("dd_matrix_piece_p2", alpha_D=alpha, c=c, d=d, kappa=kap, s=s, vartheta=theta)
            rank = ct("dd_matrix_piece_rank", alpha_D=alpha, c=c, d=d, kappa=kap, r_max=facts.rank_cap,
                      s=facts.proven_rank, vartheta=theta)
            per = np.where(p == 0, rank, np.where(p == 2, top, mid))
            total = dd_closed(ct, sens, per.sum(axis=-1), float(facts.width), n, rho, alpha[..., 0], theta_w)
        return per, total

    # weight profiles from the pieces at vartheta = 1 (alpha in the middle of the grid)
    one = np.ones(J)
    a_mid = alphas[ALPHA_POINTS // 2].reshape(1, 1)
    w, _ = pieces(a_mid, one, np.float64(1.0))
    w = np.broadcast_to(w, (1, J)).reshape(J)
    w_read = float(ct("dd_readout_piece", B_w=sens.B_w, N=float(facts.width), alpha_D=a_mid[0, 0], rho=rho,
                      vartheta_w=1.0)) if trained else 0.0
    weights = np.concatenate([w, [w_read]])
    expo = np.maximum(np.concatenate([p / 2, [0.0]]), 0.05)
    floor = weights[weights > 0].min() if bool((weights > 0).any()) else np.float64(1.0)
    wpos = np.where(weights > 0, weights, floor)
    profiles = [np.ones_like(wpos)] + [wpos ** t for t in (1 / 3, 1 / 2, 2 / 3, 1.0)]
    profiles.append((expo * wpos) ** (1 / (expo + 1)))  # Lagrange point of sum w theta^-e
    prof = np.stack(profiles)  # (T, J+1)
    if not trained:
        prof[:, -1] = 0.0
    prof = prof / prof.sum(axis=1, keepdims=True) * WEIGHT_SAFETY
    theta = np.broadcast_to(prof[None, :, :J], (ALPHA_POINTS,) + prof[:, :J].shape)
    theta_w = (np.broadcast_to(prof[None, :, J], (ALPHA_POINTS, prof.shape[0])) if trained
               else np.ones((ALPHA_POINTS, prof.shape[0])))
    theta_safe = np.where(theta > 0, theta, 1.0)
    _, total = pieces(alphas[:, None, None], theta_safe, theta_w)
    total = np.where(np.isfinite(total), total, np.inf)
    flat = int(np.argmin(total.reshape(-1)))
    ia, it = divmod(flat, prof.shape[0])
    return float(alphas[ia]), prof[it, :J].copy(), float(prof[it, J]) if trained else 0.0


def choose_plan(
    weights: AnalysisWeights,
    settings: BoundSettings,
    enclosures: Sequence | None = None,
    margins: np.ndarray | None = None,
    *,
    spectra=None,
    device="cpu",
) -> BoundPlan:
    """A :class:`BoundPlan` for ``weights`` under ``settings`` (module docstring says how).

    ``enclosures``: the certified singular-value enclosures (``SingularValueEnclosure``, canonical
    order); the planner reads their midpoints (:func:`numeric.terms.enclosure_midpoints`) and runs
    no SVD (nor imports torch).  Without them it uses ``spectra`` (precomputed, a
    ``numeric.spectra.Spectra`` or a (J, K) array) or, failing that, a float SVD in torch on
    ``device`` (numeric-only callers: ``numeric.bound.evaluate`` without a plan, experiments,
    benchmarks).  ``margins``: the float values y_i f(X_i) on the sample, used to choose the margin
    when ``settings.margin`` is None, and the Occam route's margin and p when ``settings.routes``
    lists it (without margins that route is not planned).  Deterministic: same inputs, same plan.
    """
    if enclosures is not None:
        if len(enclosures) != len(weights.matrices):
            raise SpecboundError(f"{len(enclosures)} enclosures for {len(weights.matrices)} matrices")
        spectra = enclosure_midpoints(enclosures)
    ct = compiled_theorem(settings, weights.activation, weights.variant, weights.num_outputs)
    facts = network_facts(weights, spectra=spectra, device=device)
    return plan_for(ct, facts, settings, margins)


def choose_occam(weights: AnalysisWeights, settings: BoundSettings, enclosures: Sequence, margins) -> OccamPlan:
    """The Occam route's choices alone (:func:`numeric.occam_plan.plan_occam`) for a caller that brought
    its own Rademacher plan; ``enclosures`` and ``margins`` as for :func:`choose_plan`."""
    ct = compiled_theorem(settings, weights.activation, weights.variant, weights.num_outputs)
    facts = network_facts(weights, spectra=enclosure_midpoints(enclosures))
    m = int(settings.grid_m) if settings.grid_m is not None else grid_size(facts.num_layers, facts.width)
    return plan_occam(ct, facts, settings, margins, m)


def _take(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a[..., idx[...]]`` along the last axis (idx has a's shape less the last axis)."""
    return np.take_along_axis(a, idx[..., None], axis=-1)[..., 0]


def plan_for(ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, margins=None) -> BoundPlan:
    """:func:`choose_plan` on already computed network facts (``numeric.bound.evaluate`` plans with it).

    Float overflow and invalid operations are expected here (extreme margins or weights make some
    candidates infinite or NaN; they lose the comparisons) and are not reported as warnings: the
    plan only chooses, and the certified evaluation decides what the bound is."""
    with np.errstate(all="ignore"):
        plan = _rademacher_plan(ct, facts, settings, margins)
        if ROUTE_OCCAM in settings.routes and margins is not None:
            plan = replace(plan, occam=plan_occam(ct, facts, settings, margins, plan.m))
        return plan


def _rademacher_plan(ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, margins) -> BoundPlan:
    """The main theorem's choices (module docstring)."""
    marg = as_margins(margins)
    m = int(settings.grid_m) if settings.grid_m is not None else grid_size(facts.num_layers, facts.width)
    ps = schatten_grid(m)
    ks = _margin_candidates(settings, marg)
    k_rho = np.array(ks, dtype=np.float64)
    rho = power(settings.beta_rho, k_rho)  # (R,)
    sens = sensitivities(ct, facts, settings, rho)  # kappa (R, J)
    g = grid_terms(ct, facts, settings, sens, ps, m)  # ss (R, J, P), lam (J, P)
    n = float(settings.n)

    # first pass: terms alone; then charge each choice its Lambda at the local slope
    lam_full = np.broadcast_to(g.lam, g.ss.shape)
    first = np.argmin(g.ss, axis=-1)
    lam0 = lambda_total(ct, _take(lam_full, first).sum(-1), k_rho, sens)
    delta = float(settings.charged_delta())  # delta / K (a float: it only chooses)
    slope = np.broadcast_to(ct("confidence_dLambda", Lambda=lam0, delta=delta, n=n), lam0.shape)
    choice = np.empty(g.ss.shape[:-1], dtype=np.int64)  # (R, J), first minimiser of the cost
    for b in row_blocks(g.ss.shape[1], g.ss.shape[0] * g.ss.shape[2]):
        choice[:, b] = np.argmin(2.0 * g.ss[:, b] + slope[:, None, None] * g.lam[b], axis=-1)
    ss_chosen = _take(g.ss, choice)
    lam_chosen = _take(lam_full, choice)
    Lam = lambda_total(ct, lam_chosen.sum(-1), k_rho, sens)
    with np.errstate(all="ignore"):
        closed = ss_closed(ct, sens, ss_chosen.sum(-1), float(facts.width), n, rho)
    confidence = ct("confidence", Lambda=Lam, delta=delta, n=n)
    if marg is not None and settings.margin is None:
        emp = mean_over(marg, lambda a: ct("ramp", a=a[None, :], rho=rho[:, None]))
    else:
        emp = np.zeros_like(rho)
    objective = emp + 2.0 * closed + confidence
    objective = np.where(np.isfinite(objective), objective, np.inf)
    # the closed form ranks the margins; the best few are planned in full and compared exactly
    order = np.argsort(objective, kind="stable")[:MARGIN_FINALISTS].tolist()
    best_plan, best_value = None, math.inf
    for r in sorted(order):
        plan = _plan_at_margin(ct, facts, settings, sens, g, ps, m, choice[r], r, float(rho[r]), ks[r],
                               float(k_rho[r]), ss_chosen[r], float(objective[r]))
        if len(order) == 1:
            return plan
        value = evaluate_facts(ct, facts, settings, plan, margins=marg).bound
        # the first finalist stands when no value is finite: floats only choose, any plan is valid
        if best_plan is None or value < best_value:
            best_plan, best_value = plan, value
    return best_plan


def _plan_at_margin(ct, facts, settings, sens, g, ps, m, p_idx, r, rho, k, k_float, ss_chosen, objective):
    """The plan at one margin grid point: refine p and u, then the Dudley choices."""
    n = float(settings.n)
    sens_r = _at_margin(sens, r)
    p = ps[p_idx]
    s = _take(g.s, p_idx)
    # loss scales: u* of the balance step, floored at 1/n; p = 0 terms are flat in u, so 1/n
    p_pos = np.where(p > 0, p, 1.0)
    with np.errstate(all="ignore"):
        u_star = ct("u_star", c=sens_r.c, d=facts.dims, kappa=sens_r.kappa, n=n, p=p_pos, s=s)
    u = np.where((p > 0) & np.isfinite(u_star), np.maximum(u_star, 1.0 / n), 1.0 / n)
    u_w = 1.0 / n
    # refine p and u on the exact single-scale objective (majorise-minimise); keep the better plan
    refined = _exact_single_scale(ct, facts, settings, sens_r, replace(g, ss=g.ss[r]), ps, rho, k_float,
                                  (p_idx, u, u_w), float(ss_chosen.sum()))
    if refined is not None:
        p_idx, u, u_w = refined
        p = ps[p_idx]
        s = _take(g.s, p_idx)
    alpha_D, theta, theta_w = _dudley_choice(ct, facts, settings, sens_r, p, s, rho)
    return BoundPlan(
        m=m,
        p_index=tuple(int(i) for i in p_idx.tolist()),
        k_rho=int(k),
        u=tuple(float(x) for x in u.tolist()),
        u_w=float(u_w),
        alpha_D=alpha_D,
        vartheta=tuple(float(x) for x in theta.tolist()),
        vartheta_w=theta_w,
        notes={"planner": "closed-form SS + linearised Lambda, refined on the exact SS objective; "
                          "Dudley by grid search", "closed_form_objective": objective,
               "readout": sens.readout},
    )


def _at_margin(sens, index: int):
    """The same sensitivities with kappa at one margin only."""
    return replace(sens, kappa=sens.kappa[index])


U_POINTS = 96
"""Points of the log grid of loss scales u in [1/n, 4] used by the exact single-scale refinement."""

MM_STEPS = 12


def _exact_single_scale(ct, facts, settings, sens, g, ps, rho, k_rho, start, closed_terms):
    """Choose (p_j, u_j, u_w) for the exact single-scale objective U + sqrt(c_M H(u)).

    Majorise-minimise: sqrt is concave, so at the current H0 the objective is below
    U + sqrt(c_M H0) + mu (H - H0) with mu = d/dH at H0 (the theorem's ``ss_objective_dH_total``);
    that separates over matrices, and each matrix minimises u + mu H_j(u; p) (+ its linearised Lambda
    cost) over p in P_m and a log grid of u.  Returns the best (p_index, u, u_w) found, or None when
    the starting plan is better (compared on 2 min(SS closed, SS exact) + confidence).
    """
    n, N = float(settings.n), float(facts.width)
    us = np.logspace(-math.log10(n), math.log10(4.0), U_POINTS)
    c, d, r = sens.c[:, None, None], facts.dims[:, None, None], facts.rank_cap[:, None, None]
    rows = facts.structure.rows.astype(np.float64)[:, None, None]
    cols = facts.structure.cols.astype(np.float64)[:, None, None]
    kap = sens.kappa[:, None, None]
    zero_p = ps == 0
    p_pos = np.where(zero_p, 1.0, ps)[None, :, None]
    zero_m = ((facts.proven_rank == 0) | (facts.spectral == 0))[:, None, None]
    J, P = g.s.shape
    H = np.empty((J, P, U_POINTS), dtype=np.float64)
    for b in row_blocks(J, P * U_POINTS):
        with np.errstate(all="ignore"):
            H_b = ct("ss_matrix_entropy", c=c[b], d=d[b], kappa=kap[b], p=p_pos, r_max=r[b], s=g.s[b, :, None],
                     u=us, m=rows[b], n_c=cols[b])
            H_rank = ct("ss_matrix_entropy_rank", c=c[b], d=d[b], kappa=kap[b], r_max=r[b],
                        s=facts.proven_rank[b, None, None], u=us, m=rows[b], n_c=cols[b])
        H_rank = np.where(facts.proven_rank[b, None, None] == 0, 0.0, H_rank)
        H[b] = np.where(zero_p[None, :, None], H_rank, np.where(zero_m[b], np.inf, H_b))  # (J, P, U)
    trained = sens.readout == READOUT_TRAINED
    H_w = (np.broadcast_to(ct("ss_readout_entropy", B_w=sens.B_w, N=N, rho=rho, u_w=us), us.shape) if trained
           else np.zeros_like(us))
    lam = g.lam
    rows = np.arange(H.shape[0])
    live = facts.proven_rank > 0  # a rank-0 matrix adds nothing to U (its u_j may tend to 0)

    def value(p_idx, u_idx, uw_idx):
        h = H[rows, p_idx, u_idx].sum() + (H_w[uw_idx] if trained else 0.0)
        total_u = np.where(live, us[u_idx], 0.0).sum() + (us[uw_idx] if trained else 0.0)
        with np.errstate(all="ignore"):
            obj = ct("ss_objective", H_total=h, U_total=total_u, n=n)
            mu = ct("ss_objective_dH_total", H_total=h, U_total=total_u, n=n)
        Lam = lambda_total(ct, lam[rows, p_idx].sum(), k_rho, sens)
        conf = ct("confidence", Lambda=Lam, delta=float(settings.charged_delta()), n=n)
        slope = ct("confidence_dLambda", Lambda=Lam, delta=float(settings.charged_delta()), n=n)
        with np.errstate(all="ignore"):
            closed = ss_closed(ct, sens, g.ss[rows, p_idx].sum(), N, n, rho)
        total = 2.0 * np.minimum(closed, obj) + conf
        return float(total), float(mu), float(slope)

    # the starting plan, with its u snapped up to the grid (u only matters through H and U)
    p0, u0, uw0 = start
    u_idx = np.minimum(np.searchsorted(us, np.minimum(u0, float(us[-1]))), U_POINTS - 1)
    uw_idx = 0
    best_val, mu, slope = value(p0, u_idx, uw_idx)
    start_val = _start_value(ct, facts, settings, sens, g, rows, p0, u0, start[2], rho, k_rho, H_w, closed_terms)
    best = None
    for _ in range(MM_STEPS):
        per_min = np.empty((J, P), dtype=np.float64)
        per_arg = np.empty((J, P), dtype=np.int64)
        for b in row_blocks(J, P * U_POINTS):
            with np.errstate(all="ignore"):
                per = us + mu * H[b]  # (block, P, U)
            per_min[b], per_arg[b] = per.min(axis=-1), per.argmin(axis=-1)
        cost = 2.0 * per_min + slope * lam
        p_idx = np.argmin(cost, axis=-1)
        u_idx = per_arg[rows, p_idx]
        uw_idx = int(np.argmin(us + mu * H_w)) if trained else 0
        val, mu, slope = value(p_idx, u_idx, uw_idx)
        if best is None or val < best[0] - 1e-15 * abs(best[0]):
            best = (val, p_idx, us[u_idx], float(us[uw_idx]) if trained else 1.0 / n)
        else:
            break
    if best is None or best[0] >= start_val:
        return None
    return best[1], best[2], best[3]


def _start_value(ct, facts, settings, sens, g, rows, p_idx, u, u_w, rho, k_rho, H_w_grid, closed_terms):
    """2 min(SS closed, SS exact) + confidence of the starting (closed-form) plan."""
    n, N = float(settings.n), float(facts.width)
    p = g.ps[p_idx]
    s = g.s[rows, p_idx]
    is0 = p == 0
    p_pos = np.where(is0, 1.0, p)
    vol = dict(m=facts.structure.rows.astype(np.float64), n_c=facts.structure.cols.astype(np.float64))
    with np.errstate(all="ignore"):
        ent = np.where(is0, ct("ss_matrix_entropy_rank", c=sens.c, d=facts.dims, kappa=sens.kappa,
                                 r_max=facts.rank_cap, s=facts.proven_rank, u=u, **vol),
                       ct("ss_matrix_entropy", c=sens.c, d=facts.dims, kappa=sens.kappa, p=p_pos,
                          r_max=facts.rank_cap, s=s, u=u, **vol))
    ent = np.where(is0 & (facts.proven_rank == 0), 0.0, ent)
    trained = sens.readout == READOUT_TRAINED
    h_w = ct("ss_readout_entropy", B_w=sens.B_w, N=N, rho=rho, u_w=u_w) if trained else 0.0
    u_sum = np.where(facts.proven_rank > 0, u, 0.0).sum()
    with np.errstate(all="ignore"):
        obj = ct("ss_objective", H_total=ent.sum() + h_w, U_total=u_sum + (u_w if trained else 0.0), n=n)
        closed = ss_closed(ct, sens, closed_terms, N, n, rho)
    Lam = lambda_total(ct, g.lam[rows, p_idx].sum(), k_rho, sens)
    conf = ct("confidence", Lambda=Lam, delta=float(settings.charged_delta()), n=n)
    return float(2.0 * np.minimum(closed, obj) + conf)

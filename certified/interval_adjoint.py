"""First-order (adjoint) radius of the per-sample pass, with a proven second-order remainder.

:func:`refine` runs after :func:`specbound.certified.interval_forward.interval_outputs` (given its tape of
every layer's programs and radii) the binary64 backward program of proofs_notes/interval_adjoint.md from
the read-out towards the input.  At each stage it adds the stage's local rounding (the per-layer radius
formulas evaluated again at radius 0), weighted by the computed adjoint rows, its linearisation
remainder (quadratic in the per-layer radii) and the backward's own rounding; at each cut it has a
valid radius (note step 1).  The result per sample is the least radius over the per-layer one and every
cut reached, so it is never wider than the per-layer radius; it stops at the first cut where every sample
of the batch meets the requested relative width, or at the input.

Public API: :func:`refined_pass`, :func:`refine`, :data:`BACKWARD_TINY`.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from types import SimpleNamespace

import numpy as np

from specbound.certified import kernels
from specbound.certified.directed import (
    ETA, ULP_FACTOR, UP_FACTOR, add_up, div_up, down, gamma_up, mul_up, norm_up, sq_norm_up, sqrt_up, sub_down, sum_up,
    up,
)
from specbound.certified.interval_forward import IntervalPass, prepare, rows_of
from specbound.certified.interval_stages import (
    TINY, _keymax, _scores, _to_heads, attention_stage_radius, ff_stage_radius, swap_rotation,
)
from specbound.certified.interval_network import IntervalLayer, IntervalNetwork
from specbound.certified.sigmoid import derivative

BACKWARD_TINY = 2.0**-700
"""Covers the underflow terms of one stage's backward program (note step 9): at most 2^60 operations, each
underflow <= 2^-1074, carried by at most six factors <= 2^40 (interval_network.MAX_BACKWARD_FACTOR)."""
STALL = 0.9
"""The backward stops once every sample meets its goal or has ``acc >= 0.9 best`` (later cuts can lower its
radius by less than 10%; a float choice, never a bound)."""

_INV_SQRT3 = 0.5773502691896259  # >= 1/sqrt(3) = 0.57735026918962576...: fl rounds it up (checked in the tests)
_SQRT2 = 1.4142135623730951  # >= sqrt(2) = 1.41421356237309504...


def _rec(tr: dict | None, key: str, value):
    if tr is not None:
        tr[key] = np.array(value, dtype=np.float64)
    return value


# --------------------------------------------------------------------------- Pi (note step 4)


def _pi_backward(g: np.ndarray, pp: SimpleNamespace) -> tuple[np.ndarray, np.ndarray]:
    """``iota (g - (g . y) y)`` on rows with ``nu_hat > 1``, ``g`` itself elsewhere (``c = 0``, ``iota = 1``:
    exact); returns the rows and ``iota``."""
    sphere = pp.nu > 1.0
    iota = _iota(pp)
    c = np.einsum("...i,...i->...", g, pp.y)
    c[~sphere] = 0.0
    if kernels.AVAILABLE and g.size >= kernels.MIN_SIZE:  # the same three steps per entry, compiled
        return kernels.project_out_rows(g, pp.y, c, iota), iota
    ga = np.multiply(pp.y, c[..., None])
    np.subtract(g, ga, out=ga)
    ga *= iota[..., None]
    return ga, iota


def _iota(pp: SimpleNamespace) -> np.ndarray:
    """``iota = fl(1 / nu_hat)`` on rows with ``nu_hat > 1``, else 1 (``||J_Pi|| <= iota``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pp.nu > 1.0, 1.0 / pp.nu, 1.0)


def _pi_remainder(net: IntervalNetwork, pp: SimpleNamespace, D, seg, pre0, tr, kind: str) -> np.ndarray:
    """Step 4.3: the bound of ``Pi(a + D) - Pi(a) - J_Pi D`` per row for ``|D| <= D`` and a segment
    ``[a, a + D]`` within ``seg`` of the computed pre-Pi row (``|a - a_hat| <= pre0``)."""
    if (tr is None and kernels.AVAILABLE and np.size(D) >= kernels.MIN_SIZE
            and np.shape(D) == np.shape(seg) == np.shape(pre0) == np.shape(pp.nu)):
        return kernels.pi_remainder(pp.nu, pp.nu_lo, pp.nu_hi, D, seg, pre0, net.c_pi, _INV_SQRT3, _SQRT2,
                                    ULP_FACTOR, UP_FACTOR, ETA)  # the same steps, compiled
    _rec(tr, kind + ".pi.D", D)
    nu0 = _rec(tr, kind + ".pi.nu0", sub_down(pp.nu_lo, seg))
    sphere = (pp.nu > 1.0) & (nu0 > 1.0)
    ident = (pp.nu <= 1.0) & (add_up(pp.nu_hi, seg) <= 1.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        nu0sq = np.where(sphere, down(nu0 * nu0), 1.0)
        quad = _rec(tr, kind + ".pi.quad", div_up(mul_up(mul_up(D, D), _INV_SQRT3), nu0sq))
        lin = _rec(tr, kind + ".pi.lin", mul_up(add_up(div_up(mul_up(pre0, _SQRT2), nu0sq), net.c_pi), D))
        rho = np.where(sphere, add_up(quad, lin), np.where(ident, 0.0, mul_up(D, 2.0)))
    _rec(tr, kind + ".pi.case", np.where(sphere, 1.0, np.where(ident, 0.0, 2.0)))
    return _rec(tr, kind + ".pi.rho", rho)


# --------------------------------------------------------------------------- feed-forward (steps 5, 6, 9)


def _kink(t: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """Rows with an entry whose ball ``|t_j| <= radius`` reaches ReLU's kink."""
    return (np.abs(t) <= radius[..., None]).any(axis=-1)


def _ff_remainder(lay: IntervalLayer, st, rd, r0, dy, d: np.ndarray, tr) -> np.ndarray:
    """Step 6: the bound of ``F(m + Delta) - F(m) - J_F Delta`` per row (before the residual and Pi) for
    ``|Delta_t| <= dy_t``; ``rd``, ``r0``: the stage's radii at ``dy`` and at 0."""
    fp, back = st.fp, lay.back
    relu = lay.act.name == "relu"
    if not lay.gated:
        b_in, b_out = lay.ff_blocks
        w = _rec(tr, "ff.w", mul_up(dy, b_in.sigma))
        if relu:
            kink = _kink(fp.u, rd.ff.eps_u)
            inner = np.where(kink, mul_up(w, 2.0), 0.0)
        else:
            quad = _rec(tr, "ff.quad", mul_up(mul_up(w, w), 0.5 * back.L2))
            lin = _rec(tr, "ff.lin", mul_up(add_up(mul_up(r0.ff.eps_u, back.L2), back.e_d), w))
            inner = add_up(quad, lin)
        return _rec(tr, "ff.rho", mul_up(inner, b_out.sigma))
    bG, bU, bD = lay.ff_blocks
    wa = _rec(tr, "ff.wa", mul_up(dy, bG.sigma))
    wb = _rec(tr, "ff.wb", mul_up(dy, bU.sigma))
    a0, b0 = r0.ff.eps_u, r0.ff.eps_b
    if relu:
        t1 = np.where(_kink(fp.u, rd.ff.eps_u), mul_up(wa, 2.0), 0.0)
    else:
        t1 = add_up(mul_up(mul_up(wa, wa), 0.5 * back.L2), mul_up(add_up(mul_up(a0, back.L2), back.e_d), wa))
    t1 = _rec(tr, "ff.t1", mul_up(t1, add_up(fp.b_inf, b0)))
    t2 = _rec(tr, "ff.t2", mul_up(mul_up(np.abs(d).max(axis=-1), wa), b0))
    t3 = _rec(tr, "ff.t3", mul_up(mul_up(wa, wb), lay.act.L_phi))
    t4 = _rec(tr, "ff.t4", mul_up(add_up(mul_up(a0, lay.act.L_phi), r0.ff.e_act), wb))
    return _rec(tr, "ff.rho", mul_up(add_up(t1, t2, t3, t4), bD.sigma))


def _ff_backward(net: IntervalNetwork, lay: IntervalLayer, st, ga: np.ndarray, d: np.ndarray, A: np.ndarray, tr):
    """Step 9's feed-forward program on the adjoint rows ``ga`` (after Pi's backward) and the bound of its
    rounding summed over the rows (``gamma_k S + 2^-700``)."""
    fp, back = st.fp, lay.back
    B, R, N = ga.shape
    F = d.shape[-1]
    hid = ga.reshape(B * R, N) @ back.ff_t[0]
    res = 1.0 if net.residual else 0.0
    d_inf = np.abs(d).max(axis=-1)
    if not lay.gated:
        hid *= d.reshape(B * R, F)
        g_in = (hid @ back.ff_t[1]).reshape(B, R, N)
        b_in, b_out = lay.ff_blocks
        gain = add_up(res, mul_up(mul_up(b_in.fro, d_inf), b_out.fro))
        k = 2 * N + F + 5
    else:
        bG, bU, bD = lay.ff_blocks
        ga_ = hid * fp.b.reshape(B * R, F)
        ga_ *= d.reshape(B * R, F)
        gb = hid * fp.act.g.reshape(B * R, F)
        g_in = (np.concatenate([ga_, gb], axis=-1) @ back.ff_t[1]).reshape(B, R, N)
        gain = add_up(res, mul_up(bD.fro, add_up(mul_up(mul_up(bG.fro, fp.b_inf), d_inf), mul_up(bU.fro, fp.g_inf))))
        k = 2 * N + 2 * F + 6
    if net.residual:
        g_in += ga
    _rec(tr, "ff.gain", gain)
    S = _rec(tr, "ff.S", sum_up(mul_up(A, gain)))
    return g_in, _rec(tr, "ff.B", add_up(mul_up(gamma_up(k), S), BACKWARD_TINY))


def _ff_jacobian(net: IntervalNetwork, lay: IntervalLayer, st, d: np.ndarray, tr) -> np.ndarray:
    """``>= ||J_Gamma||`` per row of the feed-forward stage before Pi (step 6): the residual's 1 plus the
    least of ``sigma_in max|d| sigma_out`` and, for a plain feed-forward with few entries, the Frobenius
    norm ``sqrt(d^T K d)`` (rounded up with K's and the quadratic form's errors); gated:
    ``sigma_D (sigma_G B_inf D_inf + sigma_U G_inf)``."""
    fp, back, res = st.fp, lay.back, 1.0 if net.residual else 0.0
    d_inf = np.abs(d).max(axis=-1)
    if lay.gated:
        bG, bU, bD = lay.ff_blocks
        spec = mul_up(bD.sigma, add_up(mul_up(mul_up(bG.sigma, fp.b_inf), d_inf), mul_up(bU.sigma, fp.g_inf)))
        return _rec(tr, "ff.J", add_up(res, spec))
    b_in, b_out = lay.ff_blocks
    spec = mul_up(mul_up(b_in.sigma, d_inf), b_out.sigma)
    F = d.shape[-1]
    if back.ff_K is not None and (F <= 32 or d.shape[1] == 1):
        q = np.maximum(np.einsum("...j,...j->...", d @ back.ff_K, d), 0.0)
        # d^T K d as (d K) . d: each term passes one product and F - 1 sums twice (gamma_2F)
        err = _rec(tr, "ff.J.err", mul_up(add_up(mul_up(gamma_up(2 * F), back.ff_K_fro), back.ff_K_err), sq_norm_up(d)))
        spec = np.minimum(spec, sqrt_up(add_up(q, err)))
    return _rec(tr, "ff.J", add_up(res, spec))


def _ff_bounds(net: IntervalNetwork, lay: IntervalLayer, st, dy, tr) -> SimpleNamespace:
    """The feed-forward stage's local error ``eps``, remainder ``rho`` (steps 3, 4, 6) for input balls ``dy``,
    ``iota`` and the computed derivative ``d``."""
    r0 = ff_stage_radius(net, lay, st, np.zeros_like(dy), None if tr is None else tr.setdefault("ff0", {}))
    rd = st.ff if dy is st.att.out else ff_stage_radius(net, lay, st, dy, None if tr is None else tr.setdefault("ff1", {}))
    act = st.fp.act
    d = _rec(tr, "ff.d", derivative(lay.act.name, act.t, act.kept))
    rho_g = _ff_remainder(lay, st, rd, r0, dy, d, tr)
    # |D| <= per-layer radii, or <= ||J_Gamma|| dy + rho_Gamma (the stage's own linearisation)
    D = np.minimum(add_up(rd.pre, r0.pre), add_up(mul_up(_ff_jacobian(net, lay, st, d, tr), dy), rho_g))
    seg = np.minimum(rd.pre, add_up(r0.pre, D))
    rho_pi = _pi_remainder(net, st.pp2, D, seg, r0.pre, tr, "ff")
    iota = _iota(st.pp2)
    rho = _rec(tr, "ff.rhoR", add_up(rho_pi, mul_up(iota, rho_g)))
    return SimpleNamespace(eps=_rec(tr, "ff.eps", r0.out), rho=rho, iota=iota, d=d)


def _ff_stage(net: IntervalNetwork, lay: IntervalLayer, st, bd, g: np.ndarray, ng: np.ndarray, tr):
    """One feed-forward stage backwards: (first-order and remainder terms summed, adjoint at the stage's
    input, backward rounding bound)."""
    ga, iota = _pi_backward(g, st.pp2)
    terms = _rec(tr, "ff.terms", sum_up(mul_up(ng, add_up(bd.eps, bd.rho))))
    A = _rec(tr, "ff.A", mul_up(mul_up(iota, ng), _one_r2(net)))
    g_in, bound = _ff_backward(net, lay, st, ga, bd.d, A, tr)
    return terms, g_in, bound


def _one_r2(net: IntervalNetwork) -> float:
    return add_up(1.0, mul_up(net.r_pi, net.r_pi))


# --------------------------------------------------------------------------- attention (steps 7, 8, 9)


def _head_sigmas(blocks, idx) -> np.ndarray:
    return np.array([blocks[i].sigma for i in idx])[None, :, None]


def _head_fros(blocks, idx) -> np.ndarray:
    return np.array([blocks[i].fro for i in idx])[None, :, None]


def _att_remainder(net: IntervalNetwork, lay: IntervalLayer, st, r0, tr) -> np.ndarray:
    """Step 8: the bound of ``A(m + Delta) - A(m) - J_A Delta`` per query row (before the residual and Pi)."""
    ap, a, a0 = st.ap, st.att.att, r0.att
    same, causal, Tq, H = ap.same, net.causal, ap.Tq, lay.num_heads
    grp, heads = lay.group, range(H)
    rho = net.rho_R if net.rope else 1.0
    qbar = _rec(tr, "att.qbar", mul_up(mul_up(a.dlt_q[:, None, :], _head_sigmas(lay.q, heads)), rho))
    dmax = _keymax(st.delta, causal, Tq)[:, None, :]
    kbar = _rec(tr, "att.kbar", mul_up(mul_up(dmax, _head_sigmas(lay.k, grp)), rho))
    ek0 = _to_heads(_keymax(a0.eps_k, causal, Tq), lay, same)
    ev0 = _to_heads(_keymax(a0.eps_v, causal, Tq), lay, same)
    Kmax, Vmax = ap.key_max  # max over each row's keys of N(k_s), N(v_s) per head (the forward's)
    eq0, Qh = a0.eps_q.transpose(0, 2, 1), ap.Qn.transpose(0, 2, 1)
    r, rl, eta = a.r, a0.r, a.eta_p
    P = add_up(1.0, eta)
    tau = _rec(tr, "att.tau", add_up(mul_up(qbar, ek0), mul_up(add_up(eq0, qbar), kbar)))
    smax = _rec(tr, "att.smax", add_up(mul_up(qbar, Kmax), mul_up(Qh, kbar)))
    t1 = _rec(tr, "att.t1", mul_up(add_up(r, eta), mul_up(_head_sigmas(lay.v, grp), dmax)))
    t2 = _rec(tr, "att.t2", mul_up(add_up(mul_up(r, r), mul_up(tau, 2.0)), add_up(ap.omega, ev0)))
    t3 = _rec(tr, "att.t3", mul_up(mul_up(mul_up(add_up(2.0, P), add_up(rl, eta)), smax), add_up(Vmax, ev0)))
    t4 = _rec(tr, "att.t4", mul_up(mul_up(mul_up(P, add_up(1.0, P)), smax), ev0))
    rho_h = _rec(tr, "att.rho_h", np.where(a.bad, np.inf, add_up(t1, t2, t3, t4)))
    return _rec(tr, "att.rho", mul_up(norm_up(rho_h.transpose(0, 2, 1)), lay.o.sigma)), smax


def _rotate_back(x: np.ndarray, net: IntervalNetwork, first: int) -> np.ndarray:
    """The transposed rotation on adjoint rows (B, H|G, Tr, d) at positions ``first..``: ``(ga c + gb s,
    gb c - ga s)``, computed as ``x [c, c] + (gb, ga) [s, -s]`` (the same values bit for bit: negation is
    exact and ``+`` commutes)."""
    Tr = x.shape[2]
    c = net.cos[first:first + Tr]
    s = net.sin[first:first + Tr]
    c2 = np.concatenate([c, c], axis=-1)[None, None]
    s2 = np.concatenate([s, -s], axis=-1)[None, None]
    return swap_rotation(x, c2, s2, x.shape[3])


def _att_backward(net: IntervalNetwork, lay: IntervalLayer, st, ga: np.ndarray, A: np.ndarray, tr):
    """Step 8/9's attention program on the adjoint rows ``ga`` (query rows, after Pi's backward) and the
    bound of its rounding summed over the input rows."""
    ap, back = st.ap, lay.back
    B, Tq, N = ga.shape
    T = ap.x.shape[1]
    H, G, d, dv = lay.num_heads, lay.num_groups, lay.dq, lay.dv
    grp, same = lay.group, ap.same
    gh = (ga.reshape(B * Tq, N) @ back.wo_t).reshape(B, Tq, H, dv).transpose(0, 2, 1, 3)
    vh, kh = ap.v.transpose(0, 2, 1, 3), ap.k.transpose(0, 2, 1, 3)
    if not same:
        vh, kh = vh[:, grp], kh[:, grp]
    qh, p = ap.q.transpose(0, 2, 1, 3), ap.p
    gv = p.transpose(0, 1, 3, 2) @ gh
    gp = _scores(gh, vh.transpose(0, 1, 3, 2))  # gh @ vh^T (a compiled outer product at dv = 1)
    c = np.einsum("bhts,bhts->bht", p, gp)
    if kernels.AVAILABLE and gp.size >= kernels.MIN_SIZE:  # the same two steps per entry, compiled
        gs = kernels.centred_times_rows(gp, c, p)
    else:
        gs = gp - c[..., None]
        gs *= p
    gq = gs @ kh
    gk = gs.transpose(0, 1, 3, 2) @ qh
    if not same:
        gk = np.einsum("bhtd,hg->bgtd", gk, back.group_sum)
        gv = np.einsum("bhtd,hg->bgtd", gv, back.group_sum)
    if net.rope:
        gq = _rotate_back(gq, net, ap.first)
        gk = _rotate_back(gk, net, 0)
    gk_r = gk.transpose(0, 2, 1, 3).reshape(B, T, G * d)
    gv_r = gv.transpose(0, 2, 1, 3).reshape(B, T, G * dv)
    gq_r = gq.transpose(0, 2, 1, 3).reshape(B, Tq, H * d)
    if Tq == T:
        g_in = (np.concatenate([gq_r, gk_r, gv_r], axis=-1).reshape(B * T, -1) @ back.wqkv_t).reshape(B, T, N)
        if net.residual:
            g_in += ga
    else:
        g_in = (np.concatenate([gk_r, gv_r], axis=-1).reshape(B * T, -1) @ back.wkv_t).reshape(B, T, N)
        row = gq_r.reshape(B, H * d) @ back.wq_t
        if net.residual:
            row += ga[:, 0]
        g_in[:, ap.first] += row
    # the absolute program's bound (step 9), per query row, then summed
    P = add_up(1.0, st.att.att.eta_p)
    Kmax, Vmax = ap.key_max
    rot = up(_SQRT2 * net.rho_R) if net.rope else 1.0
    score = mul_up(mul_up(mul_up(rot, mul_up(P, add_up(1.0, P))), Vmax),
                   add_up(mul_up(_head_fros(lay.q, range(H)), Kmax), mul_up(_head_fros(lay.k, grp), ap.Qn.transpose(0, 2, 1))))
    per_head = mul_up(np.array(back.o_fro)[None, :, None], add_up(mul_up(_head_fros(lay.v, grp), P), score))
    gain = _rec(tr, "att.gain", add_up(1.0 if net.residual else 0.0, sum_up(per_head, axis=1)))
    S = _rec(tr, "att.S", sum_up(mul_up(A, gain)))
    k = 2 * N + 2 * T + dv + (H * d + G * d + G * dv + 1) + H + 10
    return g_in, _rec(tr, "att.B", add_up(mul_up(gamma_up(k), S), BACKWARD_TINY))


def _att_bounds(net: IntervalNetwork, lay: IntervalLayer, st, tr) -> SimpleNamespace:
    """The attention stage's local error ``eps``, remainder ``rho`` (steps 3, 4, 8), ``iota``, and the
    linearised output ball ``lin >= iota |J_A Delta| + rho + eps`` (note step 10's tightening)."""
    r0 = attention_stage_radius(net, lay, st, np.zeros_like(st.delta), None if tr is None else tr.setdefault("att0", {}))
    eps = _rec(tr, "att.eps", r0.out)
    pre, pre0 = st.att.pre, r0.pre
    D = add_up(pre, pre0)
    rho_pi = _pi_remainder(net, st.pp1, D, pre, pre0, tr, "att")
    rho_g, smax = _att_remainder(net, lay, st, r0, tr)
    iota = _iota(st.pp1)
    rho = _rec(tr, "att.rhoR", add_up(rho_pi, mul_up(iota, rho_g)))
    # |J_A Delta| per head: P sigma_V dmax + smax (sqrt(P W) + eta_p P |h|)
    a, ap = st.att.att, st.ap
    P = add_up(1.0, a.eta_p)
    dmax = _keymax(st.delta, net.causal, ap.Tq)[:, None, :]
    head = add_up(mul_up(mul_up(P, _head_sigmas(lay.v, lay.group)), dmax),
                  mul_up(smax, add_up(sqrt_up(mul_up(P, a.W)), mul_up(mul_up(a.eta_p, P), ap.Hn))))
    jac = mul_up(norm_up(head.transpose(0, 2, 1)), lay.o.sigma)
    if net.residual:
        jac = add_up(jac, a.dlt_q)
    lin = _rec(tr, "att.lin", add_up(mul_up(iota, jac), rho, eps))
    return SimpleNamespace(eps=eps, rho=rho, iota=iota, lin=np.where(a.bad.any(axis=1), np.inf, lin))


def _attention_stage(net: IntervalNetwork, lay: IntervalLayer, st, bd, g: np.ndarray, ng: np.ndarray, tr):
    """One attention stage backwards (as :func:`_ff_stage`)."""
    ga, iota = _pi_backward(g, st.pp1)
    terms = _rec(tr, "att.terms", sum_up(mul_up(ng, add_up(bd.eps, bd.rho))))
    A = _rec(tr, "att.A", mul_up(mul_up(iota, ng), _one_r2(net)))
    g_in, bound = _att_backward(net, lay, st, ga, A, tr)
    return terms, g_in, bound


# --------------------------------------------------------------------------- assembly (steps 1, 10)


def _cut(best: np.ndarray, acc: np.ndarray, ng: np.ndarray, delta: np.ndarray, tr, key: str) -> np.ndarray:
    """``min(best, acc + sum_t N(g_t) delta_t)`` per sample (a non-finite candidate changes nothing)."""
    cand = _rec(tr, key, add_up(acc, sum_up(mul_up(ng, delta))))
    return np.where(np.isfinite(cand) & (cand < best), cand, best)


def _refine_row(net: IntervalNetwork, tape: list, c: int, f: np.ndarray, rad: np.ndarray,
                target: float | None, trace: dict | None) -> np.ndarray:
    fin = tape[-1]
    B, N = fin.x.shape
    g = np.broadcast_to(net.readout[c], (B, 1, N)).copy()
    ng = np.full((B, 1), net.readout_norms[c])
    acc = _rec(trace, "out.acc", add_up(mul_up(fin.rounding, net.readout_norms[c]), TINY))
    best = rad.copy()
    L = net.num_layers
    with np.errstate(invalid="ignore", over="ignore"):
        goal = np.zeros_like(f) if target is None else target * (1.0 + np.abs(f))
        for l in reversed(range(L)):
            st, lay = tape[l], net.layers[l]
            tr = None if trace is None else trace.setdefault(f"L{l}", {})
            # the feed-forward's input ball: the per-layer radius, or (last layer) the attention stage
            # linearised, whose bounds are then computed first
            att, dy = None, st.att.out
            if l == L - 1:
                att = _att_bounds(net, lay, st, tr)
                dy = _rec(tr, "ff.dy", np.minimum(dy, att.lin))
            for kind, stage, delta in (("ff", _ff_stage, dy), ("att", _attention_stage, st.delta)):
                if kind == "ff":
                    bd = _ff_bounds(net, lay, st, dy, tr)
                else:
                    bd = att if att is not None else _att_bounds(net, lay, st, tr)
                _rec(tr, kind + ".g_out", g)
                terms, g, bound = stage(net, lay, st, bd, g, ng, tr)
                ng = norm_up(g)
                _rec(tr, kind + ".g_in", g)
                acc = _rec(tr, kind + ".acc", add_up(acc, terms, mul_up(bound, delta.max(axis=1))))
                best = _cut(best, acc, ng, delta, tr, kind + ".cut")
                # every later cut is >= acc: a sample is done when it meets the goal or can gain < 10%
                if bool(((best <= goal) | (acc >= STALL * best)).all()):
                    return best
    return best


SUBSET_BELOW = 0.5
"""When fewer than this fraction of a batch's samples miss the goal, the backward runs on those samples only
(their records copied out of the tape); otherwise on the whole batch (a float choice of work, never a bound)."""


def refine(net: IntervalNetwork, tape: list, f: np.ndarray, rad: np.ndarray, ok: np.ndarray,
           target: float | None = None, trace: dict | None = None) -> np.ndarray:
    """Radii ``<= rad`` (B, k) still enclosing ``f_c(X)`` around ``f`` (note step 1): per read-out row the
    least of the per-layer radius and every cut's radius reached backwards from the read-out; stops when
    every sample's radius is ``<= target (1 + |f|)`` (``None``: runs to the input).  Samples not ``ok``
    are left alone, and with a target > 0 so are the samples whose per-layer radius already meets it (the
    backward runs only on the others when they are few: either radius encloses, the goal only chooses
    which one is returned).  ``trace``: receives every term per layer and stage (for the tests)."""
    if net.num_layers == 0 or not all(lay.back.usable for lay in net.layers):
        return rad
    need = ok.copy()
    if target:
        with np.errstate(invalid="ignore", over="ignore"):
            need &= ~(rad <= target * (1.0 + np.abs(f))).all(axis=1)
    B = need.shape[0]
    if not need.any():
        return rad
    if trace is None and need.sum() < SUBSET_BELOW * B:
        idx = np.flatnonzero(need)
        out = rad.copy()
        out[idx] = refine(net, [rows_of(st, idx, B) for st in tape], f[idx], rad[idx], ok[idx], target)
        return out
    out = rad.copy()
    for c in range(net.k):
        tr = None if trace is None else trace.setdefault(f"row{c}", {})
        out[:, c] = np.where(ok, _refine_row(net, tape, c, f[:, c], rad[:, c], target, tr), rad[:, c])
    return out


def refined_pass(weights, target: float = 0.0) -> IntervalPass:
    """The per-sample pass of ``weights`` (:func:`~specbound.certified.interval_forward.prepare`) with every
    batch refined by :func:`refine` until each radius is ``<= target (1 + |f|)`` (0: as far as it helps)."""
    if not target >= 0:
        raise ValueError(f"the refinement's target must be >= 0, got {target!r}")
    return replace(prepare(weights), refiner=partial(refine, target=float(target)), goal=float(target))


__all__ = ("BACKWARD_TINY", "refine", "refined_pass")

"""Certified forward pass with a per-sample, per-row error bound, vectorised over whole batches.

:func:`interval_outputs` runs the binary64 program of proofs_notes/interval_forward.md on a batch (every
variant: plain, residual, causal, ls, ls_residual; GELU, tanh-GELU, ReLU, SiLU; a k-row read-out) and,
alongside, a binary64 radius per row and stage from the values that occur: row norms, score
magnitudes, the spread of the values under each attention row, the norms before each projection.
Every radius operation is rounded upward (:mod:`specbound.certified.directed`), and every constant is an
exact Arb point rounded up once per model (:mod:`specbound.certified.interval_network`).  The result per
sample and class is an enclosure ``[lo, hi]`` of the exact real output, or ``[-inf, +inf]`` when a bound
overflowed (the sample is then not certified; the caller redoes it in Arb).

Public API: :class:`IntervalPass`, :func:`prepare`, :func:`interval_outputs`, :func:`outputs_of_rows`,
:func:`outputs_of_tokens`, :func:`output_enclosures`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specbound.certified.arb import precision
from specbound.certified.directed import (
    UNIT_ROUNDOFF, add_up, div_up, down, float_up, gamma_arb, gamma_up, mul_up, norm_up, norms_both, sq_norm_up,
    sqrt_up, sub_down, up, upn,
)
from specbound.certified.elementary import exp_error_bound, exp_nonpositive, phi
from specbound.certified.fast_forward import NotApplicable, check_float_environment, token_table
from specbound.certified.interval_network import IntervalLayer, IntervalNetwork
from specbound.certified.sigmoid import gelu_tanh, silu
from specbound.errors import CertificationError
from specbound.matrices import AnalysisWeights

TINY = 2.0**-1000
"""Covers every underflow term of one stage: sqrt(k) n eta, d eta, 2 sqrt(d) eta, sqrt(d) T eta with all
dimensions below 2^30 (interval_network.MAX_DIM), each <= 2^-1029."""

SOFTMAX_TINY_EXP = -1017
"""``alpha' = 2^-1017`` bounds ``alpha (1+u)/(1-beta) + 2^-1075`` for beta < 1/2 (note step 5, with
alpha = 2^-1019 the clamp error of exp and 2^-1075 the division's underflow)."""

MAX_INPUT = 2.0**500
"""Float input rows with an entry above this are not certified (their squared norms could overflow)."""

BATCH = 1024
"""Samples per batch (every sample's program is the same whatever the batch): large enough that numpy's
per-call overhead on the small per-row bound arrays is amortised (measured: 1024 beats 256 by 10-40%)."""

_U = UNIT_ROUNDOFF
_U1 = 2.0**-53 + 2.0**-105
"""u' >= u / (1 - u) = u + u^2 + ... (exactly representable)."""

_ROT = 2.0**-51
""">= sqrt(2) gamma_2 (about 3.1e-16): the rounding factor of the rotation program (note step 3)."""


@lru_cache(maxsize=None)
def _softmax_constants(T: int, d: int) -> tuple[float, float, float, float, float, float]:
    """(eta_exp, gamma_T, T alpha', 1 + gamma_d, 1/(1-gamma_T), gamma_d) as binary64 upper bounds."""
    with precision(128):
        return (float_up(exp_error_bound()), gamma_up(T), float(T) * 2.0**SOFTMAX_TINY_EXP,
                float_up(1 + gamma_arb(d)), float_up(1 / (1 - gamma_arb(T))), gamma_up(d))


def _finite(ok: np.ndarray, a: np.ndarray) -> None:
    """``ok[b] &= every entry of sample b finite`` (step 14)."""
    ok &= np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1)


def _rec(tr: dict | None, key: str, value):
    """Record ``value`` under ``key`` when tracing (the tests pin every term of the note against an
    independent recomputation); returns ``value``."""
    if tr is not None:
        tr[key] = np.array(value, dtype=np.float64)
    return value


def _linear(delta, norms, blocks, tr, name):
    """Step 2 per block: ``delta sigma + rnd N(m) + TINY``; ``delta``, ``norms`` (...,) -> (..., blocks)."""
    sig = np.array([b.sigma for b in blocks])
    rnd = np.array([b.rnd for b in blocks])
    lip = _rec(tr, name + ".lip", mul_up(delta[..., None], sig))
    rounding = _rec(tr, name + ".rnd", mul_up(norms[..., None], rnd))
    return _rec(tr, name, add_up(lip, rounding, TINY))


# --------------------------------------------------------------------------- stages


def _project(a: np.ndarray, eps: np.ndarray, net: IntervalNetwork, ok: np.ndarray, tr, name):
    """Step 9: the program ``a / max(1, fl(sqrt(fl(sum a^2))))`` and its row radius."""
    _rec(tr, name + ".in", a)
    _rec(tr, name + ".in_eps", eps)
    nu_hi, nu_lo, s = norms_both(a, with_sum=True)
    _finite(ok, nu_hi)
    y = a / np.maximum(np.sqrt(s), 1.0)[..., None]
    lip = _rec(tr, name + ".lip", div_up(eps, np.maximum(sub_down(nu_lo, eps), 1.0)))
    rounding = _rec(tr, name + ".rnd", mul_up(net.e_pi, np.minimum(nu_hi, 1.0)))
    return y, _rec(tr, name, add_up(lip, rounding, TINY))


def _rotate(x: np.ndarray, eps: np.ndarray, net: IntervalNetwork, first: int, tr, name):
    """Step 3 on rows ``x`` (B, Tr, G, d) at positions ``first..first+Tr-1``."""
    Tr, d = x.shape[1], x.shape[3]
    half = d // 2
    if net.cos is None or first + Tr > net.cos.shape[0]:
        raise NotApplicable(f"sequence length {first + Tr} exceeds the rotary tables")
    c = net.cos[first:first + Tr][None, :, None, :]
    s = net.sin[first:first + Tr][None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    out = np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    lip = _rec(tr, name + ".rot_lip", mul_up(eps, net.rho_R))
    rounding = _rec(tr, name + ".rot_rnd", mul_up(mul_up(norm_up(x), _ROT), net.rho_R))
    return out, _rec(tr, name + ".rot", add_up(lip, rounding, TINY))


def _keymax(a: np.ndarray, causal: bool, Tq: int) -> np.ndarray:
    """Max over the key set of each query row: ``a`` (..., T) -> (..., Tq) or (..., 1); prefix maxima when
    causal and every row is a query (row t keeps keys s <= t), else the max over all keys."""
    if causal and Tq == a.shape[-1] and Tq > 1:
        return np.maximum.accumulate(a, axis=-1)
    return a.max(axis=-1, keepdims=True)  # (..., 1): broadcasts against the query rows


def _box_halfwidth(v: np.ndarray, causal: bool, Tq: int) -> np.ndarray:
    """omega: the norm of the half-widths of the bounding box of each row's values; ``v`` (B, H, T, d)
    -> (B, H, Tq) (note step 6 (b1))."""
    if causal and Tq == v.shape[2] and Tq > 1:
        hi, lo = np.maximum.accumulate(v, axis=2), np.minimum.accumulate(v, axis=2)
    else:
        hi, lo = v.max(axis=2, keepdims=True), v.min(axis=2, keepdims=True)
    return norm_up(upn(upn(hi - lo) * 0.5))  # hi - lo >= 0; (B, H, Tq) or (B, H, 1)


@lru_cache(maxsize=64)
def _causal_keep(T: int, Tq: int) -> np.ndarray:
    t = np.arange(T - Tq, T)[:, None]
    return (np.arange(T)[None, :] <= t).astype(np.float64)


def _softmax(s: np.ndarray, causal: bool) -> np.ndarray:
    """The program of fast_forward.md steps 5.3-5.5 and 10 on scores (B, H, Tq, T), in place."""
    T, Tq = s.shape[-1], s.shape[-2]
    keep = _causal_keep(T, Tq) if causal else None
    if keep is not None:
        s -= np.where(keep, s, -np.inf).max(axis=-1, keepdims=True)
        np.minimum(s, 0.0, out=s)
    else:
        s -= s.max(axis=-1, keepdims=True)
    e = exp_nonpositive(s)
    if keep is not None:
        e *= keep
    e /= e.sum(axis=-1, keepdims=True)
    return e


def _softmax_errors(S, T: int, d: int, tr):
    """Step 5 per row from the score magnitude S: (eta_p, lambda, rows not certified)."""
    eta_exp, g_T, T_alpha, _, _, _ = _softmax_constants(T, d)
    a_ = mul_up(S, 2.0 * _U)
    eta1 = _rec(tr, "eta1", add_up(mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), eta_exp))
    beta = _rec(tr, "beta", add_up(eta1, mul_up(add_up(1.0, eta1), g_T), T_alpha))
    bad = ~((a_ < 0.5) & (beta < 0.5))
    eta_p = _rec(tr, "eta_p", div_up(add_up(eta1, mul_up(add_up(1.0, eta1), _U), beta, T_alpha),
                                     sub_down(1.0, beta)))
    lam = _rec(tr, "lam", div_up(add_up(1.0, beta), down(sub_down(1.0, eta1) * (1.0 - _U))))
    return eta_p, lam, bad


def _attention(net: IntervalNetwork, lay: IntervalLayer, x, delta, nx, last: bool, ok, tr):
    """Steps 2-7 for one layer: the attention output rows (before the residual sum and Pi) and radii."""
    B, T, N = x.shape
    H, G, d, dv = lay.num_heads, lay.num_groups, lay.dq, lay.dv
    tau = T - 1 if net.causal else 0
    if last:
        xq, dlt_q, nq, Tq, first = x[:, tau:tau + 1], delta[:, tau:tau + 1], nx[:, tau:tau + 1], 1, tau
    else:
        xq, dlt_q, nq, Tq, first = x, delta, nx, T, 0
    x2 = x.reshape(B * T, N)
    q = _rec(tr, "q_hat", (xq.reshape(B * Tq, N) @ lay.wq).reshape(B, Tq, H, d))
    k = _rec(tr, "k_hat", (x2 @ lay.wk).reshape(B, T, G, d))
    v = _rec(tr, "v_hat", (x2 @ lay.wv).reshape(B, T, G, dv))
    eps_q = _linear(dlt_q, nq, lay.q, tr, "eps_q")
    eps_k = _linear(delta, nx, lay.k, tr, "eps_k")
    eps_v = _linear(delta, nx, lay.v, tr, "eps_v")
    if net.rope:
        q, eps_q = _rotate(q, eps_q, net, first, tr, "eps_q")
        k, eps_k = _rotate(k, eps_k, net, 0, tr, "eps_k")
        _rec(tr, "q_rot", q)
        _rec(tr, "k_rot", k)
    Qn, Kn, Vsq = norm_up(q), norm_up(k), sq_norm_up(v)
    for a in (Qn, Kn, Vsq):
        _finite(ok, a)
    Vn = sqrt_up(Vsq)
    grp = lay.group
    same = G == H and bool((grp == np.arange(H)).all())
    qh = q.transpose(0, 2, 1, 3)
    kh = k.transpose(0, 2, 3, 1)
    vaug = np.concatenate([v, Vsq[..., None]], axis=-1).transpose(0, 2, 1, 3)
    if not same:
        kh, vaug = kh[:, grp], vaug[:, grp]
    p = _rec(tr, "p_hat", _softmax(qh @ kh, net.causal))  # (B, H, Tq, T)
    hh = p @ vaug
    h, A = _rec(tr, "h_hat", hh[..., :dv]), _rec(tr, "A_hat", hh[..., dv])
    to_heads = (lambda a: a.transpose(0, 2, 1)) if same else (lambda a: a.transpose(0, 2, 1)[:, grp])
    ek, Kh, Vh, ev = to_heads(eps_k), to_heads(Kn), to_heads(Vn), to_heads(eps_v)
    _, g_T, T_alpha, one_g_d, inv_g_T, g_d = _softmax_constants(T, d)
    causal = net.causal
    m1 = _keymax(add_up(Kh, ek), causal, Tq)
    m2 = _keymax(add_up(ek, mul_up(Kh, g_d)), causal, Tq)
    mK, mV, mEv = _keymax(Kh, causal, Tq), _keymax(Vh, causal, Tq), _keymax(ev, causal, Tq)
    omega = _box_halfwidth(v.transpose(0, 2, 1, 3) if same else v.transpose(0, 2, 1, 3)[:, grp], causal, Tq)
    Qh, eq = Qn.transpose(0, 2, 1), eps_q.transpose(0, 2, 1)
    # step 4: the score radius r and the magnitude S per query row
    r1 = _rec(tr, "r.1", mul_up(eq, m1))
    r2 = _rec(tr, "r.2", mul_up(Qh, m2))
    r = _rec(tr, "r", add_up(r1, r2, TINY))
    _rec(tr, "omega", np.broadcast_to(omega, r.shape))
    S = _rec(tr, "S", add_up(mul_up(mul_up(Qh, one_g_d), mK), TINY))
    # step 5: the softmax program's errors per row
    eta_p, lam, bad = _softmax_errors(S, T, d, tr)
    # step 6: the head output rows
    Hn, Hlo = norms_both(h)
    _finite(ok, Hn)
    e_g = _rec(tr, "h.d", add_up(mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), TINY))
    b1 = _rec(tr, "h.b1", mul_up(r, omega))
    A_up = _rec(tr, "W.A", mul_up(add_up(A, TINY), inv_g_T))
    h_sq_lo = _rec(tr, "W.h2", down(down(sub_down(1.0, eta_p) * Hlo) * Hlo))
    he = _rec(tr, "W.he", mul_up(mul_up(Hn, e_g), 2.0))
    tail = _rec(tr, "W.tail", mul_up(T_alpha, mul_up(add_up(mV, Hn), add_up(mV, Hn))))
    # the positive terms first, then one signed subtraction rounded up (it may be negative)
    W = _rec(tr, "W", mul_up(lam, np.maximum(up(add_up(A_up, he, tail) - h_sq_lo), 0.0)))
    x2r = mul_up(r, 2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        b2 = _rec(tr, "h.b2", np.where(x2r < 0.5, mul_up(div_up(x2r, sub_down(1.0, x2r)), sqrt_up(W)), np.inf))
    ha = _rec(tr, "h.a", np.broadcast_to(mEv, r.shape))
    hc = _rec(tr, "h.c", mul_up(eta_p, mV))
    eps_h = _rec(tr, "eps_h", np.where(bad, np.inf, add_up(ha, np.minimum(b1, b2), hc, e_g)))
    # step 7: heads concatenated, one product of length H dv with the stacked W_O
    hcat = h.transpose(0, 2, 1, 3).reshape(B, Tq, H * dv)
    eps_cat = norm_up(eps_h.transpose(0, 2, 1))
    n_cat = norm_up(hcat)
    _finite(ok, n_cat)
    out = _rec(tr, "a_hat", (hcat.reshape(B * Tq, H * dv) @ lay.wo).reshape(B, Tq, N))
    return out, _linear(eps_cat, n_cat, (lay.o,), tr, "eps_a")[..., 0], xq, dlt_q


def _activate(lay: IntervalLayer, t: np.ndarray, ok: np.ndarray, tr):
    """Step 10: ``phi_hat(t)`` and the norm bound of its rows' errors against ``phi(t)``."""
    act = lay.act
    F = t.shape[-1]
    nt = norm_up(t)
    _finite(ok, nt)
    if act.name == "relu":
        return np.maximum(t, 0.0), _rec(tr, "act", np.zeros_like(nt))
    tiny = mul_up(up(math.sqrt(F)), act.tau)
    k1 = _rec(tr, "act.1", mul_up(nt, act.kappa_1))
    if act.name == "gelu":
        finite = np.isfinite(t)
        if not np.abs(np.where(finite, t, 0.0)).max(initial=0.0) <= act.t_max:
            raise CertificationError("a GELU argument exceeds its proven a-priori bound")
        g = phi(t, act.coeffs)
        g *= t
        return g, _rec(tr, "act", add_up(k1, tiny))
    if act.name == "silu":
        return silu(t), _rec(tr, "act", add_up(k1, tiny))
    g, y = gelu_tanh(t)
    k2 = _rec(tr, "act.2", mul_up(mul_up(nt, np.abs(y).max(axis=-1)), act.kappa_2))
    return g, _rec(tr, "act", add_up(k1, k2, tiny))


def _feed_forward(lay: IntervalLayer, y, dy, ok, tr):
    """Step 11 (plain or gated): the rows before the residual sum and Pi, and their radii."""
    B, Tq, N = y.shape
    ny = norm_up(y)
    _finite(ok, ny)
    y2 = y.reshape(B * Tq, N)
    if not lay.gated:
        (m_in, m_out), (b_in, b_out) = lay.ff, lay.ff_blocks
        u = _rec(tr, "u_hat", (y2 @ m_in).reshape(B, Tq, -1))
        e_u = _linear(dy, ny, (b_in,), tr, "eps_u")[..., 0]
        g, e_act = _activate(lay, u, ok, tr)
        e_g = _rec(tr, "eps_g", add_up(mul_up(e_u, lay.act.L_phi), e_act))
        ng = norm_up(_rec(tr, "g_hat", g))
        _finite(ok, ng)
        z = (g.reshape(B * Tq, -1) @ m_out).reshape(B, Tq, N)
        return _rec(tr, "z_hat", z), _linear(e_g, ng, (b_out,), tr, "eps_z")[..., 0]
    (Gm, Um, Dm), (bG, bU, bD) = lay.ff, lay.ff_blocks
    a = _rec(tr, "u_hat", (y2 @ Gm).reshape(B, Tq, -1))
    b = _rec(tr, "b_hat", (y2 @ Um).reshape(B, Tq, -1))
    e_a = _linear(dy, ny, (bG,), tr, "eps_u")[..., 0]
    e_b = _linear(dy, ny, (bU,), tr, "eps_b")[..., 0]
    g, e_act = _activate(lay, a, ok, tr)
    b_inf = np.abs(b).max(axis=-1)
    g_inf = np.abs(_rec(tr, "g_hat", g)).max(axis=-1)
    hid = _rec(tr, "hid_hat", g * b)
    nh = norm_up(hid)
    _finite(ok, nh)
    h1 = _rec(tr, "hid.1", mul_up(add_up(mul_up(e_a, lay.act.L_phi), e_act), add_up(b_inf, e_b)))
    h2 = _rec(tr, "hid.2", mul_up(g_inf, e_b))
    h3 = _rec(tr, "hid.3", mul_up(nh, _U1))
    e_h = _rec(tr, "eps_hid", add_up(h1, h2, h3, TINY))
    z = (hid.reshape(B * Tq, -1) @ Dm).reshape(B, Tq, N)
    return _rec(tr, "z_hat", z), _linear(e_h, nh, (bD,), tr, "eps_z")[..., 0]


def _residual(a, eps_a, m, delta, ok, tr, name):
    """Step 8: ``fl(a + m)`` and its radius."""
    s = a + m
    ns = norm_up(s)
    _finite(ok, ns)
    rounding = _rec(tr, name + ".rnd", mul_up(ns, _U1))
    return s, _rec(tr, name, add_up(eps_a, delta, rounding))


def interval_outputs(net: IntervalNetwork, x0: np.ndarray, delta0: np.ndarray, ok: np.ndarray | None = None,
                     trace: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f_hat, radius, ok)`` for the projected input rows ``x0`` (B, T, N) with row radii ``delta0``
    (B, T): ``f_hat``, ``radius`` of shape (B, k) with ``|f_hat - f_c(X)| <= radius`` for every sample with
    ``ok`` (the note's claim); ``ok`` False marks samples whose bounds overflowed (not certified).
    ``trace``: a dict that receives every intermediate and every term, per layer (for the tests)."""
    B, T, N = x0.shape
    ok = np.ones(B, dtype=bool) if ok is None else ok.copy()
    x, delta = x0, delta0
    nx = norm_up(x)
    L = net.num_layers
    for l, lay in enumerate(net.layers):
        tr = None if trace is None else trace.setdefault(f"L{l}", {})
        _rec(tr, "x", x)
        _rec(tr, "delta", delta)
        _finite(ok, nx)
        att, eps, xq, dq = _attention(net, lay, x, delta, nx, l == L - 1, ok, tr)
        if net.residual:
            att, eps = _residual(att, eps, xq, dq, ok, tr, "res1")
        y, dy = _project(att, eps, net, ok, tr, "pi1")
        _rec(tr, "y_hat", y)
        z, ez = _feed_forward(lay, y, dy, ok, tr)
        if net.residual:
            z, ez = _residual(z, ez, y, dy, ok, tr, "res2")
        x, delta = _project(z, ez, net, ok, tr, "pi2")
        nx = norm_up(x)
    # the last layer computed only the read-out row; with L = 0 the read-out token is read directly
    tau = x.shape[1] - 1 if (net.causal and L == 0) else 0
    xr, dr, nr = x[:, tau], delta[:, tau], nx[:, tau]
    _finite(ok, nr)
    f = xr @ net.readout.T
    tr = None if trace is None else trace.setdefault("out", {})
    _rec(tr, "x", xr)
    _rec(tr, "delta", dr)
    rounding = _rec(tr, "rnd", mul_up(nr, gamma_up(N)))
    rad = _rec(tr, "rad", add_up(mul_up(add_up(dr, rounding)[:, None], net.readout_norms[None, :]), TINY))
    ok &= np.isfinite(f).all(axis=1) & np.isfinite(rad).all(axis=1)
    return f, rad, ok


# --------------------------------------------------------------------------- inputs and batches


@dataclass(frozen=True, eq=False)
class IntervalPass:
    """The per-sample pass prepared for one model (network and constants built once)."""

    net: IntervalNetwork

    def rows(self, rows: np.ndarray, batch: int = BATCH) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return outputs_of_rows(self, rows, batch)

    def tokens(self, E, P, tokens, batch: int = BATCH, table=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return outputs_of_tokens(self, E, P, tokens, batch, table)


def prepare(weights: AnalysisWeights | IntervalNetwork) -> IntervalPass:
    """The per-sample pass of ``weights`` (NotApplicable for what it does not cover)."""
    check_float_environment()
    net = weights if isinstance(weights, IntervalNetwork) else IntervalNetwork.from_weights(weights)
    return IntervalPass(net)


def input_rows(rows: np.ndarray, net: IntervalNetwork) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 12 (float rows taken as exact): ``(x0, delta0, ok)`` with ``x0`` the program's ``Pi(rows)``,
    ``delta0 = e_Pi min(1, N(r)) + tau`` per row, and ``ok`` False for samples with an entry above
    :data:`MAX_INPUT` (computed on zeros instead; not certified)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ok = (np.abs(rows) <= MAX_INPUT).reshape(rows.shape[0], -1).all(axis=1)
        r = np.where(ok[:, None, None], rows, 0.0)
        x0 = r / np.maximum(np.sqrt(np.einsum("...i,...i->...", r, r)), 1.0)[..., None]
        delta0 = add_up(mul_up(np.minimum(norm_up(r), 1.0), net.e_pi), TINY)
    return x0, delta0, ok


def outputs_of_rows(ip: IntervalPass, rows: np.ndarray, batch: int = BATCH):
    """(f_hat, radius, ok) for float input rows (n, T, N) before Pi (step 12, float-row path)."""
    rows = np.asarray(rows, dtype=np.float64)
    n, T, N = rows.shape
    if N != ip.net.width:
        raise NotApplicable(f"inputs have width {N}, the network {ip.net.width}")
    k = ip.net.k
    f, rad, okall = np.empty((n, k)), np.empty((n, k)), np.empty(n, dtype=bool)
    for a in range(0, n, batch):
        x0, delta0, ok = input_rows(rows[a:a + batch], ip.net)
        with np.errstate(over="ignore", invalid="ignore"):
            f[a:a + batch], rad[a:a + batch], okall[a:a + batch] = interval_outputs(ip.net, x0, delta0, ok)
    return f, rad, okall


def outputs_of_tokens(ip: IntervalPass, E: np.ndarray, P: np.ndarray | None, tokens: np.ndarray,
                      batch: int = BATCH, table: tuple | None = None):
    """(f_hat, radius, ok) for token sequences (n, T): the binary64 table of (position, token) rows
    of fast_forward.md step 4 (Arb; or ``table = (rows, delta0)`` of :func:`token_table` for a superset of
    these tokens), then the pass."""
    tokens = np.asarray(tokens)
    if table is None:
        E = np.asarray(E, dtype=np.float64)
        P = None if P is None else np.asarray(P, dtype=np.float64)
        table = token_table(E, P, tokens)[:2]
    table, delta0 = table
    d0 = float_up(delta0)
    n, T = tokens.shape
    pos = np.arange(T)
    k = ip.net.k
    f, rad, okall = np.empty((n, k)), np.empty((n, k)), np.empty(n, dtype=bool)
    for a in range(0, n, batch):
        x0 = table[pos, tokens[a:a + batch]]
        with np.errstate(over="ignore", invalid="ignore"):
            f[a:a + batch], rad[a:a + batch], okall[a:a + batch] = interval_outputs(
                ip.net, x0, np.full(x0.shape[:2], d0))
    return f, rad, okall


def output_enclosures(f: np.ndarray, rad: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Binary64 endpoints ``lo <= f_c(X) <= hi`` (step 13: ``down(fl(f - r))``, ``up(fl(f + r))``),
    ``-inf`` / ``+inf`` for samples not certified."""
    with np.errstate(over="ignore", invalid="ignore"):
        lo = np.where(ok[:, None], down(f - rad), -np.inf)
        hi = np.where(ok[:, None], up(f + rad), np.inf)
    lo = np.where(np.isnan(lo), -np.inf, lo)
    hi = np.where(np.isnan(hi), np.inf, hi)
    return lo, hi


__all__ = (
    "IntervalPass",
    "input_rows",
    "interval_outputs",
    "output_enclosures",
    "outputs_of_rows",
    "outputs_of_tokens",
    "prepare",
)

"""Certified forward pass with a per-sample, per-row error bound, vectorised over whole batches.

:func:`interval_outputs` runs the binary64 program of proofs_notes/interval_forward.md on a batch (every
variant: plain, residual, causal, ls, ls_residual; GELU, tanh-GELU, ReLU, SiLU; a k-row read-out) and,
alongside, a binary64 radius per row and stage from the values that occur: row norms, score
magnitudes, the spread of the values under each attention row, the norms before each projection.
Every radius operation is rounded upward (:mod:`specbound.certified.directed`), and every constant is an
exact Arb point rounded up once per model (:mod:`specbound.certified.interval_network`).  The result per
sample and class is an enclosure ``[lo, hi]`` of the exact real output, or ``[-inf, +inf]`` when a bound
overflowed (the sample is then not certified; the caller redoes it in Arb).  A pass with a ``refiner``
(:func:`specbound.certified.interval_adjoint.refined_pass`) then narrows the radius of each batch by the
first-order (adjoint) bound of proofs_notes/interval_adjoint.md; this module does not import it.

Public API: :class:`IntervalPass`, :func:`prepare`, :func:`interval_outputs`, :func:`outputs_of_rows`,
:func:`outputs_of_tokens`, :func:`output_enclosures`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from specbound.certified.arb import precision
from specbound.certified.directed import (
    UNIT_ROUNDOFF, add_up, div_up, down, float_up, gamma_arb, gamma_up, mul_up, norm_up, norms_both, sq_norm_up,
    sqrt_up, sub_down, up, upn,
)
from specbound.certified.elementary import exp_error_bound, exp_nonpositive, phi
from specbound.certified.fast_forward import NotApplicable, check_float_environment, token_table
from specbound.certified.interval_network import IntervalLayer, IntervalNetwork
from specbound.certified.sigmoid import gelu_tanh_parts, silu_parts
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
"""The most samples per batch (every sample's program is the same whatever the batch)."""

BATCH_BYTES = 2**21
""":func:`batch_size` keeps the widest array of a batch within this many bytes (about one core's L2 cache):
larger batches amortise numpy's per-call overhead on the small per-row bound arrays, but arrays beyond
the cache, and beyond what the allocator keeps mapped, cost more in memory traffic and page faults than
that overhead (benchmarks/bench_interval_forward.py: 128 samples of the L4 N64 models run 1.3-2x faster
per sample than 1024)."""


GROUP = 8
"""The radius formulas run on groups of this many batches at once (:func:`_chunked_outputs`)."""


def batch_size(net: IntervalNetwork, T: int) -> int:
    """Samples per batch for sequences of length ``T``: the largest power of two <= :data:`BATCH` (and
    >= 32) whose widest array (rows, feed-forward rows, scores, value rows) fits :data:`BATCH_BYTES`."""
    widest = max([net.width] + [max(lay.ff[0].shape[1], lay.num_heads * max(T, lay.dv)) for lay in net.layers])
    b = BATCH
    while b > 32 and b * T * widest * 8 > BATCH_BYTES:
        b //= 2
    return b

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
#
# Every stage is split into its binary64 *program* (the analysed computation and the norms of its
# float arrays, independent of any radius) and its *radius* formulas (functions of the program's values
# and of the incoming radii).  The pass evaluates the formulas at the incoming radii; the adjoint
# refinement (interval_adjoint.py) evaluates the very same formulas again at radius 0 (local errors).


def _project_program(a: np.ndarray, ok: np.ndarray) -> SimpleNamespace:
    """Step 9's program ``a / max(1, fl(sqrt(fl(sum a^2))))`` with the row norms its radius needs."""
    nu_hi, nu_lo, s = norms_both(a, with_sum=True)
    _finite(ok, nu_hi)
    nu = np.sqrt(s)
    return SimpleNamespace(a=a, y=a / np.maximum(nu, 1.0)[..., None], nu=nu, nu_hi=nu_hi, nu_lo=nu_lo)


def _project_radius(pp: SimpleNamespace, eps: np.ndarray, net: IntervalNetwork, tr, name):
    """Step 9: the row radius after Pi for the pre-Pi radius ``eps``."""
    _rec(tr, name + ".in", pp.a)
    _rec(tr, name + ".in_eps", eps)
    lip = _rec(tr, name + ".lip", div_up(eps, np.maximum(sub_down(pp.nu_lo, eps), 1.0)))
    rounding = _rec(tr, name + ".rnd", mul_up(net.e_pi, np.minimum(pp.nu_hi, 1.0)))
    return _rec(tr, name, add_up(lip, rounding, TINY))


def _residual_program(a: np.ndarray, m: np.ndarray, ok: np.ndarray, in_place: bool) -> SimpleNamespace:
    """Step 8's program ``fl(a + m)`` (into ``a`` when ``in_place``: the float forward's own memory
    traffic); its norm ``ns`` is the next projection's ``N(s)`` (one sum of squares for both), set by
    :func:`_layer`."""
    if in_place:
        a += m
        return SimpleNamespace(s=a)
    return SimpleNamespace(s=a + m)


def _residual_radius(rp: SimpleNamespace, eps_a, delta, tr, name):
    """Step 8: the radius of ``fl(a + m)``."""
    rounding = _rec(tr, name + ".rnd", mul_up(rp.ns, _U1))
    return _rec(tr, name, add_up(eps_a, delta, rounding))


def _rotate_program(x: np.ndarray, net: IntervalNetwork, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 3's program on rows ``x`` (B, Tr, G, d) at positions ``first..first+Tr-1``; also ``N(x)``."""
    Tr, d = x.shape[1], x.shape[3]
    half = d // 2
    if net.cos is None or first + Tr > net.cos.shape[0]:
        raise NotApplicable(f"sequence length {first + Tr} exceeds the rotary tables")
    c = net.cos[first:first + Tr][None, :, None, :]
    s = net.sin[first:first + Tr][None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1), norm_up(x)


def _rotate_radius(eps: np.ndarray, norms: np.ndarray, net: IntervalNetwork, tr, name):
    """Step 3: ``rho_R eps + 2^-51 rho_R N(x) + tau``."""
    lip = _rec(tr, name + ".rot_lip", mul_up(eps, net.rho_R))
    rounding = _rec(tr, name + ".rot_rnd", mul_up(mul_up(norms, _ROT), net.rho_R))
    return _rec(tr, name + ".rot", add_up(lip, rounding, TINY))


def _keymax(a: np.ndarray, causal: bool, Tq: int) -> np.ndarray:
    """Max over the key set of each query row: ``a`` (B, T, ...) with the keys on axis 1 -> (B, Tq, ...) or
    (B, 1, ...); prefix maxima when causal and every row is a query (row t keeps keys s <= t), else the max
    over all keys.  (Axis 1 of the per-row layout: the reduction runs over whole contiguous rows.)"""
    if causal and Tq == a.shape[1] and Tq > 1:
        return np.maximum.accumulate(a, axis=1)
    # keys first and contiguous: numpy then reduces whole rows at a time (a strided axis-1 max over few
    # groups runs element by element, several times slower)
    return np.ascontiguousarray(a.swapaxes(0, 1)).max(axis=0)[:, None]  # (B, 1, ...)


def _box_halfwidth(v: np.ndarray, causal: bool, Tq: int) -> np.ndarray:
    """omega: the norm of the half-widths of the bounding box of each row's values; ``v`` (B, T, G, d)
    per key/value group -> (B, Tq, G) or (B, 1, G) (note step 6 (b1))."""
    if causal and Tq == v.shape[1] and Tq > 1:
        hi, lo = np.maximum.accumulate(v, axis=1), np.minimum.accumulate(v, axis=1)
    else:
        vt = np.ascontiguousarray(v.swapaxes(0, 1))
        hi, lo = vt.max(axis=0)[:, None], vt.min(axis=0)[:, None]
    return norm_up(upn(upn(hi - lo) * 0.5))  # hi - lo >= 0


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


def _to_heads(a: np.ndarray, lay: IntervalLayer, same: bool) -> np.ndarray:
    """(B, T, G) per key/value group -> (B, H, T) per head (T may be 1: a key maximum)."""
    return a.transpose(0, 2, 1) if same else a.transpose(0, 2, 1)[:, lay.group]


def _attention_program(net: IntervalNetwork, lay: IntervalLayer, x, nx, last: bool, ok) -> SimpleNamespace:
    """Steps 2-7's program for one layer: the attention rows before the residual sum and Pi, and every
    float value and norm the radius formulas (and the adjoint) read."""
    B, T, N = x.shape
    H, G, d, dv = lay.num_heads, lay.num_groups, lay.dq, lay.dv
    tau = T - 1 if net.causal else 0
    if last:
        xq, nq, Tq, first = x[:, tau:tau + 1], nx[:, tau:tau + 1], 1, tau
    else:
        xq, nq, Tq, first = x, nx, T, 0
    x2 = x.reshape(B * T, N)
    q = (xq.reshape(B * Tq, N) @ lay.wq).reshape(B, Tq, H, d)
    k = (x2 @ lay.wk).reshape(B, T, G, d)
    v = (x2 @ lay.wv).reshape(B, T, G, dv)
    ap = SimpleNamespace(x=x, T=T, nx=nx, xq=xq, nq=nq, Tq=Tq, first=first, q_hat=q, k_hat=k, v=v, rot=None)
    if net.rope:
        qr, nqp = _rotate_program(q, net, first)
        kr, nkp = _rotate_program(k, net, 0)
        ap.rot = (nqp, nkp)
        q, k = qr, kr
    ap.q, ap.k = q, k
    Qn, Kn, Vsq = norm_up(q), norm_up(k), sq_norm_up(v)
    for a in (Qn, Kn, Vsq):
        _finite(ok, a)
    ap.Qn, ap.Kn, ap.Vn = Qn, Kn, sqrt_up(Vsq)
    grp = lay.group
    same = G == H and bool((grp == np.arange(H)).all())
    ap.same = same
    qh = q.transpose(0, 2, 1, 3)
    kh = k.transpose(0, 2, 3, 1)
    vaug = np.concatenate([v, Vsq[..., None]], axis=-1).transpose(0, 2, 1, 3)
    if not same:
        kh, vaug = kh[:, grp], vaug[:, grp]
    ap.p = _softmax(qh @ kh, net.causal)  # (B, H, Tq, T)
    hh = ap.p @ vaug
    ap.h, ap.A = hh[..., :dv], hh[..., dv]
    ap.Hn, ap.Hlo = norms_both(ap.h)
    _finite(ok, ap.Hn)
    ap.omega = _to_heads(_box_halfwidth(v, net.causal, Tq), lay, same)
    hcat = ap.h.transpose(0, 2, 1, 3).reshape(B, Tq, H * dv)
    ap.n_cat = norm_up(hcat)
    _finite(ok, ap.n_cat)
    ap.out = (hcat.reshape(B * Tq, H * dv) @ lay.wo).reshape(B, Tq, N)
    return ap


def _attention_radius(net: IntervalNetwork, lay: IntervalLayer, ap: SimpleNamespace, delta, tr) -> SimpleNamespace:
    """Steps 2-7's radius formulas at the incoming row radii ``delta`` (B, T): the radius of the attention
    rows before the residual sum (``eps_a``) and the intermediate radii (r, eta_p, ...) the adjoint reads."""
    _rec(tr, "q_hat", ap.q_hat)
    _rec(tr, "k_hat", ap.k_hat)
    _rec(tr, "v_hat", ap.v)
    T, Tq, d = ap.T, ap.Tq, lay.dq
    dlt_q = delta[:, ap.first:ap.first + Tq] if Tq == 1 else delta
    eps_q = _linear(dlt_q, ap.nq, lay.q, tr, "eps_q")
    eps_k = _linear(delta, ap.nx, lay.k, tr, "eps_k")
    eps_v = _linear(delta, ap.nx, lay.v, tr, "eps_v")
    if net.rope:
        eps_q = _rotate_radius(eps_q, ap.rot[0], net, tr, "eps_q")
        eps_k = _rotate_radius(eps_k, ap.rot[1], net, tr, "eps_k")
        _rec(tr, "q_rot", ap.q)
        _rec(tr, "k_rot", ap.k)
    _rec(tr, "p_hat", ap.p)
    _rec(tr, "h_hat", ap.h)
    _rec(tr, "A_hat", ap.A)
    same, causal = ap.same, net.causal
    # key maxima per key/value group on the (B, T, G) rows, then per head (B, H, Tq | 1)
    ek, Kg, ev = eps_k, ap.Kn, eps_v
    _, g_T, T_alpha, one_g_d, inv_g_T, g_d = _softmax_constants(T, d)
    m1 = _to_heads(_keymax(add_up(Kg, ek), causal, Tq), lay, same)
    m2 = _to_heads(_keymax(add_up(ek, mul_up(Kg, g_d)), causal, Tq), lay, same)
    mEv = _to_heads(_keymax(ev, causal, Tq), lay, same)
    Qh, eq = ap.Qn.transpose(0, 2, 1), eps_q.transpose(0, 2, 1)
    # step 4: the score radius r and the magnitude S per query row
    r1 = _rec(tr, "r.1", mul_up(eq, m1))
    r2 = _rec(tr, "r.2", mul_up(Qh, m2))
    r = _rec(tr, "r", add_up(r1, r2, TINY))
    _rec(tr, "omega", np.broadcast_to(ap.omega, r.shape))
    if tr is None and getattr(ap, "radius_free", None) is not None:
        S, eta_p, lam, bad, e_g, W, hc = ap.radius_free  # the radius-independent terms, computed once
    else:
        mK, mV = _to_heads(_keymax(Kg, causal, Tq), lay, same), _to_heads(_keymax(ap.Vn, causal, Tq), lay, same)
        ap.key_max = (mK, mV)  # also read by the adjoint (interval_adjoint.py)
        S = _rec(tr, "S", add_up(mul_up(mul_up(Qh, one_g_d), mK), TINY))
        # step 5: the softmax program's errors per row
        eta_p, lam, bad = _softmax_errors(S, T, d, tr)
        # step 6: the head output rows
        Hn, Hlo = ap.Hn, ap.Hlo
        e_g = _rec(tr, "h.d", add_up(mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), TINY))
        A_up = _rec(tr, "W.A", mul_up(add_up(ap.A, TINY), inv_g_T))
        h_sq_lo = _rec(tr, "W.h2", down(down(sub_down(1.0, eta_p) * Hlo) * Hlo))
        he = _rec(tr, "W.he", mul_up(mul_up(Hn, e_g), 2.0))
        tail = _rec(tr, "W.tail", mul_up(T_alpha, mul_up(add_up(mV, Hn), add_up(mV, Hn))))
        # the positive terms first, then one signed subtraction rounded up (it may be negative)
        W = _rec(tr, "W", mul_up(lam, np.maximum(up(add_up(A_up, he, tail) - h_sq_lo), 0.0)))
        hc = mul_up(eta_p, mV)
        ap.radius_free = (S, eta_p, lam, bad, e_g, W, hc)
    b1 = _rec(tr, "h.b1", mul_up(r, ap.omega))
    x2r = mul_up(r, 2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        b2 = _rec(tr, "h.b2", np.where(x2r < 0.5, mul_up(div_up(x2r, sub_down(1.0, x2r)), sqrt_up(W)), np.inf))
    ha = _rec(tr, "h.a", np.broadcast_to(mEv, r.shape))
    _rec(tr, "h.c", hc)
    eps_h = _rec(tr, "eps_h", np.where(bad, np.inf, add_up(ha, np.minimum(b1, b2), hc, e_g)))
    # step 7: heads concatenated, one product of length H dv with the stacked W_O
    eps_cat = norm_up(eps_h.transpose(0, 2, 1))
    _rec(tr, "a_hat", ap.out)
    eps_a = _linear(eps_cat, ap.n_cat, (lay.o,), tr, "eps_a")[..., 0]
    return SimpleNamespace(eps_a=eps_a, eps_q=eps_q, eps_k=eps_k, eps_v=eps_v, r=r, eta_p=eta_p, bad=bad,
                           dlt_q=dlt_q, W=W)


def _activate_program(lay: IntervalLayer, t: np.ndarray, ok: np.ndarray) -> SimpleNamespace:
    """Step 10's program ``phi_hat(t)``, with the values the radius (``N(t)``, ``max |y|``) and the adjoint
    (``kept``: Phi_hat for GELU, SIG for SiLU and tanh-GELU) read."""
    act = lay.act
    nt = norm_up(t)
    _finite(ok, nt)
    ac = SimpleNamespace(t=t, F=t.shape[-1], nt=nt, kept=None, y_inf=None)
    if act.name == "relu":
        ac.g = np.maximum(t, 0.0)
    elif act.name == "gelu":
        finite = np.isfinite(t)
        if not np.abs(np.where(finite, t, 0.0)).max(initial=0.0) <= act.t_max:
            raise CertificationError("a GELU argument exceeds its proven a-priori bound")
        ac.kept = phi(t, act.coeffs)
        ac.g = ac.kept * t
    elif act.name == "silu":
        ac.g, ac.kept = silu_parts(t)
    else:
        ac.g, y, ac.kept = gelu_tanh_parts(t)
        ac.y_inf = np.abs(y).max(axis=-1)
    return ac


def _activate_radius(lay: IntervalLayer, ac: SimpleNamespace, tr):
    """Step 10: the norm bound of the rows' errors ``phi_hat(t) - phi(t)``."""
    act = lay.act
    if act.name == "relu":
        return _rec(tr, "act", np.zeros_like(ac.nt))
    tiny = mul_up(up(math.sqrt(ac.F)), act.tau)
    k1 = _rec(tr, "act.1", mul_up(ac.nt, act.kappa_1))
    if ac.y_inf is None:
        return _rec(tr, "act", add_up(k1, tiny))
    k2 = _rec(tr, "act.2", mul_up(mul_up(ac.nt, ac.y_inf), act.kappa_2))
    return _rec(tr, "act", add_up(k1, k2, tiny))


def _feed_forward_program(lay: IntervalLayer, y, ok) -> SimpleNamespace:
    """Step 11's program (plain or gated): the rows before the residual sum and Pi."""
    B, Tq, N = y.shape
    ny = norm_up(y)
    _finite(ok, ny)
    y2 = y.reshape(B * Tq, N)
    fp = SimpleNamespace(y=y, ny=ny)
    if not lay.gated:
        m_in, m_out = lay.ff
        fp.u = (y2 @ m_in).reshape(B, Tq, -1)
        fp.act = _activate_program(lay, fp.u, ok)
        fp.ng = norm_up(fp.act.g)
        _finite(ok, fp.ng)
        fp.z = (fp.act.g.reshape(B * Tq, -1) @ m_out).reshape(B, Tq, N)
        return fp
    Gm, Um, Dm = lay.ff
    fp.u = (y2 @ Gm).reshape(B, Tq, -1)
    fp.b = (y2 @ Um).reshape(B, Tq, -1)
    fp.act = _activate_program(lay, fp.u, ok)
    fp.b_inf = np.abs(fp.b).max(axis=-1)
    fp.g_inf = np.abs(fp.act.g).max(axis=-1)
    fp.hid = fp.act.g * fp.b
    fp.nh = norm_up(fp.hid)
    _finite(ok, fp.nh)
    fp.z = (fp.hid.reshape(B * Tq, -1) @ Dm).reshape(B, Tq, N)
    return fp


def _feed_forward_radius(lay: IntervalLayer, fp: SimpleNamespace, dy, tr) -> SimpleNamespace:
    """Step 11's radius formulas at the incoming row radii ``dy``: ``eps_z`` (before the residual sum)
    and the intermediate radii (``eps_u``, ``eps_b``, the activation's ``e_act``)."""
    _rec(tr, "u_hat", fp.u)
    e_act = _activate_radius(lay, fp.act, tr)
    if not lay.gated:
        b_in, b_out = lay.ff_blocks
        e_u = _linear(dy, fp.ny, (b_in,), tr, "eps_u")[..., 0]
        e_g = _rec(tr, "eps_g", add_up(mul_up(e_u, lay.act.L_phi), e_act))
        _rec(tr, "g_hat", fp.act.g)
        _rec(tr, "z_hat", fp.z)
        eps_z = _linear(e_g, fp.ng, (b_out,), tr, "eps_z")[..., 0]
        return SimpleNamespace(eps_z=eps_z, eps_u=e_u, eps_b=None, e_act=e_act)
    bG, bU, bD = lay.ff_blocks
    _rec(tr, "b_hat", fp.b)
    e_a = _linear(dy, fp.ny, (bG,), tr, "eps_u")[..., 0]
    e_b = _linear(dy, fp.ny, (bU,), tr, "eps_b")[..., 0]
    _rec(tr, "g_hat", fp.act.g)
    _rec(tr, "hid_hat", fp.hid)
    h1 = _rec(tr, "hid.1", mul_up(add_up(mul_up(e_a, lay.act.L_phi), e_act), add_up(fp.b_inf, e_b)))
    h2 = _rec(tr, "hid.2", mul_up(fp.g_inf, e_b))
    h3 = _rec(tr, "hid.3", mul_up(fp.nh, _U1))
    e_h = _rec(tr, "eps_hid", add_up(h1, h2, h3, TINY))
    _rec(tr, "z_hat", fp.z)
    eps_z = _linear(e_h, fp.nh, (bD,), tr, "eps_z")[..., 0]
    return SimpleNamespace(eps_z=eps_z, eps_u=e_a, eps_b=e_b, e_act=e_act)


def attention_stage_radius(net: IntervalNetwork, lay: IntervalLayer, st: SimpleNamespace, delta, tr=None):
    """The attention stage's radii (steps 2-9) at input row radii ``delta``: a namespace with ``att``
    (the attention formulas' intermediates), ``pre`` (the radius before Pi) and ``out`` (after Pi)."""
    att = _attention_radius(net, lay, st.ap, delta, tr)
    pre = att.eps_a
    if net.residual:
        pre = _residual_radius(st.rp1, pre, att.dlt_q, tr, "res1")
    return SimpleNamespace(att=att, pre=pre, out=_project_radius(st.pp1, pre, net, tr, "pi1"))


def ff_stage_radius(net: IntervalNetwork, lay: IntervalLayer, st: SimpleNamespace, dy, tr=None):
    """The feed-forward stage's radii (steps 10, 11, 8, 9) at input row radii ``dy``."""
    ff = _feed_forward_radius(lay, st.fp, dy, tr)
    pre = ff.eps_z
    if net.residual:
        pre = _residual_radius(st.rp2, pre, dy, tr, "res2")
    return SimpleNamespace(ff=ff, pre=pre, out=_project_radius(st.pp2, pre, net, tr, "pi2"))


def _layer(net: IntervalNetwork, lay: IntervalLayer, x, delta, nx, last: bool, ok, tr) -> SimpleNamespace:
    """One layer: programs, then the radii at ``delta``; returns the layer's record (programs and radii)."""
    st = _layer_programs(net, lay, x, nx, last, ok, tr is None)  # the trace records the rows before the sums
    _layer_radii(net, lay, st, delta, tr)
    return st


def _layer_programs(net: IntervalNetwork, lay: IntervalLayer, x, nx, last: bool, ok, in_place: bool) -> SimpleNamespace:
    """One layer's binary64 programs (no radius): the record the radius formulas and the adjoint read."""
    st = SimpleNamespace()
    st.ap = _attention_program(net, lay, x, nx, last, ok)
    att = st.ap.out
    if net.residual:
        st.rp1 = _residual_program(att, st.ap.xq, ok, in_place)
        att = st.rp1.s
    st.pp1 = _project_program(att, ok)
    if net.residual:
        st.rp1.ns = st.pp1.nu_hi
    st.fp = _feed_forward_program(lay, st.pp1.y, ok)
    z = st.fp.z
    if net.residual:
        st.rp2 = _residual_program(z, st.pp1.y, ok, in_place)
        z = st.rp2.s
    st.pp2 = _project_program(z, ok)
    if net.residual:
        st.rp2.ns = st.pp2.nu_hi
    return st


def _layer_radii(net: IntervalNetwork, lay: IntervalLayer, st: SimpleNamespace, delta, tr) -> None:
    """One layer's radius formulas at the input row radii ``delta``, into its record ``st``."""
    st.delta = delta
    st.att = attention_stage_radius(net, lay, st, delta, tr)
    _rec(tr, "y_hat", st.pp1.y)
    st.ff = ff_stage_radius(net, lay, st, st.att.out, tr)


# Fields of a layer's record that the radius formulas read (all per row, per head or per sample): a chunked
# pass keeps only these of each chunk, joins them, and evaluates the formulas once on the joined batch.
_SMALL = {
    "ap": ("T", "Tq", "first", "same", "nx", "nq", "rot", "Qn", "Kn", "Vn", "Hn", "Hlo", "A", "omega", "n_cat"),
    "rp1": ("ns",), "rp2": ("ns",), "pp1": ("nu_lo", "nu_hi"), "pp2": ("nu_lo", "nu_hi"),
    "fp": ("ny", "ng", "nh", "b_inf", "g_inf", "act"), "act": ("F", "nt", "y_inf"),
}


def _small(rec: SimpleNamespace, kind: str = "st") -> SimpleNamespace:
    """The fields of ``rec`` in :data:`_SMALL` (any other field the formulas name only under a trace: None)."""
    out = SimpleNamespace(p=None, a=None, y=None, x=None, u=None, b=None, z=None, hid=None, t=None, g=None,
                          kept=None, q_hat=None, k_hat=None, v=None, q=None, k=None, h=None, out=None)
    for name in _SMALL.get(kind, tuple(vars(rec))):
        value = getattr(rec, name, None)
        setattr(out, name, _small(value, name) if isinstance(value, SimpleNamespace) else value)
    return out


def _join(parts: list):
    """Chunks' small records joined along the samples (arrays concatenated, scalars from the first)."""
    first = parts[0]
    if isinstance(first, np.ndarray):
        return np.concatenate(parts, axis=0)
    if isinstance(first, SimpleNamespace):
        return SimpleNamespace(**{k: _join([vars(p)[k] for p in parts]) for k in vars(first)})
    if isinstance(first, tuple):
        return tuple(_join(list(z)) for z in zip(*parts))
    return first


def interval_outputs(net: IntervalNetwork, x0: np.ndarray, delta0: np.ndarray, ok: np.ndarray | None = None,
                     trace: dict | None = None, tape: list | None = None, chunk: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(f_hat, radius, ok)`` for the projected input rows ``x0`` (B, T, N) with row radii ``delta0``
    (B, T): ``f_hat``, ``radius`` of shape (B, k) with ``|f_hat - f_c(X)| <= radius`` for every sample with
    ``ok`` (the note's claim); ``ok`` False marks samples whose bounds overflowed (not certified).
    ``trace``: a dict that receives every intermediate and every term, per layer (for the tests);
    ``tape``: a list that receives each layer's record (programs and radii) for the adjoint refinement;
    ``chunk``: without trace or tape, run the programs that many samples at a time (:func:`_chunked_outputs`)."""
    B, T, N = x0.shape
    ok = np.ones(B, dtype=bool) if ok is None else ok.copy()
    if chunk is not None and chunk < B and trace is None and tape is None:
        return _chunked_outputs(net, x0, delta0, ok, chunk)
    x, delta = x0, delta0
    nx = norm_up(x)
    L = net.num_layers
    for l, lay in enumerate(net.layers):
        tr = None if trace is None else trace.setdefault(f"L{l}", {})
        _rec(tr, "x", x)
        _rec(tr, "delta", delta)
        _finite(ok, nx)
        st = _layer(net, lay, x, delta, nx, l == L - 1, ok, tr)
        st.x, st.nx = x, nx
        if tape is not None:
            tape.append(st)
        x, delta = st.pp2.y, st.ff.out
        nx = norm_up(x)
    # the last layer computed only the read-out row; with L = 0 the read-out token is read directly
    tau = x.shape[1] - 1 if (net.causal and L == 0) else 0
    return _readout(net, x[:, tau], delta[:, tau], nx[:, tau], ok, trace, tape)


def _chunked_outputs(net: IntervalNetwork, x0, delta0, ok, chunk: int):
    """:func:`interval_outputs` with every layer's programs run ``chunk`` samples at a time (their arrays
    stay in cache) and the radius formulas once on the whole batch (numpy's per-call overhead on the
    small per-row arrays amortised): the same programs and formulas, each sample's values unchanged."""
    B, T, N = x0.shape
    L = net.num_layers
    parts: list[list] = [[] for _ in range(L)]
    xr, nr = [], []
    for a in range(0, B, chunk):
        x, okc = x0[a:a + chunk], ok[a:a + chunk]  # a view: the programs' overflow checks land in ok
        nx = norm_up(x)
        for l, lay in enumerate(net.layers):
            _finite(okc, nx)
            st = _layer_programs(net, lay, x, nx, l == L - 1, okc, True)
            parts[l].append(_small(st))
            x = st.pp2.y
            nx = norm_up(x)
        tau = x.shape[1] - 1 if (net.causal and L == 0) else 0
        xr.append(x[:, tau])
        nr.append(nx[:, tau])
    delta = delta0
    for l, lay in enumerate(net.layers):
        st = _join(parts[l])
        _layer_radii(net, lay, st, delta, None)
        delta = st.ff.out
    tau = T - 1 if (net.causal and L == 0) else 0
    return _readout(net, np.concatenate(xr), delta[:, tau], np.concatenate(nr), ok, None, None)


def _readout(net: IntervalNetwork, xr, dr, nr, ok, trace, tape):
    """Step 13: the read-out rows ``xr`` (B, N) with radii ``dr`` and norms ``nr``."""
    N = xr.shape[-1]
    _finite(ok, nr)
    f = xr @ net.readout.T
    tr = None if trace is None else trace.setdefault("out", {})
    _rec(tr, "x", xr)
    _rec(tr, "delta", dr)
    rounding = _rec(tr, "rnd", mul_up(nr, gamma_up(N)))
    rad = _rec(tr, "rad", add_up(mul_up(add_up(dr, rounding)[:, None], net.readout_norms[None, :]), TINY))
    ok &= np.isfinite(f).all(axis=1) & np.isfinite(rad).all(axis=1)
    if tape is not None:
        tape.append(SimpleNamespace(x=xr, delta=dr, nx=nr, rounding=rounding))
    return f, rad, ok


# --------------------------------------------------------------------------- inputs and batches


@dataclass(frozen=True, eq=False)
class IntervalPass:
    """The per-sample pass prepared for one model (network and constants built once)."""

    net: IntervalNetwork
    refiner: Callable[..., np.ndarray] | None = None
    """``None``: the per-layer radius only; else called as ``refiner(net, tape, f, radius, ok)`` on each batch
    and returning radii ``<= radius`` that still enclose (the adjoint refinement of
    proofs_notes/interval_adjoint.md, set by :func:`specbound.certified.interval_adjoint.refined_pass`)."""
    goal: float = 0.0
    """The refiner's relative goal: ``> 0`` lets a batch run without a tape when the previous batch had few
    samples whose radius missed ``goal (1 + |f|)`` (those are then run again, with a tape, on their own)."""

    def rows(self, rows: np.ndarray, batch: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return outputs_of_rows(self, rows, batch)

    def tokens(self, E, P, tokens, batch: int | None = None, table=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return outputs_of_tokens(self, E, P, tokens, batch, table)


def prepare(weights: AnalysisWeights | IntervalNetwork) -> IntervalPass:
    """The per-sample pass of ``weights`` (NotApplicable for what it does not cover)."""
    check_float_environment()
    net = weights if isinstance(weights, IntervalNetwork) else IntervalNetwork.from_weights(weights)
    return IntervalPass(net)


RERUN_BELOW = 0.25
"""With a goal, a batch runs first without a tape (the per-layer records of every layer kept for the refiner
cost memory traffic) when fewer than this fraction of the previous batch's samples missed the goal; the
samples missing it are then run again with a tape on their own (a float choice of work, never a bound)."""


def _missing(ip: IntervalPass, f: np.ndarray, rad: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Samples (certified) whose radius misses ``goal (1 + |f|)`` for some read-out row."""
    return ok & ~(rad <= ip.goal * (1.0 + np.abs(f))).all(axis=1)


def _batch(ip: IntervalPass, x0: np.ndarray, delta0: np.ndarray, ok: np.ndarray | None = None,
           state: dict | None = None, chunk: int | None = None):
    """The pass on one group of samples, refined when ``ip.refiner`` is set: the programs ``chunk`` samples at
    a time (None: all at once); a tape (for the refiner) is kept per chunk.  ``state`` carries the fraction
    of the previous group's samples that missed the goal (see :data:`RERUN_BELOW`)."""
    B = x0.shape[0]
    chunk = chunk or B
    ok = np.ones(B, dtype=bool) if ok is None else ok
    with np.errstate(over="ignore", invalid="ignore"):
        if ip.refiner is None:
            return interval_outputs(ip.net, x0, delta0, ok, chunk=chunk)
        state = {} if state is None else state
        if ip.goal > 0 and state.get("missed", 1.0) < RERUN_BELOW:
            f, rad, ok = interval_outputs(ip.net, x0, delta0, ok, chunk=chunk)
            miss = _missing(ip, f, rad, ok)
            state["missed"] = miss.mean()
            if miss.any():  # those samples again, with a tape: their own enclosures replace the first ones
                idx = np.flatnonzero(miss)
                f[idx], rad[idx], ok[idx] = _taped(ip, x0[idx], delta0[idx], ok[idx], chunk)
            return f, rad, ok
        f, rad, ok = _taped(ip, x0, delta0, ok, chunk)
        if ip.goal > 0:
            state["missed"] = _missing(ip, f, rad, ok).mean()
        return f, rad, ok


def _taped(ip: IntervalPass, x0, delta0, ok, chunk: int):
    """The pass with a tape and the refiner, ``chunk`` samples at a time."""
    parts = []
    for a in range(0, x0.shape[0], chunk):
        tape: list = []
        f, rad, okc = interval_outputs(ip.net, x0[a:a + chunk], delta0[a:a + chunk], ok[a:a + chunk], tape=tape)
        parts.append((f, ip.refiner(ip.net, tape, f, rad, okc), okc))
    return tuple(np.concatenate(z) for z in zip(*parts))


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


def outputs_of_rows(ip: IntervalPass, rows: np.ndarray, batch: int | None = None):
    """(f_hat, radius, ok) for float input rows (n, T, N) before Pi (step 12, float-row path); ``batch``
    samples at a time (None: :func:`batch_size`)."""
    rows = np.asarray(rows, dtype=np.float64)
    n, T, N = rows.shape
    if N != ip.net.width:
        raise NotApplicable(f"inputs have width {N}, the network {ip.net.width}")
    batch = batch or batch_size(ip.net, T)
    k = ip.net.k
    f, rad, okall = np.empty((n, k)), np.empty((n, k)), np.empty(n, dtype=bool)
    state: dict = {}
    group = batch * GROUP
    for a in range(0, n, group):
        x0, delta0, ok = input_rows(rows[a:a + group], ip.net)
        f[a:a + group], rad[a:a + group], okall[a:a + group] = _batch(ip, x0, delta0, ok, state, batch)
    return f, rad, okall


def outputs_of_tokens(ip: IntervalPass, E: np.ndarray, P: np.ndarray | None, tokens: np.ndarray,
                      batch: int | None = None, table: tuple | None = None):
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
    batch = batch or batch_size(ip.net, T)
    pos = np.arange(T)
    k = ip.net.k
    f, rad, okall = np.empty((n, k)), np.empty((n, k)), np.empty(n, dtype=bool)
    state: dict = {}
    group = batch * GROUP
    for a in range(0, n, group):
        x0 = table[pos, tokens[a:a + group]]
        f[a:a + group], rad[a:a + group], okall[a:a + group] = _batch(ip, x0, np.full(x0.shape[:2], d0), None,
                                                                      state, batch)
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
    "BATCH",
    "IntervalPass",
    "batch_size",
    "input_rows",
    "interval_outputs",
    "output_enclosures",
    "outputs_of_rows",
    "outputs_of_tokens",
    "prepare",
)

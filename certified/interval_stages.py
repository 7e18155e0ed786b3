"""The stages of the per-sample certified pass: each one's binary64 program and its radius formulas.

Every stage of proofs_notes/interval_forward.md (steps 2-11: linear maps, rotations, scores, softmax, head
outputs, residual sums, projections, activations, feed-forward) is split into its *program* (the analysed
binary64 computation and the norms of its float arrays, independent of any radius) and its *radius*
formulas (functions of the program's values and of the incoming row radii, every operation rounded
upward by :mod:`specbound.certified.directed`).  :mod:`specbound.certified.interval_forward` assembles them
into the pass; the adjoint refinement (:mod:`specbound.certified.interval_adjoint`) evaluates the same
formulas again at radius 0 (local errors).

Public API: :data:`TINY`, :data:`SOFTMAX_TINY_EXP`, :func:`attention_stage_radius`, :func:`ff_stage_radius`,
:func:`swap_rotation`, :func:`softmax_program`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from specbound.certified import kernels
from specbound.certified.arb import precision
from specbound.certified.directed import (
    ETA, ULP_FACTOR, UNIT_ROUNDOFF, UP_FACTOR, add_up, div_up, down, float_up, gamma_arb, gamma_up, mul_up, norm_up,
    norms_both, sq_norm_up, sqrt_up, sub_down, up, upn,
)
from specbound.certified.elementary import EXP_LOOP_ARGS, exp_error_bound, exp_nonpositive, phi
from specbound.certified.fast_forward import NotApplicable
from specbound.certified.interval_network import IntervalLayer, IntervalNetwork
from specbound.certified.sigmoid import gelu_tanh_parts, silu_parts
from specbound.errors import CertificationError

TINY = 2.0**-1000
"""Covers every underflow term of one stage: sqrt(k) n eta, d eta, 2 sqrt(d) eta, sqrt(d) T eta with all
dimensions below 2^30 (interval_network.MAX_DIM), each <= 2^-1029."""

SOFTMAX_TINY_EXP = -1017
"""``alpha' = 2^-1017`` bounds ``alpha (1+u)/(1-beta) + 2^-1075`` for beta < 1/2 (note step 5, with
alpha = 2^-1019 the clamp error of exp and 2^-1075 the division's underflow)."""

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
    if kernels.AVAILABLE and ok.dtype == np.bool_ and ok.flags.c_contiguous and a.dtype == np.float64:
        kernels.and_finite_rows(ok, a)
        return
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
    if tr is None and kernels.AVAILABLE and np.shape(delta) == np.shape(norms) and np.size(delta) >= kernels.MIN_SIZE:
        return kernels.linear_radius(delta, norms, sig, rnd, TINY, UP_FACTOR, ETA)  # the same steps, compiled
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
    div = np.maximum(nu, 1.0)
    # the compiled row division returns numpy's bits (one IEEE division per entry) without its per-row setup
    y = kernels.divide_rows(a, div) if kernels.AVAILABLE and a.size >= kernels.MIN_SIZE else a / div[..., None]
    return SimpleNamespace(a=a, y=y, nu=nu, nu_hi=nu_hi, nu_lo=nu_lo)


def _project_radius(pp: SimpleNamespace, eps: np.ndarray, net: IntervalNetwork, tr, name):
    """Step 9: the row radius after Pi for the pre-Pi radius ``eps``."""
    if tr is None and kernels.AVAILABLE and np.shape(eps) == np.shape(pp.nu_lo) and np.size(eps) >= kernels.MIN_SIZE:
        return kernels.project_radius(eps, pp.nu_lo, pp.nu_hi, net.e_pi, TINY, ULP_FACTOR, UP_FACTOR, ETA)
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
    if (tr is None and kernels.AVAILABLE and np.shape(eps_a) == np.shape(delta) == np.shape(rp.ns)
            and np.size(eps_a) >= kernels.MIN_SIZE):
        return kernels.residual_radius(eps_a, delta, rp.ns, _U1, UP_FACTOR, ETA)  # the same steps, compiled
    rounding = _rec(tr, name + ".rnd", mul_up(rp.ns, _U1))
    return _rec(tr, name, add_up(eps_a, delta, rounding))


def _rotate_program(x: np.ndarray, net: IntervalNetwork, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 3's program on rows ``x`` (B, Tr, G, d) at positions ``first..first+Tr-1``; also ``N(x)``."""
    Tr = x.shape[1]
    if net.cos is None or first + Tr > net.cos.shape[0]:
        raise NotApplicable(f"sequence length {first + Tr} exceeds the rotary tables")
    return _rotated(x, net.cos[first:first + Tr], net.sin[first:first + Tr]), norm_up(x)


def _rotated(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """``(a c - b s, a s + b c)`` on rows ``x = (a, b)`` (B, Tr, G, d) with tables (Tr, d/2), computed as
    ``x [c, c] + (b, a) [-s, s]`` on whole rows (:func:`swap_rotation`).  Bit for bit the same values:
    ``fl(b (-s)) = -fl(b s)`` (negation is exact), ``fl(p + (-q)) = fl(p - q)`` and ``+`` commutes in IEEE
    arithmetic, signed zeros included."""
    B, Tr, G, d = x.shape
    tile = (1, Tr, G, d)
    # tables tiled over the groups: numpy then runs one loop over each sample's Tr G d contiguous entries
    c2 = np.broadcast_to(np.concatenate([cos, cos], axis=-1)[None, :, None, :], tile).reshape(1, Tr, G * d)
    s2 = np.broadcast_to(np.concatenate([-sin, sin], axis=-1)[None, :, None, :], tile).reshape(1, Tr, G * d)
    return swap_rotation(x.reshape(B, Tr, G * d), c2, s2, d).reshape(B, Tr, G, d)


def swap_rotation(x: np.ndarray, c2: np.ndarray, s2: np.ndarray, d: int) -> np.ndarray:
    """``fl(fl(x c2) + fl(x' s2))`` entrywise, ``x'`` the rows of ``x`` (last axis in blocks of ``d``) with the
    two halves of every block swapped; ``c2``, ``s2`` broadcast against ``x``.  One loop over whole rows
    instead of numpy's loops over half-rows of d/2 entries (several times faster at small d)."""
    half = d // 2
    blocks = x.reshape(*x.shape[:-1], -1, d)
    swapped = np.empty_like(blocks)
    swapped[..., :half] = blocks[..., half:]
    swapped[..., half:] = blocks[..., :half]
    swapped = swapped.reshape(x.shape)
    swapped *= s2
    out = x * c2
    out += swapped
    return out


def _rotate_radius(eps: np.ndarray, norms: np.ndarray, net: IntervalNetwork, tr, name):
    """Step 3: ``rho_R eps + 2^-51 rho_R N(x) + tau``."""
    lip = _rec(tr, name + ".rot_lip", mul_up(eps, net.rho_R))
    rounding = _rec(tr, name + ".rot_rnd", mul_up(mul_up(norms, _ROT), net.rho_R))
    return _rec(tr, name + ".rot", add_up(lip, rounding, TINY))


def _keymax(a: np.ndarray, causal: bool, Tq: int) -> np.ndarray:
    """Max over the key set of each query row: ``a`` (B, T, ...) with the keys on axis 1 -> (B, Tq, ...) or
    (B, 1, ...); prefix maxima when causal and every row is a query (row t keeps keys s <= t), else the max
    over all keys.  (Axis 1 of the per-row layout: the reduction runs over whole contiguous rows.)"""
    prefix = causal and Tq == a.shape[1] and Tq > 1
    if kernels.AVAILABLE and a.size >= kernels.MIN_SIZE and a.ndim >= 2:
        return kernels.key_max(a, prefix)  # the same maxima, one pass without the transposed copy
    if prefix:
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


def _scores(qh: np.ndarray, kh: np.ndarray) -> np.ndarray:
    """``qh @ kh`` per head (B, H, Tq, d) x (B, H, d, T); at ``d = 1`` a compiled outer product (one product per
    entry, numpy's bits)."""
    if (kernels.AVAILABLE and qh.shape[-1] == 1 and kh.shape[:-2] == qh.shape[:-2]
            and qh.size * kh.shape[-1] >= kernels.MIN_SIZE):
        return kernels.outer(qh, kh)
    return qh @ kh


def _softmax(s: np.ndarray, causal: bool) -> np.ndarray:
    """The program of fast_forward.md steps 5.3-5.5 and 10 on scores (B, H, Tq, T) (:func:`softmax_program`;
    on large arrays its compiled loop, :mod:`specbound.certified.kernels`, the same bits)."""
    if kernels.AVAILABLE and s.size >= kernels.MIN_SIZE:
        T, Tq = s.shape[-1], s.shape[-2]
        kept = np.arange(T - Tq + 1, T + 1) if causal else np.array(T)  # keys kept by each query row
        return kernels.softmax_loop(s, kept, *EXP_LOOP_ARGS)
    return softmax_program(s, causal)


def softmax_program(s: np.ndarray, causal: bool) -> np.ndarray:
    """The program of fast_forward.md steps 5.3-5.5 and 10 on scores (B, H, Tq, T), in place: the shift by each
    row's max (over the kept keys), EXP, the masking, the sum over the keys taken in key order (step 5.4 holds
    for any order; one fixed order lets the compiled loop return the same bits), the division."""
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
    d = e[..., 0].copy()
    for j in range(1, T):
        d += e[..., j]
    e /= d[..., None]
    return e


def _softmax_errors(S, T: int, d: int, tr):
    """Step 5 per row from the score magnitude S: (eta_p, lambda, rows not certified)."""
    eta_exp, g_T, T_alpha, _, _, _ = _softmax_constants(T, d)
    if tr is None and kernels.AVAILABLE and np.size(S) >= kernels.MIN_SIZE:  # the same steps, compiled
        return kernels.softmax_errors(S, 2.0 * _U, up(1.0 + eta_exp), eta_exp, g_T, T_alpha, _U, 1.0 - _U,
                                      ULP_FACTOR, UP_FACTOR, ETA)
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
    ap.p = _softmax(_scores(qh, kh), net.causal)  # (B, H, Tq, T)
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


__all__ = ("SOFTMAX_TINY_EXP", "TINY", "attention_stage_radius", "ff_stage_radius")

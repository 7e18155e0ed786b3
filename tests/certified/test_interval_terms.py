"""Every term of proofs_notes/interval_forward.md pinned against an independent recomputation.

The pass records each term of its error formulas (``interval_outputs(..., trace=...)``).  Here every
term is recomputed from the note in 50-digit mpmath, from the traced binary64 intermediates (the
computed rows, exact as reals) and exact leaf values computed here: Euclidean norms, spectral and
Frobenius norms of the weights (mpmath SVD), gamma_n, the constants tau, alpha', u', 2^-51 as the note
declares them.  Nothing of the code under test is imported for a reference value except the proven
routines of other notes (``exp_error_bound``, ``phi_error_bound``).  Each term must be >= its reference
(soundness) and at most 0.1% above it (a pin: a term shrunk by 10% fails the first check, and the
mutation probe scripts/mutate_interval_forward.py confirms that each one is caught).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from specbound.certified.elementary import exp_error_bound, phi_degree, phi_error_bound
from specbound.certified.interval_forward import interval_outputs, prepare
from specbound.certified.fast_forward import project_rows_float
from tests.certified.mp_network import random_weights

mp = mpmath.mp
DPS = 50
U = mpmath.mpf(2) ** -53
TAU = mpmath.mpf(2) ** -1000
ALPHA1 = mpmath.mpf(2) ** -1017
U1 = U + mpmath.mpf(2) ** -105
ROT = mpmath.mpf(2) ** -51
REL = mpmath.mpf("1e-3")
SLACK = mpmath.mpf("1e-150")  # the upper pin's room: N-up of a subnormal vector is about sqrt(n 2^-1074)


def gam(n):
    return n * U / (1 - n * U)


def mpf(x):
    return mpmath.mpf(float(x))


def norm(v) -> mpmath.mpf:
    return mpmath.sqrt(sum(mpf(a) ** 2 for a in np.ravel(v)))


def spec(w) -> mpmath.mpf:
    return max(mpmath.svd_r(mpmath.matrix([[mpf(a) for a in row] for row in np.atleast_2d(w)]), compute_uv=False))


class Pins:
    """Collects ``code >= ref`` and ``code <= ref (1 + REL) + SLACK`` checks with readable failures."""

    def __init__(self):
        self.count = 0

    def check_lower(self, name, code, ref):
        """A lower bound: ``code <= ref`` and ``code >= ref - REL |ref| - SLACK``."""
        code = mpf(code)
        self.count += 1
        assert code <= ref, f"{name}: lower bound {mpmath.nstr(code, 20)} > reference {mpmath.nstr(ref, 20)}"
        assert code >= ref - REL * abs(ref) - SLACK, f"{name}: lower bound {mpmath.nstr(code, 20)} far below"

    def check(self, name, code, ref, scale=None):
        """``code >= ref``, and ``code <= ref + REL scale`` (``scale`` defaults to ``ref``; a term that is a
        difference of larger ones gets their size, as the code rounds each of them)."""
        code = mpf(code)
        self.count += 1
        if ref == mpmath.inf:
            assert code == mpmath.inf, (name, code)
            return
        assert code >= ref, f"{name}: code {mpmath.nstr(code, 20)} < reference {mpmath.nstr(ref, 20)}"
        assert code <= ref + REL * (abs(ref) if scale is None else scale) + SLACK, f"{name}: code {mpmath.nstr(code, 20)} far above {mpmath.nstr(ref, 20)}"


def _exact_sqrt_fraction(q: Fraction):
    return mpmath.sqrt(mpmath.mpf(q.numerator) / q.denominator)


def _e_pi(N):
    g = gam(N) + 4 * TAU
    kappa = max(mpmath.sqrt(1 + g) * (1 + U) - 1, 1 - mpmath.sqrt(1 - g) * (1 - U))
    return (1 + U) / (1 - kappa) - 1, (1 + U) / (1 - kappa) + mpmath.sqrt(N) * mpmath.mpf(2) ** -1075


def _activation_refs(name, t_max):
    """(L_phi, kappa_1, kappa_2, tau_phi) from the note's step 10."""
    eta = mpmath.mpf(exp_error_bound().str(40, radius=False))
    if name == "relu":
        return mpmath.mpf(1), 0, 0, 0
    if name == "gelu":
        e_phi = mpmath.mpf(phi_error_bound(t_max, phi_degree(t_max)).str(40, radius=False))
        L = (1 + mpmath.erf(1)) / 2 + 1 / (mpmath.e * mpmath.sqrt(mpmath.pi))
        return L, e_phi + U * (1 + e_phi), 0, mpmath.mpf(2) ** -1074
    k_sig = (1 + eta) * (1 + U) / ((1 - eta / 2) * (1 - U)) - 1
    k1 = k_sig + U * (1 + k_sig)
    t = mpf(t_max)
    if name == "silu":
        return mpmath.mpf(109983932012886692) / 10**17, k1, 0, t * mpmath.mpf(2) ** -1018 + mpmath.mpf(2) ** -1075
    C1, C2 = 2 * mpmath.sqrt(2 / mpmath.pi), mpmath.mpf(44715) / 10**6
    c1, c2 = mpf(2.0 * np.sqrt(2.0 / np.pi)), mpf(0.044715)
    e_c = (abs(c2 - C2) + c2 * gam(3)) / C2
    k_y = (1 + abs(c1 - C1) / C1) * (1 + e_c) * (1 + U) ** 2 - 1
    tau_y = (1 + t) * mpmath.mpf(2) ** -1070
    k2 = (1 + U) * k_y / (4 * (1 - k_y))
    return mpmath.mpf(113) / 100, k1, k2, t * (mpmath.mpf(2) ** -1018 + tau_y / (1 - k_y)) + mpmath.mpf(2) ** -1075


def _linear_refs(P, tr, name, delta, rows, W_list, n):
    """Step 2: per block ``lip >= delta ||W||_2``, ``rnd >= gamma_n ||W||_F ||m||``, total."""
    sig = [spec(W) for W in W_list]
    fro = [norm(W) for W in W_list]
    lip, rnd, tot = tr[name + ".lip"], tr[name + ".rnd"], tr[name]
    for idx in np.ndindex(lip.shape):
        *row, blk = idx
        d, m = mpf(delta[tuple(row)]), norm(rows[tuple(row)])
        P.check(f"{name}.lip{idx}", lip[idx], d * sig[blk])
        floor = gam(n) * fro[blk] * mpmath.sqrt(np.shape(rows)[-1] * mpmath.mpf(2) ** -1073)  # N-up(0) > 0
        P.check(f"{name}.rnd{idx}", rnd[idx], gam(n) * fro[blk] * m, scale=gam(n) * fro[blk] * m + floor / REL)
        P.check(f"{name}{idx}", tot[idx], mpf(lip[idx]) + mpf(rnd[idx]) + TAU)


def _project_refs(P, tr, name, e_pi):
    a, eps = tr[name + ".in"], tr[name + ".in_eps"]
    for idx in np.ndindex(eps.shape):
        nu, e = norm(a[idx]), mpf(eps[idx])
        P.check(f"{name}.lip{idx}", tr[name + ".lip"][idx], e / max(mpmath.mpf(1), nu - e))
        P.check(f"{name}.rnd{idx}", tr[name + ".rnd"][idx], e_pi * min(mpmath.mpf(1), nu))
        P.check(f"{name}{idx}", tr[name][idx], mpf(tr[name + ".lip"][idx]) + mpf(tr[name + ".rnd"][idx]) + TAU)


def _residual_refs(P, tr, name, s, eps_a, delta):
    for idx in np.ndindex(eps_a.shape):
        P.check(f"{name}.rnd{idx}", tr[name + ".rnd"][idx], U1 * norm(s[idx]))
        P.check(f"{name}{idx}", tr[name][idx], mpf(eps_a[idx]) + mpf(delta[idx]) + mpf(tr[name + ".rnd"][idx]))


def _layer_refs(P, w, net, l, tr, last, eta_exp):
    """Every term of one layer (steps 2-11) against the note."""
    ls = w.variant in ("ls", "ls_residual")
    causal = w.variant in ("causal", "ls", "ls_residual")
    residual = w.variant in ("residual", "ls_residual")
    H, N = w.num_heads, w.width
    G = (w.num_kv_heads or H) if ls else H
    group = [h if not ls or not w.num_kv_heads else h // (H // G) for h in range(H)]
    x, delta = tr["x"], tr["delta"]
    T = x.shape[1]
    tau = T - 1 if causal else 0
    qrows = slice(tau, tau + 1) if last else slice(0, T)
    if ls:
        WQ = [w.get(l, "Q", h).left for h in range(H)]
        WK = [w.get(l, "K", g).left for g in range(G)]
    else:
        WQ = [w.get(l, "QK", h).left for h in range(H)]
        WK = [np.eye(N) if w.get(l, "QK", h).right is None else w.get(l, "QK", h).right.T for h in range(H)]
    WV = [None] * G
    WO = []
    for h in range(H):
        vt = w.get(l, "V_tilde", h)
        WV[group[h]] = vt.left
        WO.append(np.eye(N) if vt.right is None else vt.right)
    d, dv = WQ[0].shape[1], WV[0].shape[1]
    _linear_refs(P, tr, "eps_q", delta[:, qrows], x[:, qrows], WQ, N)
    _linear_refs(P, tr, "eps_k", delta, x, WK, N)
    _linear_refs(P, tr, "eps_v", delta, x, WV, N)
    q, k, eq, ek = tr["q_hat"], tr["k_hat"], tr["eps_q"], tr["eps_k"]
    if ls:
        cos, sin = w.extra["rope.cos"], w.extra["rope.sin"]
        rho = _exact_sqrt_fraction(max(Fraction(float(c)) ** 2 + Fraction(float(s)) ** 2
                                       for c, s in zip(cos.ravel(), sin.ravel())))
        for name, src, eps in (("eps_q", q, eq), ("eps_k", k, ek)):
            for idx in np.ndindex(eps.shape):
                P.check(f"{name}.rot_lip{idx}", tr[name + ".rot_lip"][idx], rho * mpf(eps[idx]))
                P.check(f"{name}.rot_rnd{idx}", tr[name + ".rot_rnd"][idx], rho * ROT * norm(src[idx]))
                P.check(f"{name}.rot{idx}", tr[name + ".rot"][idx],
                        mpf(tr[name + ".rot_lip"][idx]) + mpf(tr[name + ".rot_rnd"][idx]) + TAU)
        q, k, eq, ek = tr["q_rot"], tr["k_rot"], tr["eps_q.rot"], tr["eps_k.rot"]
    v, ev = tr["v_hat"], tr["eps_v"]
    B, Tq = q.shape[0], q.shape[1]
    A_hat, h_hat, p_hat = tr["A_hat"], tr["h_hat"], tr["p_hat"]
    g_d, g_T = gam(d), gam(T)
    for b, h, t in itertools.product(range(B), range(H), range(Tq)):
        g = group[h]
        pos = tau if last else t
        keys = range(pos + 1) if causal else range(T)
        Q = norm(q[b, t, h])
        K = {s: norm(k[b, s, g]) for s in keys}
        V = {s: norm(v[b, s, g]) for s in keys}
        e_q = mpf(eq[b, t, h])
        idx = (b, h, t)
        P.check(f"r.1{idx}", tr["r.1"][idx], e_q * max(K[s] + mpf(ek[b, s, g]) for s in keys))
        P.check(f"r.2{idx}", tr["r.2"][idx], Q * max(mpf(ek[b, s, g]) + g_d * K[s] for s in keys))
        P.check(f"r{idx}", tr["r"][idx], mpf(tr["r.1"][idx]) + mpf(tr["r.2"][idx]) + TAU)
        P.check(f"S{idx}", tr["S"][idx], (1 + g_d) * Q * max(K.values()) + TAU)
        S = mpf(tr["S"][idx])
        a = 2 * U * S
        P.check(f"eta1{idx}", tr["eta1"][idx], eta_exp + (1 + eta_exp) * a / (1 - a))
        e1 = mpf(tr["eta1"][idx])
        P.check(f"beta{idx}", tr["beta"][idx], e1 + g_T * (1 + e1) + T * ALPHA1)
        beta = mpf(tr["beta"][idx])
        P.check(f"eta_p{idx}", tr["eta_p"][idx], (e1 + U * (1 + e1) + beta + T * ALPHA1) / (1 - beta))
        P.check(f"lam{idx}", tr["lam"][idx], (1 + beta) / ((1 - e1) * (1 - U)))
        eta_p, lam = mpf(tr["eta_p"][idx]), mpf(tr["lam"][idx])
        half = [(max(mpf(v[b, s, g, j]) for s in keys) - min(mpf(v[b, s, g, j]) for s in keys)) / 2 for j in range(dv)]
        P.check(f"omega{idx}", tr["omega"][idx], mpmath.sqrt(sum(x_ ** 2 for x_ in half)))
        mV = max(V.values())
        P.check(f"h.a{idx}", tr["h.a"][idx], max(mpf(ev[b, s, g]) for s in keys))
        P.check(f"h.b1{idx}", tr["h.b1"][idx], mpf(tr["r"][idx]) * mpf(tr["omega"][idx]))
        P.check(f"h.c{idx}", tr["h.c"][idx], eta_p * mV)
        P.check(f"h.d{idx}", tr["h.d"][idx], g_T * (1 + eta_p) * mV + TAU)
        Hn, e_g = norm(h_hat[b, h, t]), mpf(tr["h.d"][idx])
        # W = lam [A-term - ||h||^2-term + 2 H e_g + alpha' T (max V + H)^2], each term pinned, then the sum
        P.check(f"W.A{idx}", tr["W.A"][idx], (mpf(A_hat[b, h, t]) + TAU) / (1 - g_T))
        P.check_lower(f"W.h2{idx}", tr["W.h2"][idx], (1 - eta_p) * Hn ** 2)
        P.check(f"W.he{idx}", tr["W.he"][idx], 2 * Hn * e_g)
        P.check(f"W.tail{idx}", tr["W.tail"][idx], ALPHA1 * T * (mV + Hn) ** 2)
        Wref = lam * (mpf(tr["W.A"][idx]) - mpf(tr["W.h2"][idx]) + mpf(tr["W.he"][idx]) + mpf(tr["W.tail"][idx]))
        P.check(f"W{idx}", tr["W"][idx], max(Wref, mpmath.mpf(0)),
                scale=lam * (mpf(tr["W.A"][idx]) + abs(mpf(tr["W.h2"][idx]))) * mpmath.mpf("1e-9") / REL + abs(Wref))
        x2 = 2 * mpf(tr["r"][idx])
        P.check(f"h.b2{idx}", tr["h.b2"][idx], x2 / (1 - x2) * mpmath.sqrt(mpf(tr["W"][idx])) if x2 < 0.5 else mpmath.inf)
        P.check(f"eps_h{idx}", tr["eps_h"][idx], mpf(tr["h.a"][idx]) + min(mpf(tr["h.b1"][idx]), mpf(tr["h.b2"][idx]))
                + mpf(tr["h.c"][idx]) + mpf(tr["h.d"][idx]))
    WOs = np.concatenate(WO, axis=0)
    hcat = h_hat.transpose(0, 2, 1, 3).reshape(B, Tq, H * dv)
    eps_cat = np.array([[float(norm(tr["eps_h"][b, :, t])) for t in range(Tq)] for b in range(B)])
    # eps_cat is the code's own norm bound of the heads' radii: recompute it upward-exactly here
    for b, t in itertools.product(range(B), range(Tq)):
        ref = norm(tr["eps_h"][b, :, t]) * spec(WOs)
        P.check(f"eps_a.lip{(b, t)}", tr["eps_a.lip"][b, t, 0], ref)
        P.check(f"eps_a.rnd{(b, t)}", tr["eps_a.rnd"][b, t, 0], gam(H * dv) * norm(WOs) * norm(hcat[b, t]))
        P.check(f"eps_a{(b, t)}", tr["eps_a"][b, t, 0],
                mpf(tr["eps_a.lip"][b, t, 0]) + mpf(tr["eps_a.rnd"][b, t, 0]) + TAU)
    del eps_cat
    e_pi, r_pi = _e_pi(N)
    if residual:
        s = tr["a_hat"] + x[:, qrows]
        _residual_refs(P, tr, "res1", s, tr["eps_a"][..., 0], delta[:, qrows])
    _project_refs(P, tr, "pi1", e_pi)
    y, dy = tr["y_hat"], tr["pi1"]
    F_in = w.get(l, "G" if ls else "M_in").left
    t_max = float((1 + gam(N)) * r_pi * max(norm(F_in[:, j]) for j in range(F_in.shape[1])) + N * mpmath.mpf(2) ** -1074)
    t_max = float(np.nextafter(t_max, np.inf))
    L_phi, k1, k2, tau_phi = _activation_refs(w.activation, t_max)
    _linear_refs(P, tr, "eps_u", dy, y, [F_in], N)
    u_hat = tr["u_hat"]
    Fdim = u_hat.shape[-1]
    for idx in np.ndindex(dy.shape):
        nu = norm(u_hat[idx])
        if w.activation == "relu":
            P.check(f"act{idx}", tr["act"][idx], mpmath.mpf(0))
            continue
        P.check(f"act.1{idx}", tr["act.1"][idx], k1 * nu)
        extra = 0
        if w.activation == "gelu_tanh":
            t_ = u_hat[idx]
            yv = ((t_ * t_ * t_) * 0.044715 + t_) * (2.0 * np.sqrt(2.0 / np.pi))  # the note's program for 2v
            P.check(f"act.2{idx}", tr["act.2"][idx], k2 * nu * max(abs(mpf(a)) for a in yv))
            extra = mpf(tr["act.2"][idx])
        P.check(f"act{idx}", tr["act"][idx], mpf(tr["act.1"][idx]) + extra + mpmath.sqrt(Fdim) * tau_phi)
    if not ls:
        for idx in np.ndindex(dy.shape):
            P.check(f"eps_g{idx}", tr["eps_g"][idx], L_phi * mpf(tr["eps_u"][idx + (0,)]) + mpf(tr["act"][idx]))
        _linear_refs(P, tr, "eps_z", tr["eps_g"], tr["g_hat"], [w.get(l, "M_out").left], Fdim)
    else:
        _linear_refs(P, tr, "eps_b", dy, y, [w.get(l, "U").left], N)
        b_hat, g_hat, hid = tr["b_hat"], tr["g_hat"], tr["hid_hat"]
        for idx in np.ndindex(dy.shape):
            e_a, e_b = mpf(tr["eps_u"][idx + (0,)]), mpf(tr["eps_b"][idx + (0,)])
            b_inf = max(abs(mpf(a)) for a in b_hat[idx])
            g_inf = max(abs(mpf(a)) for a in g_hat[idx])
            P.check(f"hid.1{idx}", tr["hid.1"][idx], (L_phi * e_a + mpf(tr["act"][idx])) * (b_inf + e_b))
            P.check(f"hid.2{idx}", tr["hid.2"][idx], g_inf * e_b)
            P.check(f"hid.3{idx}", tr["hid.3"][idx], U1 * norm(hid[idx]))
            P.check(f"eps_hid{idx}", tr["eps_hid"][idx],
                    mpf(tr["hid.1"][idx]) + mpf(tr["hid.2"][idx]) + mpf(tr["hid.3"][idx]) + TAU)
        _linear_refs(P, tr, "eps_z", tr["eps_hid"], hid, [w.get(l, "D").left], Fdim)
    if residual:
        _residual_refs(P, tr, "res2", tr["z_hat"] + y, tr["eps_z"][..., 0], dy)
    _project_refs(P, tr, "pi2", e_pi)


CASES = [
    ("plain", "gelu", 1), ("residual", "gelu", 1), ("causal", "relu", 1), ("causal", "gelu_tanh", 1),
    ("ls", "silu", 1), ("ls_residual", "gelu_tanh", 0), ("ls", "gelu", 2), ("residual", "silu", 1),
    ("plain", "relu", 1),
]


def _pin_all(w, x0, delta0) -> int:
    net = prepare(w).net
    trace: dict = {}
    f, rad, ok = interval_outputs(net, x0, delta0, trace=trace)
    assert ok.all()
    P = Pins()
    with mpmath.workdps(DPS):
        eta_exp = mpmath.mpf(exp_error_bound().str(40, radius=False))
        for l in range(w.num_layers):
            _layer_refs(P, w, net, l, trace[f"L{l}"], l == w.num_layers - 1, eta_exp)
        out = trace["out"]
        nw = [norm(row) for row in np.atleast_2d(w.readout)]
        for b in range(out["x"].shape[0]):
            P.check(f"out.rnd[{b}]", out["rnd"][b], gam(w.width) * norm(out["x"][b]))
            for c, n_c in enumerate(nw):
                P.check(f"out.rad[{b},{c}]", out["rad"][b, c], (mpf(out["delta"][b]) + mpf(out["rnd"][b])) * n_c + TAU)
    return P.count


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_every_term_of_the_note_is_pinned(case):
    variant, act, kv = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    w = random_weights(rng, variant=variant, activation=act, L=2, H=2, N=4, d=2, F=3, kv=kv, T=3, qk=2.0,
                       k=2 if act == "relu" else 1)
    x0 = project_rows_float(rng.standard_normal((2, 3, 4)))
    assert _pin_all(w, x0, np.full(x0.shape[:2], 1e-15)) > 200


@pytest.mark.parametrize("variant", ["residual", "ls_residual"])
def test_the_underflow_terms_are_pinned_where_nothing_else_is_left(variant):
    # zero weights and zero inputs: every radius is a sum of the tau terms of the note, so a shrunk
    # tau (or a dropped one) fails here although it is invisible next to the rounding terms elsewhere
    from dataclasses import replace

    rng = np.random.default_rng(3)
    w = random_weights(rng, variant=variant, activation="relu" if variant == "residual" else "silu",
                       L=1, H=2, N=4, d=2, F=2, T=2)
    zero = replace(w, matrices=tuple(replace(m, left=np.zeros_like(m.left),
                                             right=None if m.right is None else np.zeros_like(m.right))
                                     for m in w.matrices))
    assert _pin_all(zero, np.zeros((1, 2, 4)), np.zeros((1, 2))) > 20


def test_the_input_stage_is_pinned():
    from specbound.certified.interval_forward import MAX_INPUT, input_rows

    rng = np.random.default_rng(4)
    w = random_weights(rng, L=1, N=4)
    net = prepare(w).net
    rows = rng.standard_normal((3, 2, 4)) * np.array([1e-3, 1.0, 30.0])[:, None, None]
    rows[2, 1, 0] = MAX_INPUT * 2
    x0, delta0, ok = input_rows(rows, net)
    assert ok.tolist() == [True, True, False]
    P = Pins()
    with mpmath.workdps(DPS):
        e_pi, _ = _e_pi(4)
        for b, t in itertools.product(range(2), range(2)):
            P.check(f"delta0[{b},{t}]", delta0[b, t], e_pi * min(mpmath.mpf(1), norm(rows[b, t])) + TAU)


def test_the_constants_are_the_ones_the_note_declares():
    # constants that enter a bound as stated: each pinned to the note's value (a shrunk one fails)
    from specbound.certified import directed
    from specbound.certified import interval_stages as iv
    from specbound.certified.interval_network import projection_constants

    assert iv.TINY == 2.0**-1000 and iv._U1 == 2.0**-53 + 2.0**-105 and iv._ROT == 2.0**-51
    assert iv._softmax_constants(7, 3)[2] == 7 * 2.0**-1017
    with mpmath.workdps(DPS):
        for n in (1, 3, 64, 1000):
            hi, lo, tiny = directed._norm_factors(n)
            close = mpmath.mpf("1e-12")
            assert 1 / (1 - gam(n)) <= mpf(hi) <= (1 + close) / (1 - gam(n))
            assert (1 - close) / (1 + gam(n)) <= mpf(lo) <= 1 / (1 + gam(n))
            assert n * mpmath.mpf(2) ** -1074 <= mpf(tiny) <= (1 + close) * n * mpmath.mpf(2) ** -1074
            e_pi, r_pi = projection_constants(n)
            ref_e, ref_r = _e_pi(n)
            assert ref_e <= mpf(e_pi) <= ref_e * (1 + REL) and ref_r <= mpf(r_pi) <= ref_r * (1 + REL)
            g = iv.gamma_up(n)
            assert gam(n) <= mpf(g) <= gam(n) * (1 + REL)


def test_the_rotation_underflow_term_is_pinned_with_zero_tables():
    # rotary tables of zeros (a legal model: every rotated row is 0): the rotation's radius is its tau
    from dataclasses import replace

    rng = np.random.default_rng(5)
    w = random_weights(rng, variant="ls", activation="silu", L=1, H=2, N=4, d=2, F=2, T=2)
    zero = replace(w, matrices=tuple(replace(m, left=np.zeros_like(m.left),
                                             right=None if m.right is None else np.zeros_like(m.right))
                                     for m in w.matrices),
                   extra=dict(w.extra, **{"rope.cos": np.zeros((2, 1)), "rope.sin": np.zeros((2, 1))}))
    assert _pin_all(zero, np.zeros((1, 2, 4)), np.zeros((1, 2))) > 20


@pytest.mark.parametrize("name", ["gelu", "relu", "silu", "gelu_tanh"])
@pytest.mark.parametrize("t_max", [0.5, 3.0, 1e30])
def test_the_activation_constants_are_the_notes(name, t_max):
    from specbound.certified.sigmoid import activation_bounds

    if name == "gelu" and t_max > 8:
        return
    act = activation_bounds(name, t_max)
    with mpmath.workdps(DPS):
        L, k1, k2, tau = _activation_refs(name, t_max)
        close = mpmath.mpf("1e-12")
        for code, ref in ((act.L_phi, L), (act.kappa_1, k1), (act.kappa_2, k2), (act.tau, tau)):
            assert ref <= mpf(code) <= ref * (1 + close), (name, code, ref)


@pytest.mark.parametrize("variant, activation", [("plain", "silu"), ("ls", "gelu_tanh")])
def test_the_activation_underflow_term_is_pinned_at_zero_arguments(variant, activation):
    # zero inputs make every activation argument 0, and a feed-forward input matrix of norm ~1e200 makes
    # t_max, hence the routine's underflow term sqrt(F) tau_phi, the largest part of its error bound
    from dataclasses import replace

    rng = np.random.default_rng(6)
    w = random_weights(rng, variant=variant, activation=activation, L=1, H=1, N=4, d=2, F=3, T=2)
    big = "G" if variant == "ls" else "M_in"
    w = replace(w, matrices=tuple(replace(m, left=m.left * 1e200) if m.kind == big else m for m in w.matrices))
    assert _pin_all(w, np.zeros((1, 2, 4)), np.zeros((1, 2))) > 20

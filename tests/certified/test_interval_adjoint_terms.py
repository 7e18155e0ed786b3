"""Every term of proofs_notes/interval_adjoint.md pinned against an independent recomputation.

The refinement records each term (``refine(..., trace=...)``), the forward pass its per-layer radii and
intermediates (``interval_outputs(..., trace=...)``; those are pinned by test_interval_terms.py and are
inputs here), and the refinement the per-layer formulas at radius 0 (sub-traces ``att0``, ``ff0``) and at the
tightened ball (``ff1``).  Each term is recomputed from the note in 50-digit mpmath from exact leaf values
computed here (spectral and Frobenius norms of the weights, Euclidean norms of the float rows, gamma_n,
e_Pi, the derivative error e_d from the note's formula, the matrix K of step 6 in exact arithmetic) and
must be >= its reference and at most 0.1% above it, so a term shrunk by 10% fails (the mutation probe
scripts/mutate_interval_forward.py confirms it for each term).
"""

from __future__ import annotations

import zlib

import mpmath
import numpy as np
import pytest

from specbound.certified.elementary import exp_error_bound, phi_degree, phi_error_bound
from specbound.certified.interval_adjoint import BACKWARD_TINY, refine
from specbound.certified.interval_forward import input_rows, interval_outputs, prepare
from tests.certified.mp_network import random_weights
from tests.certified.test_interval_terms import DPS, REL, TAU, U, Pins, _e_pi, gam, mpf, norm, spec

SQRT2, INV_SQRT3 = mpmath.sqrt(2), 1 / mpmath.sqrt(3)


def _e_d_ref(name: str, t_max: float):
    """Step 5's e_d in exact arithmetic."""
    if name == "relu":
        return mpmath.mpf(0)
    tm, tiny = mpf(t_max), mpmath.mpf(2) ** -1074
    eta = mpmath.mpf(exp_error_bound().str(40, radius=False))
    if name == "gelu":
        e_phi = mpmath.mpf(phi_error_bound(t_max, phi_degree(t_max)).str(40, radius=False))
        a1 = tm * tm * U / 2 + tiny
        u_psi = abs(mpf(1.0 / np.sqrt(2.0 * np.pi)) * mpmath.sqrt(2 * mpmath.pi) - 1)
        k_psi = mpmath.exp(a1) * (1 + eta) * (1 + U) * (1 + u_psi) - 1
        return e_phi + (k_psi + U * (1 + k_psi)) / 4 + U * mpmath.mpf("1.2") + (tm + 2) * tiny
    k_sig = (1 + eta) * (1 + U) / ((1 - eta / 2) * (1 - U)) - 1
    e_s = k_sig + mpmath.mpf(2) ** -1019
    if name == "silu":
        e_m = 2 * e_s + U + U * (mpmath.mpf(1) / 4 + 2 * e_s + U) + tiny
        return e_s + tm * e_m + U * tm * (mpmath.mpf(1) / 4 + e_m) + U * mpmath.mpf("1.2") + 2 * tiny
    C1, C2 = 2 * mpmath.sqrt(2 / mpmath.pi), mpmath.mpf(44715) / 10**6
    c1, c2, c3 = mpf(2.0 * np.sqrt(2.0 / np.pi)), mpf(0.044715), mpf(3.0 * 0.044715)
    e_c = (abs(c2 - C2) + c2 * gam(3)) / C2
    k_y = (1 + abs(c1 - C1) / C1) * (1 + e_c) * (1 + U) ** 2 - 1
    e_y = k_y * C1 * (tm + C2 * tm**3) + (1 + tm) * mpmath.mpf(2) ** -1070
    e0 = e_s + e_y / 4
    e_m = 2 * e0 + U + U * (mpmath.mpf(1) / 4 + 2 * e0 + U) + tiny
    k_p = (1 + abs(c1 / C1 - 1)) * (1 + abs(c3 / (3 * C2) - 1)) * (1 + U) ** 4 * (1 + mpmath.mpf(2) ** -1070) - 1
    yp = C1 * (1 + 3 * C2 * tm * tm)
    prod = (mpmath.mpf(1) / 4 + e_m) * (1 + k_p) * yp
    return (e0 + tm * (e_m * (1 + k_p) * yp + k_p * yp / 4 + U * prod) + U * tm * prod * (1 + U)
            + U * (1 + tm * prod * (1 + U)) + (tm + 3) * tiny)


class _W:
    """The layer's weights as the note names them, with exact sigma (SVD) and phi (Frobenius)."""

    def __init__(self, w, l: int):
        ls = w.variant in ("ls", "ls_residual")
        H, N = w.num_heads, w.width
        G = (w.num_kv_heads or H) if ls else H
        self.group = [h if not ls or not w.num_kv_heads else h // (H // G) for h in range(H)]
        if ls:
            WQ = [w.get(l, "Q", h).left for h in range(H)]
            WK = [w.get(l, "K", g).left for g in range(G)]
        else:
            WQ = [w.get(l, "QK", h).left for h in range(H)]
            WK = [np.eye(N) if w.get(l, "QK", h).right is None else w.get(l, "QK", h).right.T for h in range(H)]
        WV, WO = [None] * G, []
        for h in range(H):
            vt = w.get(l, "V_tilde", h)
            WV[self.group[h]] = vt.left
            WO.append(np.eye(N) if vt.right is None else vt.right)
        self.sQ, self.sK, self.sV = [spec(a) for a in WQ], [spec(a) for a in WK], [spec(a) for a in WV]
        self.fQ, self.fK, self.fV = [norm(a) for a in WQ], [norm(a) for a in WK], [norm(a) for a in WV]
        self.fO = [norm(a) for a in WO]
        self.sO = spec(np.concatenate(WO, axis=0))
        kinds = ("G", "U", "D") if ls else ("M_in", "M_out")
        self.ff = [w.get(l, k).left for k in kinds]
        self.sF = [spec(a) for a in self.ff]
        self.fF = [norm(a) for a in self.ff]
        self.d, self.dv = WQ[0].shape[1], WV[0].shape[1]
        self.G = G


def _pin_pi(P, name, L, a_hat, pre, pre0, D, seg, e_pi, idx):
    """Step 4's terms of one row."""
    nu_ex = norm(a_hat)
    P.check_lower(f"{name}.pi.nu0{idx}", L[name + ".pi.nu0"][idx], nu_ex - seg)
    case = int(L[name + ".pi.case"][idx])
    nu_hat = float(np.sqrt(np.dot(a_hat, a_hat)))
    if case == 1:  # the sphere branch must be justified
        assert nu_hat > 1 and nu_ex - seg > 1, (name, idx)
        nu0 = nu_ex - seg
        P.check(f"{name}.pi.quad{idx}", L[name + ".pi.quad"][idx], D * D * INV_SQRT3 / nu0**2)
        P.check(f"{name}.pi.lin{idx}", L[name + ".pi.lin"][idx], (SQRT2 * pre0 / nu0**2 + 4 * e_pi + TAU) * D)
        ref = mpf(L[name + ".pi.quad"][idx]) + mpf(L[name + ".pi.lin"][idx])
    elif case == 0:
        assert nu_hat <= 1 and nu_ex + seg <= 1, (name, idx)
        ref = mpmath.mpf(0)
    else:
        ref = 2 * D
    P.check(f"{name}.pi.rho{idx}", L[name + ".pi.rho"][idx], ref)
    return mpmath.mpf(float(1.0 / nu_hat)) if nu_hat > 1 else mpmath.mpf(1)


def _keys(causal: bool, pos: int, T: int):
    return range(pos + 1) if causal else range(T)


def _pin_row(P, w, net, trace, atr, rad, out_refined, c) -> None:
    ls = w.variant in ("ls", "ls_residual")
    causal = w.variant in ("causal", "ls", "ls_residual")
    res = 1 if w.variant in ("residual", "ls_residual") else 0
    N, H = w.width, w.num_heads
    e_pi, r_pi = _e_pi(N)
    rho = mpmath.mpf(1)
    if ls:
        cos, sin = w.extra["rope.cos"], w.extra["rope.sin"]
        rho = mpmath.sqrt(max(mpf(a) ** 2 + mpf(b) ** 2 for a, b in zip(cos.ravel(), sin.ravel())))
    rot = SQRT2 * rho if ls else mpmath.mpf(1)
    wc = np.atleast_2d(w.readout)[c]
    B = trace["out"]["x"].shape[0]
    acc = [mpf(trace["out"]["rnd"][b]) * norm(wc) + TAU for b in range(B)]
    for b in range(B):
        P.check(f"out.acc[{b}]", atr["out.acc"][b], acc[b])
    best = [mpf(rad[b, c]) for b in range(B)]
    Lc = w.num_layers
    for l in reversed(range(Lc)):
        if f"L{l}" not in atr or "ff.terms" not in atr[f"L{l}"]:
            break
        A, FT, W_ = atr[f"L{l}"], trace[f"L{l}"], _W(w, l)
        lay = net.layers[l]
        last = l == Lc - 1
        x, delta = FT["x"], FT["delta"]
        T = x.shape[1]
        tau = T - 1 if causal else 0
        qpos = [tau] if last else list(range(T))
        Tq = len(qpos)
        L2, e_d_code, L_phi = mpf(lay.back.L2), lay.back.e_d, mpf(lay.act.L_phi)
        e_d = _e_d_ref(w.activation, lay.act.t_max)
        P.check(f"L{l}.e_d", e_d_code, e_d, scale=e_d + mpmath.mpf("1e-300"))
        # ---- attention stage quantities (also the tightened ball before the last feed-forward)
        a0 = A["att0"]
        kq = "q_rot" if ls else "q_hat"
        kk = "k_rot" if ls else "k_hat"
        eq0_key, ek0_key = ("eps_q.rot", "eps_k.rot") if ls else ("eps_q", "eps_k")
        for b, t in np.ndindex(B, Tq):
            pos = qpos[t]
            keys = _keys(causal, pos, T)
            dmax = max(mpf(delta[b, s]) for s in keys)
            heads = []
            for h in range(H):
                g = W_.group[h]
                idx = (b, h, t)
                qbar = rho * W_.sQ[h] * mpf(delta[b, pos])
                kbar = rho * W_.sK[g] * dmax
                P.check(f"L{l}.att.qbar{idx}", A["att.qbar"][idx], qbar)
                P.check(f"L{l}.att.kbar{idx}", np.broadcast_to(A["att.kbar"], (B, H, Tq))[idx], kbar)
                ek0 = max(mpf(a0[ek0_key][b, s, g]) for s in keys)
                ev0 = max(mpf(a0["eps_v"][b, s, g]) for s in keys)
                Kmax = max(norm(FT[kk][b, s, g]) for s in keys)
                Vmax = max(norm(FT["v_hat"][b, s, g]) for s in keys)
                Q = norm(FT[kq][b, t, h])
                eq0 = mpf(a0[eq0_key][b, t, h])
                r, rl, eta = mpf(FT["r"][idx]), mpf(a0["r"][idx]), mpf(FT["eta_p"][idx])
                Pp = 1 + eta
                om = mpf(np.broadcast_to(FT["omega"], (B, H, Tq))[idx])
                P.check(f"L{l}.att.tau{idx}", A["att.tau"][idx], qbar * ek0 + (eq0 + qbar) * kbar)
                P.check(f"L{l}.att.smax{idx}", A["att.smax"][idx], qbar * Kmax + Q * kbar)
                tau_, smax = mpf(A["att.tau"][idx]), mpf(A["att.smax"][idx])
                P.check(f"L{l}.att.t1{idx}", A["att.t1"][idx], (r + eta) * W_.sV[g] * dmax)
                P.check(f"L{l}.att.t2{idx}", A["att.t2"][idx], (r * r + 2 * tau_) * (om + ev0))
                P.check(f"L{l}.att.t3{idx}", A["att.t3"][idx], (2 + Pp) * (rl + eta) * smax * (Vmax + ev0))
                P.check(f"L{l}.att.t4{idx}", A["att.t4"][idx], Pp * (1 + Pp) * smax * ev0)
                P.check(f"L{l}.att.rho_h{idx}", A["att.rho_h"][idx],
                        sum(mpf(A[f"att.t{i}"][idx]) for i in range(1, 5)))
                heads.append((Pp * W_.sV[g] * dmax + smax * (mpmath.sqrt(Pp * mpf(FT["W"][idx]))
                                                              + eta * Pp * norm(FT["h_hat"][idx])),
                              W_.fO[h] * (W_.fV[g] * Pp + rot * Pp * (1 + Pp) * Vmax * (W_.fQ[h] * Kmax + W_.fK[g] * Q))))
            P.check(f"L{l}.att.rho[{b},{t}]", A["att.rho"][b, t],
                    W_.sO * mpmath.sqrt(sum(mpf(A["att.rho_h"][b, h, t]) ** 2 for h in range(H))))
            a_hat = FT["pi1.in"][b, t]
            pre, pre0 = mpf(FT["pi1.in_eps"][b, t]), mpf(a0["pi1.in_eps"][b, t])
            P.check(f"L{l}.att.pi.D[{b},{t}]", A["att.pi.D"][b, t], pre + pre0)
            iota = _pin_pi(P, "att", A, a_hat, pre, pre0, mpf(A["att.pi.D"][b, t]), pre, e_pi, (b, t))
            P.check(f"L{l}.att.rhoR[{b},{t}]", A["att.rhoR"][b, t],
                    mpf(A["att.pi.rho"][b, t]) + iota * mpf(A["att.rho"][b, t]))
            assert A["att.eps"][b, t] == a0["pi1"][b, t]
            jac = W_.sO * mpmath.sqrt(sum(hd[0] ** 2 for hd in heads)) + res * mpf(delta[b, pos])
            P.check(f"L{l}.att.lin[{b},{t}]", A["att.lin"][b, t],
                    iota * jac + mpf(A["att.rhoR"][b, t]) + mpf(A["att.eps"][b, t]))
            if "att.gain" in A:
                P.check(f"L{l}.att.gain[{b},{t}]", A["att.gain"][b, t], res + sum(hd[1] for hd in heads))
        # ---- feed-forward stage
        f0 = A["ff0"]
        fd = A["ff1"] if last else FT
        dy = A["ff.dy"] if last else FT["pi1"]
        if last:
            for b, t in np.ndindex(B, Tq):
                P.check(f"L{l}.ff.dy[{b},{t}]", dy[b, t], min(mpf(FT["pi1"][b, t]), mpf(A["att.lin"][b, t])))
        d_hat = A["ff.d"]
        Fd = d_hat.shape[-1]
        for b, t in np.ndindex(B, Tq):
            idx = (b, t)
            y = mpf(dy[idx])
            d_inf = max(abs(mpf(a)) for a in d_hat[idx])
            kink = w.activation == "relu" and bool((np.abs(FT["u_hat"][idx]) <= fd["eps_u"][idx + (0,)]).any())
            if not lay.gated:
                wv = W_.sF[0] * y
                P.check(f"L{l}.ff.w{idx}", A["ff.w"][idx], wv)
                if w.activation == "relu":
                    ref = W_.sF[1] * (2 * mpf(A["ff.w"][idx]) if kink else 0)
                else:
                    P.check(f"L{l}.ff.quad{idx}", A["ff.quad"][idx], L2 / 2 * mpf(A["ff.w"][idx]) ** 2)
                    P.check(f"L{l}.ff.lin{idx}", A["ff.lin"][idx], (L2 * mpf(f0["eps_u"][idx + (0,)]) + e_d) * mpf(A["ff.w"][idx]))
                    ref = W_.sF[1] * (mpf(A["ff.quad"][idx]) + mpf(A["ff.lin"][idx]))
                P.check(f"L{l}.ff.rho{idx}", A["ff.rho"][idx], ref)
                dm = [mpf(a) for a in d_hat[idx]]
                Mi, Mo = W_.ff
                K = [[sum(mpf(Mi[n, j]) * mpf(Mi[n, k]) for n in range(N)) * sum(mpf(Mo[j, n]) * mpf(Mo[k, n]) for n in range(N))
                      for k in range(Fd)] for j in range(Fd)]
                fro = mpmath.sqrt(max(mpmath.mpf(0), sum(dm[j] * K[j][k] * dm[k] for j in range(Fd) for k in range(Fd))))
                # the quadratic form's rounding (gamma_2F ||K_hat||_F) and K_hat's own error, times |d|^2
                g_N = gam(N)
                K_err = (g_N + (1 + g_N) * g_N + U * (1 + g_N) ** 2) * (W_.fF[0] * W_.fF[1]) ** 2
                K_hat = norm(lay.back.ff_K)
                P.check(f"L{l}.ff.J.err{idx}", A["ff.J.err"][idx], (gam(2 * Fd) * K_hat + K_err) * norm(d_hat[idx]) ** 2)
                P.check(f"L{l}.ff.J{idx}", A["ff.J"][idx], res + min(W_.sF[0] * d_inf * W_.sF[1], fro))
                gain = res + W_.fF[0] * d_inf * W_.fF[1]
            else:
                wa, wb = W_.sF[0] * y, W_.sF[1] * y
                P.check(f"L{l}.ff.wa{idx}", A["ff.wa"][idx], wa)
                P.check(f"L{l}.ff.wb{idx}", A["ff.wb"][idx], wb)
                wa, wb = mpf(A["ff.wa"][idx]), mpf(A["ff.wb"][idx])
                a0_, b0_ = mpf(f0["eps_u"][idx + (0,)]), mpf(f0["eps_b"][idx + (0,)])
                b_inf = max(abs(mpf(a)) for a in FT["b_hat"][idx])
                g_inf = max(abs(mpf(a)) for a in FT["g_hat"][idx])
                t1 = (2 * wa if kink else 0) if w.activation == "relu" else L2 / 2 * wa * wa + (L2 * a0_ + e_d) * wa
                P.check(f"L{l}.ff.t1{idx}", A["ff.t1"][idx], t1 * (b_inf + b0_))
                P.check(f"L{l}.ff.t2{idx}", A["ff.t2"][idx], d_inf * wa * b0_)
                P.check(f"L{l}.ff.t3{idx}", A["ff.t3"][idx], wa * wb * L_phi)
                P.check(f"L{l}.ff.t4{idx}", A["ff.t4"][idx], (L_phi * a0_ + mpf(f0["act"][idx])) * wb)
                P.check(f"L{l}.ff.rho{idx}", A["ff.rho"][idx], W_.sF[2] * sum(mpf(A[f"ff.t{i}"][idx]) for i in range(1, 5)))
                P.check(f"L{l}.ff.J{idx}", A["ff.J"][idx], res + W_.sF[2] * (W_.sF[0] * b_inf * d_inf + W_.sF[1] * g_inf))
                gain = res + W_.fF[2] * (W_.fF[0] * b_inf * d_inf + W_.fF[1] * g_inf)
            pre, pre0 = mpf(fd["pi2.in_eps"][idx]), mpf(f0["pi2.in_eps"][idx])
            D = min(pre + pre0, mpf(A["ff.J"][idx]) * y + mpf(A["ff.rho"][idx]))
            P.check(f"L{l}.ff.pi.D{idx}", A["ff.pi.D"][idx], D)
            D = mpf(A["ff.pi.D"][idx])
            iota = _pin_pi(P, "ff", A, FT["pi2.in"][idx], pre, pre0, D, min(pre, pre0 + D), e_pi, idx)
            P.check(f"L{l}.ff.rhoR{idx}", A["ff.rhoR"][idx], mpf(A["ff.pi.rho"][idx]) + iota * mpf(A["ff.rho"][idx]))
            assert A["ff.eps"][idx] == f0["pi2"][idx]
            P.check(f"L{l}.ff.gain{idx}", A["ff.gain"][idx], gain)
        # ---- the backward's sums, bounds and cuts (step 1)
        k_ff = 2 * N + (2 * Fd + 6 if lay.gated else Fd + 5)
        k_att = 2 * N + 2 * T + W_.dv + (H * W_.d + W_.G * W_.d + W_.G * W_.dv + 1) + H + 10
        for kind, k, rows_in, dl in (("ff", k_ff, Tq, dy), ("att", k_att, T, delta)):
            if kind + ".g_out" not in A:  # the backward stopped after the feed-forward (step 10's rule)
                break
            for b in range(B):
                go, gi = A[kind + ".g_out"][b], A[kind + ".g_in"][b]
                Rq = go.shape[0]
                pp_in = FT["pi2.in" if kind == "ff" else "pi1.in"][b]
                iotas = [mpmath.mpf(float(1.0 / np.sqrt(np.dot(a, a)))) if np.sqrt(np.dot(a, a)) > 1 else mpmath.mpf(1)
                         for a in pp_in]
                for t in range(Rq):
                    P.check(f"L{l}.{kind}.A[{b},{t}]", A[kind + ".A"][b, t], iotas[t] * norm(go[t]) * (1 + r_pi * r_pi))
                P.check(f"L{l}.{kind}.terms[{b}]", A[kind + ".terms"][b],
                        sum(norm(go[t]) * (mpf(A[kind + ".eps"][b, t]) + mpf(A[kind + ".rhoR"][b, t])) for t in range(Rq)))
                P.check(f"L{l}.{kind}.S[{b}]", A[kind + ".S"][b],
                        sum(mpf(A[kind + ".A"][b, t]) * mpf(A[kind + ".gain"][b, t]) for t in range(Rq)))
                P.check(f"L{l}.{kind}.B[{b}]", A[kind + ".B"][b], gam(k) * mpf(A[kind + ".S"][b]) + mpf(BACKWARD_TINY))
                acc[b] = acc[b] + mpf(A[kind + ".terms"][b]) + mpf(A[kind + ".B"][b]) * max(mpf(v) for v in dl[b])
                P.check(f"L{l}.{kind}.acc[{b}]", A[kind + ".acc"][b], acc[b])
                acc[b] = mpf(A[kind + ".acc"][b])
                cut = acc[b] + sum(norm(gi[t]) * mpf(dl[b, t]) for t in range(rows_in))
                P.check(f"L{l}.{kind}.cut[{b}]", A[kind + ".cut"][b], cut)
                best[b] = min(best[b], mpf(A[kind + ".cut"][b]))
    for b in range(B):
        assert mpf(out_refined[b, c]) == best[b], (b, out_refined[b, c], best[b])


def _pin_all(w, X, delta0=None) -> int:
    net = prepare(w).net
    x0, d0, ok = input_rows(X, net)
    if delta0 is not None:
        d0 = np.full(d0.shape, delta0)
    trace: dict = {}
    tape: list = []
    f, rad, ok = interval_outputs(net, x0, d0, ok, trace=trace, tape=tape)
    assert ok.all()
    atr: dict = {}
    out = refine(net, tape, f, rad, ok, 0.0, trace=atr)
    P = Pins()
    with mpmath.workdps(DPS):
        for c in range(net.k):
            _pin_row(P, w, net, trace, atr[f"row{c}"], rad, out, c)
    return P.count


CASES = [
    ("plain", "gelu", 1), ("residual", "gelu", 1), ("causal", "relu", 1), ("causal", "gelu_tanh", 1),
    ("ls", "silu", 1), ("ls_residual", "gelu_tanh", 0), ("ls", "gelu", 2), ("residual", "silu", 1),
    ("plain", "relu", 1), ("ls_residual", "relu", 0),
]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_every_term_of_the_adjoint_note_is_pinned(case):
    variant, act, kv = case
    rng = np.random.default_rng(zlib.crc32("-".join(map(str, case)).encode()))
    w = random_weights(rng, variant=variant, activation=act, L=2, H=2, N=4, d=2, F=3, kv=kv, T=3, qk=2.0,
                       k=2 if act == "relu" else 1)
    X = rng.standard_normal((2, 3, 4))
    # radii large enough that the remainders are not below the rounding of the sums they enter
    assert _pin_all(w, X, 1e-6) > 300


def test_the_constants_are_the_ones_the_note_declares():
    from specbound.certified import interval_adjoint as ia
    from specbound.certified.interval_network import projection_constants
    from specbound.certified.sigmoid import GELU_PSI, GELU_TANH_C3, second_derivative_bound

    with mpmath.workdps(DPS):
        assert mpf(ia._INV_SQRT3) >= 1 / mpmath.sqrt(3) and mpf(ia._SQRT2) >= mpmath.sqrt(2)
        assert ia.BACKWARD_TINY == 2.0**-700
        assert GELU_PSI == 1.0 / np.sqrt(2.0 * np.pi) and GELU_TANH_C3 == 3.0 * 0.044715
        for n in (4, 64):
            net = prepare(random_weights(np.random.default_rng(n), N=n)).net
            e_pi = _e_pi(n)[0]
            assert 4 * e_pi + TAU <= mpf(net.c_pi) <= (4 * e_pi + TAU) * (1 + REL)
            assert mpf(projection_constants(n)[0]) >= e_pi
        assert 2 / mpmath.sqrt(2 * mpmath.pi) <= mpf(second_derivative_bound("gelu")) <= 2 / mpmath.sqrt(2 * mpmath.pi) * (1 + REL)
        assert mpmath.mpf(1) / 2 <= mpf(second_derivative_bound("silu")) <= mpmath.mpf("0.5") * 1.003


def test_the_plain_feed_forward_K_constants_are_pinned():
    rng = np.random.default_rng(21)
    w = random_weights(rng, L=1, N=5, F=4)
    lay = prepare(w).net.layers[0]
    Mi, Mo = lay.ff
    with mpmath.workdps(DPS):
        K = [[sum(mpf(Mi[n, j]) * mpf(Mi[n, k]) for n in range(5)) * sum(mpf(Mo[j, n]) * mpf(Mo[k, n]) for n in range(5))
              for k in range(4)] for j in range(4)]
        err = mpmath.sqrt(sum((K[j][k] - mpf(lay.back.ff_K[j, k])) ** 2 for j in range(4) for k in range(4)))
        g = gam(5)
        ref = (g + (1 + g) * g + U * (1 + g) ** 2) * (norm(Mi) * norm(Mo)) ** 2
        assert err <= ref
        assert ref <= mpf(lay.back.ff_K_err) <= ref * (1 + REL)
        assert norm(lay.back.ff_K) <= mpf(lay.back.ff_K_fro) <= norm(lay.back.ff_K) * (1 + REL)


@pytest.mark.parametrize("case", [("plain", "relu", 1), ("ls", "relu", 1), ("residual", "gelu", 1)],
                         ids=["plain-relu", "ls-relu", "residual-gelu"])
def test_the_kink_and_sphere_crossing_rules_are_pinned_on_large_balls(case):
    # radii of 3e-2: some ReLU arguments' balls reach the kink (step 6's 2|w| rule) and some pre-Pi balls
    # meet the unit sphere (step 4's case X); both rules are pinned by _pin_row like every other term
    variant, act, kv = case
    rng = np.random.default_rng(zlib.crc32(("large-" + "-".join(map(str, case))).encode()))
    w = random_weights(rng, variant=variant, activation=act, L=2, H=2, N=4, d=2, F=3, kv=kv, T=3, qk=2.0)
    X = rng.standard_normal((4, 3, 4))
    net = prepare(w).net
    x0, d0, ok = input_rows(X, net)
    trace: dict = {}
    tape: list = []
    f, rad, ok = interval_outputs(net, x0, np.full(d0.shape, 3e-2), ok, trace=trace, tape=tape)
    atr: dict = {}
    out = refine(net, tape, f, rad, ok, 0.0, trace=atr)
    P = Pins()
    with mpmath.workdps(DPS):
        _pin_row(P, w, net, trace, atr["row0"], rad, out, 0)
    layers = [v for k, v in atr["row0"].items() if k.startswith("L")]
    cases = np.concatenate([np.ravel(L[k + ".pi.case"]) for L in layers for k in ("att", "ff") if k + ".pi.case" in L])
    assert (cases == 2).any(), "no ball met the unit sphere: case X untested"
    if act == "relu":
        kinks = [float(np.max(L["ff.rho"])) > 0 for L in layers]
        assert any(kinks), "no ReLU ball reached the kink"


@pytest.mark.parametrize("name", ["gelu", "silu", "gelu_tanh"])
def test_the_second_derivative_tails_are_the_notes_bounds(name):
    # step 5: beyond t = 8, |phi''| is below a decreasing bound, evaluated at 8 (pinned to the note's formula)
    from specbound.certified.sigmoid import _phi2_tail

    tail = mpmath.mpf(_phi2_tail(name).upper().str(30, radius=False))
    with mpmath.workdps(DPS):
        t = mpmath.mpf(8)
        if name == "gelu":
            ref = t * t * mpmath.exp(-t * t / 2) / mpmath.sqrt(2 * mpmath.pi)
        elif name == "silu":
            ref = mpmath.exp(-t) * (t + 2)
        else:
            C1, C2 = 2 * mpmath.sqrt(2 / mpmath.pi), mpmath.mpf(44715) / 10**6
            y1 = C1 * (1 + 3 * C2 * t * t)
            ref = mpmath.exp(-C1 * t) * (2 * y1 + t * y1 * y1 + 6 * C1 * C2 * t * t)
        assert ref <= tail <= ref * (1 + REL)

        def phi2(x):
            if name == "gelu":
                return mpmath.exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi) * (2 - x * x)
            if name == "silu":
                s = 1 / (1 + mpmath.exp(-x))
                return s * (1 - s) * (2 + x * (1 - 2 * s))
            C1, C2 = 2 * mpmath.sqrt(2 / mpmath.pi), mpmath.mpf(44715) / 10**6
            y = C1 * (x + C2 * x**3)
            s = 1 / (1 + mpmath.exp(-y))
            s1, y1 = s * (1 - s), C1 * (1 + 3 * C2 * x * x)
            return 2 * s1 * y1 + x * s1 * (1 - 2 * s) * y1 * y1 + x * s1 * 6 * C1 * C2 * x

        assert all(abs(phi2(mpmath.mpf(x))) <= tail for x in np.linspace(8, 60, 200))

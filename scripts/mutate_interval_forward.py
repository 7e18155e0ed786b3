"""Mutation probe of the per-sample pass (proofs_notes/interval_forward.md) and of its adjoint refinement
(proofs_notes/interval_adjoint.md): every error term shrunk by 10%.

For each mutant the source file is rewritten with one term multiplied by 0.9 (or, for a lower bound, its
reciprocal 1/0.9), the pinning tests are run, and the file is restored.  A mutant is *caught* when the
tests fail.  Prints one line per mutant and exits 1 if any survives.

    .venv/bin/python scripts/mutate_interval_forward.py [--group forward|adjoint|all] [--only SUBSTRING]

Runs about one minute per 10 mutants on one core (a forward mutant runs tests/certified/test_interval_terms.py,
an adjoint mutant tests/certified/test_interval_adjoint_terms.py, then test_interval_adjoint.py if it passed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IV, NET, SIG = "certified/interval_forward.py", "certified/interval_network.py", "certified/sigmoid.py"
ST = "certified/interval_stages.py"
DIR = "certified/directed.py"

EQUIVALENT = {
    # term -> why the shrunk term cannot change any output bit (checked below by comparing outputs)
    "step 9 tau": "below half an ulp of e_Pi N-up(a) >= e_Pi sqrt(N 2^-1074) ~ 1e-178 >> 2^52 tau",
    "step 6 (d) tau": "below half an ulp of gamma_T max N-up(v) >= gamma_T sqrt(2^-1074) ~ 1e-178",
    "step 11 gated tau": "below half an ulp of u' N-up(hid) >= u' sqrt(2^-1074) ~ 1e-178",
    "step 5 beta, T alpha'": "below half an ulp of eta_1 >= eta_exp ~ 1.75e-14 (T 2^-1017 < 2^-900)",
    "step 5 eta_p, T alpha'": "below half an ulp of eta_1 >= eta_exp ~ 1.75e-14 (T 2^-1017 < 2^-900)",
}

MUTANTS: list[tuple[str, str, str, str]] = [
    # (file, term, original text, mutated text)
    (ST, "step 2 delta sigma", 'lip = _rec(tr, name + ".lip", mul_up(delta[..., None], sig))',
     'lip = _rec(tr, name + ".lip", 0.9 * mul_up(delta[..., None], sig))'),
    (ST, "step 2 gamma_n ||W|| N(m)", 'rounding = _rec(tr, name + ".rnd", mul_up(norms[..., None], rnd))',
     'rounding = _rec(tr, name + ".rnd", 0.9 * mul_up(norms[..., None], rnd))'),
    (ST, "step 2 tau", "    return _rec(tr, name, add_up(lip, rounding, TINY))\n\n\n# ----",
     "    return _rec(tr, name, add_up(lip, rounding, 0.9 * TINY))\n\n\n# ----"),
    (ST, "step 9 eps / max(1, N - eps)", 'lip = _rec(tr, name + ".lip", div_up(eps, np.maximum(sub_down(pp.nu_lo, eps), 1.0)))',
     'lip = _rec(tr, name + ".lip", 0.9 * div_up(eps, np.maximum(sub_down(pp.nu_lo, eps), 1.0)))'),
    (ST, "step 9 e_Pi min(1, N)", 'rounding = _rec(tr, name + ".rnd", mul_up(net.e_pi, np.minimum(pp.nu_hi, 1.0)))',
     'rounding = _rec(tr, name + ".rnd", 0.9 * mul_up(net.e_pi, np.minimum(pp.nu_hi, 1.0)))'),
    (ST, "step 9 tau", "    return _rec(tr, name, add_up(lip, rounding, TINY))\n\n\ndef _residual_program",
     "    return _rec(tr, name, add_up(lip, rounding, 0.9 * TINY))\n\n\ndef _residual_program"),
    (ST, "step 3 rho_R eps", 'lip = _rec(tr, name + ".rot_lip", mul_up(eps, net.rho_R))',
     'lip = _rec(tr, name + ".rot_lip", 0.9 * mul_up(eps, net.rho_R))'),
    (ST, "step 3 rounding", 'rounding = _rec(tr, name + ".rot_rnd", mul_up(mul_up(norms, _ROT), net.rho_R))',
     'rounding = _rec(tr, name + ".rot_rnd", 0.9 * mul_up(mul_up(norms, _ROT), net.rho_R))'),
    (ST, "step 3 tau", 'return _rec(tr, name + ".rot", add_up(lip, rounding, TINY))',
     'return _rec(tr, name + ".rot", add_up(lip, rounding, 0.9 * TINY))'),
    (ST, "step 4 r, query term", 'r1 = _rec(tr, "r.1", mul_up(eq, m1))', 'r1 = _rec(tr, "r.1", 0.9 * mul_up(eq, m1))'),
    (ST, "step 4 r, key term", 'r2 = _rec(tr, "r.2", mul_up(Qh, m2))', 'r2 = _rec(tr, "r.2", 0.9 * mul_up(Qh, m2))'),
    (ST, "step 4 r, K + eps_k", "m1 = _to_heads(_keymax(add_up(Kg, ek), causal, Tq), lay, same)", "m1 = _to_heads(_keymax(0.9 * add_up(Kg, ek), causal, Tq), lay, same)"),
    (ST, "step 4 r, gamma_d K", "m2 = _to_heads(_keymax(add_up(ek, mul_up(Kg, g_d)), causal, Tq), lay, same)",
     "m2 = _to_heads(_keymax(add_up(ek, 0.9 * mul_up(Kg, g_d)), causal, Tq), lay, same)"),
    (ST, "step 4 r, sum", 'r = _rec(tr, "r", add_up(r1, r2, TINY))', 'r = _rec(tr, "r", 0.9 * add_up(r1, r2, TINY))'),
    (ST, "step 4 r, tau", 'r = _rec(tr, "r", add_up(r1, r2, TINY))', 'r = _rec(tr, "r", add_up(r1, r2, 0.9 * TINY))'),
    (ST, "step 4 S", 'S = _rec(tr, "S", add_up(mul_up(mul_up(Qh, one_g_d), mK), TINY))',
     'S = _rec(tr, "S", 0.9 * add_up(mul_up(mul_up(Qh, one_g_d), mK), TINY))'),
    (ST, "step 4 S tau", 'S = _rec(tr, "S", add_up(mul_up(mul_up(Qh, one_g_d), mK), TINY))',
     'S = _rec(tr, "S", add_up(mul_up(mul_up(Qh, one_g_d), mK), 0.9 * TINY))'),
    (ST, "step 5 eta_1, shift term", "add_up(mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), eta_exp)",
     "add_up(0.9 * mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), eta_exp)"),
    (ST, "step 5 eta_1, eta_exp", "add_up(mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), eta_exp)",
     "add_up(mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), 0.9 * eta_exp)"),
    (ST, "step 5 beta", 'beta = _rec(tr, "beta", add_up(eta1, mul_up(add_up(1.0, eta1), g_T), T_alpha))',
     'beta = _rec(tr, "beta", 0.9 * add_up(eta1, mul_up(add_up(1.0, eta1), g_T), T_alpha))'),
    (ST, "step 5 beta, T alpha'", 'beta = _rec(tr, "beta", add_up(eta1, mul_up(add_up(1.0, eta1), g_T), T_alpha))',
     'beta = _rec(tr, "beta", add_up(eta1, mul_up(add_up(1.0, eta1), g_T), 0.9 * T_alpha))'),
    (ST, "step 5 eta_p", 'eta_p = _rec(tr, "eta_p", div_up(', 'eta_p = _rec(tr, "eta_p", 0.9 * div_up('),
    (ST, "step 5 eta_p, T alpha'", "mul_up(add_up(1.0, eta1), _U), beta, T_alpha),", "mul_up(add_up(1.0, eta1), _U), beta, 0.9 * T_alpha),"),
    (ST, "step 5 lambda", 'lam = _rec(tr, "lam", div_up(', 'lam = _rec(tr, "lam", 0.9 * div_up('),
    (ST, "step 6 (a)", 'ha = _rec(tr, "h.a", np.broadcast_to(mEv, r.shape))', 'ha = _rec(tr, "h.a", 0.9 * np.broadcast_to(mEv, r.shape))'),
    (ST, "step 6 (b1)", 'b1 = _rec(tr, "h.b1", mul_up(r, ap.omega))', 'b1 = _rec(tr, "h.b1", 0.9 * mul_up(r, ap.omega))'),
    (ST, "step 6 omega", "return norm_up(upn(upn(hi - lo) * 0.5))", "return 0.9 * norm_up(upn(upn(hi - lo) * 0.5))"),
    (ST, "step 6 (b2)", "mul_up(div_up(x2r, sub_down(1.0, x2r)), sqrt_up(W))", "0.9 * mul_up(div_up(x2r, sub_down(1.0, x2r)), sqrt_up(W))"),
    (ST, "step 6 W", 'W = _rec(tr, "W", mul_up(lam,', 'W = _rec(tr, "W", 0.9 * mul_up(lam,'),
    (ST, "step 6 W, A column", '"W.A", mul_up(add_up(ap.A, TINY), inv_g_T))', '"W.A", 0.9 * mul_up(add_up(ap.A, TINY), inv_g_T))'),
    (ST, "step 6 W, ||h||^2 (lower bound)", '"W.h2", down(down(sub_down(1.0, eta_p) * Hlo) * Hlo))',
     '"W.h2", down(down(sub_down(1.0, eta_p) * Hlo) * Hlo) / 0.9)'),
    (ST, "step 6 W, alpha' tail", '"W.tail", mul_up(T_alpha,', '"W.tail", 0.9 * mul_up(T_alpha,'),
    (ST, "step 6 W, 2 H e_g", '"W.he", mul_up(mul_up(Hn, e_g), 2.0))', '"W.he", 0.9 * mul_up(mul_up(Hn, e_g), 2.0))'),
    (ST, "step 6 (c)", 'hc = mul_up(eta_p, mV)', 'hc = 0.9 * mul_up(eta_p, mV)'),
    (ST, "step 6 (d)", 'e_g = _rec(tr, "h.d", add_up(mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), TINY))',
     'e_g = _rec(tr, "h.d", add_up(0.9 * mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), TINY))'),
    (ST, "step 6 (d) tau", 'e_g = _rec(tr, "h.d", add_up(mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), TINY))',
     'e_g = _rec(tr, "h.d", add_up(mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), 0.9 * TINY))'),
    (ST, "step 6 max V", "mK, mV = _to_heads(_keymax(Kg, causal, Tq), lay, same), _to_heads(_keymax(ap.Vn, causal, Tq), lay, same)",
     "mK, mV = _to_heads(_keymax(Kg, causal, Tq), lay, same), 0.9 * _to_heads(_keymax(ap.Vn, causal, Tq), lay, same)"),
    (ST, "step 6 sum", "add_up(ha, np.minimum(b1, b2), hc, e_g)", "0.9 * add_up(ha, np.minimum(b1, b2), hc, e_g)"),
    (ST, "step 7 concatenated radii", "eps_cat = norm_up(eps_h.transpose(0, 2, 1))", "eps_cat = 0.9 * norm_up(eps_h.transpose(0, 2, 1))"),
    (ST, "step 8 u' N", 'rounding = _rec(tr, name + ".rnd", mul_up(rp.ns, _U1))', 'rounding = _rec(tr, name + ".rnd", 0.9 * mul_up(rp.ns, _U1))'),
    (ST, "step 8 sum", "return _rec(tr, name, add_up(eps_a, delta, rounding))", "return _rec(tr, name, 0.9 * add_up(eps_a, delta, rounding))"),
    (ST, "step 10 kappa_1 N", 'k1 = _rec(tr, "act.1", mul_up(ac.nt, act.kappa_1))', 'k1 = _rec(tr, "act.1", 0.9 * mul_up(ac.nt, act.kappa_1))'),
    (ST, "step 10 kappa_2 N Y", 'k2 = _rec(tr, "act.2", mul_up(mul_up(ac.nt, ac.y_inf), act.kappa_2))',
     'k2 = _rec(tr, "act.2", 0.9 * mul_up(mul_up(ac.nt, ac.y_inf), act.kappa_2))'),
    (ST, "step 10 sqrt(F) tau_phi", "tiny = mul_up(up(math.sqrt(ac.F)), act.tau)",
     "tiny = 0.9 * mul_up(up(math.sqrt(ac.F)), act.tau)"),
    (ST, "step 11 L_phi eps_u", 'e_g = _rec(tr, "eps_g", add_up(mul_up(e_u, lay.act.L_phi), e_act))',
     'e_g = _rec(tr, "eps_g", add_up(0.9 * mul_up(e_u, lay.act.L_phi), e_act))'),
    (ST, "step 11 activation error", 'e_g = _rec(tr, "eps_g", add_up(mul_up(e_u, lay.act.L_phi), e_act))',
     'e_g = _rec(tr, "eps_g", add_up(mul_up(e_u, lay.act.L_phi), 0.9 * e_act))'),
    (ST, "step 11 gated (L eps_a + e_phi)(B + eps_b)", 'h1 = _rec(tr, "hid.1", mul_up(', 'h1 = _rec(tr, "hid.1", 0.9 * mul_up('),
    (ST, "step 11 gated G eps_b", 'h2 = _rec(tr, "hid.2", mul_up(fp.g_inf, e_b))', 'h2 = _rec(tr, "hid.2", 0.9 * mul_up(fp.g_inf, e_b))'),
    (ST, "step 11 gated u' N(h)", 'h3 = _rec(tr, "hid.3", mul_up(fp.nh, _U1))', 'h3 = _rec(tr, "hid.3", 0.9 * mul_up(fp.nh, _U1))'),
    (ST, "step 11 gated tau", 'e_h = _rec(tr, "eps_hid", add_up(h1, h2, h3, TINY))', 'e_h = _rec(tr, "eps_hid", add_up(h1, h2, h3, 0.9 * TINY))'),
    (IV, "step 13 gamma_N N", 'rounding = _rec(tr, "rnd", mul_up(nr, gamma_up(N)))', 'rounding = _rec(tr, "rnd", 0.9 * mul_up(nr, gamma_up(N)))'),
    (IV, "step 13 (delta + rnd) ||w||", "rad = _rec(tr, \"rad\", add_up(mul_up(", "rad = _rec(tr, \"rad\", add_up(0.9 * mul_up("),
    (IV, "step 12 input delta", "delta0 = add_up(mul_up(np.minimum(norm_up(r), 1.0), net.e_pi), TINY)",
     "delta0 = add_up(0.9 * mul_up(np.minimum(norm_up(r), 1.0), net.e_pi), TINY)"),
    (ST, "constant tau", "TINY = 2.0**-1000\n", "TINY = 0.9 * 2.0**-1000\n"),
    (ST, "constant u'", "_U1 = 2.0**-53 + 2.0**-105\n", "_U1 = 0.9 * (2.0**-53 + 2.0**-105)\n"),
    (ST, "constant 2^-51 (rotation)", "_ROT = 2.0**-51\n", "_ROT = 0.9 * 2.0**-51\n"),
    (ST, "constant T alpha'", "float(T) * 2.0**SOFTMAX_TINY_EXP", "0.9 * float(T) * 2.0**SOFTMAX_TINY_EXP"),
    (ST, "constant gamma_T", "return (float_up(exp_error_bound()), gamma_up(T),", "return (float_up(exp_error_bound()), 0.9 * gamma_up(T),"),
    (ST, "constant 1 + gamma_d", "float_up(1 + gamma_arb(d)),", "0.9 * float_up(1 + gamma_arb(d)),"),
    (ST, "constant 1/(1 - gamma_T)", "float_up(1 / (1 - gamma_arb(T))), gamma_up(d))", "0.9 * float_up(1 / (1 - gamma_arb(T))), gamma_up(d))"),
    (ST, "constant gamma_d", "float_up(1 / (1 - gamma_arb(T))), gamma_up(d))", "float_up(1 / (1 - gamma_arb(T))), 0.9 * gamma_up(d))"),
    (ST, "constant eta_exp", "return (float_up(exp_error_bound()),", "return (0.9 * float_up(exp_error_bound()),"),
    (NET, "sigma_W", "return Block(float_up(sigma), float_up(gamma_arb(w.shape[0]) * frob), float_up(frob))",
     "return Block(0.9 * float_up(sigma), float_up(gamma_arb(w.shape[0]) * frob), float_up(frob))"),
    (NET, "g_W = gamma_n ||W||_F", "return Block(float_up(sigma), float_up(gamma_arb(w.shape[0]) * frob), float_up(frob))",
     "return Block(float_up(sigma), 0.9 * float_up(gamma_arb(w.shape[0]) * frob), float_up(frob))"),
    (NET, "e_Pi", "return float_up(r - 1), float_up(r + arb(N).sqrt() * pow2(-1075))",
     "return 0.9 * float_up(r - 1), float_up(r + arb(N).sqrt() * pow2(-1075))"),
    (NET, "R_Pi (t_max)", "return float_up(r - 1), float_up(r + arb(N).sqrt() * pow2(-1075))",
     "return float_up(r - 1), 0.9 * float_up(r + arb(N).sqrt() * pow2(-1075))"),
    (NET, "t_max", "        t_max = float_up(t_max)\n", "        t_max = 0.9 * float_up(t_max)\n"),
    (NET, "rho_R", "rho = float_up((arb(bound.numerator) / arb(bound.denominator)).sqrt())",
     "rho = 0.9 * float_up((arb(bound.numerator) / arb(bound.denominator)).sqrt())"),
    (NET, "||w_c||", "norms = np.array([float_up(fro_upper(row)) for row in w])", "norms = 0.9 * np.array([float_up(fro_upper(row)) for row in w])"),
    (SIG, "kappa_sigma", "k = (1 + eta) * (1 + u) / ((1 - eta / 2) * (1 - u)) - 1", "k = 0.9 * ((1 + eta) * (1 + u) / ((1 - eta / 2) * (1 - u)) - 1)"),
    (SIG, "kappa_y", "k = (1 + abs(c1 - C1) / C1) * (1 + e_c) * (1 + u) ** 2 - 1", "k = 0.9 * ((1 + abs(c1 - C1) / C1) * (1 + e_c) * (1 + u) ** 2 - 1)"),
    (SIG, "kappa_1 (SiLU, tanh-GELU)", "k1 = k_sig + u * (1 + k_sig)", "k1 = 0.9 * (k_sig + u * (1 + k_sig))"),
    (SIG, "kappa_1 (GELU)", "k1 = e_phi + u * (1 + e_phi)", "k1 = 0.9 * (e_phi + u * (1 + e_phi))"),
    (SIG, "kappa_2 (tanh-GELU)", "k2 = (1 + u) * k_y / (4 * (1 - k_y))", "k2 = 0.9 * (1 + u) * k_y / (4 * (1 - k_y))"),
    (SIG, "tau_phi (SiLU)", "tau = t * pow2(-1018) + pow2(-1075)", "tau = 0.9 * (t * pow2(-1018) + pow2(-1075))"),
    (SIG, "tau_phi (tanh-GELU)", "tau = t * (pow2(-1018) + tau_y / (1 - k_y)) + pow2(-1075)",
     "tau = 0.9 * (t * (pow2(-1018) + tau_y / (1 - k_y)) + pow2(-1075))"),
    (SIG, "L_phi (SiLU)", "L_PHI_SILU = Fraction(109983932012886692, 10**17)", "L_PHI_SILU = Fraction(9 * 109983932012886692, 10 * 10**17)"),
    (SIG, "L_phi (tanh-GELU)", "L_PHI_GELU_TANH = Fraction(113, 100)", "L_PHI_GELU_TANH = Fraction(9 * 113, 1000)"),
    (SIG, "L_phi (GELU)", "return (1 + arb(1).erf()) / 2 + 1 / (arb(1).exp() * arb.pi().sqrt())",
     "return 0.9 * ((1 + arb(1).erf()) / 2 + 1 / (arb(1).exp() * arb.pi().sqrt()))"),
    (DIR, "N-up factor 1/(1 - gamma_n)", "return float_up(1 / (1 - g)), float_lower(1 / (1 + g)), float_up(arb(int(n)) * arb(ETA))",
     "return 0.9 * float_up(1 / (1 - g)), float_lower(1 / (1 + g)), float_up(arb(int(n)) * arb(ETA))"),
    (DIR, "N-down factor 1/(1 + gamma_n) (raised)", "return float_up(1 / (1 - g)), float_lower(1 / (1 + g)), float_up(arb(int(n)) * arb(ETA))",
     "return float_up(1 / (1 - g)), float_lower(1 / (1 + g)) / 0.9, float_up(arb(int(n)) * arb(ETA))"),
    (DIR, "N-up underflow n eta", "return float_up(1 / (1 - g)), float_lower(1 / (1 + g)), float_up(arb(int(n)) * arb(ETA))",
     "return float_up(1 / (1 - g)), float_lower(1 / (1 + g)), 0.9 * float_up(arb(int(n)) * arb(ETA))"),
]

ADJ = "certified/interval_adjoint.py"

ADJOINT_EQUIVALENT = {
    "adj step 1 out tau": "below half an ulp of gamma_N N-up(m) ||w|| >= 1e-178",
}

ADJOINT_MUTANTS: list[tuple[str, str, str, str]] = [
    # proofs_notes/interval_adjoint.md, every term of its steps (each shrunk by 10%; lower bounds raised)
    (ADJ, "adj step 4 nu0 (lower bound)", 'sub_down(pp.nu_lo, seg))', 'sub_down(pp.nu_lo, seg) / 0.9)'),
    (ADJ, "adj step 4 |D|^2 / (sqrt3 nu0^2)", '".pi.quad", div_up(', '".pi.quad", 0.9 * div_up('),
    (ADJ, "adj step 4 sqrt2 rho0 / nu0^2", "add_up(div_up(mul_up(pre0, _SQRT2), nu0sq), net.c_pi)",
     "add_up(0.9 * div_up(mul_up(pre0, _SQRT2), nu0sq), net.c_pi)"),
    (ADJ, "adj step 4 c_Pi", "add_up(div_up(mul_up(pre0, _SQRT2), nu0sq), net.c_pi)",
     "add_up(div_up(mul_up(pre0, _SQRT2), nu0sq), 0.9 * net.c_pi)"),
    (ADJ, "adj step 4 (X) 2|D|", "np.where(ident, 0.0, mul_up(D, 2.0))", "np.where(ident, 0.0, 0.9 * mul_up(D, 2.0))"),
    (ADJ, "adj constant 1/sqrt3", "_INV_SQRT3 = 0.5773502691896259", "_INV_SQRT3 = 0.9 * 0.5773502691896259"),
    (ADJ, "adj constant sqrt2", "_SQRT2 = 1.4142135623730951", "_SQRT2 = 0.9 * 1.4142135623730951"),
    (ADJ, "adj step 6 |w| = sigma_in dy", 'w = _rec(tr, "ff.w", mul_up(dy, b_in.sigma))', 'w = _rec(tr, "ff.w", 0.9 * mul_up(dy, b_in.sigma))'),
    (ADJ, "adj step 6 L2/2 |w|^2", '"ff.quad", mul_up(', '"ff.quad", 0.9 * mul_up('),
    (ADJ, "adj step 6 L2 rho_u0", "mul_up(add_up(mul_up(r0.ff.eps_u, back.L2), back.e_d), w)",
     "mul_up(add_up(0.9 * mul_up(r0.ff.eps_u, back.L2), back.e_d), w)"),
    (ADJ, "adj step 6 e_d", "mul_up(add_up(mul_up(r0.ff.eps_u, back.L2), back.e_d), w)",
     "mul_up(add_up(mul_up(r0.ff.eps_u, back.L2), 0.9 * back.e_d), w)"),
    (ADJ, "adj step 6 ReLU 2|w|", "inner = np.where(kink, mul_up(w, 2.0), 0.0)", "inner = np.where(kink, 0.9 * mul_up(w, 2.0), 0.0)"),
    (ADJ, "adj step 6 sigma_out", 'return _rec(tr, "ff.rho", mul_up(inner, b_out.sigma))',
     'return _rec(tr, "ff.rho", 0.9 * mul_up(inner, b_out.sigma))'),
    (ADJ, "adj step 6 gated |w_a|", 'wa = _rec(tr, "ff.wa", mul_up(dy, bG.sigma))', 'wa = _rec(tr, "ff.wa", 0.9 * mul_up(dy, bG.sigma))'),
    (ADJ, "adj step 6 gated |w_b|", 'wb = _rec(tr, "ff.wb", mul_up(dy, bU.sigma))', 'wb = _rec(tr, "ff.wb", 0.9 * mul_up(dy, bU.sigma))'),
    (ADJ, "adj step 6 gated L2/2 |w_a|^2", "t1 = add_up(mul_up(mul_up(wa, wa), 0.5 * back.L2),",
     "t1 = add_up(0.9 * mul_up(mul_up(wa, wa), 0.5 * back.L2),"),
    (ADJ, "adj step 6 gated (L2 rho_a0 + e_d)|w_a|", "mul_up(add_up(mul_up(a0, back.L2), back.e_d), wa))",
     "0.9 * mul_up(add_up(mul_up(a0, back.L2), back.e_d), wa))"),
    (ADJ, "adj step 6 gated ReLU 2|w_a|", "t1 = np.where(_kink(fp.u, rd.ff.eps_u), mul_up(wa, 2.0), 0.0)",
     "t1 = np.where(_kink(fp.u, rd.ff.eps_u), 0.9 * mul_up(wa, 2.0), 0.0)"),
    (ADJ, "adj step 6 gated B + rho_b0", '"ff.t1", mul_up(t1, add_up(fp.b_inf, b0)))', '"ff.t1", mul_up(t1, 0.9 * add_up(fp.b_inf, b0)))'),
    (ADJ, "adj step 6 gated D |w_a| rho_b0", '"ff.t2", mul_up(', '"ff.t2", 0.9 * mul_up('),
    (ADJ, "adj step 6 gated L_phi |w_a||w_b|", '"ff.t3", mul_up(', '"ff.t3", 0.9 * mul_up('),
    (ADJ, "adj step 6 gated L_phi rho_a0", "mul_up(add_up(mul_up(a0, lay.act.L_phi), r0.ff.e_act), wb)",
     "mul_up(add_up(0.9 * mul_up(a0, lay.act.L_phi), r0.ff.e_act), wb)"),
    (ADJ, "adj step 6 gated e_phi", "mul_up(add_up(mul_up(a0, lay.act.L_phi), r0.ff.e_act), wb)",
     "mul_up(add_up(mul_up(a0, lay.act.L_phi), 0.9 * r0.ff.e_act), wb)"),
    (ADJ, "adj step 6 gated sigma_D", 'return _rec(tr, "ff.rho", mul_up(add_up(t1, t2, t3, t4), bD.sigma))',
     'return _rec(tr, "ff.rho", 0.9 * mul_up(add_up(t1, t2, t3, t4), bD.sigma))'),
    (ADJ, "adj step 6 ||J_Gamma|| spectral", "spec = mul_up(mul_up(b_in.sigma, d_inf), b_out.sigma)",
     "spec = 0.9 * mul_up(mul_up(b_in.sigma, d_inf), b_out.sigma)"),
    (ADJ, "adj step 6 ||J_Gamma|| d^T K d", 'q = np.maximum(np.einsum("...j,...j->...", d @ back.ff_K, d), 0.0)',
     'q = 0.9 * np.maximum(np.einsum("...j,...j->...", d @ back.ff_K, d), 0.0)'),
    (ADJ, "adj step 6 gamma_2F ||K||", "mul_up(gamma_up(2 * F), back.ff_K_fro)", "mul_up(0.9 * gamma_up(2 * F), back.ff_K_fro)"),
    (ADJ, "adj step 6 ||K - K_hat||", "back.ff_K_fro), back.ff_K_err)", "back.ff_K_fro), 0.9 * back.ff_K_err)"),
    (ADJ, "adj step 6 gated ||J_Gamma||", "spec = mul_up(bD.sigma, add_up(", "spec = 0.9 * mul_up(bD.sigma, add_up("),
    (ADJ, "adj step 3 |D| from the radii", "D = np.minimum(add_up(rd.pre, r0.pre),", "D = np.minimum(0.9 * add_up(rd.pre, r0.pre),"),
    (ADJ, "adj step 3 |D| from ||J|| dy + rho", "add_up(mul_up(_ff_jacobian(net, lay, st, d, tr), dy), rho_g))",
     "0.9 * add_up(mul_up(_ff_jacobian(net, lay, st, d, tr), dy), rho_g))"),
    (ADJ, "adj step 3 seg", "seg = np.minimum(rd.pre, add_up(r0.pre, D))", "seg = np.minimum(rd.pre, 0.9 * add_up(r0.pre, D))"),
    (ADJ, "adj step 3 ff rho_Pi", '"ff.rhoR", add_up(rho_pi, mul_up(iota, rho_g)))', '"ff.rhoR", add_up(0.9 * rho_pi, mul_up(iota, rho_g)))'),
    (ADJ, "adj step 3 ff iota rho_Gamma", '"ff.rhoR", add_up(rho_pi, mul_up(iota, rho_g)))', '"ff.rhoR", add_up(rho_pi, 0.9 * mul_up(iota, rho_g)))'),
    (ADJ, "adj step 3 att |D|", "D = add_up(pre, pre0)", "D = 0.9 * add_up(pre, pre0)"),
    (ADJ, "adj step 3 att rho_Pi", '"att.rhoR", add_up(rho_pi, mul_up(iota, rho_g)))', '"att.rhoR", add_up(0.9 * rho_pi, mul_up(iota, rho_g)))'),
    (ADJ, "adj step 3 att iota rho_Gamma", '"att.rhoR", add_up(rho_pi, mul_up(iota, rho_g)))', '"att.rhoR", add_up(rho_pi, 0.9 * mul_up(iota, rho_g)))'),
    (ADJ, "adj step 8 q-bar", '"att.qbar", mul_up(', '"att.qbar", 0.9 * mul_up('),
    (ADJ, "adj step 8 k-bar", '"att.kbar", mul_up(', '"att.kbar", 0.9 * mul_up('),
    (ADJ, "adj step 8 tau, q-bar eps_k0", '"att.tau", add_up(mul_up(qbar, ek0),', '"att.tau", add_up(0.9 * mul_up(qbar, ek0),'),
    (ADJ, "adj step 8 tau, (eps_q0 + q-bar) k-bar", "mul_up(add_up(eq0, qbar), kbar)))", "0.9 * mul_up(add_up(eq0, qbar), kbar)))"),
    (ADJ, "adj step 8 sigma-tilde, q-bar K", '"att.smax", add_up(mul_up(qbar, Kmax),', '"att.smax", add_up(0.9 * mul_up(qbar, Kmax),'),
    (ADJ, "adj step 8 sigma-tilde, Q k-bar", "mul_up(Qh, kbar)))", "0.9 * mul_up(Qh, kbar)))"),
    (ADJ, "adj step 8 t1 (r + eta_p) sigma_V delta", '"att.t1", mul_up(', '"att.t1", 0.9 * mul_up('),
    (ADJ, "adj step 8 t2 r^2", '"att.t2", mul_up(add_up(mul_up(r, r),', '"att.t2", mul_up(add_up(0.9 * mul_up(r, r),'),
    (ADJ, "adj step 8 t2 2 tau", "mul_up(tau, 2.0)), add_up(ap.omega, ev0)))", "0.9 * mul_up(tau, 2.0)), add_up(ap.omega, ev0)))"),
    (ADJ, "adj step 8 t2 omega + eps_v0", "mul_up(tau, 2.0)), add_up(ap.omega, ev0)))", "mul_up(tau, 2.0)), 0.9 * add_up(ap.omega, ev0)))"),
    (ADJ, "adj step 8 t3", '"att.t3", mul_up(', '"att.t3", 0.9 * mul_up('),
    (ADJ, "adj step 8 t3 r0 + eta_p", "add_up(2.0, P), add_up(rl, eta))", "add_up(2.0, P), 0.9 * add_up(rl, eta))"),
    (ADJ, "adj step 8 t4", '"att.t4", mul_up(', '"att.t4", 0.9 * mul_up('),
    (ADJ, "adj step 8 sigma_O", '"att.rho", mul_up(norm_up(rho_h.transpose(0, 2, 1)), lay.o.sigma))',
     '"att.rho", 0.9 * mul_up(norm_up(rho_h.transpose(0, 2, 1)), lay.o.sigma))'),
    (ADJ, "adj step 9 A = iota |g| (1 + R_Pi^2)", "return add_up(1.0, mul_up(net.r_pi, net.r_pi))",
     "return 0.9 * add_up(1.0, mul_up(net.r_pi, net.r_pi))"),
    (ADJ, "adj step 9 ff A", '"ff.A", mul_up(', '"ff.A", 0.9 * mul_up('),
    (ADJ, "adj step 9 ff gain", "gain = add_up(res, mul_up(mul_up(b_in.fro, d_inf), b_out.fro))",
     "gain = add_up(res, 0.9 * mul_up(mul_up(b_in.fro, d_inf), b_out.fro))"),
    (ADJ, "adj step 9 gated gain", "gain = add_up(res, mul_up(bD.fro,", "gain = add_up(res, 0.9 * mul_up(bD.fro,"),
    (ADJ, "adj step 9 ff depth", "k = 2 * N + F + 5", "k = int(0.9 * (2 * N + F + 5))"),
    (ADJ, "adj step 9 gated depth", "k = 2 * N + 2 * F + 6", "k = int(0.9 * (2 * N + 2 * F + 6))"),
    (ADJ, "adj step 9 ff S", '"ff.S", sum_up(mul_up(A, gain)))', '"ff.S", 0.9 * sum_up(mul_up(A, gain)))'),
    (ADJ, "adj step 9 ff B", '"ff.B", add_up(mul_up(gamma_up(k), S),', '"ff.B", add_up(0.9 * mul_up(gamma_up(k), S),'),
    (ADJ, "adj step 9 att A", '"att.A", mul_up(', '"att.A", 0.9 * mul_up('),
    (ADJ, "adj step 9 att rotation sqrt2 rho_R", "rot = up(_SQRT2 * net.rho_R)", "rot = 0.9 * up(_SQRT2 * net.rho_R)"),
    (ADJ, "adj step 9 att score path", "score = mul_up(mul_up(mul_up(rot,", "score = 0.9 * mul_up(mul_up(mul_up(rot,"),
    (ADJ, "adj step 9 att value path", "add_up(mul_up(_head_fros(lay.v, grp), P), score))", "add_up(0.9 * mul_up(_head_fros(lay.v, grp), P), score))"),
    (ADJ, "adj step 9 att phi_O", "per_head = mul_up(np.array(back.o_fro)", "per_head = 0.9 * mul_up(np.array(back.o_fro)"),
    (ADJ, "adj step 9 att depth", "k = 2 * N + 2 * T + dv + (H * d + G * d + G * dv + 1) + H + 10",
     "k = int(0.9 * (2 * N + 2 * T + dv + (H * d + G * d + G * dv + 1) + H + 10))"),
    (ADJ, "adj step 9 att S", '"att.S", sum_up(mul_up(A, gain)))', '"att.S", 0.9 * sum_up(mul_up(A, gain)))'),
    (ADJ, "adj step 9 att B", '"att.B", add_up(mul_up(gamma_up(k), S),', '"att.B", add_up(0.9 * mul_up(gamma_up(k), S),'),
    (ADJ, "adj step 9 2^-700", "BACKWARD_TINY = 2.0**-700\n", "BACKWARD_TINY = 0.9 * 2.0**-700\n"),
    (ADJ, "adj step 10 P sigma_V delta", "head = add_up(mul_up(mul_up(P, _head_sigmas(lay.v, lay.group)), dmax),",
     "head = add_up(0.9 * mul_up(mul_up(P, _head_sigmas(lay.v, lay.group)), dmax),"),
    (ADJ, "adj step 10 sqrt(P W)", "add_up(sqrt_up(mul_up(P, a.W)),", "add_up(0.9 * sqrt_up(mul_up(P, a.W)),"),
    (ADJ, "adj step 10 eta_p P |h|", "mul_up(mul_up(a.eta_p, P), ap.Hn))))", "0.9 * mul_up(mul_up(a.eta_p, P), ap.Hn))))"),
    (ADJ, "adj step 10 sigma_O", "jac = mul_up(norm_up(head.transpose(0, 2, 1)), lay.o.sigma)",
     "jac = 0.9 * mul_up(norm_up(head.transpose(0, 2, 1)), lay.o.sigma)"),
    (ADJ, "adj step 10 residual delta", "jac = add_up(jac, a.dlt_q)", "jac = add_up(jac, 0.9 * a.dlt_q)"),
    (ADJ, "adj step 10 iota |J Delta|", '"att.lin", add_up(mul_up(iota, jac), rho, eps))', '"att.lin", add_up(0.9 * mul_up(iota, jac), rho, eps))'),
    (ADJ, "adj step 10 rho + eps", '"att.lin", add_up(mul_up(iota, jac), rho, eps))', '"att.lin", add_up(mul_up(iota, jac), 0.9 * rho, eps))'),
    (ADJ, "adj step 1 ff |g| (eps + rho)", '"ff.terms", sum_up(mul_up(ng, add_up(bd.eps, bd.rho))))',
     '"ff.terms", sum_up(mul_up(ng, add_up(0.9 * bd.eps, bd.rho))))'),
    (ADJ, "adj step 1 ff |g| rho", '"ff.terms", sum_up(mul_up(ng, add_up(bd.eps, bd.rho))))',
     '"ff.terms", sum_up(mul_up(ng, add_up(bd.eps, 0.9 * bd.rho))))'),
    (ADJ, "adj step 1 att |g| eps", '"att.terms", sum_up(mul_up(ng, add_up(bd.eps, bd.rho))))',
     '"att.terms", sum_up(mul_up(ng, add_up(0.9 * bd.eps, bd.rho))))'),
    (ADJ, "adj step 1 att |g| rho", '"att.terms", sum_up(mul_up(ng, add_up(bd.eps, bd.rho))))',
     '"att.terms", sum_up(mul_up(ng, add_up(bd.eps, 0.9 * bd.rho))))'),
    (ADJ, "adj step 1 B max delta", "mul_up(bound, delta.max(axis=1))))", "0.9 * mul_up(bound, delta.max(axis=1))))"),
    (ADJ, "adj step 1 cut |g| delta", "cand = _rec(tr, key, add_up(acc, sum_up(mul_up(ng, delta))))",
     "cand = _rec(tr, key, add_up(acc, 0.9 * sum_up(mul_up(ng, delta))))"),
    (ADJ, "adj step 1 read-out rounding", '"out.acc", add_up(mul_up(fin.rounding, net.readout_norms[c]), TINY))',
     '"out.acc", add_up(0.9 * mul_up(fin.rounding, net.readout_norms[c]), TINY))'),
    (ADJ, "adj step 1 out tau", '"out.acc", add_up(mul_up(fin.rounding, net.readout_norms[c]), TINY))',
     '"out.acc", add_up(mul_up(fin.rounding, net.readout_norms[c]), 0.9 * TINY))'),
    (NET, "adj c_Pi = 4 e_Pi + tau", "return float_up(4 * arb(self.e_pi) + pow2(-1000))", "return 0.9 * float_up(4 * arb(self.e_pi) + pow2(-1000))"),
    (NET, "adj ||W_O^(h)||_F", "o_fro = tuple(float_up(fro_upper(", "o_fro = tuple(0.9 * float_up(fro_upper("),
    (NET, "adj phi_W = ||W||_F", "float_up(gamma_arb(w.shape[0]) * frob), float_up(frob))", "float_up(gamma_arb(w.shape[0]) * frob), 0.9 * float_up(frob))"),
    (NET, "adj ||K_hat||_F", "kf = float_up(fro_upper(K))", "kf = 0.9 * float_up(fro_upper(K))"),
    (NET, "adj ||K - K_hat||_F", "ke = float_up((g + (1 + g) * g", "ke = 0.9 * float_up((g + (1 + g) * g"),
    (SIG, "adj L_2 (sweep)", "            top = arb(v.upper())\n", "            top = 0.9 * arb(v.upper())\n"),
    (SIG, "adj L_2 tail (GELU)", "return t * t * (-t * t / 2).exp()", "return 0.9 * t * t * (-t * t / 2).exp()"),
    (SIG, "adj L_2 tail (SiLU)", "return (-t).exp() * (t + 2)", "return 0.9 * (-t).exp() * (t + 2)"),
    (SIG, "adj L_2 tail (tanh-GELU)", "return (-C1 * t).exp() * (2 * y1", "return 0.9 * (-C1 * t).exp() * (2 * y1"),
    (SIG, "adj e_d GELU E_Phi", 'e = e_phi + (k_psi + u * (1 + k_psi)) / 4 +', 'e = 0.9 * e_phi + (k_psi + u * (1 + k_psi)) / 4 +'),
    (SIG, "adj e_d GELU psi", 'e = e_phi + (k_psi + u * (1 + k_psi)) / 4 +', 'e = e_phi + 0.9 * (k_psi + u * (1 + k_psi)) / 4 +'),
    (SIG, "adj e_d GELU sum 1.2u", '/ 4 + u * arb("1.2") + (tm + 2) * tiny', '/ 4 + 0.9 * u * arb("1.2") + (tm + 2) * tiny'),
    (SIG, "adj e_d SiLU e_s", "e = e_s + tm * e_m + u * tm", "e = 0.9 * e_s + tm * e_m + u * tm"),
    (SIG, "adj e_d SiLU t e_m", "e = e_s + tm * e_m + u * tm", "e = e_s + 0.9 * tm * e_m + u * tm"),
    (SIG, "adj e_d SiLU e_m", "e_m = 2 * e_s + u + u * (arb(1) / 4 + 2 * e_s + u) + tiny",
     "e_m = 0.9 * (2 * e_s + u + u * (arb(1) / 4 + 2 * e_s + u) + tiny)"),
    (SIG, "adj e_d SiLU product rounding", "+ u * tm * (arb(1) / 4 + e_m) + u * arb", "+ 0.9 * u * tm * (arb(1) / 4 + e_m) + u * arb"),
    (SIG, "adj e_d tanh-GELU e_0", "e0 = e_s + e_y / 4", "e0 = 0.9 * (e_s + e_y / 4)"),
    (SIG, "adj e_d tanh-GELU e_m", "e_m = 2 * e0 + u + u * (arb(1) / 4 + 2 * e0 + u) + tiny",
     "e_m = 0.9 * (2 * e0 + u + u * (arb(1) / 4 + 2 * e0 + u) + tiny)"),
    (SIG, "adj e_d tanh-GELU kappa_p", "k_p = (1 + e_c1) * (1 + e_c3) * (1 + u) ** 4 * (1 + pow2(-1070)) - 1",
     "k_p = 0.9 * ((1 + e_c1) * (1 + e_c3) * (1 + u) ** 4 * (1 + pow2(-1070)) - 1)"),
    (SIG, "adj e_d tanh-GELU t (...)", "e = (e0 + tm * (e_m * (1 + k_p) * yp", "e = (e0 + 0.9 * tm * (e_m * (1 + k_p) * yp"),
]

ADJOINT_TESTS = ["tests/certified/test_interval_adjoint_terms.py", "tests/certified/test_interval_adjoint.py"]

TESTS = ["tests/certified/test_interval_terms.py"]

FINGERPRINT = """
import hashlib, numpy as np
from tests.certified.mp_network import random_weights
from specbound.certified.interval_adjoint import refined_pass
from specbound.certified.interval_forward import prepare
h = hashlib.sha256()
for i, (v, a) in enumerate([("plain", "gelu"), ("residual", "relu"), ("causal", "silu"), ("ls", "silu"),
                            ("ls_residual", "gelu_tanh"), ("residual", "gelu")]):
    for qk, scale in ((1.0, 1.0), (40.0, 1.0), (1e-160, 1e-150), (1.0, 0.0)):
        rng = np.random.default_rng(i)
        w = random_weights(rng, variant=v, activation=a, qk=qk, T=3, L=2)
        X = rng.standard_normal((4, 3, 4)) * scale
        for ip in (prepare(w), refined_pass(w, 0.0)):
            f, rad, ok = ip.rows(X)
            h.update(f.tobytes()); h.update(rad.tobytes()); h.update(ok.tobytes())
print(h.hexdigest())
"""


def _env() -> dict:
    return dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def fingerprint() -> str:
    """A hash of the pass's outputs and radii on fixed models and inputs (zero, tiny and huge scores)."""
    proc = subprocess.run([sys.executable, "-c", FINGERPRINT], cwd=ROOT, env=_env(), capture_output=True, text=True)
    if proc.returncode:
        return "failed: " + proc.stderr[-200:]
    return proc.stdout.strip()


def run_one(path: Path, old: str, new: str, reference: str | None = None, tests: list[str] = TESTS) -> bool | str:
    """True when the tests fail on the mutant (caught); else, with ``reference``, whether the outputs are
    bit-identical to the unmutated pass ("equivalent") or not ("survived")."""
    original = path.read_text(encoding="utf-8")
    if original.count(old) != 1:
        raise SystemExit(f"{path}: the text to mutate occurs {original.count(old)} times: {old[:60]!r}")
    try:
        path.write_text(original.replace(old, new), encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                              cwd=ROOT, env=_env(), capture_output=True, text=True)
        if proc.returncode != 0:
            return True
        if reference is not None:
            return "equivalent" if fingerprint() == reference else "survived"
        return False
    finally:
        path.write_text(original, encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run only mutants whose term contains this text")
    ap.add_argument("--group", choices=("forward", "adjoint", "all"), default="all")
    args = ap.parse_args()
    survivors = []
    began = time.perf_counter()
    reference = fingerprint()
    equivalent = {**EQUIVALENT, **ADJOINT_EQUIVALENT}
    groups = {"forward": [(m, TESTS) for m in MUTANTS], "adjoint": [(m, ADJOINT_TESTS) for m in ADJOINT_MUTANTS]}
    chosen = groups["forward"] + groups["adjoint"] if args.group == "all" else groups[args.group]
    for (file, term, old, new), tests in chosen:
        if args.only and args.only not in term:
            continue
        outcome = run_one(ROOT / file, old, new, reference if term in equivalent else None, tests)
        if outcome is True:
            print(f"caught     {file:32s} {term}", flush=True)
        elif outcome == "equivalent":
            print(f"equivalent {file:32s} {term}: outputs bit-identical ({equivalent[term]})", flush=True)
        else:
            print(f"SURVIVED   {file:32s} {term}", flush=True)
            survivors.append(term)
    print(f"{len(survivors)} survivor(s) in {time.perf_counter() - began:.0f} s")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())

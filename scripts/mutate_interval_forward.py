"""Mutation probe of the per-sample pass (proofs_notes/interval_forward.md): every error term shrunk by 10%.

For each mutant the source file is rewritten with one term multiplied by 0.9 (or, for a lower bound, its
reciprocal 1/0.9), the pinning tests are run, and the file is restored.  A mutant is *caught* when the
tests fail.  Prints one line per mutant and exits 1 if any survives.

    .venv/bin/python scripts/mutate_interval_forward.py [--only SUBSTRING]

Runs about one minute per 10 mutants on one core (each mutant runs tests/certified/test_interval_terms.py).
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
    (IV, "step 2 delta sigma", 'lip = _rec(tr, name + ".lip", mul_up(delta[..., None], sig))',
     'lip = _rec(tr, name + ".lip", 0.9 * mul_up(delta[..., None], sig))'),
    (IV, "step 2 gamma_n ||W|| N(m)", 'rounding = _rec(tr, name + ".rnd", mul_up(norms[..., None], rnd))',
     'rounding = _rec(tr, name + ".rnd", 0.9 * mul_up(norms[..., None], rnd))'),
    (IV, "step 2 tau", "    return _rec(tr, name, add_up(lip, rounding, TINY))\n\n\n# ----",
     "    return _rec(tr, name, add_up(lip, rounding, 0.9 * TINY))\n\n\n# ----"),
    (IV, "step 9 eps / max(1, N - eps)", 'lip = _rec(tr, name + ".lip", div_up(eps, np.maximum(sub_down(nu_lo, eps), 1.0)))',
     'lip = _rec(tr, name + ".lip", 0.9 * div_up(eps, np.maximum(sub_down(nu_lo, eps), 1.0)))'),
    (IV, "step 9 e_Pi min(1, N)", 'rounding = _rec(tr, name + ".rnd", mul_up(net.e_pi, np.minimum(nu_hi, 1.0)))',
     'rounding = _rec(tr, name + ".rnd", 0.9 * mul_up(net.e_pi, np.minimum(nu_hi, 1.0)))'),
    (IV, "step 9 tau", "    return y, _rec(tr, name, add_up(lip, rounding, TINY))",
     "    return y, _rec(tr, name, add_up(lip, rounding, 0.9 * TINY))"),
    (IV, "step 3 rho_R eps", 'lip = _rec(tr, name + ".rot_lip", mul_up(eps, net.rho_R))',
     'lip = _rec(tr, name + ".rot_lip", 0.9 * mul_up(eps, net.rho_R))'),
    (IV, "step 3 rounding", 'rounding = _rec(tr, name + ".rot_rnd", mul_up(mul_up(norm_up(x), _ROT), net.rho_R))',
     'rounding = _rec(tr, name + ".rot_rnd", 0.9 * mul_up(mul_up(norm_up(x), _ROT), net.rho_R))'),
    (IV, "step 3 tau", 'return out, _rec(tr, name + ".rot", add_up(lip, rounding, TINY))',
     'return out, _rec(tr, name + ".rot", add_up(lip, rounding, 0.9 * TINY))'),
    (IV, "step 4 r, query term", 'r1 = _rec(tr, "r.1", mul_up(eq, m1))', 'r1 = _rec(tr, "r.1", 0.9 * mul_up(eq, m1))'),
    (IV, "step 4 r, key term", 'r2 = _rec(tr, "r.2", mul_up(Qh, m2))', 'r2 = _rec(tr, "r.2", 0.9 * mul_up(Qh, m2))'),
    (IV, "step 4 r, K + eps_k", "m1 = _keymax(add_up(Kh, ek), causal, Tq)", "m1 = _keymax(0.9 * add_up(Kh, ek), causal, Tq)"),
    (IV, "step 4 r, gamma_d K", "m2 = _keymax(add_up(ek, mul_up(Kh, g_d)), causal, Tq)",
     "m2 = _keymax(add_up(ek, 0.9 * mul_up(Kh, g_d)), causal, Tq)"),
    (IV, "step 4 r, sum", 'r = _rec(tr, "r", add_up(r1, r2, TINY))', 'r = _rec(tr, "r", 0.9 * add_up(r1, r2, TINY))'),
    (IV, "step 4 r, tau", 'r = _rec(tr, "r", add_up(r1, r2, TINY))', 'r = _rec(tr, "r", add_up(r1, r2, 0.9 * TINY))'),
    (IV, "step 4 S", 'S = _rec(tr, "S", add_up(mul_up(mul_up(Qh, one_g_d), mK), TINY))',
     'S = _rec(tr, "S", 0.9 * add_up(mul_up(mul_up(Qh, one_g_d), mK), TINY))'),
    (IV, "step 4 S tau", 'S = _rec(tr, "S", add_up(mul_up(mul_up(Qh, one_g_d), mK), TINY))',
     'S = _rec(tr, "S", add_up(mul_up(mul_up(Qh, one_g_d), mK), 0.9 * TINY))'),
    (IV, "step 5 eta_1, shift term", "add_up(mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), eta_exp)",
     "add_up(0.9 * mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), eta_exp)"),
    (IV, "step 5 eta_1, eta_exp", "add_up(mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), eta_exp)",
     "add_up(mul_up(div_up(a_, sub_down(1.0, a_)), up(1.0 + eta_exp)), 0.9 * eta_exp)"),
    (IV, "step 5 beta", 'beta = _rec(tr, "beta", add_up(eta1, mul_up(add_up(1.0, eta1), g_T), T_alpha))',
     'beta = _rec(tr, "beta", 0.9 * add_up(eta1, mul_up(add_up(1.0, eta1), g_T), T_alpha))'),
    (IV, "step 5 beta, T alpha'", 'beta = _rec(tr, "beta", add_up(eta1, mul_up(add_up(1.0, eta1), g_T), T_alpha))',
     'beta = _rec(tr, "beta", add_up(eta1, mul_up(add_up(1.0, eta1), g_T), 0.9 * T_alpha))'),
    (IV, "step 5 eta_p", 'eta_p = _rec(tr, "eta_p", div_up(', 'eta_p = _rec(tr, "eta_p", 0.9 * div_up('),
    (IV, "step 5 eta_p, T alpha'", "mul_up(add_up(1.0, eta1), _U), beta, T_alpha),", "mul_up(add_up(1.0, eta1), _U), beta, 0.9 * T_alpha),"),
    (IV, "step 5 lambda", 'lam = _rec(tr, "lam", div_up(', 'lam = _rec(tr, "lam", 0.9 * div_up('),
    (IV, "step 6 (a)", 'ha = _rec(tr, "h.a", np.broadcast_to(mEv, r.shape))', 'ha = _rec(tr, "h.a", 0.9 * np.broadcast_to(mEv, r.shape))'),
    (IV, "step 6 (b1)", 'b1 = _rec(tr, "h.b1", mul_up(r, omega))', 'b1 = _rec(tr, "h.b1", 0.9 * mul_up(r, omega))'),
    (IV, "step 6 omega", "return norm_up(upn(upn(hi - lo) * 0.5))", "return 0.9 * norm_up(upn(upn(hi - lo) * 0.5))"),
    (IV, "step 6 (b2)", "mul_up(div_up(x2r, sub_down(1.0, x2r)), sqrt_up(W))", "0.9 * mul_up(div_up(x2r, sub_down(1.0, x2r)), sqrt_up(W))"),
    (IV, "step 6 W", 'W = _rec(tr, "W", mul_up(lam,', 'W = _rec(tr, "W", 0.9 * mul_up(lam,'),
    (IV, "step 6 W, A column", '"W.A", mul_up(add_up(A, TINY), inv_g_T))', '"W.A", 0.9 * mul_up(add_up(A, TINY), inv_g_T))'),
    (IV, "step 6 W, ||h||^2 (lower bound)", '"W.h2", down(down(sub_down(1.0, eta_p) * Hlo) * Hlo))',
     '"W.h2", down(down(sub_down(1.0, eta_p) * Hlo) * Hlo) / 0.9)'),
    (IV, "step 6 W, alpha' tail", '"W.tail", mul_up(T_alpha,', '"W.tail", 0.9 * mul_up(T_alpha,'),
    (IV, "step 6 W, 2 H e_g", '"W.he", mul_up(mul_up(Hn, e_g), 2.0))', '"W.he", 0.9 * mul_up(mul_up(Hn, e_g), 2.0))'),
    (IV, "step 6 (c)", 'hc = _rec(tr, "h.c", mul_up(eta_p, mV))', 'hc = _rec(tr, "h.c", 0.9 * mul_up(eta_p, mV))'),
    (IV, "step 6 (d)", 'e_g = _rec(tr, "h.d", add_up(mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), TINY))',
     'e_g = _rec(tr, "h.d", add_up(0.9 * mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), TINY))'),
    (IV, "step 6 (d) tau", 'e_g = _rec(tr, "h.d", add_up(mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), TINY))',
     'e_g = _rec(tr, "h.d", add_up(mul_up(mul_up(add_up(1.0, eta_p), g_T), mV), 0.9 * TINY))'),
    (IV, "step 6 max V", "mV, mEv = _keymax(Kh, causal, Tq), _keymax(Vh, causal, Tq)",
     "mV, mEv = _keymax(Kh, causal, Tq), 0.9 * _keymax(Vh, causal, Tq)"),
    (IV, "step 6 sum", "add_up(ha, np.minimum(b1, b2), hc, e_g)", "0.9 * add_up(ha, np.minimum(b1, b2), hc, e_g)"),
    (IV, "step 7 concatenated radii", "eps_cat = norm_up(eps_h.transpose(0, 2, 1))", "eps_cat = 0.9 * norm_up(eps_h.transpose(0, 2, 1))"),
    (IV, "step 8 u' N", 'rounding = _rec(tr, name + ".rnd", mul_up(ns, _U1))', 'rounding = _rec(tr, name + ".rnd", 0.9 * mul_up(ns, _U1))'),
    (IV, "step 8 sum", "return s, _rec(tr, name, add_up(eps_a, delta, rounding))", "return s, _rec(tr, name, 0.9 * add_up(eps_a, delta, rounding))"),
    (IV, "step 10 kappa_1 N", 'k1 = _rec(tr, "act.1", mul_up(nt, act.kappa_1))', 'k1 = _rec(tr, "act.1", 0.9 * mul_up(nt, act.kappa_1))'),
    (IV, "step 10 kappa_2 N Y", 'k2 = _rec(tr, "act.2", mul_up(mul_up(nt, np.abs(y).max(axis=-1)), act.kappa_2))',
     'k2 = _rec(tr, "act.2", 0.9 * mul_up(mul_up(nt, np.abs(y).max(axis=-1)), act.kappa_2))'),
    (IV, "step 10 sqrt(F) tau_phi", "tiny = mul_up(up(math.sqrt(F)), act.tau)", "tiny = 0.9 * mul_up(up(math.sqrt(F)), act.tau)"),
    (IV, "step 11 L_phi eps_u", 'e_g = _rec(tr, "eps_g", add_up(mul_up(e_u, lay.act.L_phi), e_act))',
     'e_g = _rec(tr, "eps_g", add_up(0.9 * mul_up(e_u, lay.act.L_phi), e_act))'),
    (IV, "step 11 activation error", 'e_g = _rec(tr, "eps_g", add_up(mul_up(e_u, lay.act.L_phi), e_act))',
     'e_g = _rec(tr, "eps_g", add_up(mul_up(e_u, lay.act.L_phi), 0.9 * e_act))'),
    (IV, "step 11 gated (L eps_a + e_phi)(B + eps_b)", 'h1 = _rec(tr, "hid.1", mul_up(', 'h1 = _rec(tr, "hid.1", 0.9 * mul_up('),
    (IV, "step 11 gated G eps_b", 'h2 = _rec(tr, "hid.2", mul_up(g_inf, e_b))', 'h2 = _rec(tr, "hid.2", 0.9 * mul_up(g_inf, e_b))'),
    (IV, "step 11 gated u' N(h)", 'h3 = _rec(tr, "hid.3", mul_up(nh, _U1))', 'h3 = _rec(tr, "hid.3", 0.9 * mul_up(nh, _U1))'),
    (IV, "step 11 gated tau", 'e_h = _rec(tr, "eps_hid", add_up(h1, h2, h3, TINY))', 'e_h = _rec(tr, "eps_hid", add_up(h1, h2, h3, 0.9 * TINY))'),
    (IV, "step 13 gamma_N N", 'rounding = _rec(tr, "rnd", mul_up(nr, gamma_up(N)))', 'rounding = _rec(tr, "rnd", 0.9 * mul_up(nr, gamma_up(N)))'),
    (IV, "step 13 (delta + rnd) ||w||", "rad = _rec(tr, \"rad\", add_up(mul_up(", "rad = _rec(tr, \"rad\", add_up(0.9 * mul_up("),
    (IV, "step 12 input delta", "delta0 = add_up(mul_up(np.minimum(norm_up(r), 1.0), net.e_pi), TINY)",
     "delta0 = add_up(0.9 * mul_up(np.minimum(norm_up(r), 1.0), net.e_pi), TINY)"),
    (IV, "constant tau", "TINY = 2.0**-1000\n", "TINY = 0.9 * 2.0**-1000\n"),
    (IV, "constant u'", "_U1 = 2.0**-53 + 2.0**-105\n", "_U1 = 0.9 * (2.0**-53 + 2.0**-105)\n"),
    (IV, "constant 2^-51 (rotation)", "_ROT = 2.0**-51\n", "_ROT = 0.9 * 2.0**-51\n"),
    (IV, "constant T alpha'", "float(T) * 2.0**SOFTMAX_TINY_EXP", "0.9 * float(T) * 2.0**SOFTMAX_TINY_EXP"),
    (IV, "constant gamma_T", "return (float_up(exp_error_bound()), gamma_up(T),", "return (float_up(exp_error_bound()), 0.9 * gamma_up(T),"),
    (IV, "constant 1 + gamma_d", "float_up(1 + gamma_arb(d)),", "0.9 * float_up(1 + gamma_arb(d)),"),
    (IV, "constant 1/(1 - gamma_T)", "float_up(1 / (1 - gamma_arb(T))), gamma_up(d))", "0.9 * float_up(1 / (1 - gamma_arb(T))), gamma_up(d))"),
    (IV, "constant gamma_d", "float_up(1 / (1 - gamma_arb(T))), gamma_up(d))", "float_up(1 / (1 - gamma_arb(T))), 0.9 * gamma_up(d))"),
    (IV, "constant eta_exp", "return (float_up(exp_error_bound()),", "return (0.9 * float_up(exp_error_bound()),"),
    (NET, "sigma_W", "return Block(float_up(sigma), float_up(gamma_arb(w.shape[0]) * frob))",
     "return Block(0.9 * float_up(sigma), float_up(gamma_arb(w.shape[0]) * frob))"),
    (NET, "g_W = gamma_n ||W||_F", "return Block(float_up(sigma), float_up(gamma_arb(w.shape[0]) * frob))",
     "return Block(float_up(sigma), 0.9 * float_up(gamma_arb(w.shape[0]) * frob))"),
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

TESTS = ["tests/certified/test_interval_terms.py"]

FINGERPRINT = """
import hashlib, numpy as np
from tests.certified.mp_network import random_weights
from specbound.certified.interval_forward import prepare
h = hashlib.sha256()
for i, (v, a) in enumerate([("plain", "gelu"), ("residual", "relu"), ("causal", "silu"), ("ls", "silu"),
                            ("ls_residual", "gelu_tanh"), ("residual", "gelu")]):
    for qk, scale in ((1.0, 1.0), (40.0, 1.0), (1e-160, 1e-150), (1.0, 0.0)):
        rng = np.random.default_rng(i)
        w = random_weights(rng, variant=v, activation=a, qk=qk, T=3, L=2)
        f, rad, ok = prepare(w).rows(rng.standard_normal((4, 3, 4)) * scale)
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


def run_one(path: Path, old: str, new: str, reference: str | None = None) -> bool | str:
    """True when the tests fail on the mutant (caught); else, with ``reference``, whether the outputs are
    bit-identical to the unmutated pass ("equivalent") or not ("survived")."""
    original = path.read_text(encoding="utf-8")
    if original.count(old) != 1:
        raise SystemExit(f"{path}: the text to mutate occurs {original.count(old)} times: {old[:60]!r}")
    try:
        path.write_text(original.replace(old, new), encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS],
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
    args = ap.parse_args()
    survivors = []
    began = time.perf_counter()
    reference = fingerprint()
    for file, term, old, new in MUTANTS:
        if args.only and args.only not in term:
            continue
        outcome = run_one(ROOT / file, old, new, reference if term in EQUIVALENT else None)
        if outcome is True:
            print(f"caught     {file:32s} {term}", flush=True)
        elif outcome == "equivalent":
            print(f"equivalent {file:32s} {term}: outputs bit-identical ({EQUIVALENT[term]})", flush=True)
        else:
            print(f"SURVIVED   {file:32s} {term}", flush=True)
            survivors.append(term)
    print(f"{len(survivors)} survivor(s) in {time.perf_counter() - began:.0f} s")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())

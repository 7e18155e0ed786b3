"""The Occam route on tiny networks, recomputed independently of the derivation.

1. N = 2, L = H = 1, d_ff = 2: the allocation, the scales, H_theta(gamma) and the mass C evaluated
   through the theorem's fields in Arb, against a hand computation in mpmath typed from
   proofs_notes/occam_route.md (and theory.md sections 2, 6 for the sensitivities and the prior).
2. N = 1 (every matrix a scalar): the cover itself, built explicitly at the route's scales (a grid of
   centres per weight), is counted (log of the count <= the derivation's H_theta) and checked by brute
   force: every sampled network of the class is within gamma/2 of its centre network at every sampled
   input, through a forward pass of the analysis model written here in numpy.
3. The bound from its parts: C of 1, K^ from certified margin enclosures (certified/margins.py
   count_upper), BinInv from certified/binomial.py, against a float64 recomputation from the definition.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from flint import arb, fmpq

from specbound.certified.binomial import bininv_upper
from specbound.certified.margins import MarginEnclosures, count_upper, from_center_radius
from specbound.derivation import symbols as S
from specbound.derivation.backends import compile_expr
from specbound.derivation.routes import assemble_occam

DPS = 50


def _lphi():
    """L_phi of the exact GELU (gelu_constants.md): Phi(sqrt 2) + 1/(e sqrt pi) = (1 + erf 1)/2 + e^-1/sqrt(pi)."""
    return (1 + mpmath.erf(1)) / 2 + mpmath.exp(-1) / mpmath.sqrt(mpmath.pi)


def _lam(k: int):
    """lambda(k) = log(3 (|k|+1)(|k|+2) / 2) (posthoc_union.md)."""
    return mpmath.log(mpmath.mpf(3) * (abs(k) + 1) * (abs(k) + 2) / 2)


# ------------------------------------------------------------------------------- 1. H and C in Arb

C_RAD = {"A": fmpq(1, 2), "V": fmpq(1), "M_in": fmpq(2), "M_out": fmpq(1)}
#: (p, s, r_max, d, k_c, k_s) per matrix; N = 2, d_h = 1, d_ff = 2 (d_j = 4)
SPEC = {"A": (0, 1, 1, 4, -3, None), "V": (0, 1, 1, 4, 0, None), "M_in": (fmpq(1, 2), fmpq(3, 2), 2, 4, 3, 2),
        "M_out": (0, 2, 2, 4, 0, None)}
B_W, GAMMA, DELTA, WIDTH, K_W, K_GAMMA, M_GRID = fmpq(1), fmpq(1, 2), fmpq(1, 20), 2, 0, -1, 2
ROWS = COLS = 2  # every matrix 2 x 2: volumetric dimension 4 (proofs_notes/sharpenings.md S1)


def _hand_mass():
    """(H, C) by hand, 50 digits."""
    mp = mpmath
    c = {k: mp.mpf(int(v.p)) / int(v.q) for k, v in C_RAD.items()}
    Lphi = _lphi()
    sens = {"A": Lphi * c["V"] * c["M_in"] * c["M_out"], "V": Lphi * c["M_in"] * c["M_out"],
            "M_in": Lphi * c["M_out"], "M_out": c["M_in"]}  # C_sm = B_phi = 1, alpha = 1 (last layer)
    weights = {}
    for key, (p, s, r_max, d, _kc, _ks) in SPEC.items():
        # the rule: r_j d_j (rank cap at p > 0), at most the volumetric dimension m n
        weights[key] = min((min(s, r_max) if p == 0 else r_max) * d, ROWS * COLS)
    omega = sum(weights.values()) + WIDTH
    g, B = mp.mpf(1) / 2, mp.mpf(1)
    H = mp.mpf(0)
    for key, (p, s, r_max, d, _kc, _ks) in SPEC.items():
        share = mp.mpf(weights[key]) / omega
        eps = share * g / (2 * B * sens[key])  # eps_j = vartheta_j gamma / (2 B_w alpha gamma_j)
        volumetric = ROWS * COLS * mp.log(1 + 2 * c[key] / eps)
        if p == 0:
            H += min(min(s, r_max) * d * mp.log(1 + 4 * c[key] / eps), volumetric)
        else:
            pp, ss = mp.mpf(1) / 2, mp.mpf(3) / 2
            rank = min(max(0, int(mp.ceil(ss * (2 / eps) ** pp)) - 1), r_max)
            H += min(rank * d * mp.log(1 + 8 * c[key] / eps), volumetric)
    eps_w = mp.mpf(WIDTH) / omega * g / 2
    H += WIDTH * mp.log(1 + 2 * B / eps_w)
    Lam = _lam(K_W) + _lam(K_GAMMA)
    for key, (p, s, r_max, d, kc, ks) in SPEC.items():
        Lam += mp.log(2 * M_GRID + 1) + _lam(kc) + (mp.log(r_max + 1) if p == 0 else _lam(ks))
    return H, H + Lam + mp.log(20)


def _call(fn, values):
    return fn(*(values[a.name] for a in fn.args))


def _arb_mass():
    T = assemble_occam()
    f = {name: compile_expr(getattr(T, name), "arb") for name in (
        "kappa", "weight", "weight_rank", "Omega_total", "share", "share_readout", "entropy_matrix",
        "entropy_matrix_rank", "entropy_readout", "H_total", "lambda_matrix", "lambda_matrix_rank",
        "Lambda_total", "confidence_mass")}
    gam = {k: compile_expr(T.gamma[k], "arb") for k in C_RAD}
    radius = {"c_A": C_RAD["A"], "c_V": C_RAD["V"], "c_in": C_RAD["M_in"], "c_out": C_RAD["M_out"]}
    weights = {}
    for key, (p, s, r_max, d, _kc, _ks) in SPEC.items():
        weights[key] = _call(f["weight_rank"] if p == 0 else f["weight"],
                             {"s": s, "r_max": r_max, "d": d, "m": ROWS, "n_c": COLS})
    Omega = _call(f["Omega_total"], {"Omega_sum": sum(weights.values(), arb(0)), "N": WIDTH})
    H_sum, Lam_sum = arb(0), arb(0)
    for key, (p, s, r_max, d, kc, ks) in SPEC.items():
        kap = _call(f["kappa"], {"B_w": B_W, "alpha": 1, "gamma": _call(gam[key], radius), "gamma_m": GAMMA})
        share = _call(f["share"], {"omega": weights[key], "Omega": Omega})
        vals = {"s": s, "c": C_RAD[key], "p": p, "r_max": r_max, "d": d, "kappa": kap, "vartheta": share,
                "m": ROWS, "n_c": COLS}
        H_sum += _call(f["entropy_matrix_rank"] if p == 0 else f["entropy_matrix"], vals)
        Lam_sum += _call(f["lambda_matrix_rank"] if p == 0 else f["lambda_matrix"],
                         {"k_c": kc, "k_s": ks, "m_grid": M_GRID, "r_max": r_max})
    share_w = _call(f["share_readout"], {"N": WIDTH, "Omega": Omega})
    H = _call(f["H_total"], {"H_sum": H_sum, "N": WIDTH, "B_w": B_W, "gamma_m": GAMMA, "vartheta_w": share_w})
    Lam = _call(f["Lambda_total"], {"Lambda_sum": Lam_sum, "k_w": K_W, "k_gamma": K_GAMMA})
    C = _call(f["confidence_mass"], {"H_theta": H, "Lambda": Lam, "delta": DELTA})
    return H, C


def test_entropy_and_mass_of_a_tiny_network_match_a_hand_computation():
    with mpmath.workdps(DPS):
        H_ref, C_ref = _hand_mass()
        H, C = _arb_mass()
        for ball, ref in ((H, H_ref), (C, C_ref)):
            assert ball.rad() < 1e-12
            lo, hi = (mpmath.mpf(x.mid().str(60, radius=False)) for x in (ball.lower(), ball.upper()))
            assert lo - mpmath.mpf(10) ** -40 <= ref <= hi + mpmath.mpf(10) ** -40, (ball, ref)
    assert 50 < H_ref < 100  # every 2 x 2 matrix at its full cap takes the volumetric cover (dimension 4)


# ------------------------------------------------------------------------------- 2. the cover itself, N = 1

#: scalar radii (every matrix 1 x 1: rank 1, r_max 1, d_j = 2) and the read-out radius
SC = {"A": 0.5, "V": 1.0, "M_in": 2.0, "M_out": 1.0}
SB, SG = 1.0, 0.5  # B_w and the margin gamma


def _scalar_scales():
    """eps_j and eps_w by the rule, typed from occam_route.md: weights min(r_j d_j, m_j n_j) = min(2, 1) = 1
    (a scalar is at its full rank cap: the volumetric cover, sharpenings S1), read-out N = 1."""
    lphi = float(_lphi())
    sens = {"A": lphi * SC["V"] * SC["M_in"] * SC["M_out"], "V": lphi * SC["M_in"] * SC["M_out"],
            "M_in": lphi * SC["M_out"], "M_out": SC["M_in"]}
    omega = 4 * 1 + 1
    eps = {k: (1 / omega) * SG / (2 * SB * sens[k]) for k in SC}
    return eps, (1 / omega) * SG / 2


def _centres(c: float, e: float) -> np.ndarray:
    """An internal e-cover of [-c, c]: -c + e(2i + 1), i < ceil(c/e), the last one clipped to c."""
    return np.minimum(-c + e * (2 * np.arange(math.ceil(c / e)) + 1), c)


def _nearest(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    return centres[np.abs(x[:, None] - centres[None, :]).argmin(axis=1)]


_erf = np.frompyfunc(math.erf, 1, 1)


def _forward(a, v, m_in, m_out, w, X):
    """f(X) of the scalar analysis model (L = H = 1, N = 1) for P networks and Q inputs of length T:
    softmax(X a X^T) X v, Pi (clip to [-1, 1]), gelu(Y m_in) m_out, Pi, read-out w at the first token."""
    a, v, m_in, m_out, w = (np.asarray(t, dtype=np.float64)[:, None, None] for t in (a, v, m_in, m_out, w))
    scores = a[..., None] * X[None, :, :, None] * X[None, :, None, :]  # (P, Q, T, T)
    scores = scores - scores.max(axis=-1, keepdims=True)
    att = np.exp(scores)
    att /= att.sum(axis=-1, keepdims=True)
    y = np.clip((att * X[None, :, None, :]).sum(axis=-1) * v, -1, 1)  # (P, Q, T)
    z = y * m_in
    ff = 0.5 * z * (1 + _erf(z / math.sqrt(2)).astype(np.float64)) * m_out
    return w[..., 0] * np.clip(ff, -1, 1)[..., 0]  # (P, Q)


def test_scalar_scales_are_the_derivation_scales():
    T = assemble_occam()
    eps_fn = compile_expr(T.eps_matrix.xreplace({S.kappa: T.kappa}), "mpmath")
    gam = {k: compile_expr(T.gamma[k], "mpmath") for k in SC}
    eps, eps_w = _scalar_scales()
    radius = {"c_A": SC["A"], "c_V": SC["V"], "c_in": SC["M_in"], "c_out": SC["M_out"]}
    for k in SC:
        vals = {"vartheta": mpmath.mpf(1) / 5, "gamma_m": SG, "B_w": SB, "alpha": 1, "gamma": _call(gam[k], radius)}
        assert abs(float(_call(eps_fn, vals)) / eps[k] - 1) < 1e-12
    assert abs(float(T.eps_readout.subs({S.vartheta_w: mpmath.mpf(1) / 5, S.gamma_m: SG})) / eps_w - 1) < 1e-12


def test_explicit_cover_of_a_scalar_network_is_within_half_the_margin_and_no_larger_than_exp_H():
    eps, eps_w = _scalar_scales()
    centres = {k: _centres(SC[k], eps[k]) for k in SC}
    centres_w = _centres(SB, eps_w)
    log_count = sum(math.log(len(c)) for c in centres.values()) + math.log(len(centres_w))
    T = assemble_occam()
    H_rank = compile_expr(T.entropy_matrix_rank.xreplace({S.kappa: S.vartheta / (2 * S.eps)}), "mpmath")
    H = sum(float(_call(H_rank, {"s": 1, "r_max": 1, "d": 2, "m": 1, "n_c": 1, "c": SC[k], "epsilon": eps[k],
                                 "vartheta": 1}))
            for k in SC) + float(T.entropy_readout.subs({S.N: 1, S.B_w: SB, S.gamma_m: SG,
                                                         S.vartheta_w: sp.Rational(1, 5)}))
    assert log_count <= H

    rng = np.random.default_rng(23)
    P = 400
    weights = {k: rng.uniform(-SC[k], SC[k], P) for k in SC}
    w = rng.uniform(-SB, SB, P)
    for k in SC:  # corners and cell edges too
        weights[k][:40] = rng.choice([-SC[k], SC[k]], 40)
        weights[k][40:80] = _centres(SC[k], eps[k])[rng.integers(0, len(centres[k]), 40)] + eps[k] * rng.choice([-1, 1], 40)
        weights[k] = np.clip(weights[k], -SC[k], SC[k])
    w[:40] = rng.choice([-SB, SB], 40)
    worst = 0.0
    for length in (1, 2, 3, 5):
        X = rng.uniform(-1, 1, (60, length))
        X[:8] = rng.choice([-1.0, 1.0], (8, length))
        f = _forward(weights["A"], weights["V"], weights["M_in"], weights["M_out"], w, X)
        fc = _forward(*(_nearest(weights[k], centres[k]) for k in ("A", "V", "M_in", "M_out")),
                      _nearest(w, centres_w), X)
        worst = max(worst, float(np.abs(f - fc).max()))
    assert worst <= SG / 2 + 1e-12, worst
    assert worst > 0


@pytest.mark.parametrize("key", sorted(SC))
def test_scalar_centres_are_internal_and_cover_their_interval(key):
    eps, _ = _scalar_scales()
    c = _centres(SC[key], eps[key])
    grid = np.linspace(-SC[key], SC[key], 20001)
    assert np.abs(c).max() <= SC[key]
    assert np.abs(grid[:, None] - c[None, :]).min(axis=1).max() <= eps[key] * (1 + 1e-12)


# ------------------------------------------------------------------------------- 3. the bound from its parts


def _float_log_cdf(n: int, k: int, p: float) -> float:
    """log P(Bin(n, p) <= k) in float64 (log-sum-exp of the k + 1 terms)."""
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p)
            + (n - i) * math.log1p(-p) for i in range(k + 1)]
    top = max(logs)
    return top + math.log(sum(math.exp(v - top) for v in logs))


def _float_bininv(n: int, k: int, C: float) -> float:
    """BinInv(n, k, e^-C) recomputed in float64 from its definition, by bisection (no code under test)."""
    if k == n:
        return 1.0
    if k == 0:
        return -math.expm1(-C / n)
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if _float_log_cdf(n, k, mid) + C > 0 else (lo, mid)
    return lo


def _synthetic_margins(n: int, gamma: float, seed: int):
    """True margins, float centres within 0.03 of them, and certified enclosures (radius 0.05; the last
    three samples not certified)."""
    rng = np.random.default_rng(seed)
    true = rng.normal(2.0, 1.0, n)
    true[:12] = gamma - rng.uniform(0, 0.02, 12)  # at or just below the margin: must count
    noise = rng.uniform(-0.03, 0.03, n)
    radius = np.full(n, 0.05)
    enc = from_center_radius(true + noise, radius)
    lo, hi = enc.lower.copy(), enc.upper.copy()
    lo[-3:], hi[-3:] = -np.inf, np.inf  # three samples the pass could not certify
    return true, MarginEnclosures(lo, hi, "synthetic"), true + noise


def test_bound_from_its_parts_agrees_with_an_independent_float_recomputation():
    _H, C = _arb_mass()
    n, gamma = 5000, arb(GAMMA)
    true, enc, _centres_f = _synthetic_margins(n, float(GAMMA.p) / float(GAMMA.q), 5)
    K = count_upper(enc, gamma)
    assert K >= int(np.count_nonzero(true <= 0.5)) + 3  # C4: undecided samples count
    bound = bininv_upper(n, K, C)
    again = _float_bininv(n, K, float(C.upper().mid()))
    ours = float(bound.mid())
    assert again <= ours * (1 + 1e-12) and abs(ours / again - 1) < 0.01, (ours, again)


def test_a_float_margin_count_would_undercount():
    # the mutant "upper count replaced by a float count" (midpoints <= gamma) misses true margins <= gamma
    true, enc, centres_f = _synthetic_margins(5000, 0.5, 5)
    float_count = int(np.count_nonzero(centres_f <= 0.5))
    assert float_count < int(np.count_nonzero(true <= 0.5)) <= count_upper(enc, arb(0.5))

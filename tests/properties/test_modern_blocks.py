"""Modern blocks (register entries 24-30) against brute force: masked softmax, score bias, RoPE
heads, grouped keys, gated feed-forward, the SiLU constants and the LS network.

Right-hand sides are the derivation's expressions (``modern_constants``); left-hand sides the
numpy / mpmath models of ``modern_reference``.  ``target`` hill-climbs the ratio.
"""

from __future__ import annotations

import copy
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, target
from hypothesis import strategies as st

from specbound.derivation import REGISTRY

from . import modern_cases as mc
from . import modern_reference as mref
from .modern_constants import DERIVED, ModernConstants

RTOL = 1e-9


def ratio_ok(lhs: float, rhs: float) -> float:
    assert lhs <= rhs * (1 + RTOL), f"violated: {lhs!r} > {rhs!r}"
    return lhs / rhs if rhs > 0 else 0.0


# ------------------------------------------------------------------ sides (shared with mutations)


def masked_softmax_sides(case, K: ModernConstants):
    z, zp, mask = case
    lhs = np.abs(mref.masked_softmax(z, mask) - mref.masked_softmax(zp, mask)).sum()
    return lhs, K("masked_softmax", "C_sm") * float(np.max(np.abs(z - zp)))


def rope_sides(case, K: ModernConstants):
    which, X, X2, Q, Q2, Kk, K2, V, V2, R, masks, rho = case
    K = ModernConstants(K.activation, rho, K.symbols, K.scale, K.group)
    lhs = mref.norm2inf(mref.rope_head(X, Q, Kk, V, R, masks) - mref.rope_head(X2, Q2, K2, V2, R, masks))
    if which == "input":
        rhs = K("rope_attention", "head_summand", c_V=mref.op(V), c_Q=mref.op(Q), c_K=mref.op(Kk)) \
            * mref.norm2inf(X - X2)
    elif which == "Q":
        rhs = K("rope_attention", "Q", c_V=mref.op(V), c_K=mref.op(Kk)) * mref.op(Q - Q2)
    elif which == "K":
        rhs = K("rope_attention", "K", c_V=mref.op(V), c_Q=mref.op(Q)) * mref.op(Kk - K2)
    else:
        rhs = K("rope_attention", "V") * mref.op(V - V2)
    return lhs, rhs


def gqa_sides(case, K: ModernConstants):
    X, Qs, Ks, Ks2, Vs, group, R, masks, g, rho = case
    K = ModernConstants(K.activation, rho, K.symbols, K.scale, K.group)
    lhs = mref.norm2inf(mref.gqa_attention(X, Qs, Ks, Vs, group, R, masks)
                        - mref.gqa_attention(X, Qs, Ks2, Vs, group, R, masks))
    terms = [mref.op(Vs[h]) * mref.op(Qs[h]) for h in range(len(Qs)) if group[h] == g]
    sigma_g = sum(terms) if K.group == "sum" else max(terms)
    return lhs, K("shared_matrix_sensitivity", "K_group", Sigma_g=sigma_g) * mref.op(Ks[g] - Ks2[g])


def gated_sides(case, K: ModernConstants):
    which, act, Y, Y2, G, G2, U, U2, D, D2 = case
    K = ModernConstants(act, K.rho_R, K.symbols, K.scale, K.group)
    lhs = mref.norm2inf(mref.gated_ff(Y, G, U, D, act) - mref.gated_ff(Y2, G2, U2, D2, act))
    cG, cU, cD = mref.op(G), mref.op(U), mref.op(D)
    if which == "input":
        rhs = K("gated_ff", "input", c_G=cG, c_U=cU, c_D=cD) * mref.norm2inf(Y - Y2)
    elif which == "G":
        rhs = K("gated_ff", "G", c_U=cU, c_D=cD) * mref.op(G - G2)
    elif which == "U":
        rhs = K("gated_ff", "U", c_G=cG, c_D=cD) * mref.op(U - U2)
    else:
        rhs = K("gated_ff", "D", c_G=cG, c_U=cU) * mref.op(D - D2)
    return lhs, rhs


def violated(sides, case, K) -> bool:
    lhs, rhs = sides(case, K)
    return lhs > rhs * (1 + 1e-6)


# ------------------------------------------------------------------ 24 masked_softmax


@given(st.one_of(mc.masked_softmax_cases(), mc.masked_softmax_witnesses()))
def test_masked_softmax(case):
    target(ratio_ok(*masked_softmax_sides(case, DERIVED["silu"])))


def test_masked_softmax_is_tight_on_a_two_element_mask():
    z = np.array([7.0, 0.0, -3.0, 0.0, 2.0])
    zp = np.array([7.0, 1e-3, -3.0, -1e-3, 2.0])
    mask = np.array([False, True, False, True, False])
    lhs, rhs = masked_softmax_sides((z, zp, mask), DERIVED["silu"])
    assert 1 - 1e-6 <= lhs / rhs <= 1


@given(mc.seeds, st.integers(1, 6))
def test_causal_attention_rows_obey_masked_softmax(seed, T):
    rng = np.random.default_rng(seed)
    Z, dZ = rng.standard_normal((T, T)) * 3, rng.standard_normal((T, T)) * 0.3
    for t, mask in enumerate(mref.causal_masks(T)):
        lhs, rhs = masked_softmax_sides((Z[t], Z[t] + dZ[t], mask), DERIVED["silu"])
        ratio_ok(lhs, rhs)
        assert np.all(mref.masked_softmax(Z[t], mask)[t + 1:] == 0)


# ------------------------------------------------------------------ 25 score_bias


@given(mc.seeds, st.integers(1, 8))
def test_score_bias_leaves_differences_and_bounds_unchanged(seed, T):
    rng = np.random.default_rng(seed)
    z, dz = rng.standard_normal(T), 0.1 * rng.standard_normal(T)
    slope = rng.uniform(0.01, 1.0)
    b = -slope * np.abs(np.arange(T) - rng.integers(T))  # an ALiBi row
    mask = np.ones(T, bool)
    assert np.allclose((z + dz + b) - (z + b), dz, rtol=0, atol=1e-12)
    ratio_ok(*masked_softmax_sides((z + b, z + dz + b, mask), DERIVED["silu"]))
    # a -inf bias off M is the mask itself
    M = rng.random(T) < 0.5
    M[0] = True
    zb = np.where(M, z, -np.inf)
    e = np.exp(zb - zb[M].max())
    assert np.allclose(e / e.sum(), mref.masked_softmax(z, M), rtol=1e-12, atol=0)
    assert REGISTRY["score_bias"].constants == {}


# ------------------------------------------------------------------ 26 rope_attention


@given(st.one_of(mc.rope_cases(), mc.rope_witnesses()))
def test_rope_attention(case):
    target(ratio_ok(*rope_sides(case, DERIVED["silu"])), label=case[0])


def test_rope_tables_bound_exceeds_one_only_by_rounding():
    _, rho = mref.rope_pair_matrices(6, 4)
    assert 1 <= rho < 1 + 1e-14


# ------------------------------------------------------------------ 27 shared_matrix_sensitivity


@given(mc.gqa_cases())
def test_shared_key_matrix_sensitivity_is_the_group_sum(case):
    target(ratio_ok(*gqa_sides(case, DERIVED["silu"])))


# ------------------------------------------------------------------ 28 gated_ff


@given(st.one_of(mc.gated_cases(), mc.gated_witnesses()))
def test_gated_ff(case):
    target(ratio_ok(*gated_sides(case, DERIVED[case[1]])), label=f"{case[0]}-{case[1]}")


def test_erf_gelu_L_phi_is_not_valid_for_tanh_gelu_geglu():
    """Review witness: (b) with N = d_ff = 1, y = 1, G = 1.4185, U = D = 1 (mpmath, 50 digits)."""
    with mpmath.workdps(50):
        g, eta = mpmath.mpf("1.4185"), mpmath.mpf("1e-12")
        change = (mref.mp_gelu_tanh(g + eta) - mref.mp_gelu_tanh(g)) / eta
        L_erf = mpmath.mpf(sp.N(REGISTRY["gelu_constants"].constants["L_phi"], 50))
        L_tanh = mpmath.mpf(sp.N(ModernConstants("gelu_tanh").sym("L_phi"), 50))
        assert change / L_erf > 1.00007  # the erf constant is broken by the tanh GELU
        assert change <= L_tanh  # the tanh constant in force (113/100) holds


# ------------------------------------------------------------------ 29 silu_constants


def _silu_t_star():
    with mpmath.workdps(50):
        return mpmath.findroot(lambda t: 2 + t * (1 - 2 / (1 + mpmath.exp(-t))), 2.4)


def _silu_d1(t):
    s = 1 / (1 + mpmath.exp(-t))
    return s + t * s * (1 - s)


def test_silu_second_derivative_is_the_stated_formula():
    stmt = REGISTRY["silu_constants"].statement
    assert sp.simplify(stmt.lhs - stmt.rhs) == 0
    t = sp.Symbol("t", real=True)
    phi = t / (1 + sp.exp(-t))
    s = 1 / (1 + sp.exp(-t))
    assert sp.simplify(sp.diff(phi, t, 2) - s * (1 - s) * (2 + t * (1 - 2 * s))) == 0


def test_silu_L_phi_is_a_tight_upper_bound():
    L = Fraction(str(REGISTRY["silu_constants"].constants["L_phi"]))
    with mpmath.workdps(50):
        sup = _silu_d1(_silu_t_star())
        assert sup < mpmath.mpf(L.numerator) / L.denominator < sup + mpmath.mpf("1e-17")
    # dense grid (binary64) with a margin for rounding
    t = np.linspace(-40, 40, 400001)
    s = 1 / (1 + np.exp(-t))
    assert np.max(np.abs(s + t * s * (1 - s))) <= float(L) * (1 + 1e-15)
    assert REGISTRY["silu_constants"].constants["B_phi"] == 1
    assert np.all(np.abs(mref.silu(t)) <= np.abs(t))


@pytest.fixture
def arb_prec_200():
    """Arb at 200 bits for one test, restored afterwards (the precision is global state)."""
    import flint

    old = flint.ctx.prec
    flint.ctx.prec = 200
    yield
    flint.ctx.prec = old


def test_silu_enclosure_in_arb(arb_prec_200):
    flint = pytest.importorskip("flint")
    with mpmath.workdps(40):
        ts = _silu_t_star()
        a = flint.arb(mpmath.nstr(ts - mpmath.mpf("1e-25"), 40))
        b = flint.arb(mpmath.nstr(ts + mpmath.mpf("1e-25"), 40))

    def sig(t):
        return 1 / (1 + (-t).exp())

    def d1(t):
        return sig(t) + t * sig(t) * (1 - sig(t))

    def d2(t):
        return sig(t) * (1 - sig(t)) * (2 + t * (1 - 2 * sig(t)))

    assert d2(a) > 0 and d2(b) < 0  # t* in [a, b]
    box = flint.arb((a.mid() + b.mid()) / 2, (b.mid() - a.mid()) / 2)
    upper = d1(a) + (b - a) * abs(d2(box))
    L = REGISTRY["silu_constants"].constants["L_phi"]
    assert upper < flint.arb(int(L.p)) / int(L.q)


# ------------------------------------------------------------------ 30 ls_model


def _perturbed(layers, l, kind, idx, eta, seed):
    rng = np.random.default_rng(seed)
    new = copy.deepcopy(layers)
    lay = new[l]
    if kind in ("Q", "K", "Vt"):
        old = getattr(lay, kind)[idx]
        getattr(lay, kind)[idx] = old + eta * rng.standard_normal(old.shape)
        return new, mref.op(getattr(lay, kind)[idx] - old)
    old = getattr(lay, kind)
    setattr(lay, kind, old + eta * rng.standard_normal(old.shape))
    return new, mref.op(getattr(lay, kind) - old)


def layer_constants(K: ModernConstants, model: str, lay, group, kind=None, idx=None):
    """(L_l, gamma of (kind, idx)) of one layer, from the assembled theorem's expressions."""
    cG, cU, cD = mref.op(lay.G), mref.op(lay.U), mref.op(lay.D)
    H = len(lay.Q)
    heads = sum(K.assembled(model, "head_summand", c_V=mref.op(lay.Vt[h]), c_Q=mref.op(lay.Q[h]),
                            c_K=mref.op(lay.K[group[h]])) for h in range(H))
    Ll = K.assembled(model, "layer_lipschitz", Sigma_h=heads, c_G=cG, c_U=cU, c_D=cD)
    if kind is None:
        return Ll, None
    ff = dict(c_G=cG, c_U=cU, c_D=cD)
    if kind == "Q":
        g = K.assembled(model, "gamma.Q", c_V=mref.op(lay.Vt[idx]), c_K=mref.op(lay.K[group[idx]]), **ff)
    elif kind == "K":
        sg = sum(mref.op(lay.Vt[h]) * mref.op(lay.Q[h]) for h in range(H) if group[h] == idx)
        g = K.assembled(model, "gamma.K", Sigma_g=sg, **ff)
    else:
        g = K.assembled(model, f"gamma.{kind}", **ff)
    return Ll, g


def ls_sides(case, K: ModernConstants, residual: bool = False):
    layers, group, w, act, R, rho, X, l, kind, idx, eta, seed = case
    model = "ls_residual" if residual else "ls"
    K = ModernConstants(act, rho, K.symbols, K.scale, K.group)
    new, dW = _perturbed(layers, l, kind, idx, eta, seed)
    lhs = abs(mref.ls_forward(X, layers, group, w, act, R, residual)
              - mref.ls_forward(X, new, group, w, act, R, residual))
    alpha = math.prod(layer_constants(K, model, lay, group)[0] for lay in layers[l + 1:])
    gamma = layer_constants(K, model, layers[l], group, kind, idx)[1]
    return lhs, float(np.linalg.norm(w)) * alpha * gamma * dW


@given(mc.ls_networks())
def test_ls_network_one_matrix_perturbation(case):
    target(ratio_ok(*ls_sides(case, DERIVED["silu"])), label=case[8])


@given(mc.ls_networks())
def test_ls_residual_network_one_matrix_perturbation(case):
    target(ratio_ok(*ls_sides(case, DERIVED["silu"], residual=True)), label=case[8])


def test_ls_counts_and_shapes_from_the_derivation():
    c = REGISTRY["ls_model"].constants
    from specbound.derivation import symbols as S

    assert c["J"].subs({S.L: 18, S.H: 4, S.n_kv: 1}) == 18 * 12  # Gemma 3 270M-like
    assert c["rmax_Q"] == S.d_h and c["d_Vt"] == 2 * S.N
    assert c["beta_c"].subs(S.L, 1) == sp.Rational(25, 24)  # 1 + 1/(24L), sharpenings.md S2

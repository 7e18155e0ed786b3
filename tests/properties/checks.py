"""Sampled inequalities of proofs_notes/theory.md section 8 as (left side, right side) pairs.

Each ``*_sides(case, K, mp)`` evaluates the left side with the brute-force model of
:mod:`reference` and the right side with constants ``K`` (a :class:`constants.Constants`; the
derivation's values, or a mutation of them).  ``mp=True`` redoes both sides at 50 digits from the
exact binary64 inputs.  :func:`holds` is the decision rule: a float64 pass is accepted; a float64
near-violation is re-decided in mpmath (review edit 4: float cancellation, not the lemma, is what
pushes ratios above 1 at tiny perturbations).
"""

from __future__ import annotations

import mpmath
import numpy as np

from . import reference as ref

RTOL = 1e-9  # proofs_notes/theory.md section 8: "<=" means "<= up to relative tolerance 1e-9"
# In mpmath only the binary64 inputs remain (rows of X may exceed norm 1 by an ulp), so 1e-12 is
# far below any real violation and far above what an ulp of input can cause.
MP_RTOL = mpmath.mpf(10) ** -12


def holds(sides, *args, rtol: float = RTOL) -> float:
    """Return lhs/rhs if ``lhs <= rhs`` (float64 with ``rtol``, else decided at 50 digits).

    Raises AssertionError with both evaluations when the inequality fails.
    """
    lhs, rhs = sides(*args, mp=False)
    lhs, rhs = float(lhs), float(rhs)
    if lhs <= rhs * (1 + rtol):
        return lhs / rhs if rhs > 0 else 0.0
    with mpmath.workdps(ref.MP_DPS):
        lhs_mp, rhs_mp = sides(*args, mp=True)
        ok = lhs_mp <= rhs_mp * (1 + MP_RTOL)
    assert ok, f"violated: float64 {lhs!r} > {rhs!r}; mpmath {mpmath.nstr(lhs_mp, 20)} > {mpmath.nstr(rhs_mp, 20)}"
    return float(lhs_mp / rhs_mp) if rhs_mp > 0 else 0.0


def violated(sides, *args, rtol: float = 1e-6) -> bool:
    """True when the inequality fails clearly (float64 excess beyond ``rtol``, confirmed in mpmath)."""
    lhs, rhs = sides(*args, mp=False)
    if float(lhs) <= float(rhs) * (1 + rtol):
        return False
    with mpmath.workdps(ref.MP_DPS):
        lhs_mp, rhs_mp = sides(*args, mp=True)
        return bool(lhs_mp > rhs_mp * (1 + mpmath.mpf(rtol) / 2))


def _arr(a, mp: bool):
    return ref.to_mp(a) if mp else np.asarray(a, dtype=float)


def _norm(w, mp: bool):
    """Spectral norm: LAPACK in float64, mpmath SVD at 50 digits when ``mp``."""
    if mp:
        s = ref.mp_singular_values(w)
        return s[0] if s else mpmath.mpf(0)
    return ref.spectral_norm(w)


# ------------------------------------------------------------------ section 2: Lipschitz lemmas


def softmax_osc_sides(case, K, mp=False):
    """||sigma(z) - sigma(z')||_1 <= osc(z - z') / 2."""
    z, z2 = (_arr(v, mp) for v in case)
    lhs = np.sum(np.abs(ref.softmax(z) - ref.softmax(z2)))
    d = z2 - z
    return lhs, (np.max(d) - np.min(d)) / 2


def softmax_sides(case, K, mp=False):
    """||sigma(z) - sigma(z')||_1 <= C_sm ||z - z'||_inf."""
    z, z2 = (_arr(v, mp) for v in case)
    lhs = np.sum(np.abs(ref.softmax(z) - ref.softmax(z2)))
    return lhs, K.symbol("C_sm") * np.max(np.abs(z2 - z))


def proj_sides(case, K, mp=False):
    """||Pi x - Pi x'|| <= Lip_Pi ||x - x'||."""
    x, x2 = (_arr(v, mp).reshape(1, -1) for v in case)
    lhs = ref.norm_2inf(ref.project(x) - ref.project(x2))
    return lhs, K("proj_unit_ball", "Lip_Pi") * ref.norm_2inf(x - x2)


def attn_input_sides(case, K, mp=False):
    """||Att(X) - Att(X')||_{2,inf} <= sum_h head_summand(||A_h||, ||V_h||) ||X - X'||_{2,inf}."""
    x, x2, a_list, v_list = case
    xs, x2s = _arr(x, mp), _arr(x2, mp)
    am = [_arr(a, mp) for a in a_list]
    vm = [_arr(v, mp) for v in v_list]
    lhs = ref.norm_2inf(ref.attention(xs, am, vm) - ref.attention(x2s, am, vm))
    const = sum(
        K("attn_input_lipschitz", "head_summand", c_A=_norm(a, mp), c_V=_norm(v, mp))
        for a, v in zip(a_list, v_list)
    )
    return lhs, const * ref.norm_2inf(xs - x2s)


def attn_qk_sides(case, K, mp=False):
    """||head(X;A,V) - head(X;A',V)||_{2,inf} <= C_sm ||V|| ||A - A'||."""
    x, a, a2, v = case
    xs, am, a2m, vm = (_arr(t, mp) for t in case)
    lhs = ref.norm_2inf(ref.head(xs, am, vm) - ref.head(xs, a2m, vm))
    const = K("attn_qk_lipschitz", "gamma_head_A", c_V=_norm(v, mp))
    return lhs, const * _diff_norm(a2, a, mp)


def _mp_norm_diff(a, b):
    """||a - b|| with the difference formed exactly (mpmath), not rounded in float64."""
    diff = ref.to_mp(a) - ref.to_mp(b)
    with mpmath.workdps(ref.MP_DPS):
        s = mpmath.svd_r(mpmath.matrix(diff.tolist()), compute_uv=False)
        return max(s[i] for i in range(len(s))) if len(s) else mpmath.mpf(0)


def _diff_norm(a, b, mp):
    return _mp_norm_diff(a, b) if mp else ref.spectral_norm(np.asarray(a) - np.asarray(b))


def attn_v_sides(case, K, mp=False):
    """||head(X;A,V) - head(X;A,V')||_{2,inf} <= ||V - V'||."""
    x, a, v, v2 = case
    xs, am, vm, v2m = (_arr(t, mp) for t in case)
    lhs = ref.norm_2inf(ref.head(xs, am, vm) - ref.head(xs, am, v2m))
    return lhs, K("attn_v_lipschitz", "gamma_head_V") * _diff_norm(v2, v, mp)


def ff_input_sides(case, K, mp=False):
    """(a) ||F(Y) - F(Y')|| <= L_phi ||M_in|| ||M_out|| ||Y - Y'||."""
    y, y2, m_in, m_out = case
    ys, y2s, mi, mo = (_arr(t, mp) for t in case)
    act = K.activation
    lhs = ref.norm_2inf(ref.feed_forward(ys, mi, mo, act) - ref.feed_forward(y2s, mi, mo, act))
    const = K("ff_lipschitz", "input", c_in=_norm(m_in, mp), c_out=_norm(m_out, mp))
    return lhs, const * ref.norm_2inf(ys - y2s)


def ff_min_sides(case, K, mp=False):
    """(b) ||F(Y; M_in) - F(Y; M_in')|| <= L_phi ||M_out|| ||M_in - M_in'||."""
    y, m_in, m_in2, m_out = case
    ys, mi, mi2, mo = (_arr(t, mp) for t in case)
    act = K.activation
    lhs = ref.norm_2inf(ref.feed_forward(ys, mi, mo, act) - ref.feed_forward(ys, mi2, mo, act))
    return lhs, K("ff_lipschitz", "M_in", c_out=_norm(m_out, mp)) * _diff_norm(m_in2, m_in, mp)


def ff_mout_sides(case, K, mp=False):
    """(c) ||F(Y; M_out) - F(Y; M_out')|| <= B_phi ||M_in|| ||M_out - M_out'||."""
    y, m_in, m_out, m_out2 = case
    ys, mi, mo, mo2 = (_arr(t, mp) for t in case)
    act = K.activation
    lhs = ref.norm_2inf(ref.feed_forward(ys, mi, mo, act) - ref.feed_forward(ys, mi, mo2, act))
    return lhs, K("ff_lipschitz", "M_out", c_in=_norm(m_in, mp)) * _diff_norm(m_out2, m_out, mp)


# ------------------------------------------------------------------ composition (network)


def layer_norms(lay: ref.Layer, mp: bool) -> dict:
    return {
        "A": [_norm(a, mp) for a in lay.a],
        "V": [_norm(v, mp) for v in lay.v],
        "M_in": _norm(lay.m_in, mp),
        "M_out": _norm(lay.m_out, mp),
    }


def layer_constant(nrm: dict, K, model: str):
    """mathcal L_l of the assembled theorem, its head summand summed over the heads."""
    head_sum = sum(K.assembled("head_summand", model, c_A=a, c_V=v) for a, v in zip(nrm["A"], nrm["V"]))
    return K.assembled("layer_lipschitz", model, Sigma_h=head_sum, c_in=nrm["M_in"], c_out=nrm["M_out"])


def gamma_constant(nrm: dict, key: tuple, K, model: str):
    """gamma_j of the assembled theorem for the matrix ``key`` of a layer with norms ``nrm``."""
    kind, h = key
    values = {"c_in": nrm["M_in"], "c_out": nrm["M_out"]}
    if kind == "A":
        values["c_V"] = nrm["V"][h]
    return K.assembled(f"gamma.{kind}", model, **values)


def network_sides(case, K, mp=False):
    """|f(W) - f(W')| <= B_w alpha_l gamma_j ||W_j - W_j'|| when only W_j (layer l) changes."""
    net, x, layer, key, new = case
    net2 = net.with_matrix(layer, key, new)
    old = net.layers[layer].matrices()[key]
    if mp:
        lhs = abs(ref.forward(net.to_mp(), ref.to_mp(x)) - ref.forward(net2.to_mp(), ref.to_mp(x)))
    else:
        lhs = abs(ref.forward(net, x) - ref.forward(net2, x))
    norms = [layer_norms(lay, mp) for lay in net.layers]
    model = "residual" if net.residual else "plain"
    alpha = 1
    for nrm in norms[layer + 1 :]:
        alpha = alpha * layer_constant(nrm, K, model)
    gamma = gamma_constant(norms[layer], key, K, model)
    b_w = ref.row_norms(_arr(net.w, mp).reshape(1, -1))[0]
    return lhs, b_w * alpha * gamma * _diff_norm(new, old, mp)


def network_cover_sides(case, K, mp=False):
    """network_cover: |f - f_hat| <= sum_j B_w alpha_bar gamma_bar eps_j + eps_w (proofs_notes/theory.md section 4).

    Every matrix and the read-out are replaced by a centre; the radii are
    c_j = max(||W_j||, ||W_j_hat||), eps_j = ||W_j - W_j_hat||, B_w = ||w||, eps_w = ||w - w_hat||.
    """
    net, centre, x = case
    if mp:
        lhs = abs(ref.forward(net.to_mp(), ref.to_mp(x)) - ref.forward(centre.to_mp(), ref.to_mp(x)))
    else:
        lhs = abs(ref.forward(net, x) - ref.forward(centre, x))
    model = "residual" if net.residual else "plain"
    radii = []
    for lay, lay_hat in zip(net.layers, centre.layers):
        a, b = layer_norms(lay, mp), layer_norms(lay_hat, mp)
        radii.append({
            "A": [max(u, v) for u, v in zip(a["A"], b["A"])],
            "V": [max(u, v) for u, v in zip(a["V"], b["V"])],
            "M_in": max(a["M_in"], b["M_in"]),
            "M_out": max(a["M_out"], b["M_out"]),
        })
    b_w = ref.row_norms(_arr(net.w, mp).reshape(1, -1))[0]
    total = 0
    for l, (lay, lay_hat) in enumerate(zip(net.layers, centre.layers)):
        alpha = 1
        for nrm in radii[l + 1 :]:
            alpha = alpha * layer_constant(nrm, K, model)
        old, new = lay.matrices(), lay_hat.matrices()
        for key in old:
            gamma = gamma_constant(radii[l], key, K, model)
            sens = K("network_cover", "matrix_loss_sensitivity", B_w=b_w, alpha=alpha, gamma=gamma)
            total = total + sens * _diff_norm(new[key], old[key], mp)
    eps_w = ref.row_norms((_arr(centre.w, mp) - _arr(net.w, mp)).reshape(1, -1))[0]
    return lhs, total + eps_w

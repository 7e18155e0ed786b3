"""Every term of the fast pass's error formulas pinned to proofs_notes/fast_forward.md.

The error bounds are 10^3-10^4 times the errors seen in practice, so containment tests cannot notice a
weakened formula.  Here each formula -- ``eta_exp`` (step 1), ``E_Phi`` (step 2), ``e_Pi, R_Pi`` (step 3),
every head term (step 5), the feed-forward terms (step 6), the residual and causal variants (steps
9-10) and ``epsilon`` (step 7) -- is recomputed from the note in 60-digit mpmath, importing nothing from
the code under test for the formulas (only data: the network's float factors, the routine constants
whose definitions are checked against the note, and the certified spectral norms, themselves checked
against exact singular values).  The code's value must equal the reference to a relative 1e-20 (its
Arb balls are 128 bits wide, less the cancellation in ``(1 + eta) e^x - 1``), so any term dropped or
shrunk by 10% fails.

Underflow terms (``tau = 2**-1000``, ``alpha = 2**-1019``, ``2**-1074``) vanish below 128 bits against the
rest, so a second run inflates those constants (monkeypatched to ``2**-40`` and the like) and pins
each underflow term the same way: the formulas are linear in them.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from flint import arb

from specbound.certified import elementary, fast_forward
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered

DPS = 60
REL = mpmath.mpf(10) ** -20
"""The code's quantities like ``(1 + eta) e^x - 1`` cancel ~46 of their 128 bits; 1e-20 still resolves
a 10% change of any term above 1e-19 of its sum (all of them here)."""
U = mpmath.mpf(2) ** -53


def mpf(x) -> mpmath.mpf:
    """An exact point (arb of radius 0), an int or a float as an mpf (exact at DPS digits)."""
    if isinstance(x, arb):
        assert x.rad() == 0, "the code's bounds are exact points"
        return mpmath.mpf(x.mid().str(DPS + 20, radius=False))
    return mpmath.mpf(x)


def assert_pinned(code, ref, what: str) -> None:
    code = mpf(code)
    assert abs(code - ref) <= REL * abs(ref) + mpmath.mpf(10) ** -(DPS + 5), (what, code, ref)


def gamma(n) -> mpmath.mpf:
    return n * U / (1 - n * U)


# --------------------------------------------------------------------------- the underflow constants


@pytest.fixture(params=["real", "inflated"])
def constants(request, monkeypatch):
    """``(tau, alpha, horner_underflow, phi_underflow)`` as in the note, or inflated so that every
    underflow term is resolvable (the code reads the same monkeypatched constants)."""
    if request.param == "inflated":
        monkeypatch.setattr(fast_forward, "TINY_EXP", -40)
        monkeypatch.setattr(fast_forward, "EXP_UNDERFLOW_ERROR", 2.0**-45)
        monkeypatch.setattr(elementary, "HORNER_UNDERFLOW_EXP", -60)
        monkeypatch.setattr(elementary, "PHI_UNDERFLOW_EXP", -42)
        exps = (-40, -45, -60, -42)
    else:
        exps = (-1000, -1019, -1074, -1000)
    elementary._exp_bound_parts.cache_clear()
    yield tuple(mpmath.mpf(2) ** e for e in exps)
    elementary._exp_bound_parts.cache_clear()


# --------------------------------------------------------------------------- step 1: exp


def ref_eta_exp(horner_underflow) -> mpmath.mpf:
    """eta_exp of note step 1 from the routine's constants (checked against their definitions)."""
    ln2 = mpmath.log(2)
    c, L1, L2 = mpf(elementary.INV_LN2), mpf(elementary.LN2_HI), mpf(elementary.LN2_LO)
    coeffs = [mpf(x) for x in elementary.EXP_COEFFS]
    n, kmax, zmax = len(coeffs) - 1, 1021, mpmath.mpf(708)
    theta_k = zmax * abs(c - 1 / ln2) + U * zmax * c
    r_star = ln2 * (mpmath.mpf(1) / 2 + theta_k)
    rho1 = r_star + kmax * abs(ln2 - L1)
    delta0 = U * rho1 + kmax * U * abs(L2) + kmax * abs(ln2 - L1 - L2)
    delta_r = delta0 + U * (r_star + delta0)
    r_max = r_star + delta_r
    horner = gamma(2 * n) * sum(abs(cj) * r_max**j for j, cj in enumerate(coeffs)) + n * horner_underflow
    coeff = sum(abs(cj - 1 / mpmath.factorial(j)) * r_max**j for j, cj in enumerate(coeffs))
    tail = r_max ** (n + 1) * mpmath.exp(r_max) / mpmath.factorial(n + 1)
    A = horner + coeff + tail
    return (1 + A * mpmath.exp(r_max)) * mpmath.exp(delta_r) - 1


def test_the_exp_routines_constants_are_those_of_the_note():
    with mpmath.workdps(DPS):
        ln2 = mpmath.log(2)
        assert elementary.INV_LN2 == float(1 / ln2)  # c = fl(1/ln 2)
        L1 = mpmath.floor(ln2 * 2**32) / 2**32  # ln 2 truncated to 32 significant bits
        assert mpf(elementary.LN2_HI) == L1
        assert elementary.LN2_LO == float(ln2 - L1)  # L2 = fl(ln 2 - L1)
        assert elementary.EXP_COEFFS == tuple(float(1 / mpmath.factorial(j)) for j in range(12))
        assert elementary.EXP_CLAMP == -708.0 and elementary.EXP_UNDERFLOW_ERROR == 2.0**-1019
        assert 2 * mpmath.exp(-708) < mpmath.mpf(2) ** -1019  # step 1.5: alpha covers the clamp


def test_eta_exp_is_pinned_to_note_step_1(constants):
    with mpmath.workdps(DPS):
        ref = ref_eta_exp(constants[2])
        assert_pinned(elementary.exp_error_bound(), ref, "eta_exp")
        if constants[2] < 1e-300:
            assert 1.7e-14 < ref < 1.8e-14  # the value quoted in the note's Constants section


# --------------------------------------------------------------------------- step 2: Phi


def ref_phi_bound(t_max, degree: int, phi_underflow) -> mpmath.mpf:
    """E_Phi of note step 2 for the routine's coefficients b_hat (data) on |t| <= t_max."""
    b_hat = [mpf(x) for x in elementary.phi_coefficients(degree)]
    t = mpf(t_max)
    sqrt2pi = mpmath.sqrt(2 * mpmath.pi)
    s_max = t * t * (1 + U)
    G = mpmath.exp(s_max / 2) / sqrt2pi
    arg = U * t * t * mpmath.exp(s_max / 2) / (2 * sqrt2pi)
    horner = gamma(2 * degree) * sum(abs(b) * s_max**j for j, b in enumerate(b_hat))
    exact_b = [(-1) ** j / (sqrt2pi * 2**j * mpmath.factorial(j) * (2 * j + 1)) for j in range(degree + 1)]
    coeff = sum(abs(b - e) * s_max**j for j, (b, e) in enumerate(zip(b_hat, exact_b)))
    tail = (s_max / 2) ** (degree + 1) / mpmath.factorial(degree + 1) * mpmath.exp(s_max / 2) / sqrt2pi
    B = arg + horner + coeff + tail
    return t * B + U * t * (G + B) + U * (1 + 2 * t * (G + B)) + phi_underflow


@pytest.mark.parametrize("t_max, degree", [(0.5, 8), (1.52, 17), (3.99, 40), (1.5, 6)])
def test_phi_bound_is_pinned_to_note_step_2(t_max, degree, constants):
    with mpmath.workdps(DPS):
        assert_pinned(elementary.phi_error_bound(t_max, degree), ref_phi_bound(t_max, degree, constants[3]),
                      f"E_Phi({t_max}, {degree})")


def test_phi_underflow_allowance_covers_the_underflow_terms_of_note_step_2():
    # fl(t t), each of <= 200 Horner products and fl(t q) lose <= 2**-1075 each when they underflow;
    # through g' <= e^{s/2} / (2 sqrt(2 pi)) and the factor t <= 4 their total stays below 2**-1000
    with mpmath.workdps(DPS):
        t, n, e = 4, 200, mpmath.mpf(2) ** -1075
        total = t * (e * mpmath.exp(t * t / 2) / (2 * mpmath.sqrt(2 * mpmath.pi)) + n * 2 * e) + e
        assert total < mpmath.mpf(2) ** elementary.PHI_UNDERFLOW_EXP


# --------------------------------------------------------------------------- steps 3-10: epsilon


def ref_projection(N: int, tau) -> tuple[mpmath.mpf, mpmath.mpf]:
    """(e_Pi, R_Pi) of note step 3, with the division underflow tau."""
    g = gamma(N) + 4 * tau
    kappa = max(mpmath.sqrt(1 + g) * (1 + U) - 1, 1 - mpmath.sqrt(1 - g) * (1 - U))
    r = (1 + U) / (1 - kappa)
    return r - 1 + tau, r + tau


@pytest.mark.parametrize("N", [1, 2, 3, 4, 5, 64, 4096])
def test_the_projection_error_is_pinned_to_note_step_3(N, constants):
    # both sides of kappa decide it somewhere: the upper one for N < 4, the lower one beyond
    with mpmath.workdps(DPS):
        e_pi, r_pi = ref_projection(N, constants[0])
        code = fast_forward.projection_error(N)
        assert_pinned(code[0], e_pi, "e_Pi")
        assert_pinned(code[1], r_pi, "R_Pi")


def frob(a: np.ndarray) -> mpmath.mpf:
    return mpmath.sqrt(mpmath.fsum(mpmath.mpf(float(x)) ** 2 for x in np.asarray(a).ravel()))


def exact_spectral(a) -> mpmath.mpf:
    return max(mpmath.svd_r(a, compute_uv=False))


def ref_norms(w: AnalysisWeights, code_norms: dict) -> dict:
    """Frobenius norms and column norms recomputed here; the spectral norms are the code's certified
    upper points, checked to lie between the exact singular value and its Frobenius cap."""
    out = {"w": frob(w.readout), "layers": []}
    for l in range(w.num_layers):
        heads = []
        for h in range(w.num_heads):
            qk, vt = w.get(l, "QK", h), w.get(l, "V_tilde", h)
            hn = {"q": frob(qk.left), "k": frob(qk.right), "v": frob(vt.left), "o": frob(vt.right)}
            for key, mat, cap in (("A", mpmath.matrix(qk.left.tolist()) * mpmath.matrix(qk.right.tolist()),
                                   hn["q"] * hn["k"]),
                                  ("V", mpmath.matrix(vt.left.tolist()) * mpmath.matrix(vt.right.tolist()),
                                   hn["v"] * hn["o"])):
                code = mpf(code_norms["layers"][l]["heads"][h][key])
                assert exact_spectral(mat) <= code <= cap * (1 + REL)
                hn[key] = code
            heads.append(hn)
        m_in, m_out = w.get(l, "M_in").left, w.get(l, "M_out").left
        ln = {"heads": heads, "in": frob(m_in), "out": frob(m_out),
              "in_col": max(frob(m_in[:, j]) for j in range(m_in.shape[1]))}
        for key, mat, cap in (("s_in", m_in, ln["in"]), ("s_out", m_out, ln["out"])):
            code = mpf(code_norms["layers"][l][key])
            assert exact_spectral(mpmath.matrix(mat.tolist())) <= code <= cap * (1 + REL)
            ln[key] = code
        for key in ("in", "out", "in_col"):
            assert_pinned(code_norms["layers"][l][key], ln[key], key)
        for h, hn in enumerate(heads):
            for key in "qkvo":
                assert_pinned(code_norms["layers"][l]["heads"][h][key], hn[key], f"n_{key}")
        out["layers"].append(ln)
    assert_pinned(code_norms["w"], out["w"], "||w||")
    return out


def ref_head(hn, N, dq, dv, H, T, delta, R, eta_exp, tau, alpha) -> dict:
    """Note step 5 for one head (5.1 rows, 5.2 scores, 5.3-5.5 softmax, 5.7-5.8 values and W_O)."""
    e_q = gamma(N) * R * hn["q"] + tau
    e_k = gamma(N) * R * hn["k"] + tau
    e_v = gamma(N) * R * hn["v"] + tau
    qn, kn = R * hn["q"] + e_q, R * hn["k"] + e_k
    e_s = delta * hn["A"] * (1 + R) + e_q * kn + R * hn["q"] * e_k + gamma(dq) * qn * kn + tau
    S = qn * kn * (1 + gamma(dq)) + tau
    eta_1 = (1 + eta_exp) * mpmath.exp(2 * U * S) - 1
    beta = (1 + eta_1) * (1 + gamma(T)) - 1 + T * alpha * (1 + gamma(T))
    up, down = (1 + eta_1) * (1 + U) / (1 - beta) - 1, 1 - (1 - eta_1) * (1 - U) / (1 + beta)
    assert up >= down  # step 5.5: the lower side never decides the maximum
    eta_p = up + T * alpha * (1 + U) / (1 - beta)
    vn = R * hn["v"] + e_v
    h_max = (1 + eta_p) * vn * (1 + gamma(T)) + tau
    head = ((delta + (e_s + eta_p) * R) * hn["V"]
            + ((1 + eta_p) * e_v + gamma(T) * (1 + eta_p) * vn + tau) * hn["o"]
            + gamma(H * dv) * h_max * hn["o"])
    return {"e_q": e_q, "e_k": e_k, "e_v": e_v, "e_s": e_s, "S": S, "eta_1": eta_1, "beta": beta,
            "eta_p": eta_p, "h_max": h_max, "head": head}


def l_phi() -> mpmath.mpf:
    """max |phi'| of GELU, at t = sqrt 2 (gelu_constants.md): Phi(sqrt 2) + sqrt 2 phi_N(sqrt 2)."""
    r2 = mpmath.sqrt(2)
    return mpmath.ncdf(r2) + r2 * mpmath.npdf(r2)


def test_the_gelu_lipschitz_constant_is_the_maximum_slope():
    with mpmath.workdps(30):
        slope = [abs(mpmath.diff(lambda t: t * mpmath.ncdf(t), t)) for t in mpmath.linspace(-8, 8, 801)]
        assert max(slope) <= l_phi() <= max(slope) + 1e-4


def check_budget(w: AnalysisWeights, T: int, constants) -> None:
    """The code's budget for float rows of length T against the note, term by term."""
    tau, alpha, horner_underflow, phi_underflow = constants
    fast = fast_forward.prepare_rows(w, T)
    budget, net = fast.budget, fast.net
    with mpmath.workdps(DPS):
        norms = ref_norms(w, net.norms)
        eta_exp = ref_eta_exp(horner_underflow)
        N, H, F = w.width, w.num_heads, w.ff_dim
        e_pi, r_pi = ref_projection(N, tau)
        delta, R = e_pi, r_pi  # step 4, float-row path
        residual, relu = w.variant == "residual", w.activation == "relu"
        assert len(budget.terms) == w.num_layers
        for l, got in enumerate(budget.terms):
            ln = norms["layers"][l]
            dq = dv = w.head_dim
            assert_pinned(got["delta"], delta, f"layer {l}: delta")
            assert_pinned(got["R"], R, f"layer {l}: R")
            heads = [ref_head(hn, N, dq, dv, H, T, delta, R, eta_exp, tau, alpha) for hn in ln["heads"]]
            for h, (ref, code) in enumerate(zip(heads, got["heads"])):
                for key, value in ref.items():
                    assert_pinned(code[key], value, f"layer {l} head {h}: {key}")
            e_att = sum(hd["head"] for hd in heads) + tau
            assert_pinned(got["e_att"], e_att, f"layer {l}: e_att")
            if residual:  # step 9.1
                A = sum(hn["V"] for hn in ln["heads"]) + e_att
                delta_y = delta + e_att + U * (R + A) + e_pi
            else:  # step 5.9
                delta_y = e_att + e_pi
            assert_pinned(got["delta_y"], delta_y, f"layer {l}: delta_y")
            e_u = delta_y * ln["s_in"] + gamma(N) * r_pi * ln["in"] + tau  # step 6.1
            assert_pinned(got["e_u"], e_u, f"layer {l}: e_u")
            if relu:
                e_g = e_u + tau
                assert budget.t_max[l] == 0 and budget.degrees[l] == 0
            else:
                t_max = ln["in_col"] + e_u
                assert_pinned(budget.t_max[l], t_max, f"layer {l}: t_max")
                e_phi = ref_phi_bound(budget.t_max[l], budget.degrees[l], phi_underflow)
                assert_pinned(got["e_phi"], e_phi, f"layer {l}: E_Phi")
                e_g = l_phi() * e_u + (ln["s_in"] + e_u) * (e_phi + U * (1 + e_phi)) + tau  # step 6.2
            assert_pinned(got["e_g"], e_g, f"layer {l}: e_g")
            e_z = e_g * ln["s_out"] + gamma(F) * (ln["s_in"] + e_g) * ln["out"] + tau  # step 6.3
            assert_pinned(got["e_z"], e_z, f"layer {l}: e_z")
            if residual:  # step 9.2
                delta_x = delta_y + e_z + U * (r_pi + ln["s_in"] * ln["s_out"] + e_z) + e_pi
            else:
                delta_x = e_z + e_pi
            assert_pinned(got["delta_x"], delta_x, f"layer {l}: delta_x")
            delta, R = mpf(got["delta_x"]), r_pi
        eps = delta * norms["w"] + gamma(N) * R * norms["w"] + tau  # step 7
        assert_pinned(budget.epsilon, eps, "epsilon")


def _weights(seed: int, *, L=2, H=2, N=4, d=2, F=3, activation="gelu", variant="plain") -> AnalysisWeights:
    rng = np.random.default_rng(seed)
    mats = []
    for l in range(L):
        for h in range(H):
            mats.append(NamedMatrix(l, h, "QK", rng.standard_normal((N, d)), rng.standard_normal((d, N))))
            mats.append(NamedMatrix(l, h, "V_tilde", rng.standard_normal((N, d)), rng.standard_normal((d, N)) / 2))
        mats.append(NamedMatrix(l, -1, "M_in", rng.standard_normal((N, F)) / math.sqrt(N)))
        mats.append(NamedMatrix(l, -1, "M_out", rng.standard_normal((F, N))))
    return AnalysisWeights(matrices=ordered(mats), num_layers=L, num_heads=H, width=N, head_dim=d, ff_dim=F,
                           activation=activation, readout=rng.standard_normal(N), variant=variant)


@pytest.mark.parametrize("variant", ["plain", "residual", "causal"])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_every_term_of_epsilon_is_pinned_to_the_note(variant, activation, constants):
    check_budget(_weights(7, activation=activation, variant=variant), T=3, constants=constants)


def test_epsilon_of_a_network_without_layers_is_the_read_out_term(constants):
    w = AnalysisWeights(matrices=(), num_layers=0, num_heads=1, width=4, head_dim=2, ff_dim=3,
                        activation="gelu", readout=np.array([1.0, -2.0, 0.5, 3.0]), variant="causal")
    check_budget(w, T=2, constants=constants)


def test_the_token_paths_input_bounds_enclose_the_table_rows():
    # step 4, token path: delta0 >= max ||Pi(E[a] + P[t]) - m[t, a]||, R0 >= max ||m[t, a]||, both tight
    rng = np.random.default_rng(9)
    E, P = rng.standard_normal((5, 4)) * 3, rng.standard_normal((3, 4))
    tokens = rng.integers(0, 5, size=(6, 3))
    table, delta0, R0 = fast_forward.token_table(E, P, tokens)
    with mpmath.workdps(DPS):
        dist, size = mpmath.mpf(0), mpmath.mpf(0)
        for t in range(3):
            for a in set(tokens[:, t].tolist()):
                row = [mpmath.mpf(float(E[a, j])) + mpmath.mpf(float(P[t, j])) for j in range(4)]
                nrm = max(mpmath.mpf(1), mpmath.sqrt(mpmath.fsum(x * x for x in row)))
                m = [mpmath.mpf(float(x)) for x in table[t, a]]
                dist = max(dist, mpmath.sqrt(mpmath.fsum((x / nrm - y) ** 2 for x, y in zip(row, m))))
                size = max(size, mpmath.sqrt(mpmath.fsum(y * y for y in m)))
        assert dist <= mpf(delta0) <= dist + 1e-25
        assert size <= mpf(R0) <= size * (1 + REL) + mpmath.mpf(10) ** -30

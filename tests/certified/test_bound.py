"""The certified bound (proofs_notes/theory.md section 7) against an independent 50-digit mpmath evaluation.

The reference below re-derives every ingredient from mpmath singular values of the exact matrices
(its own grid rounding, its own layer products) and evaluates the theorem's expressions with the
derivation's *mpmath* backend; only the SymPy expressions are shared (one source of truth).
"""

from dataclasses import replace
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb

from specbound.certified.bound import certify_bound, grid_m
from specbound.certified.factored import enclose
from specbound.certified.radii import exact_value, round_matrix
from specbound.derivation import symbols as S
from specbound.derivation.backends import to_mpmath
from specbound.derivation.theorem import assemble
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from specbound.plan import BoundPlan, BoundSettings

KEY = {"QK": "A", "V_tilde": "V", "M_in": "M_in", "M_out": "M_out"}


def _short(rng, shape, scale=1.0):
    # few-bit floats, so products are exact at 50 digits
    return np.round(rng.standard_normal(shape) * scale * 64) / 64


def tiny_network(seed=0, zero_head=False) -> AnalysisWeights:
    rng = np.random.default_rng(seed)
    L, H, N, dh, F = 2, 2, 4, 2, 5
    mats = []
    for l in range(L):
        for h in range(H):
            left = np.zeros((N, dh)) if (zero_head and l == 1 and h == 1) else _short(rng, (N, dh))
            mats.append(NamedMatrix(l, h, "QK", left, _short(rng, (dh, N))))
            mats.append(NamedMatrix(l, h, "V_tilde", _short(rng, (N, dh), 0.7), _short(rng, (dh, N), 0.7)))
        mats.append(NamedMatrix(l, -1, "M_in", _short(rng, (N, F), 0.5)))
        mats.append(NamedMatrix(l, -1, "M_out", _short(rng, (F, N), 0.5)))
    return AnalysisWeights(matrices=ordered(mats), num_layers=L, num_heads=H, width=N, head_dim=dh,
                           ff_dim=F, activation="gelu", readout=_short(rng, (N,)))


def hand_plan(weights, settings, p_index, k_rho=-1):
    J = len(weights.matrices)
    return BoundPlan(m=grid_m(settings, weights), p_index=tuple(p_index), k_rho=k_rho,
                     u=tuple(0.02 + 0.01 * j for j in range(J)), u_w=0.03, alpha_D=0.01,
                     vartheta=(0.5 / J,) * J, vartheta_w=0.25)


# ---------------------------------------------------------------- the independent reference


def mp_matrix(mat: NamedMatrix):
    A = mpmath.matrix(mat.left.tolist())
    return A * mpmath.matrix(mat.right.tolist()) if mat.is_factored else A


def mp_index_up(x, beta):
    beta = mpmath.mpf(beta.numerator) / beta.denominator
    k = int(mpmath.ceil(mpmath.log(x) / mpmath.log(beta)))
    while beta**k < x:
        k += 1
    while beta ** (k - 1) >= x:
        k -= 1
    return k


def reference_bound(weights, settings, plan, emp):
    """The theorem at the plan's choices, in mpmath at 50 digits."""
    T = assemble()
    f = lambda expr, *args: to_mpmath(expr, args)  # noqa: E731
    with mpmath.workdps(50):
        bc = settings.base_c(weights.num_layers)
        bs, bw, br = (Fraction(settings.beta_s), Fraction(settings.beta_w), Fraction(settings.beta_rho))
        mpq = lambda q: mpmath.mpf(q.numerator) / q.denominator  # noqa: E731
        m, n = plan.m, settings.n
        info = []
        for j, mat in enumerate(weights.matrices):
            sv = mpmath.svd_r(mp_matrix(mat), compute_uv=False)
            sv = sorted((abs(v) for v in sv), reverse=True)[: mat.rank_cap]  # exact zero tail dropped
            rank = sum(1 for v in sv if v > mpmath.mpf(10) ** -30)
            p = Fraction(plan.p_index[j], m)
            if rank == 0:
                info.append(dict(p=0, k_c=0, c=mpmath.mpf(1), s=0, rank=0))
                continue
            k_c = mp_index_up(sv[0], bc)
            if p == 0:
                info.append(dict(p=0, k_c=k_c, c=mpq(bc) ** k_c, s=rank, rank=rank))
            else:
                sp_ = mpmath.fsum(v ** mpq(p) for v in sv[:rank])
                k_s = mp_index_up(sp_, bs)
                info.append(dict(p=p, k_c=k_c, k_s=k_s, c=mpq(bc) ** k_c, s=mpq(bs) ** k_s, rank=rank))
        c = {(mat.layer, mat.kind, mat.head): inf["c"] for mat, inf in zip(weights.matrices, info)}
        L = weights.num_layers
        lips = []
        for l in range(L):
            heads = mpmath.fsum(f(T.head_summand, S.c_A, S.c_V)(c[(l, "QK", h)], c[(l, "V_tilde", h)])
                                for h in range(weights.num_heads))
            lips.append(f(T.layer_lipschitz, S.c_in, S.c_out, S.head_sum)(c[(l, "M_in", -1)], c[(l, "M_out", -1)], heads))
        alphas = [mpmath.mpf(1)] * L
        for l in range(L - 2, -1, -1):
            alphas[l] = alphas[l + 1] * lips[l + 1]
        wn = mpmath.sqrt(mpmath.fsum(mpmath.mpf(float(v)) ** 2 for v in weights.readout))
        k_w = mp_index_up(wn, bw)
        B_w = mpq(bw) ** k_w
        rho = mpq(br) ** plan.k_rho
        N = weights.width
        terms, ents, pieces, lams, us = [], [], [], [], []
        for j, (mat, inf) in enumerate(zip(weights.matrices, info)):
            l = mat.layer
            g = f(T.gamma[KEY[mat.kind]], S.c_V, S.c_in, S.c_out)(
                c[(l, "V_tilde", mat.head)] if mat.kind == "QK" else 1, c[(l, "M_in", -1)], c[(l, "M_out", -1)])
            kap = f(T.kappa, S.B_w, S.alpha, S.gamma, S.rho)(B_w, alphas[l], g, rho)
            d, rmax = sum(mat.shape), mat.rank_cap
            u = mpq(Fraction(plan.u[j]))
            th = mpq(Fraction(plan.vartheta[j]))
            aD = mpq(Fraction(plan.alpha_D))
            if inf["p"] == 0:
                terms.append(f(T.ss_matrix_term_rank, S.c, S.d, S.kappa, S.n, S.r_max, S.s)(inf["c"], d, kap, n, rmax, inf["s"]))
                lams.append(f(T.lambda_matrix_rank, S.k_c, S.m_grid, S.r_max)(inf["k_c"], m, rmax))
                if inf["rank"] == 0:
                    ents.append(0); pieces.append(0)  # noqa: E702
                    continue
                ents.append(f(T.ss_matrix_entropy_rank, S.c, S.d, S.kappa, S.r_max, S.s, S.u, S.m_rows, S.n_cols)(
                    inf["c"], d, kap, rmax, inf["s"], u, *mat.shape))
                pieces.append(f(T.dd_matrix_piece_rank, S.alpha_D, S.c, S.d, S.kappa, S.r_max, S.s, S.vartheta)(
                    aD, inf["c"], d, kap, rmax, inf["s"], th))
            else:
                pp = mpq(inf["p"])
                terms.append(f(T.ss_matrix_term, S.c, S.d, S.kappa, S.n, S.p, S.s)(inf["c"], d, kap, n, pp, inf["s"]))
                lams.append(f(T.lambda_matrix, S.k_c, S.k_s, S.m_grid)(inf["k_c"], inf["k_s"], m))
                ents.append(f(T.ss_matrix_entropy, S.c, S.d, S.kappa, S.p, S.r_max, S.s, S.u, S.m_rows, S.n_cols)(
                    inf["c"], d, kap, pp, rmax, inf["s"], u, *mat.shape))
                piece = T.dd_matrix_piece_p2 if inf["p"] == 2 else T.dd_matrix_piece
                pieces.append(f(piece, S.alpha_D, S.c, S.d, S.kappa, S.p, S.s, S.vartheta)(aD, inf["c"], d, kap, pp, inf["s"], th))
            us.append(u)
        ss_closed = f(T.ss_closed, S.B_w, S.N, S.T_sum, S.n, S.rho)(B_w, N, mpmath.fsum(terms), n, rho)
        u_w = mpq(Fraction(plan.u_w))
        H = mpmath.fsum(ents) + f(T.ss_readout_entropy, S.B_w, S.N, S.rho, S.u_w)(B_w, N, rho, u_w)
        ss_exact = f(T.ss_objective, S.H_total, S.U_total, S.n)(H, mpmath.fsum(us) + u_w, n)
        SS = min(ss_closed, ss_exact)
        DD = f(T.dd_closed, S.B_w, S.D_sum, S.N, S.alpha_D, S.n, S.rho, S.vartheta_w)(
            B_w, mpmath.fsum(pieces), N, mpq(Fraction(plan.alpha_D)), n, rho, mpq(Fraction(plan.vartheta_w)))
        Lam = f(T.Lambda_total, S.Lambda_sum, S.k_rho, S.k_w)(mpmath.fsum(lams), plan.k_rho, k_w)
        delta = mpmath.mpf(1) / 20
        bound = f(T.bound, S.DD, S.Lambda, S.SS, S.delta, S.emp, S.n)(DD, Lam, SS, delta, emp, n)
        return {"bound": bound, "SS": SS, "DD": DD, "Lambda": Lam, "ss_closed": ss_closed, "ss_exact": ss_exact}


def agrees(ball: arb, ref) -> bool:
    """``ref`` (50 digits) lies in the ball, up to the reference's own 1e-45 relative error."""
    lo, hi = (exact_value(ball.lower()), exact_value(ball.upper()))
    with mpmath.workdps(60):
        tol = mpmath.mpf(10) ** -45 * (1 + abs(ref))
        lo = mpmath.mpf(lo.numerator) / lo.denominator
        hi = mpmath.mpf(hi.numerator) / hi.denominator
        return lo - tol <= ref <= hi + tol


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("p_index", [
    "zeros", "ones", "mixed", "twos",
])
def test_certified_bound_contains_the_mpmath_reference(p_index):
    w = tiny_network()
    st = BoundSettings(n=500, delta=0.05)
    m = grid_m(st, w)
    J = len(w.matrices)
    p = {"zeros": [0] * J, "ones": [m] * J, "twos": [2 * m] * J,
         "mixed": [(3 * j) % (2 * m + 1) for j in range(J)]}[p_index]
    plan = hand_plan(w, st, p)
    cb = certify_bound(w, st, plan, [enclose(x) for x in w.matrices], arb("0.125"))
    ref = reference_bound(w, st, plan, mpmath.mpf("0.125"))
    for key in ("ss_closed", "ss_exact", "SS", "DD", "Lambda"):
        assert agrees(getattr(cb, key), ref[key]), key
    assert agrees(cb.bound, ref["bound"])
    up = exact_value(cb.upper)
    assert mpmath.mpf(up.numerator) / up.denominator * (1 + mpmath.mpf(10) ** -40) >= ref["bound"]


def test_zero_matrix_contributes_nothing_and_never_forms_0_log_inf():
    w = tiny_network(zero_head=True)
    st = BoundSettings(n=500)
    m = grid_m(st, w)
    J = len(w.matrices)
    plan = hand_plan(w, st, [m] * J)
    cb = certify_bound(w, st, plan, [enclose(x) for x in w.matrices], arb(0))
    zero = [r for r in cb.matrices if r.proven_rank == 0]
    assert len(zero) == 1 and zero[0].p == 0 and zero[0].k_c == 0
    assert zero[0].ss_entropy == 0 and zero[0].dd_piece == 0
    assert cb.bound.is_finite()
    ref = reference_bound(w, st, plan, mpmath.mpf(0))
    assert agrees(cb.bound, ref["bound"])


@pytest.fixture(scope="module")
def default_model():
    from specbound.checkpoint import load_weights

    w = load_weights(None)
    return w, [enclose(x) for x in w.matrices]


def _default_bound(default_model, n, roundings=None):
    w, encs = default_model
    st = BoundSettings(n=n)
    m = grid_m(st, w)
    plan = hand_plan(w, st, [m // 2] * len(w.matrices), k_rho=1)
    return certify_bound(w, st, plan, encs, arb("0.01"), roundings=roundings)


def test_bound_decreases_in_n_for_a_fixed_empirical_loss(default_model):
    ups = [_default_bound(default_model, n).upper for n in (10**3, 10**5, 10**7, 10**9)]
    assert all(a > b for a, b in zip(ups, ups[1:]))


def test_bound_increases_with_a_radius(default_model):
    w, encs = default_model
    base = _default_bound(default_model, 10**6)
    st = base.settings
    rounded = [round_matrix(e, base.plan.p(j), st.base_c(w.num_layers), st.beta_s) for j, e in enumerate(encs)]
    for j in (0, 4, 11):
        for field in ("k_c", "k_s"):
            bigger = list(rounded)
            bigger[j] = replace(rounded[j], **{field: getattr(rounded[j], field) + 1})
            assert _default_bound(default_model, 10**6, bigger).upper > base.upper, (j, field)


def test_fixed_readout_drops_the_readout_cost(default_model):
    w, encs = default_model
    st = BoundSettings(n=10**6)
    m = grid_m(st, w)
    plan = hand_plan(w, st, [m] * len(w.matrices), k_rho=1)
    trained = certify_bound(w, st, plan, encs, arb(0))
    fixed = certify_bound(w, replace(st, readout="fixed"), plan, encs, arb(0))
    assert fixed.k_w is None and fixed.readout == "fixed"
    assert fixed.Lambda.upper() < trained.Lambda.upper()


def test_settings_are_a_value_object_and_theorem_for_assembles():
    from specbound.derivation.theorem import assemble, theorem_for

    st = BoundSettings(n=10, overrides=(("C_sm", 2.0),), dudley="uncentred")
    assert not hasattr(st, "theorem")
    assert theorem_for(st, "relu") is assemble({"C_sm": 2.0}, dudley="uncentred", activation="relu")
    assert theorem_for(BoundSettings(n=10), "gelu") is assemble()

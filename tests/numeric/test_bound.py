"""The torch evaluation of the whole bound agrees with an independent high-precision evaluation.

The reference below computes singular values of the *exact* products with mpmath (40 digits),
rounds radii with exact rational comparisons, and evaluates the theorem's expressions through the
derivation's mpmath backend -- it shares no code with ``numeric.bound`` beyond the theorem itself.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch

from specbound.derivation.theorem import readout_free_forms
from specbound.derivation.backends import compile_expr
from specbound.derivation.theorem import REGISTRY, assemble
from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from specbound.numeric.bound import FLOAT32_DERIVED_REL_TOL, evaluate, singular_values
from specbound.numeric.spectra import compute_spectra
from specbound.plan import BoundPlan, BoundSettings

L_, H_, N_, D_, F_ = 2, 2, 6, 2, 8


def tiny_weights(seed: int = 0, zero: bool = False, readout: bool = True) -> AnalysisWeights:
    """A 2-layer, 2-head network of width 6; ``zero`` makes L1.H1.QK exactly zero (zero factor)."""
    rng = np.random.default_rng(seed)
    mats = []
    for l in range(L_):
        for h in range(H_):
            q = rng.normal(size=(N_, D_)) * 0.7
            if zero and l == 1 and h == 1:
                q = np.zeros_like(q)
            mats.append(NamedMatrix(l, h, "QK", q, rng.normal(size=(D_, N_)) * 0.7))
            mats.append(NamedMatrix(l, h, "V_tilde", rng.normal(size=(N_, D_)), rng.normal(size=(D_, N_))))
        mats.append(NamedMatrix(l, -1, "M_in", rng.normal(size=(N_, F_)) * 0.5))
        mats.append(NamedMatrix(l, -1, "M_out", rng.normal(size=(F_, N_)) * 0.5))
    w = rng.normal(size=N_) if readout else None
    return AnalysisWeights(ordered(mats), L_, H_, N_, D_, F_, "gelu", w)


# -- independent reference ------------------------------------------------------------------------

def _mp(expr_name, T, **values):
    expr = T.gamma[expr_name[6:]] if expr_name.startswith("gamma_") else getattr(T, expr_name)
    fn = compile_expr(expr, "mpmath")
    return fn(*[values[str(a)] for a in fn.args])


def _k_up(x, beta: Fraction) -> int:
    """least k with beta^k >= x (x an mpf > 0), by exact comparison at 40 digits."""
    k = int(mpmath.floor(mpmath.log(x) / mpmath.log(mpmath.mpf(beta.numerator) / beta.denominator)))
    bq = lambda k: mpmath.mpf(beta.numerator) ** k / mpmath.mpf(beta.denominator) ** k  # noqa: E731
    while bq(k) < x:
        k += 1
    while bq(k - 1) >= x:
        k -= 1
    return k


def reference(weights: AnalysisWeights, settings: BoundSettings, plan: BoundPlan, empirical) -> dict:
    mpmath.mp.dps = 40
    try:
        T = assemble(massart=settings.massart, dudley=settings.dudley)
        fixed = settings.readout == "fixed" or weights.readout is None
        n, m = settings.n, plan.m
        bc, bs, bw, br = settings.base_c(L_), Fraction(settings.beta_s), Fraction(settings.beta_w), \
            Fraction(settings.beta_rho)
        def powq(b, k):  # exact rational, then rounded at 40 digits
            q = Fraction(b) ** k
            return mpmath.mpf(q.numerator) / q.denominator

        sig, c, kc = [], [], []
        for mat in weights.matrices:
            W = mpmath.matrix(mat.left.tolist())
            if mat.right is not None:
                W = W * mpmath.matrix(mat.right.tolist())
            s = sorted(mpmath.svd_r(W, compute_uv=False), reverse=True)[: mat.rank_cap]
            zero = not np.any(mat.left) or (mat.right is not None and not np.any(mat.right))
            s = [mpmath.mpf(0)] * len(s) if zero else s
            sig.append(s)
            k = 0 if zero else _k_up(s[0], bc)
            kc.append(k)
            c.append(powq(bc, k))
        idx = {(mt.layer, mt.kind, mt.head): j for j, mt in enumerate(weights.matrices)}
        lips = []
        for l in range(L_):
            hs = sum(_mp("head_summand", T, c_A=c[idx[(l, "QK", h)]], c_V=c[idx[(l, "V_tilde", h)]])
                     for h in range(H_))
            lips.append(_mp("layer_lipschitz", T, Sigma_h=hs, c_in=c[idx[(l, "M_in", -1)]],
                            c_out=c[idx[(l, "M_out", -1)]]))
        alphas = [None] * L_
        alphas[-1] = mpmath.mpf(1)
        for l in range(L_ - 2, -1, -1):
            alphas[l] = _mp("alpha_step", T, alpha=alphas[l + 1], mathcal_L=lips[l + 1])
        wn = mpmath.mpf(1) if weights.readout is None else mpmath.norm(mpmath.matrix(weights.readout.tolist()))
        if fixed:
            B_w, k_w = wn, None
        else:
            k_w = _k_up(wn, bw)
            B_w = powq(bw, k_w)
        rho = powq(br, plan.k_rho)
        keys = {"QK": "A", "V_tilde": "V", "M_in": "M_in", "M_out": "M_out"}
        terms, ents, pieces, lams, us = [], [], [], [], []
        for j, mat in enumerate(weights.matrices):
            l = mat.layer
            args = dict(c_V=c[idx[(l, "V_tilde", mat.head)]] if mat.kind == "QK" else 1,
                        c_in=c[idx[(l, "M_in", -1)]], c_out=c[idx[(l, "M_out", -1)]])
            g_fn = compile_expr(T.gamma[keys[mat.kind]], "mpmath")
            g = g_fn(*[args[str(a)] for a in g_fn.args])
            kap = _mp("kappa", T, B_w=B_w, alpha=alphas[l], gamma=g, rho=rho)
            d, r = sum(mat.shape), mat.rank_cap
            p = Fraction(plan.p_index[j], m)
            pm = mpmath.mpf(p.numerator) / p.denominator
            u, th = mpmath.mpf(plan.u[j]), mpmath.mpf(plan.vartheta[j])
            a = mpmath.mpf(plan.alpha_D)
            zero = sig[j][0] == 0
            if p == 0:
                rank = 0 if zero else r
                terms.append(_mp("ss_matrix_term_rank", T, c=c[j], d=d, kappa=kap, n=n, r_max=r, s=rank))
                ents.append(0 if rank == 0 else _mp("ss_matrix_entropy_rank", T, c=c[j], d=d, kappa=kap, r_max=r,
                                                     s=rank, u=u, m=mat.shape[0], n_c=mat.shape[1]))
                pieces.append(0 if rank == 0 else _mp("dd_matrix_piece_rank", T, alpha_D=a, c=c[j], d=d,
                                                       kappa=kap, r_max=r, s=rank, vartheta=th))
                lams.append(_mp("lambda_matrix_rank", T, k_c=kc[j], m_grid=m, r_max=r))
                us.append(0 if rank == 0 else u)
            else:
                S = sum(x ** pm for x in sig[j] if x > 0)
                ks = _k_up(S, bs)
                s = powq(bs, ks)
                terms.append(_mp("ss_matrix_term", T, c=c[j], d=d, kappa=kap, n=n, p=pm, s=s))
                ents.append(_mp("ss_matrix_entropy", T, c=c[j], d=d, kappa=kap, p=pm, r_max=r, s=s, u=u,
                                m=mat.shape[0], n_c=mat.shape[1]))
                name = "dd_matrix_piece_p2" if p == 2 else "dd_matrix_piece"
                extra = {} if p == 2 else {"p": pm}
                pieces.append(0 if a == mpmath.mpf(T.dd_upper) else _mp(
                    name, T, alpha_D=a, c=c[j], d=d, kappa=kap, s=s, vartheta=th, **extra))
                lams.append(_mp("lambda_matrix", T, k_c=kc[j], k_s=ks, m_grid=m))
                us.append(u)
        free = readout_free_forms(T)
        N = weights.width
        if fixed:
            ss_c = compile_expr(free["ss_closed"], "mpmath")
            ss_closed = ss_c(*[{"T_sum": sum(terms), "n": n}[str(a)] for a in ss_c.args])
            H = sum(ents)
            U = sum(us)
            dd_c = compile_expr(free["dd_closed"], "mpmath")
            dd = dd_c(*[{"D_sum": sum(pieces), "alpha_D": mpmath.mpf(plan.alpha_D), "n": n}[str(a)]
                        for a in dd_c.args])
            lt = compile_expr(free["Lambda_total"], "mpmath")
            Lam = lt(*[{"Lambda_sum": sum(lams), "k_rho": plan.k_rho}[str(a)] for a in lt.args])
        else:
            ss_closed = _mp("ss_closed", T, B_w=B_w, N=N, T_sum=sum(terms), n=n, rho=rho)
            H = sum(ents) + _mp("ss_readout_entropy", T, B_w=B_w, N=N, rho=rho, u_w=mpmath.mpf(plan.u_w))
            U = sum(us) + mpmath.mpf(plan.u_w)
            dd = _mp("dd_closed", T, B_w=B_w, D_sum=sum(pieces), N=N, alpha_D=mpmath.mpf(plan.alpha_D), n=n,
                     rho=rho, vartheta_w=mpmath.mpf(plan.vartheta_w))
            Lam = _mp("Lambda_total", T, Lambda_sum=sum(lams), k_rho=plan.k_rho, k_w=k_w)
        ss_obj = _mp("ss_objective", T, H_total=H, U_total=U, n=n)
        SS = min(ss_closed, ss_obj)
        delta = mpmath.mpf(1) / 20 if settings.delta == 0.05 else mpmath.mpf(settings.delta)
        bound = _mp("bound", T, DD=dd, Lambda=Lam, SS=SS, delta=delta, hat_E=empirical, n=n)
        return dict(ss_closed=ss_closed, ss_objective=ss_obj, dd=dd, Lambda=Lam, bound=bound,
                    terms=terms, sigma=sig, lips=lips)
    finally:
        mpmath.mp.dps = 15


def _close(a, b, rel=1e-10):
    return abs(float(a) - float(b)) <= rel * max(abs(float(b)), 1e-300)


def mixed_plan(weights, settings, **changes):
    """The planner's plan with p indices forced to cover 0, interior points and 2."""
    base = evaluate(weights, settings).plan
    J = len(weights.matrices)
    p_index = tuple((0, 1, base.m, 2 * base.m, 3)[j % 5] for j in range(J))
    return replace(base, p_index=p_index, **changes)


@pytest.mark.parametrize("readout", ["trained", "fixed"])
@pytest.mark.parametrize("alpha_D", [0.25, 0.01])
def test_bound_agrees_with_high_precision_reference(readout, alpha_D):
    w = tiny_weights(3)
    st = BoundSettings(n=50_000, margin=0.75, empirical=0.125, readout=readout)
    plan = mixed_plan(w, st, alpha_D=alpha_D)
    ours = evaluate(w, st, plan)
    ref = reference(w, st, plan, mpmath.mpf("0.125"))
    for key in ("ss_closed", "ss_objective", "dd", "Lambda", "bound"):
        got = {"ss_objective": ours.ss_objective}.get(key, getattr(ours, key))
        assert _close(got, ref[key]), (key, got, ref[key])
    for rec, t in zip(ours.matrices, ref["terms"]):
        assert _close(rec.ss_term, t), (rec.name, rec.ss_term, t)
    for l, lip in enumerate(ref["lips"]):
        assert _close(ours.lipschitz[l], lip)


def test_zero_matrix_and_missing_readout_match_the_reference():
    w = tiny_weights(5, zero=True, readout=False)
    st = BoundSettings(n=10_000, margin=0.5, empirical=0.0)
    ours = evaluate(w, st)
    zero = next(r for r in ours.matrices if r.name == "L1.H1.QK")
    assert zero.p_index == 0 and zero.rank_used == 0 and zero.ss_entropy == 0 and zero.k_c == 0
    assert ours.readout == "fixed" and ours.B_w == 1.0
    ref = reference(w, st, ours.plan, mpmath.mpf(0))
    assert _close(ours.bound, ref["bound"]) and _close(ours.ss_objective, ref["ss_objective"])


def test_singular_values_of_factored_products_match_exact_svd():
    w = tiny_weights(7)
    vals = singular_values(w.matrices)
    ref = reference(w, BoundSettings(n=10, margin=1.0), evaluate(w, BoundSettings(n=10, margin=1.0)).plan, 0)
    for j, mat in enumerate(w.matrices):
        exact = [float(x) for x in ref["sigma"][j]]
        assert vals[j, : mat.rank_cap] == pytest.approx(exact, abs=1e-14 * exact[0])
        assert np.all(vals[j, mat.rank_cap:] == 0)  # beyond the proven rank cap: nothing


def test_p_zero_uses_the_structural_rank_cap_not_a_numerical_rank():
    # a factored product of rank 1 < head dim 2: the numerical rank would say 1, the theorem needs
    # a proven bound, and the structural cap 2 is what the fast path uses
    w = tiny_weights(1)
    mats = list(w.matrices)
    q = mats[0]
    left = np.outer(q.left[:, 0], [1.0, 2.0])
    mats[0] = NamedMatrix(q.layer, q.head, q.kind, left, q.right)
    w = replace_weights(w, tuple(mats))
    st = BoundSettings(n=1000, margin=1.0)
    plan = replace(evaluate(w, st).plan, p_index=(0,) * len(mats))
    rec = evaluate(w, st, plan).matrices[0]
    assert rec.rank_used == D_ == rec.rank_cap


def replace_weights(w, matrices):
    return AnalysisWeights(matrices, w.num_layers, w.num_heads, w.width, w.head_dim, w.ff_dim,
                           w.activation, w.readout)


def test_reusing_precomputed_spectra_gives_the_same_bound():
    w = tiny_weights(2)
    st = BoundSettings(n=5000, margin=0.5, empirical=0.1)
    a = evaluate(w, st)
    b = evaluate(w, st, a.plan, spectra=compute_spectra(w))
    assert b.bound == pytest.approx(a.bound, rel=1e-12)


def test_float32_within_stated_tolerance():
    w = tiny_weights(4)
    st = BoundSettings(n=20_000, margin=0.5, empirical=0.1)
    a = evaluate(w, st)
    b = evaluate(w, st, a.plan, dtype=torch.float32)
    assert [r.k_c for r in a.matrices] == [r.k_c for r in b.matrices]
    assert [r.k_s for r in a.matrices] == [r.k_s for r in b.matrices]
    for key in ("ss_closed", "ss_objective", "dd", "Lambda", "confidence"):
        assert getattr(b, key) == pytest.approx(getattr(a, key), rel=FLOAT32_DERIVED_REL_TOL)
    # the reported bounds are rounded up by their own tolerances
    assert b.tolerance == FLOAT32_DERIVED_REL_TOL
    assert b.bound / (1 + b.tolerance) == pytest.approx(a.bound / (1 + a.tolerance), rel=FLOAT32_DERIVED_REL_TOL)
    assert b.bound >= a.bound / (1 + a.tolerance)


def test_empirical_from_margins_is_the_mean_ramp_loss():
    w = tiny_weights(0)
    margins = np.array([-1.0, 0.0, 0.25, 0.5, 2.0])
    st = BoundSettings(n=5, margin=0.5)
    got = evaluate(w, st, margins=margins).empirical
    ramp = REGISTRY["ramp_loss_cover"].constants["ramp"]
    fn = compile_expr(ramp, "mpmath")
    want = sum(fn(*[{"a": x, "rho": 0.5}[str(s)] for s in fn.args]) for x in margins) / 5
    assert got == pytest.approx(float(want), rel=1e-15)


def test_bad_plans_are_refused_with_one_clear_error():
    w = tiny_weights(0, zero=True)
    st = BoundSettings(n=100, margin=0.5)
    plan = evaluate(w, st).plan
    with pytest.raises(SpecboundError, match="matrices"):
        evaluate(w, st, replace(plan, p_index=plan.p_index[:-1]))
    with pytest.raises(SpecboundError, match="zero matrix L1.H1.QK"):
        j = [m.name for m in w.matrices].index("L1.H1.QK")
        evaluate(w, st, replace(plan, p_index=tuple(3 if i == j else p for i, p in enumerate(plan.p_index))))
    with pytest.raises(SpecboundError, match="sum to more than 1"):
        evaluate(w, st, replace(plan, vartheta=(0.5,) * len(plan.vartheta)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    w = tiny_weights(6)
    st = BoundSettings(n=5000, margin=0.5, empirical=0.1)
    a = evaluate(w, st)
    b = evaluate(w, st, a.plan, device="cuda")
    assert b.bound == pytest.approx(a.bound, rel=1e-10)


@pytest.mark.parametrize("shape", [(5, 20), (20, 5), (7, 7), (12, 7)])
def test_dense_singular_values_in_any_orientation_match_numpy(shape):
    rng = np.random.default_rng(sum(shape))
    mats = [NamedMatrix(0, -1, "M_in", rng.normal(size=shape) * 10.0 ** rng.integers(-3, 3)) for _ in range(3)]
    got = singular_values(mats)
    for j, m in enumerate(mats):
        want = np.linalg.svd(m.left, compute_uv=False)
        assert got[j] == pytest.approx(want, abs=1e-14 * want[0])

"""The planner's choices are on the grid, deterministic, valid, and at least as good as simple plans."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from specbound.checkpoint import load_weights
from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from specbound.numeric.bound import evaluate
from specbound.numeric.planner import choose_plan
from specbound.plan import BoundPlan, BoundSettings


def tiny_weights(seed: int = 0, zero: bool = False, head_dim: int = 2) -> AnalysisWeights:
    rng = np.random.default_rng(seed)
    L, H, N, F = 2, 2, 8, 12
    mats = []
    for l in range(L):
        for h in range(H):
            q = np.zeros((N, head_dim)) if zero and (l, h) == (0, 1) else rng.normal(size=(N, head_dim))
            mats.append(NamedMatrix(l, h, "QK", q, rng.normal(size=(head_dim, N))))
            mats.append(NamedMatrix(l, h, "V_tilde", rng.normal(size=(N, head_dim)), rng.normal(size=(head_dim, N))))
        mats.append(NamedMatrix(l, -1, "M_in", rng.normal(size=(N, F)) * 0.4))
        mats.append(NamedMatrix(l, -1, "M_out", rng.normal(size=(F, N)) * 0.4))
    return AnalysisWeights(ordered(mats), L, H, N, head_dim, F, "gelu", rng.normal(size=N))


def assert_valid(plan: BoundPlan, weights: AnalysisWeights, settings: BoundSettings) -> None:
    J, n = len(weights.matrices), settings.n
    assert plan.m == int(np.ceil(weights.num_layers + np.log(weights.width)))
    assert len(plan.p_index) == len(plan.u) == len(plan.vartheta) == J
    assert all(isinstance(i, int) and 0 <= i <= 2 * plan.m for i in plan.p_index)
    assert all(u >= 1.0 / n for u in plan.u) and plan.u_w >= 1.0 / n
    assert 0.0 < plan.alpha_D <= 0.25
    assert all(t > 0 for t in plan.vartheta) and plan.vartheta_w >= 0
    # exact rational sum of the float weights: the theorem needs sum <= 1
    assert sum(Fraction(t) for t in plan.vartheta) + Fraction(plan.vartheta_w) <= 1


@pytest.mark.parametrize("n", [100, 10**5, 10**9])
def test_choices_are_on_the_grid_and_valid(n):
    w = tiny_weights(0)
    st = BoundSettings(n=n, margin=0.3)
    assert_valid(choose_plan(w, st), w, st)


@pytest.mark.parametrize("margin", [0.3, 0.5, 1.0, 3.0, 1e-3])
def test_given_margin_is_rounded_down_onto_its_grid(margin):
    plan = choose_plan(tiny_weights(0), BoundSettings(n=1000, margin=margin))
    beta = Fraction(2)
    assert beta ** plan.k_rho <= Fraction(margin) < beta ** (plan.k_rho + 1)


def test_deterministic():
    w = tiny_weights(1)
    st = BoundSettings(n=10**6)
    margins = np.random.default_rng(3).normal(0.8, 0.5, size=500)
    assert choose_plan(w, st, margins=margins) == choose_plan(w, st, margins=margins)


def test_zero_matrix_gets_p_zero():
    w = tiny_weights(2, zero=True)
    plan = choose_plan(w, BoundSettings(n=10**9, margin=1.0))
    j = [m.name for m in w.matrices].index("L0.H1.QK")
    assert plan.p_index[j] == 0


def test_margin_is_chosen_from_the_data_when_not_given():
    w = tiny_weights(1)
    st = BoundSettings(n=10**6)
    margins = np.random.default_rng(0).normal(1.0, 0.3, size=2000)
    plan = choose_plan(w, st, margins=margins)
    assert_valid(plan, w, st)
    # brute force over the window of margin grid points: the planner's k_rho is no worse than any
    # other when each is evaluated with its own plan (same machinery, margin fixed)
    chosen = evaluate(w, st, plan, margins=margins).bound
    for k in range(plan.k_rho - 3, plan.k_rho + 4):
        other = BoundSettings(n=10**6, margin=float(Fraction(2) ** k))
        alt = evaluate(w, other, margins=margins).bound
        assert chosen <= alt * (1 + 1e-9), (k, chosen, alt)


def test_missing_margin_information_is_an_error():
    with pytest.raises(SpecboundError, match="margin"):
        choose_plan(tiny_weights(0), BoundSettings(n=10))


def _uniform(plan: BoundPlan, p: int, n: int) -> BoundPlan:
    J = len(plan.p_index)
    return replace(plan, p_index=(p,) * J, u=(1.0 / n,) * J, u_w=1.0 / n, alpha_D=0.25,
                   vartheta=(1.0 / (J + 1),) * J, vartheta_w=1.0 / (J + 1))


@pytest.mark.parametrize("n", [10**4, 10**7, 10**11])
def test_plan_beats_uniform_plans(n):
    w = load_weights(None)  # the embedded default network
    st = BoundSettings(n=n, margin=0.5, empirical=0.0)
    plan = choose_plan(w, st)
    ours = evaluate(w, st, plan).bound
    for p in (0, 1, plan.m, 2 * plan.m):
        assert ours <= evaluate(w, st, _uniform(plan, p, n)).bound * (1 + 1e-12), p


def decaying_mlp_weights(seed: int = 0) -> AnalysisWeights:
    """Width 48; M_in/M_out have full rank 48 but singular values 0.5^i: their rank form pays for
    48 directions while a Schatten radius with small p pays for about one."""
    rng = np.random.default_rng(seed)
    L, H, N, d, F = 2, 2, 48, 4, 48

    def decaying(m, n):
        u, _ = np.linalg.qr(rng.normal(size=(m, m)))
        v, _ = np.linalg.qr(rng.normal(size=(n, n)))
        k = min(m, n)
        return (u[:, :k] * 0.5 ** np.arange(k)) @ v[:, :k].T

    mats = []
    for l in range(L):
        for h in range(H):
            mats.append(NamedMatrix(l, h, "QK", rng.normal(size=(N, d)) * 0.2, rng.normal(size=(d, N)) * 0.2))
            mats.append(NamedMatrix(l, h, "V_tilde", rng.normal(size=(N, d)) * 0.2, rng.normal(size=(d, N)) * 0.2))
        mats.append(NamedMatrix(l, -1, "M_in", decaying(N, F)))
        mats.append(NamedMatrix(l, -1, "M_out", decaying(F, N)))
    return AnalysisWeights(ordered(mats), L, H, N, d, F, "gelu", rng.normal(size=N) / 7)


def test_plan_prefers_positive_p_for_decaying_full_rank_matrices():
    w = decaying_mlp_weights()
    st = BoundSettings(n=1000, margin=1.0, empirical=0.0)
    plan = choose_plan(w, st)
    chosen = [j for j, m in enumerate(w.matrices) if plan.p_index[j] > 0]
    assert chosen and all(w.matrices[j].kind in ("M_in", "M_out") for j in chosen), plan.p_index
    # and the choice pays off: moving any of them back to the rank form does not lower the bound
    ours = evaluate(w, st, plan).bound
    for j in chosen:
        p_index = tuple(0 if i == j else p for i, p in enumerate(plan.p_index))
        u = tuple(1.0 / st.n if i == j else x for i, x in enumerate(plan.u))
        assert ours <= evaluate(w, st, replace(plan, p_index=p_index, u=u)).bound


def test_planner_reads_enclosure_midpoints_not_a_second_svd():
    # the enclosures' midpoints are what the planner sees: the plan equals the plan from those
    # midpoints as precomputed spectra, and a deliberately distorted enclosure changes the inputs
    from specbound.certified.factored import enclose
    from specbound.numeric.terms import enclosure_midpoints, singular_values

    w = tiny_weights(3)
    st = BoundSettings(n=10**5, margin=0.3)
    encs = [enclose(m) for m in w.matrices]
    mids = enclosure_midpoints(encs)
    svd = singular_values(w.matrices)
    # independent check of the midpoints: certified enclosures are tight around the float SVD
    assert mids.shape[0] == len(w.matrices)
    k = min(mids.shape[1], svd.shape[1])
    assert np.allclose(mids[:, :k], svd[:, :k], rtol=1e-9, atol=1e-12)
    plan = choose_plan(w, st, encs)
    assert_valid(plan, w, st)
    assert plan == choose_plan(w, st, spectra=mids)


def test_planner_rejects_enclosures_of_another_network():
    from specbound.certified.factored import enclose

    w = tiny_weights(0)
    with pytest.raises(SpecboundError):
        choose_plan(w, BoundSettings(n=100, margin=0.3), [enclose(m) for m in w.matrices][:-1])


def test_planner_given_enclosures_runs_no_float_svd(monkeypatch):
    # with the enclosures given, any float SVD call is an error: the planner takes their midpoints
    import torch

    from specbound.pipeline import enclose_all

    def forbidden(*args, **kwargs):
        raise AssertionError("the planner ran a second float SVD")

    w = tiny_weights(2)
    st = BoundSettings(n=10**5, margin=0.3)
    encs = enclose_all(w)
    for mod, name in [(torch.linalg, "svdvals"), (torch.linalg, "svd"), (torch, "svd"), (np.linalg, "svd"),
                      (np.linalg, "eigh"), (np.linalg, "eigvalsh"), (torch.linalg, "eigvalsh")]:
        monkeypatch.setattr(mod, name, forbidden)
    assert_valid(choose_plan(w, st, encs), w, st)


def test_blocks_of_matrices_do_not_change_the_plan(monkeypatch):
    # the closed forms run over blocks of matrices (bounded temporaries for thousands of matrices):
    # one matrix per block must give exactly the plan of one block for all, margins chosen or given
    from specbound.numeric import terms

    w = tiny_weights(5)
    margins = np.random.default_rng(1).normal(2.0, 1.0, size=500)
    for st in (BoundSettings(n=10**5), BoundSettings(n=10**4, margin=0.3)):
        whole = choose_plan(w, st, margins=margins)
        monkeypatch.setattr(terms, "BLOCK_ELEMENTS", 1)
        tiny = choose_plan(w, st, margins=margins)
        monkeypatch.undo()
        assert tiny == whole
        assert evaluate(w, st, tiny, margins=margins).bound == evaluate(w, st, whole, margins=margins).bound

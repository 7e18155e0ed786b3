"""The Occam route as lemma objects (derivation/occam.py) and its theorem variants (derivation/routes.py).

Each condition of proofs_notes/occam_route.md that the derivation can carry is checked here with a
check written from the note (not from the code): the cover budget is exactly gamma/2 (with mutants:
gamma instead of gamma/2, a read-out share dropped), the scales depend on the grid point and the
margin only (C2), the price is posthoc_union's with k_gamma for k_rho (C3), the delta split adds log 2 to
each route, the fixed read-out forms drop the read-out, and the route is assembled for every model
variant the network cover covers (C1).  The CLI renders all three routes; the default is unchanged.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import mpmath
import pytest
import sympy as sp

from specbound.cli import main
from specbound.derivation import symbols as S
from specbound.derivation.backends import compile_expr, rounding_violations
from specbound.derivation.render import render
from specbound.derivation.routes import (
    RADEMACHER_ONLY, ROUTES, OccamTheorem, assemble_occam, assemble_routes, occam_readout_free_forms,
)
from specbound.derivation.theorem import DerivationError, assemble
from specbound.vocabulary import ACTIVATIONS, MODEL_VARIANTS


# ------------------------------------------------------------------------------- the command


def test_rademacher_route_is_the_default_and_renders_byte_identically(capsys):
    assert main(["theorem"]) == 0
    default = capsys.readouterr().out
    assert main(["theorem", "--route", "rademacher"]) == 0
    assert capsys.readouterr().out == default == render(assemble(), "text")


@pytest.mark.parametrize("fmt", ["text", "markdown", "latex"])
def test_route_option_renders_occam_and_both(capsys, fmt):
    assert main(["theorem", "--route", "occam", "--format", fmt]) == 0
    assert capsys.readouterr().out == render(assemble_occam(), fmt)
    assert main(["theorem", "--route", "both", "--format", fmt, "--model", "causal"]) == 0
    assert capsys.readouterr().out == render(assemble_routes(model="causal"), fmt)


def test_route_option_takes_overrides_and_rejects_bad_ones(capsys):
    assert main(["theorem", "--route", "occam", "--set", "C_sm=2"]) == 0
    assert "constant C_sm = 2  [user override]" in capsys.readouterr().out
    assert main(["theorem", "--route", "both", "--set", "C_sm=-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specbound: error: override C_sm")


def test_unknown_route_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["theorem", "--route", "pac-bayes"])
    assert exc.value.code == 2
    assert ROUTES == ("rademacher", "occam", "both")


# ------------------------------------------------------------------------------- C1: every variant


@pytest.mark.parametrize("model", MODEL_VARIANTS)
def test_occam_route_is_assembled_for_every_model_variant_of_the_network_cover(model):
    activation = "silu" if model.startswith("ls") else "gelu"
    occ = assemble_occam(model=model, activation=activation)
    rad = assemble(model=model, activation=activation)
    names = set(occ.lemmas)
    assert {"proj_unit_ball", "network_cover", "posthoc_union", "occam_route", "binomial_inversion"} <= names
    assert not names & set(RADEMACHER_ONLY)
    assert dict(occ.gamma) == dict(rad.gamma) and occ.layer_lipschitz == rad.layer_lipschitz
    assert occ.kappa == rad.kappa.xreplace({S.rho: S.gamma_m})  # kappa_j with rho replaced by gamma


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_occam_route_takes_every_activation(activation):
    assert assemble_occam(activation=activation).variants["activation"] == activation


def test_bad_requests_are_refused_as_in_the_main_theorem():
    with pytest.raises(DerivationError):
        assemble_occam(model="lstm")
    with pytest.raises(DerivationError):
        assemble_occam({"C_sm": -1})


# ------------------------------------------------------------------------------- the cover budget


def _budget_errors(T: OccamTheorem) -> list[str]:
    """occam_route.md step 1: B_w alpha_l gamma_j eps_j = vartheta_j gamma/2 per matrix and
    eps_w = vartheta_w gamma/2, so with shares summing to 1 the cover radius is exactly gamma/2."""
    out = []
    per_matrix = S.B_w * S.alpha * S.gamma * T.eps_matrix.xreplace({S.kappa: T.kappa})
    if sp.simplify(per_matrix - S.vartheta * S.gamma_m / 2) != 0:
        out.append(f"matrix step {per_matrix}")
    if sp.simplify(T.eps_readout - S.vartheta_w * S.gamma_m / 2) != 0:
        out.append(f"read-out step {T.eps_readout}")
    total = sp.simplify(T.share.xreplace({S.omega: S.Omega_sum}) + T.share_readout)
    if sp.simplify(total.xreplace({S.Omega: T.Omega_total}) - 1) != 0:
        out.append(f"shares sum to {total}")
    return out


def test_cover_budget_is_exactly_half_the_margin():
    assert _budget_errors(assemble_occam()) == []
    assert _budget_errors(assemble_occam(model="ls", activation="silu")) == []


@pytest.mark.parametrize("mutant", [
    lambda T: dataclasses.replace(T, eps_matrix=2 * T.eps_matrix),  # gamma instead of gamma/2
    lambda T: dataclasses.replace(T, eps_readout=S.vartheta_w * S.gamma_m),
    lambda T: dataclasses.replace(T, Omega_total=S.Omega_sum),  # read-out share not paid for
])
def test_mutated_budget_is_caught(mutant):
    assert _budget_errors(mutant(assemble_occam())) != []


def test_lemma_records_the_budget_identity_and_the_two_transfers():
    from specbound.derivation.occam import occam_route

    eq = occam_route.constants["budget_matrix"]
    assert isinstance(eq, sp.Equality) and sp.simplify(eq.lhs - eq.rhs) == 0
    assert occam_route.constants["cover_radius"] == S.gamma_m / 2
    err, cnt = occam_route.constants["transfer_error"], occam_route.constants["transfer_count"]
    assert err.args[1].rhs == S.gamma_m / 2 and cnt.args[1].rhs == S.gamma_m  # count at gamma, not below


# ------------------------------------------------------------------------------- C2, C3 and the rule


#: symbols a scale or an entropy may depend on: grid values, the margin, the rule (never S or n)
GRID = {S.s, S.c, S.p, S.r_max, S.d, S.m_rows, S.n_cols, S.kappa, S.vartheta, S.vartheta_w, S.gamma_m, S.B_w,
        S.N, S.omega, S.Omega, S.Omega_sum, S.H_sum, S.alpha, S.gamma}


def test_scales_and_entropy_depend_on_the_grid_point_and_the_margin_only():
    T = assemble_occam()
    for name in ("kappa", "weight", "weight_rank", "weight_readout", "Omega_total", "share", "share_readout",
                 "eps_matrix", "eps_readout", "entropy_matrix", "entropy_matrix_rank", "entropy_readout",
                 "H_total"):
        free = getattr(T, name).free_symbols
        assert free <= GRID, (name, free - GRID)
    for name in ("weight", "weight_rank", "weight_readout"):  # the rule: integers of the grid point
        assert getattr(T, name).free_symbols <= {S.s, S.r_max, S.d, S.m_rows, S.n_cols, S.N}


def test_rule_gives_exact_shares_summing_to_one_and_zero_only_at_rank_zero():
    T = assemble_occam()
    # (p, s, r_max, m, n_c) of six matrices: ranks at p = 0 (one of them proven 0), Schatten at p > 0
    mats = [(0, 1, 1, 2, 2), (0, 0, 1, 2, 2), (Fraction(1, 2), 3, 2, 2, 2), (0, 2, 2, 2, 2), (1, 5, 2, 2, 4),
            (0, 1, 2, 3, 3)]
    weights = []
    for p, s, r_max, m, n_c in mats:
        expr = T.weight_rank if p == 0 else T.weight
        weights.append(Fraction(str(expr.subs({S.s: s, S.r_max: r_max, S.d: m + n_c, S.m_rows: m,
                                               S.n_cols: n_c}))))
    # min(r d, m n_c): the volumetric weight at a full cap, the rank weight below it (sharpenings S1)
    assert weights == [4, 0, 4, 4, 8, 6]
    width = 2
    omega_total = Fraction(str(T.Omega_total.subs({S.Omega_sum: sum(weights), S.N: width})))
    shares = [w / omega_total for w in weights] + [Fraction(width) / omega_total]
    assert sum(shares) == 1 and shares[1] == 0 and all(x > 0 for i, x in enumerate(shares) if i != 1)


def test_occam_price_is_posthoc_price_with_k_gamma_for_k_rho():
    occ, rad = assemble_occam(), assemble()
    assert occ.Lambda_total == rad.Lambda_total.xreplace({S.k_rho: S.k_gamma})
    lam = sp.lambdify(S.k, occ.lambda_k, "math")
    # the prior pi_Z sums to one (posthoc_union step 1): partial sums 1 - 4/(3(K+2))
    total = sum(mpmath.exp(-lam(i)) for i in range(-400, 401))
    assert abs(total - (1 - 4 / (3 * 402))) < 1e-12


def test_entropy_fields_compile_to_arb_with_every_ceiling_on_the_upper_side():
    T = assemble_occam()
    for name in ("entropy_matrix", "entropy_matrix_rank", "entropy_readout", "H_total", "kappa", "eps_matrix",
                 "Lambda_total", "confidence_mass", "bound_k0"):
        expr = getattr(T, name)
        assert rounding_violations(expr) == [], name
        compile_expr(expr, "arb")


# ------------------------------------------------------------------------------- two routes


def _split_errors(R) -> list[str]:
    """occam_route.md step 5: each route at delta/2: log(2/delta) -> log(2/delta) + log 2 in the
    Rademacher confidence, + log 2 in the Occam mass; reported = the minimum of the two bounds."""
    out = []
    vals = {S.delta: sp.Rational(1, 20), S.Lambda: 7, S.n: 1000, S.H_theta: 123}
    half = R.rademacher.confidence.xreplace({S.delta: S.delta / 2}).subs(vals)
    if abs(float(R.confidence.subs(vals) - half)) > 1e-15:
        out.append("Rademacher confidence not at delta/2")
    unsplit = assemble_occam(dict(R.rademacher.constants) if R.rademacher.overridden else None,
                             activation=R.rademacher.variants["activation"], model=R.rademacher.variants["model"])
    if sp.simplify(R.occam.confidence_mass - unsplit.confidence_mass - sp.log(2)) != 0:
        out.append("Occam mass without log 2")
    if R.reported != sp.Min(R.rademacher_bound, R.occam.bound):
        out.append("reported is not the minimum")
    return out


def test_delta_split_adds_log_2_to_each_route_and_reports_the_minimum():
    R = assemble_routes()
    assert _split_errors(R) == []
    assert "delta/2" in R.variants["delta"] and R.occam.variants["delta"].startswith("delta/2")
    assert set(R.lemmas) == set(R.rademacher.lemmas) | set(R.occam.lemmas)


@pytest.mark.parametrize("mutant", [
    lambda R: dataclasses.replace(R, confidence=R.rademacher.confidence),
    lambda R: dataclasses.replace(R, occam=assemble_occam()),
    lambda R: dataclasses.replace(R, reported=R.occam.bound),
])
def test_mutated_split_is_caught(mutant):
    assert _split_errors(mutant(assemble_routes())) != []


def test_unsplit_occam_route_runs_at_delta():
    T = assemble_occam()
    assert T.confidence_mass == S.H_theta + S.Lambda + sp.log(1 / S.delta)
    assert T.variants["delta"] == "delta"


def test_fixed_readout_forms_drop_the_readout_weight_entropy_and_price():
    free = occam_readout_free_forms(assemble_occam())
    assert free["Omega_total"] == S.Omega_sum and free["H_total"] == S.H_sum
    assert not free["Lambda_total"].has(S.k_w) and free["Lambda_total"].has(S.k_gamma)


# ------------------------------------------------------------------------------- BinInv's closed forms


def test_closed_forms_agree_with_the_certified_inversion():
    from flint import arb

    from specbound.certified.binomial import bininv_upper, kl

    T = assemble_occam()
    k0 = sp.lambdify((S.C_mass, S.n), T.bound_k0, "mpmath")
    for n, C in ((1, 3.0), (10, 2.5), (10**6, 1.2e4), (10**9, 1e-3)):
        with mpmath.workdps(40):
            ref = k0(mpmath.mpf(C), n)
            ours = mpmath.mpf(float(bininv_upper(n, 0, C).mid()))
            assert ours >= ref and (ours - ref) / ref < 1e-14
    q, t = sorted(T.kl.free_symbols, key=lambda s: s.name)
    kl_ref = sp.lambdify((q, t), T.kl, "mpmath")
    for qv, tv in ((0.1, 0.3), (0.5, 0.5001), (0.02, 0.9)):
        ball = kl(arb(qv), arb(tv))
        with mpmath.workdps(40):
            assert abs(float(ball.mid()) / float(kl_ref(mpmath.mpf(qv), mpmath.mpf(tv))) - 1) < 1e-12

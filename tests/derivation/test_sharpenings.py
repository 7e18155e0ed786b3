"""The sharpenings in force (proofs_notes/sharpenings.md), and the guard of S3.

S3, the one-McDiarmid-step confidence, is proven only while SS and DD bound the empirical Rademacher
complexity for *every* sample (functions of the grid point, n and the choices).  Two guards, both
tested here: the assembly refuses the form when a complexity field contains a quantity measured on S
(``theorem.sample_dependent_complexity``), and the evaluation driver computes SS and DD from no input
that depends on S (changing the sample-derived facts moves the empirical term only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

import specbound.derivation.theorem as TH
from specbound.derivation import symbols as S
from specbound.derivation.assembly import beta_c_expression
from specbound.derivation.theorem import DerivationError, assemble, sample_dependent_complexity
from specbound.plan import BoundSettings


def test_s1_every_matrix_entropy_is_the_smaller_of_its_cover_and_the_volumetric_one():
    T = assemble()
    vol = S.m_rows * S.n_cols * sp.log(1 + 2 * S.c / S.eps)
    assert T.entropy_volumetric == vol
    for name in ("ss_matrix_entropy", "ss_matrix_entropy_rank"):
        expr = getattr(T, name)
        assert isinstance(expr, sp.Min) and expr.has(S.m_rows) and expr.has(S.n_cols), name


def test_s2_bases_in_force():
    L = sp.Symbol("L", positive=True, integer=True)
    assert sp.simplify(beta_c_expression("plain").subs(S.L, L) - (1 + 1 / (16 * L))) == 0
    assert sp.simplify(beta_c_expression("ls").subs(S.L, L) - (1 + 1 / (24 * L))) == 0
    st = BoundSettings(n=1)
    assert st.beta_w == Fraction(17, 16) == st.beta_gamma and st.beta_rho == st.beta_s == 2
    # sharpenings.md S2: beta_w beta_c^(4L) <= 17/16 e^(1/4) < 1.37 at every depth
    for depth in (1, 2, 4, 12, 48):
        assert float(st.beta_w) * float(st.base_c(depth)) ** (4 * depth) < 1.37


def test_s3_confidence_is_one_mcdiarmid_step():
    T = assemble()
    want = sp.sqrt((sp.log(1 / S.delta) + S.Lambda) / (2 * S.n))
    assert sp.simplify(T.confidence - want) == 0


def test_s3_is_refused_when_a_complexity_field_depends_on_the_sample(monkeypatch):
    """A data-dependent complexity (here: an entropy that reads the empirical term) would need the
    two-step confidence: the assembly must refuse to build the one-step theorem."""
    assert sample_dependent_complexity(dict(assemble().items())) == []
    original = TH.REGISTRY
    lem = original["rank_cover"]
    bad = dataclasses.replace(lem, covering=lem.covering * (1 + S.emp))
    monkeypatch.setattr(TH, "REGISTRY", {**original, "rank_cover": bad})
    TH._assemble.cache_clear()
    try:
        with pytest.raises(DerivationError, match="sharpenings.md S3"):
            assemble()
    finally:
        monkeypatch.undo()
        TH._assemble.cache_clear()
    assemble()  # restored


def _ss_dd(evaluation):
    t = evaluation.terms
    return float(t.SS), float(t.DD), float(t.Lambda), float(t.confidence)


def test_s3_the_driver_takes_ss_and_dd_from_no_sample_input():
    """The same network and plan with different sample facts (empirical term, margins): SS, DD, Lambda
    and the confidence do not move, in both contexts (numpy here; the Arb context runs the same code)."""
    from specbound.certified.evaluation import evaluate
    from specbound.numeric.context import NumpyContext
    from specbound.numeric.evaluation import FloatFacts
    from specbound.numeric.planner import choose_plan
    from specbound.numeric.terms import compiled_theorem, network_facts
    from tests.numeric.test_bound import tiny_weights

    w = tiny_weights(3)
    st = BoundSettings(n=5000, margin=0.5)
    plan = choose_plan(w, st)
    ct = compiled_theorem(st, w.activation, w.variant)
    facts = network_facts(w)
    rng = np.random.default_rng(0)
    runs = [evaluate(NumpyContext(ct), FloatFacts(facts, replace(st, empirical=e), m), plan)
            for e, m in ((None, rng.normal(1, 1, 5000)), (None, rng.normal(-1, 2, 5000)), (0.3, None))]
    assert len({_ss_dd(r) for r in runs}) == 1
    assert len({float(r.terms.empirical) for r in runs}) == 3

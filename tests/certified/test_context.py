"""The two arithmetic contexts meet the one contract of certified/context.py: same operations, the
Arb ball encloses the exact value the float result approximates, and Arb never forms a masked-out
formula."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from flint import arb

from specbound.certified import generated as arb_table
from specbound.certified.arb import WORK_PREC, precision
from specbound.certified.compiled import compiled_theorem
from specbound.certified.context import ArbContext
from specbound.errors import CertificationError
from specbound.numeric import generated as float_table
from specbound.numeric.context import NumpyContext
from specbound.plan import BoundSettings

ST = BoundSettings(n=100)


@pytest.fixture(scope="module")
def contexts():
    return (ArbContext(compiled_theorem(arb_table, ST, "gelu")),
            NumpyContext(compiled_theorem(float_table, ST, "gelu")))


def test_each_context_takes_only_its_own_theorem():
    with pytest.raises(ValueError):
        ArbContext(compiled_theorem(float_table, ST, "gelu"))
    with pytest.raises(ValueError):
        NumpyContext(compiled_theorem(arb_table, ST, "gelu"))


def test_exact_rationals_are_enclosed_by_the_ball_and_rounded_by_the_float(contexts):
    a, f = contexts
    with precision(WORK_PREC):
        third = a.exact(Fraction(1, 3))
        assert third.contains(arb(1) / 3) and third.rad() < 2.0 ** -250
        assert a.exact(Fraction(3, 8)).is_exact() and a.exact(7) == 7
    assert f.exact(Fraction(1, 3)) == 1 / 3 and f.exact(7) == 7.0


def test_sums_start_from_an_exact_zero_and_add_in_index_order(contexts):
    a, f = contexts
    xs = [0.1, 0.2, 0.3, 1e-17]
    with precision(WORK_PREC):
        ball = a.sum(a.vector([arb(x) for x in xs]))
        by_hand = arb(0)
        for x in xs:
            by_hand += arb(x)
        assert str(ball) == str(by_hand)
        rows = a.sum(a.vector([arb(x) for x in xs]).reshape(2, 2), axis=-1)
        assert [str(r) for r in rows] == [str(arb(0.1) + arb(0.2)), str(arb(0.3) + arb(1e-17))]
    assert f.sum(np.array(xs)) == np.sum(xs) == pytest.approx(float(ball.mid()), rel=1e-15)


def test_group_sums_add_each_groups_heads_in_order_in_both_contexts(contexts):
    a, f = contexts
    x = np.array([[1.0, 2.0, 4.0, 8.0], [0.5, 0.25, 0.125, 1.0]])
    group = np.array([0, 1, 0, 1])
    want = np.array([[5.0, 10.0], [0.625, 1.25]])
    assert np.array_equal(f.group_sum(x, group, 2), want)
    with precision(WORK_PREC):
        got = a.group_sum(a.vector([arb(v) for v in x.ravel()]).reshape(2, 4), group, 2)
    assert [[float(v) for v in row] for row in got] == want.tolist()


def test_select_and_min_agree(contexts):
    a, f = contexts
    mask = np.array([True, False, True])
    assert f.select(mask, np.array([1.0, 2.0, 3.0]), 0.0).tolist() == [1.0, 0.0, 3.0]
    got = a.select(mask, a.vector([arb(1), arb(2), arb(3)]), a.zero)
    assert [float(v) for v in got] == [1.0, 0.0, 3.0]
    assert float(a.min(arb(2), arb(1))) == 1.0 == f.min(2.0, 1.0)


def test_a_masked_out_entry_is_never_formed_in_arb_but_computed_in_float(contexts):
    a, f = contexts
    # lambda_matrix needs k_s, which does not exist at p = 0 (None in the certified radii): Arb
    # must not call the field there; numpy computes everything and the caller selects
    mask = np.array([True, False])
    with precision(WORK_PREC):
        got = a.field("lambda_matrix", where=mask, k_c=a.vector([3, 5]), k_s=a.vector([2, None]), m_grid=4)
        assert got[1] is None and got[0].contains(a.field("lambda_matrix", k_c=3, k_s=2, m_grid=4))
        with pytest.raises(TypeError):
            a.field("lambda_matrix", k_c=a.vector([3, 5]), k_s=a.vector([2, None]), m_grid=4)
    out = f.field("lambda_matrix", where=mask, k_c=np.array([3.0, 5.0]), k_s=np.array([2.0, np.nan]), m_grid=4.0)
    assert out.shape == (2,) and float(out[0]) == pytest.approx(float(got[0].mid()), rel=1e-14)


def test_fields_broadcast_over_vectors_alike(contexts):
    a, f = contexts
    c = [1.5, 2.0, 0.75]
    with precision(WORK_PREC):
        balls = a.field("kappa", B_w=2, alpha=a.vector([arb(x) for x in c]), gamma=a.vector([arb(1)] * 3), rho=0.5)
    floats = f.field("kappa", B_w=2.0, alpha=np.array(c), gamma=np.ones(3), rho=0.5)
    assert [float(b.mid()) for b in balls] == pytest.approx(floats.tolist(), rel=1e-15)


def test_a_vanishing_term_is_written_zero_in_float_and_checked_in_arb(contexts):
    a, f = contexts
    assert f.vanish(True, np.array([-0.0, 2e-16])).tolist() == [0.0, 0.0]
    with precision(WORK_PREC):
        x = a.vector([arb("0 +/- 1e-70"), arb(0)])
        assert a.vanish(True, x) is x  # the ball already holds the exact 0: kept
        with pytest.raises(CertificationError):
            a.vanish(True, a.vector([arb(1)]))

"""Side by side with the paper's proxy (docs/design.md section 6): which factors match and which differ."""

from specbound.derivation import assemble
from specbound.derivation.comparison import paper_comparison


def _rows(th=None):
    return {r.factor: r for r in paper_comparison(th)}


def test_factors_that_differ_are_flagged():
    rows = _rows()
    for factor in ("dimension factor", "scale inside (.)^p", "softmax constant C_sm", "gamma_V",
                   "gamma_M_in", "gamma_M_out", "additive term"):
        assert rows[factor].match is False, factor
    assert rows["Schatten power"].match and rows["exponent"].match
    assert rows["L_phi value"].match  # 1.13 >= L_phi


def test_safe_override_reproduces_the_paper_softmax_constant():
    rows = _rows(assemble({"C_sm": 2}))
    assert rows["softmax constant C_sm"].match and rows["head summand"].match


def test_ours_has_no_depth_factor_and_is_linear_in_width():
    rows = _rows()
    assert "L" not in {str(s) for s in rows["scale inside (.)^p"].ours.free_symbols}
    assert "N" not in {str(s) for s in rows["dimension factor"].ours.free_symbols}

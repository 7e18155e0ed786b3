"""Side by side: our assembled per-matrix term vs the paper's BERT-adapted proxy (docs/design.md section 6).

The paper's proxy is transcribed from its public experiment code (docs/design.md section 6), *not* derived
here; it is the object of comparison, so it is written out below on purpose.  Our side is read
from :func:`~specbound.derivation.theorem.assemble`, never retyped.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .symbols import B_w, L, N, alpha, c_A, c_in, c_out, c_V, gamma, kappa, p, rho, s
from .theorem import Theorem, assemble


@dataclass(frozen=True)
class FactorComparison:
    """One factor of the per-matrix term: the paper's form, ours, and whether they agree."""

    factor: str
    paper: sp.Expr
    ours: sp.Expr
    match: bool
    note: str


#: the proxy's per-matrix contribution c_j(p) = (S_p (gamma alpha L)^p N^{p+1})^{1/(p+2)}
PAPER_TERM = (s * (gamma * alpha * L) ** p * N ** (p + 1)) ** (1 / (p + 2))
PAPER_GAMMA = {"A": 2 * c_V * c_out * c_in, "V": c_out * c_in, "M_in": c_out, "M_out": sp.Integer(1)}
PAPER_HEAD_SUMMAND = c_V * (1 + 4 * c_A)
PAPER_L_PHI = sp.Rational(113, 100)
PAPER_ADDITIVE = sp.sqrt(L)


def paper_comparison(theorem: Theorem | None = None) -> tuple[FactorComparison, ...]:
    """Which factors of the paper's proxy match ours and which differ (proofs_notes/theory.md section 7)."""
    th = theorem if theorem is not None else assemble()
    inner = th.a_matrix  # s (2 kappa)^p d lbar: our base before the 1/(p+2) power and the 1/n
    dim = sp.simplify(inner / (s * (2 * kappa) ** p))
    scale = sp.simplify(inner / dim / s) ** (1 / p)
    rows = [
        FactorComparison("Schatten power", s, s, True, "ours is the rounded-up radius s~_j"),
        FactorComparison("exponent", 1 / (p + 2), sp.Integer(1) / (p + 2), True,
                         "single-scale rate n^{-1/(p+2)}; Dudley gives n^{-1/2} up to logs"),
        FactorComparison("dimension factor", N ** (p + 1), dim, False,
                         "ours is linear in the width (d_j = m_j + n_j) times a log, for every p"),
        FactorComparison("scale inside (.)^p", gamma * alpha * L,
                         sp.simplify(scale.subs(kappa, B_w * alpha * gamma / rho)), False,
                         "no depth factor L: each matrix has its own loss scale u_j"),
        FactorComparison("softmax constant C_sm", sp.Integer(2), th.constants["C_sm"],
                         th.constants["C_sm"] == 2, "paper's 1 + 4||A|| is 1 + 2 C_sm ||A|| with C_sm = 2"),
        FactorComparison("head summand", PAPER_HEAD_SUMMAND, th.head_summand,
                         sp.simplify(PAPER_HEAD_SUMMAND - th.head_summand) == 0,
                         "paper's is >= ours: safe"),
        FactorComparison("L_phi value", PAPER_L_PHI, th.constants["L_phi"],
                         bool(PAPER_L_PHI >= th.constants["L_phi"]),
                         "1.13 is a valid upper bound for the GELU constant (match = paper >= ours)"),
    ]
    for key, paper in PAPER_GAMMA.items():
        ours = th.gamma[key]
        ratio = sp.simplify(ours / paper)
        rows.append(FactorComparison(
            f"gamma_{key}", paper, ours, ratio == 1,
            f"ours / paper = {sp.sstr(ratio)}" + ("" if key != "M_out" else
                                                  " (paper's 1 is B_phi ||M_in|| in our model)")))
    rows.append(FactorComparison("additive term", PAPER_ADDITIVE, th.confidence, False,
                                 "ours is the confidence term 3 sqrt((log(2/delta)+Lambda)/(2n));"
                                 " Lambda grows like J = L(2H+2)"))
    return tuple(rows)

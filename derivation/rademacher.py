"""Rademacher step (proofs_notes/theory.md sections 4-5, 7 and the section 10 sharpenings).

Both chaining bounds come in two forms.  The *centred* forms (proofs_notes/theory.md section 10; centre the
[0,1]-valued cover at 1/2, radius sqrt(n)/2) are the defaults; the *uncentred* forms are kept as
named alternatives (``variant="uncentred"``) so a rendered theorem says which one is in force.
"""

from __future__ import annotations

import sympy as sp

from .lemma import Lemma
from .symbols import R_hat, alpha_D, card, delta, eps, n, rho, u

_a = sp.Symbol("a", real=True)
_b = sp.Symbol("b", real=True)
_logN = sp.Function("log_N")  # u |-> log N(G, u, L_2(P_n)) (nonincreasing)

#: ramp loss l_rho(t) = min(1, max(0, 1 - t/rho))
RAMP = sp.Min(1, sp.Max(0, 1 - _a / rho))

ramp_loss_cover = Lemma(
    name="ramp_loss_cover",
    assumptions=("rho > 0", "an eps-cover of F in sup norm"),
    statement=sp.Le(sp.Abs(RAMP - RAMP.subs(_a, _b)), sp.Abs(_a - _b) / rho),
    constants={"loss_scale": eps / rho, "ramp": RAMP},
)

#: coefficient c_M in  R_hat <= u + sqrt(c_M log N(u))
MASSART_COEFF = {"centred": 1 / (2 * n), "uncentred": 2 / n}

massart_single_scale = Lemma(
    name="massart_single_scale",
    assumptions=("G [0,1]-valued", "a u-cover of G in L_inf(S) with N points (centres in [0,1]^n)"),
    statement=sp.Le(R_hat, u + sp.sqrt(MASSART_COEFF["centred"] * sp.log(card))),
    constants={
        "coefficient": MASSART_COEFF["centred"],
        "coefficient_uncentred": MASSART_COEFF["uncentred"],
    },
    source="Massart's finite-class lemma; centred at 1/2 (proofs_notes/theory.md section 10.1)",
)

#: Dudley upper integration limit: 1/4 centred (R_hat <= 1/2, radius sqrt(n)/2), 1/2 uncentred.
DUDLEY_UPPER = {"centred": sp.Rational(1, 4), "uncentred": sp.Rational(1, 2)}


def dudley_bound(upper: sp.Expr) -> sp.Expr:
    """The Dudley right-hand side 4 alpha + 12/sqrt(n) int_alpha^upper sqrt(log N(u)) du."""
    return 4 * alpha_D + 12 / sp.sqrt(n) * sp.Integral(sp.sqrt(_logN(u)), (u, alpha_D, upper))


dudley = Lemma(
    name="dudley",
    assumptions=("G [0,1]-valued", "alpha in (0, 1/4]", "covers in L_2(P_n) (L_inf(S) covers suffice)"),
    statement=sp.Le(R_hat, dudley_bound(DUDLEY_UPPER["centred"])),
    constants={
        "upper": DUDLEY_UPPER["centred"],
        "upper_uncentred": DUDLEY_UPPER["uncentred"],
        "alpha_coeff": sp.Integer(4),
        "integral_coeff": sp.Integer(12),
    },
    source="Shalev-Shwartz & Ben-David Lemma 27.4 (dyadic -> integral); centred (proofs_notes/theory.md section 10.2)",
)

_Eg = sp.Symbol("E_g", real=True)
_Eg_hat = sp.Symbol("hat_E_g", real=True)
_R_bar = sp.Symbol("bar_R", nonnegative=True)  # a data-independent bound: hat_R_S(G) <= bar_R for every S
#: one McDiarmid step (proofs_notes/sharpenings.md S3): valid for a complexity bound bar_R that holds
#: for EVERY sample (a function of the grid point, n and choices only), as SS and DD are
CONFIDENCE_BASE = sp.sqrt(sp.log(1 / delta) / (2 * n))
#: the two-step form with the empirical hat_R_S: needed again if a data-dependent complexity is introduced
CONFIDENCE_TWO_STEP = 3 * sp.sqrt(sp.log(2 / delta) / (2 * n))
rademacher_generalization = Lemma(
    name="rademacher_generalization",
    assumptions=("G a fixed [0,1]-valued class", "S i.i.d. of size n", "0 < delta < 1",
                 "bar_R >= hat_R_S(G) for EVERY sample S of size n (data-independent: one McDiarmid step; "
                 "a data-dependent complexity needs confidence_two_step with hat_R_S)"),
    statement=sp.Le(_Eg, _Eg_hat + 2 * _R_bar + CONFIDENCE_BASE),
    constants={"rademacher_coeff": sp.Integer(2), "confidence": CONFIDENCE_BASE,
               "confidence_two_step": CONFIDENCE_TWO_STEP},
    source="Mohri-Rostamizadeh-Talwalkar 2018 Thm 3.3; McDiarmid 1989; one step for a data-independent "
           "bound (proofs_notes/sharpenings.md S3)",
)

# -- allocation_23: min sum_j b_j / eps_j^2 subject to sum_j kappa_j eps_j = eps -----------------
_bj = sp.Symbol("b_j", positive=True)
_kj = sp.Symbol("kappa_j", positive=True)
_S13 = sp.Symbol("Sigma_j_(kappa^2 b)^(1/3)", positive=True)
allocation_23 = Lemma(
    name="allocation_23",
    assumptions=("b_j, kappa_j > 0", "eps > 0"),
    statement=None,
    constants={
        "minimum": _S13**3 / eps**2,
        "summand": (_kj**2 * _bj) ** sp.Rational(1, 3),
        "minimiser_proportional_to": (_bj / _kj) ** sp.Rational(1, 3),
    },
    source="Lagrange / Hoelder (the Edelman-style proxy's algebra)",
)

LEMMAS = (ramp_loss_cover, massart_single_scale, dudley, rademacher_generalization, allocation_23)

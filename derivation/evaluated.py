"""Which theorem expressions the evaluation layers evaluate, with their argument order.

One list, read twice: at run time by the SymPy fallback of :mod:`specbound.certified.bound` (and
the torch layer), and by scripts/generate_derived.py, which prints every listed expression of
every theorem variant to Python source over Arb (``certified/generated.py``) and numpy
(``numeric/generated.py``).  The generated modules let ``specbound certify`` run without importing
SymPy; tests/derivation/test_generated.py keeps them equal to a fresh generation.

Arguments: a tuple of symbols is a positional order; ``None`` means "called by name": the sorted
free symbols, fed from a mapping symbol name -> value.
"""

from __future__ import annotations

import itertools
from typing import Mapping

import sympy as sp

from . import symbols as S
from .assembly import GROUP_SUMMAND, layout
from .theorem import REGISTRY, VARIANTS, Theorem, assemble, readout_free_forms

_PER = (S.c, S.d, S.kappa, S.n, S.p, S.r_max, S.s)
_ENT = (S.c, S.d, S.kappa, S.p, S.r_max, S.s, S.u)
_DD = (S.alpha_D, S.c, S.d, S.kappa, S.p, S.r_max, S.s, S.vartheta)
_GLOB = (S.B_w, S.N, S.n, S.rho)


def complexity_of(T: Theorem) -> sp.Expr:
    """``2 Min(SS, DD)``: the theorem's bound less its confidence and empirical terms."""
    out = sp.expand(T.bound - T.confidence - S.emp)
    if out.has(S.emp) or out.has(S.delta):
        raise AssertionError("could not isolate the complexity term of the bound")
    return out


def certified_expressions(T: Theorem, fixed: bool) -> dict[str, tuple[sp.Expr, tuple | None]]:
    """name -> (expression, arguments) of every expression :func:`certify_bound` evaluates in Arb.

    ``fixed``: the read-out is fixed (proofs_notes/theory.md section 7): the combiners without the
    read-out's summand (:func:`readout_free_forms`)."""
    free = readout_free_forms(T) if fixed else {}
    out = {
        "head": (T.head_summand, None),
        "layer": (T.layer_lipschitz, None),
        "step": (T.alpha_step, (S.layer_L, S.alpha)),
        "kappa": (T.kappa, (S.B_w, S.alpha, S.gamma, S.rho)),
        "ss_term": (T.ss_matrix_term, _PER),
        "ss_term_rank": (T.ss_matrix_term_rank, _PER),
        "ss_closed": (free.get("ss_closed", T.ss_closed), _GLOB + (S.T_sum,)),
        "ss_entropy": (T.ss_matrix_entropy, _ENT),
        "ss_entropy_rank": (T.ss_matrix_entropy_rank, _ENT),
        "ss_entropy_w": (T.ss_readout_entropy, (S.B_w, S.N, S.rho, S.u_w)),
        "ss_objective": (T.ss_objective, (S.H_total, S.U_total, S.n)),
        "dd_piece": (T.dd_matrix_piece, _DD),
        "dd_piece_p2": (T.dd_matrix_piece_p2, _DD),
        "dd_piece_rank": (T.dd_matrix_piece_rank, _DD),
        "dd_closed": (free.get("dd_closed", T.dd_closed), _GLOB + (S.alpha_D, S.D_sum, S.vartheta_w)),
        "lam_matrix": (T.lambda_matrix, (S.k_c, S.k_s, S.m_grid, S.r_max)),
        "lam_matrix_rank": (T.lambda_matrix_rank, (S.k_c, S.k_s, S.m_grid, S.r_max)),
        "Lambda_total": (free.get("Lambda_total", T.Lambda_total), (S.Lambda_sum, S.k_rho, S.k_w)),
        "confidence": (T.confidence, (S.Lambda, S.delta, S.n)),
        "complexity": (complexity_of(T), (S.DD, S.SS)),
        "bound": (T.bound, (S.DD, S.Lambda, S.SS, S.delta, S.emp, S.n)),
    }
    for key, expr in T.gamma.items():
        out[f"gamma_{key}"] = (expr, None)
    return out


def numeric_expressions(T: Theorem) -> dict[str, sp.Expr]:
    """name -> expression of every field the float layer evaluates (called by name: sorted free
    symbols), including the composed ones (balance point ``u_star``, ramp loss, the fixed read-out's
    combiners) and the two derivatives the planner linearises with."""
    bal = REGISTRY["balance_single_scale"].constants
    (b_sym,) = bal["u_star"].free_symbols - {S.p}
    massart = REGISTRY["massart_single_scale"].constants
    coeff = massart["coefficient" if T.variants["massart"] == "centred" else "coefficient_uncentred"]
    free = readout_free_forms(T)
    out = {name: getattr(T, name) for name in (
        "head_summand", "layer_lipschitz", "alpha_step", "kappa", "ss_matrix_term", "ss_matrix_term_rank",
        "ss_closed", "ss_matrix_entropy", "ss_matrix_entropy_rank", "ss_readout_entropy", "ss_objective",
        "dd_matrix_piece", "dd_matrix_piece_p2", "dd_matrix_piece_rank", "dd_readout_piece", "dd_closed",
        "lambda_matrix", "lambda_matrix_rank", "Lambda_total", "confidence", "bound")}
    out |= {f"gamma_{key}": expr for key, expr in T.gamma.items()}
    out |= {
        "u_star": bal["u_star"].xreplace({b_sym: coeff * T.a_matrix}),
        "ramp": REGISTRY["ramp_loss_cover"].constants["ramp"],
        "ss_closed_fixed": free["ss_closed"],
        "dd_closed_fixed": free["dd_closed"],
        "Lambda_total_fixed": free["Lambda_total"],
        "confidence_dLambda": sp.diff(T.confidence, S.Lambda),
        "ss_objective_dH_total": sp.diff(T.ss_objective, S.H_total),
    }
    return out


def variant_keys() -> list[tuple[str, str, str, str]]:
    """Every (massart, dudley, activation, model) the generated modules cover (no overrides)."""
    return list(itertools.product(VARIANTS["massart"], VARIANTS["dudley"], VARIANTS["activation"],
                                  VARIANTS["model"]))


def theorem_of(key: tuple[str, str, str, str]) -> Theorem:
    """The assembled theorem (constants at their proven values) of a variant key."""
    massart, dudley, activation, model = key
    return assemble(None, massart=massart, dudley=dudley, activation=activation, model=model)


def constants_of(T: Theorem) -> dict[str, object]:
    """The exact numbers the certified layer reads from a theorem besides expressions:
    ``dd_upper`` and (rotary models) ``rho_R`` as ``"p/q"`` strings."""
    out = {"dd_upper": str(sp.Rational(T.dd_upper))}
    if "rho_R" in T.constants:
        out["rho_R"] = str(sp.Rational(T.constants["rho_R"]))
    return out


def layouts() -> Mapping[str, dict]:
    """Every variant's :func:`layout` with symbol *names* (no SymPy needed to read it)."""
    out = {}
    for model in VARIANTS["model"]:
        lay = layout(model)
        out[model] = {"kinds": tuple(lay.kinds), "head": {str(k): v for k, v in lay.head.items()},
                      "layer": {str(k): v for k, v in lay.layer.items()}, "gamma_key": dict(lay.gamma_key),
                      "shared": lay.shared}
    return out


#: names of the placeholder symbols the certified layer feeds by name
NAMES = {"head_sum": str(S.head_sum), "group_sum": str(S.group_sum)}
GROUP = (GROUP_SUMMAND, None)

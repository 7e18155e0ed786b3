"""The one list of theorem fields the evaluation layers evaluate, called by name.

Read twice: by scripts/generate_derived.py, which prints every field of every theorem variant to
Python source over Arb (``certified/generated.py``) and numpy (``numeric/generated.py``), and at run
time by the SymPy fallback of :class:`specbound.certified.compiled.CompiledTheorem` (a lemma constant
overridden, or the register patched).  The generated modules let ``specbound certify`` run without
importing SymPy; tests/derivation/test_generated.py keeps them equal to a fresh generation.

Every field is called by *name*: its arguments are the sorted free symbols of its expression, fed
from a mapping symbol name -> value, so there is one name list and no positional order to keep.
"""

from __future__ import annotations

import itertools
from typing import Mapping

import sympy as sp

from . import symbols as S
from .assembly import GROUP_SUMMAND, layout
from .routes import occam_on, occam_readout_free_forms
from .theorem import CLASSES_BINARY, CLASSES_K, REGISTRY, VARIANTS, Theorem, assemble, readout_free_forms

THEOREM_FIELDS = (
    "head_summand", "layer_lipschitz", "alpha_step", "kappa", "ss_matrix_term", "ss_matrix_term_rank",
    "ss_closed", "ss_matrix_entropy", "ss_matrix_entropy_rank", "ss_readout_entropy", "ss_objective",
    "dd_matrix_piece", "dd_matrix_piece_p2", "dd_matrix_piece_rank", "dd_readout_piece", "dd_closed",
    "lambda_matrix", "lambda_matrix_rank", "Lambda_total", "confidence", "bound",
)
"""Fields that are attributes of the assembled :class:`Theorem`, under their own names."""


def complexity_of(T: Theorem) -> sp.Expr:
    """``2 Min(SS, DD)``: the theorem's bound less its confidence and empirical terms."""
    out = sp.expand(T.bound - T.confidence - S.emp)
    if out.has(S.emp) or out.has(S.delta):
        raise AssertionError("could not isolate the complexity term of the bound")
    return out


def fields(T: Theorem) -> dict[str, sp.Expr]:
    """name -> expression of every field an evaluation layer calls (the one list).

    Besides :data:`THEOREM_FIELDS`: each sensitivity ``gamma_<key>``; the key/value group summand
    (``group_summand``, :data:`specbound.derivation.assembly.GROUP_SUMMAND`); ``complexity``
    (``2 Min(SS, DD)``); the fixed read-out's combiners ``ss_closed_fixed``, ``dd_closed_fixed``,
    ``Lambda_total_fixed`` (proofs_notes/theory.md section 7, fixed w: :func:`readout_free_forms`);
    and what only the float planner uses to *choose*: the balance point ``u_star``, the ramp loss
    ``ramp`` and the two derivatives it linearises with (``confidence_dLambda``,
    ``ss_objective_dH_total``).

    The Occam route's fields (proofs_notes/occam_route.md; derivation/routes.py on top of ``T``) carry
    the prefix ``occam_``: the allocation weights, total and shares, the per-matrix and read-out
    entropies at the route's scales, ``H_theta`` (and its fixed-read-out form), its ``Lambda`` (the
    posthoc price with ``k_gamma``) and the mass ``C`` at the level it is given (the driver passes
    delta/2 when both routes are reported).  Its ``kappa`` is the field ``kappa`` at ``rho = gamma``.
    """
    bal = REGISTRY["balance_single_scale"].constants
    (b_sym,) = bal["u_star"].free_symbols - {S.p}
    massart = REGISTRY["massart_single_scale"].constants
    coeff = massart["coefficient" if T.variants["massart"] == "centred" else "coefficient_uncentred"]
    free = readout_free_forms(T)
    out = {name: getattr(T, name) for name in THEOREM_FIELDS}
    out |= {f"gamma_{key}": expr for key, expr in T.gamma.items()}
    out |= {
        "group_summand": GROUP_SUMMAND,
        "complexity": complexity_of(T),
        "ss_closed_fixed": free["ss_closed"],
        "dd_closed_fixed": free["dd_closed"],
        "Lambda_total_fixed": free["Lambda_total"],
        "u_star": bal["u_star"].xreplace({b_sym: coeff * T.a_matrix}),
        "ramp": REGISTRY["ramp_loss_cover"].constants["ramp"],
        "confidence_dLambda": sp.diff(T.confidence, S.Lambda),
        "ss_objective_dH_total": sp.diff(T.ss_objective, S.H_total),
    }
    O = occam_on(T)
    occ_free = occam_readout_free_forms(O)
    out |= {f"occam_{name}": getattr(O, name) for name in OCCAM_FIELDS}
    out |= {"occam_Omega_total_fixed": occ_free["Omega_total"], "occam_H_total_fixed": occ_free["H_total"],
            "occam_Lambda_total_fixed": occ_free["Lambda_total"]}
    return out


OCCAM_FIELDS = ("weight", "weight_rank", "Omega_total", "share", "share_readout", "entropy_matrix",
                "entropy_matrix_rank", "entropy_readout", "H_total", "Lambda_total", "confidence_mass")
"""Fields of :class:`~specbound.derivation.routes.OccamTheorem` an evaluation calls (as ``occam_<name>``)."""


def arguments(expr: sp.Expr) -> tuple[sp.Symbol, ...]:
    """The arguments of a field: its free symbols sorted by name (it is called by name)."""
    return tuple(sorted(expr.free_symbols, key=str))


def variant_keys() -> list[tuple[str, str, str, str]]:
    """Every (massart, dudley, activation, model) the generated modules cover (no overrides)."""
    return list(itertools.product(VARIANTS["massart"], VARIANTS["dudley"], VARIANTS["activation"],
                                  VARIANTS["model"]))


def theorem_of(key: tuple[str, str, str, str], classes: str = CLASSES_BINARY) -> Theorem:
    """The assembled theorem (constants at their proven values) of a variant key; ``classes`` "k": its
    k-class form (proofs_notes/k_class.md)."""
    massart, dudley, activation, model = key
    return assemble(None, massart=massart, dudley=dudley, activation=activation, model=model, classes=classes)


KCLASS_PREFIX = "kclass_"
"""Prefix of a field's k-class twin in a generated row: ``kclass_<name>`` is field ``name`` of the k-class
theorem, present only where it differs from the binary one (the margin operator's factor 2 in ``kappa``
and the read-out scale, the read-out over W in k N dimensions; the Occam route's gamma/4 and k N)."""


def kclass_twins(T: Theorem, Tk: Theorem) -> dict[str, sp.Expr]:
    """``kclass_<name>`` -> expression for every field of the k-class theorem ``Tk`` that differs from the
    binary theorem ``T``'s (structurally): what a k-class evaluation calls instead."""
    binary = fields(T)
    return {KCLASS_PREFIX + name: expr for name, expr in fields(Tk).items() if expr != binary[name]}


def table_row(key: tuple[str, str, str, str]) -> dict[str, sp.Expr]:
    """Every field a generated module holds for a variant key: the binary theorem's fields and their
    k-class twins (:func:`kclass_twins`)."""
    T = theorem_of(key)
    return fields(T) | kclass_twins(T, theorem_of(key, CLASSES_K))


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


#: names of the placeholder symbols an evaluation feeds: the sum over heads and the group sum
NAMES = {"head_sum": str(S.head_sum), "group_sum": str(S.group_sum)}

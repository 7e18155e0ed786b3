"""The main theorem, assembled from the lemma objects (proofs_notes/theory.md section 7).

Sums over the J covered matrices are represented as **summand + combiner**: a per-matrix
*summand* is one SymPy expression over the generic per-matrix symbols (``s, c, p, r_max, d, kappa,
u, vartheta``), evaluated once per matrix by a backend (vectorised in torch, one ball per matrix in
Arb); a *combiner* is an expression over an aggregate placeholder symbol (``T_sum``, ``D_sum``,
``H_total``, ``U_total``, ``Lambda_sum``) that stands for the sum of the summands.  For example

    SS_closed = ss_closed.subs(T_sum, sum_j ss_matrix_term(j)).

Every p_j > 0 summand has a p_j = 0 twin (``..._rank``) built from ``rank_cover`` instead of
``schatten_cover``; there ``s`` is a proven rank bound.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Iterator, Mapping

import sympy as sp

from specbound.errors import SpecboundError
from specbound.vocabulary import ACTIVATIONS, LS_VARIANTS, MODEL_VARIANTS, RESIDUAL_VARIANTS

from . import covering, k_class, symbols, lipschitz, modern_blocks, occam, posthoc, rademacher
from .lemma import Lemma
from .symbols import (
    B_phi, B_w, C_sm, D_sum, DD, H_total, J, L_phi, Lambda, Lambda_sum, N, SS, T4_sum, T_sum,
    U_total, alpha_D, c, d, delta, emp, eps, k, k_c, k_rho, k_s, k_w, kappa,
    n, p, r_max, rho, rho_R, s, u, u_w, vartheta, vartheta_w, SAMPLE_SYMBOLS,
)


class DerivationError(SpecboundError):
    """A bad request to the derivation layer (unknown override name, invalid constant value)."""


# -- balance_single_scale: g(u) = u + sqrt(b) u^{-p/2} ------------------------------------------
_b = sp.Symbol("b", positive=True)
#: C_p = (1 + 2/p)(p/2)^{2/(p+2)}: the value of g at its exact minimiser, over b^{1/(p+2)}.
C_P = (1 + 2 / p) * (p / 2) ** (2 / (p + 2))
G_BALANCE = u + sp.sqrt(_b) * u ** (-p / 2)
U_STAR = (p / 2) ** (2 / (p + 2)) * _b ** (1 / (p + 2))

balance_single_scale = Lemma(
    name="balance_single_scale",
    assumptions=("u_j >= 1/n (flooring costs at most 1/n per term)", "sqrt(sum x) <= sum sqrt(x)",
                 "H_j(u/kappa_j) <= a_j u^{-p_j} for u >= 1/n"),
    statement=sp.Le(G_BALANCE.subs(u, U_STAR), C_P * _b ** (1 / (p + 2))),
    constants={"C_p": C_P, "C_0": sp.Integer(1), "g": G_BALANCE, "u_star": U_STAR,
               "u_paper": _b ** (1 / (p + 2))},
)

main_theorem = Lemma(
    name="main_theorem",
    assumptions=("network_cover", "ramp_loss_cover", "massart_single_scale", "dudley",
                 "rademacher_generalization", "posthoc_union", "balance_single_scale"),
    statement=None,  # the assembled bound is Theorem.bound
    constants={"bound": emp + 2 * sp.Min(SS, DD) + sp.sqrt((sp.log(1 / delta) + Lambda) / (2 * n))},
)

#: every register entry of the analysis model (proofs_notes/theory.md section 8; layer_lipschitz / sensitivity_gamma are two objects)
ANALYSIS_REGISTRY: Mapping[str, Lemma] = MappingProxyType({
    lem.name: lem
    for lem in (*lipschitz.LEMMAS, *covering.LEMMAS, *rademacher.LEMMAS, *posthoc.LEMMAS,
                balance_single_scale, main_theorem)
})
#: every register entry: the analysis model's, the modern blocks (entries 24-30), the Occam route (31-32),
#: k-class margins (33)
REGISTRY: Mapping[str, Lemma] = MappingProxyType(
    dict(ANALYSIS_REGISTRY) | {lem.name: lem for lem in (*modern_blocks.LEMMAS, *occam.LEMMAS, *k_class.LEMMAS)})

#: the register as shipped (certified/generated.py and numeric/generated.py are printed from it; a
#: test that swaps a lemma into REGISTRY makes the evaluation layers compile from SymPy instead)
SHIPPED_REGISTRY = REGISTRY

#: the lemmas each model variant rests on (what its rendering lists)
MODEL_LEMMAS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "plain": tuple(ANALYSIS_REGISTRY), "residual": tuple(ANALYSIS_REGISTRY),
    "causal": (*ANALYSIS_REGISTRY, "masked_softmax", "score_bias"),
    **dict.fromkeys(LS_VARIANTS, (*ANALYSIS_REGISTRY, *(lem.name for lem in modern_blocks.LEMMAS))),
})
"""The Rademacher route's lemma list per variant (the Occam route's: derivation/occam.py)."""

#: overridable lemma constants: name -> (symbol, lemma that proves the default)
OVERRIDABLE: Mapping[str, tuple[sp.Symbol, str]] = MappingProxyType({
    "C_sm": (C_sm, "softmax_linf_l1"),
    "L_phi": (L_phi, "gelu_constants"),
    "B_phi": (B_phi, "gelu_constants"),
    "rho_R": (rho_R, "rope_attention"),
})

VARIANTS = {"massart": ("centred", "uncentred"), "dudley": ("centred", "uncentred"),
            "activation": ACTIVATIONS, "model": MODEL_VARIANTS, "classes": ("binary", "k")}

CLASSES_BINARY, CLASSES_K = VARIANTS["classes"]
"""The two margin forms: ``binary`` (one read-out vector w, labels +-1, margin y f) and ``k`` (a read-out
of k >= 2 rows W, labels 0..k-1, margin f_y - max_{c != y} f_c; proofs_notes/k_class.md)."""


@dataclass(frozen=True)
class Theorem:
    """The assembled theorem: every expression an evaluator needs, with constants substituted.

    Per-matrix summands are over ``s, c, p, r_max, d, kappa`` (+ ``u``, ``vartheta``, ``alpha_D``,
    ``n``); combiners are over the placeholders named in the module docstring.  Lemma constants
    (``C_sm, L_phi, B_phi``) are already replaced by the values in ``constants``.
    """

    constants: Mapping[str, sp.Expr]  #: values in force for C_sm, L_phi, B_phi
    overridden: tuple[str, ...]  #: which of them the user supplied (not proved here)
    variants: Mapping[str, str]  #: massart, dudley, activation, model

    # Lipschitz (over c_A, c_V, c_in, c_out; Sigma_h = sum_h head_summand; mathcal_L = a layer)
    head_summand: sp.Expr  #: ||V_h|| (1 + 2 C_sm ||A_h||)
    layer_lipschitz: sp.Expr  #: L_l over c_in, c_out, Sigma_h
    alpha_step: sp.Expr  #: alpha_{l-1} = mathcal_L_l * alpha_l, alpha_L = 1 (over mathcal_L, alpha)
    gamma: Mapping[str, sp.Expr]  #: keys A, V, M_in, M_out, w (LS models: Q, K, Vt, G, U, D, w)
    kappa: sp.Expr  #: B_w alpha gamma / rho

    # entropies H(eps)
    entropy_schatten: sp.Expr  #: p > 0, with the ceiling
    entropy_rank: sp.Expr  #: p = 0
    entropy_readout: sp.Expr  #: N log(1 + 2 B_w / eps)
    entropy_volumetric: sp.Expr  #: m n_c log(1 + 2 c / eps): every matrix may take the smaller (S1)

    # exact single-scale objective
    ss_matrix_entropy: sp.Expr  #: min(H_j(u/kappa), volumetric), p > 0
    ss_matrix_entropy_rank: sp.Expr  #: min(H_j(u/kappa), volumetric), p = 0
    ss_readout_entropy: sp.Expr  #: H_w(rho u_w)
    ss_objective: sp.Expr  #: over U_total, H_total, n

    # closed form (balance_single_scale)
    C_p: sp.Expr
    a_matrix: sp.Expr  #: a_j, p > 0
    a_matrix_rank: sp.Expr  #: a_j, p = 0
    ss_matrix_term: sp.Expr  #: C_p (c_M a_j)^{1/(p+2)} + 1/n, p > 0
    ss_matrix_term_rank: sp.Expr  #: sqrt(c_M a_j) + 1/n, p = 0
    ss_readout_term: sp.Expr  #: sqrt(c_M N ell_w) + 1/n
    ss_closed: sp.Expr  #: over T_sum: T_sum + ss_readout_term

    # Dudley (exact integrand pieces and closed form)
    dd_upper: sp.Expr  #: upper integration limit (1/4 centred, 1/2 uncentred)
    dd_matrix_entropy: sp.Expr  #: H_j(vartheta u / kappa), p > 0
    dd_matrix_entropy_rank: sp.Expr
    dd_readout_entropy: sp.Expr  #: H_w(vartheta_w rho u)
    dd_integral: sp.Expr  #: 4 alpha_D + 12/sqrt(n) Integral(sqrt(H_total), (u, alpha_D, upper))
    dd_I_p: sp.Expr  #: int_alpha^upper u^{-p/2} du for p != 2 (also p = 0)
    dd_I_2: sp.Expr  #: the same for p = 2
    dd_a_matrix: sp.Expr  #: a^D_j, p > 0
    dd_a_matrix_rank: sp.Expr
    dd_matrix_piece: sp.Expr  #: sqrt(a^D_j) I_p, valid for 0 < p < 2 (use dd_matrix_piece_p2 at p = 2)
    dd_matrix_piece_rank: sp.Expr
    dd_matrix_piece_p2: sp.Expr  #: sqrt(a^D_j) I_2 at p = 2 (dd_matrix_piece is 0/0 there)
    dd_readout_piece: sp.Expr
    dd_closed: sp.Expr  #: over D_sum

    # post hoc union and confidence
    lambda_k: sp.Expr  #: lambda(k) over k
    grid_m: sp.Expr  #: m = ceil(L + log N)
    log_grid: sp.Expr  #: log(2 m + 1) over m_grid
    log_rank_prior: sp.Expr  #: log(r_max + 1)
    lambda_matrix: sp.Expr  #: per-matrix part of Lambda, p > 0 (over m_grid, k_c, k_s)
    lambda_matrix_rank: sp.Expr  #: p = 0 (over m_grid, k_c, r_max)
    Lambda_total: sp.Expr  #: over Lambda_sum, k_w, k_rho
    confidence: sp.Expr  #: sqrt((log(1/delta) + Lambda)/(2n)) (one McDiarmid step, data-independent SS, DD)

    bound: sp.Expr  #: hat_E + 2 Min(SS, DD) + confidence
    corollary: sp.Expr  #: hat_E + 2 ss_closed + confidence (over T_sum, Lambda)
    corollary_matrix_term: sp.Expr  #: 4 (c_M a_j)^{1/(p+2)} (explicit form, p > 0; p = 0 same at p=0)
    corollary_explicit: sp.Expr  #: over T4_sum, J, Lambda

    lemmas: Mapping[str, Lemma] = field(default_factory=lambda: ANALYSIS_REGISTRY, repr=False)

    def items(self) -> Iterator[tuple[str, sp.Basic]]:
        """(name, expression) for every expression field, gamma flattened as gamma_<type>."""
        for f in fields(self):
            if f.name in ("constants", "overridden", "variants", "lemmas"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                for key, expr in value.items():
                    yield f"{f.name}_{key}", expr
            else:
                yield f.name, value


def _exact(name: str, value: sp.Expr | float | int) -> sp.Expr:
    """An exact positive SymPy number or expression from a user override (floats: exact binary)."""
    if isinstance(value, bool):
        raise DerivationError(f"override {name}: expected a positive number, got {value!r}")
    if isinstance(value, float):
        if not (value == value and abs(value) != float("inf")):
            raise DerivationError(f"override {name}: expected a finite number, got {value!r}")
        expr = sp.Rational(value)  # exact binary64 value, no decimal rounding
    else:
        try:
            expr = sp.sympify(value)
        except (sp.SympifyError, TypeError) as exc:
            raise DerivationError(f"override {name}: not a number: {value!r}") from exc
        if isinstance(expr, sp.Float):
            expr = sp.Rational(expr)
    if expr.free_symbols or expr.is_positive is not True or not expr.is_finite:
        raise DerivationError(f"override {name}: expected a positive finite constant, got {value!r}")
    return expr


def assemble(
    overrides: Mapping[str, sp.Expr | float | int] | None = None,
    *,
    massart: str = "centred",
    dudley: str = "centred",
    activation: str = "gelu",
    model: str = "plain",
    classes: str = "binary",
) -> Theorem:
    """Assemble the theorem from the lemma objects of :data:`REGISTRY`.

    ``overrides`` replaces lemma constants by name (:data:`OVERRIDABLE`: ``C_sm``, ``L_phi``,
    ``B_phi``); every downstream expression changes accordingly.  An override is the user's claim,
    recorded in ``Theorem.overridden``.  ``massart``/``dudley`` pick the centred (default) or
    uncentred chaining forms; ``activation`` the GELU, tanh-GELU, ReLU or SiLU constants;
    ``model`` the analysis model (``plain``), its residual variant (R), the causal GPT-2-style model
    (``causal``: a fixed mask and a fixed read-out token change no constant, masked_softmax), or the
    Llama-style model (``ls``, ``ls_residual``: RoPE, grouped keys, gated feed-forward; ls_model).
    ``rho_R`` (the rotation tables' norm bound, default 1 = exact rotations) applies to LS models only.
    ``classes``: "binary" (default; one read-out vector) or "k" (a k-row read-out, the symbol ``k_cls``;
    the margin operator's factor 2 in ``kappa`` and in the read-out scale, the read-out cover over W in
    ``k N`` dimensions: proofs_notes/k_class.md (c)).
    """
    chosen = {"massart": massart, "dudley": dudley, "activation": activation, "model": model, "classes": classes}
    for key, value in chosen.items():
        if value not in VARIANTS[key]:
            raise DerivationError(f"unknown {key} variant {value!r}; expected one of {VARIANTS[key]}")
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise DerivationError(f"unknown constant(s) {unknown}; overridable: {sorted(OVERRIDABLE)}")
    if "rho_R" in overrides and model not in LS_VARIANTS:  # only their attention rotates (rope_attention)
        raise DerivationError(f"override rho_R applies to the rotary models {LS_VARIANTS} only")
    exact = tuple(sorted((name, _exact(name, value)) for name, value in overrides.items()))
    # Theorems are immutable, so one assembly per distinct request is shared (assembly costs ~0.5 s).
    return _assemble(exact, massart, dudley, activation, model, classes)


@functools.lru_cache(maxsize=None)
def _dudley_integrals(upper: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """``int_alpha^upper u^{-p/2} du`` for p != 2 and for p = 2 (shared by every assembly: the slow part)."""
    I_p = sp.integrate(u ** (-p / 2), (u, alpha_D, upper), conds="none")
    I_p = sp.simplify(I_p.args[-1][0] if isinstance(I_p, sp.Piecewise) else I_p)
    return I_p, sp.integrate(u ** (-1), (u, alpha_D, upper))


@functools.lru_cache(maxsize=64)
def _assemble(exact_overrides: tuple, massart: str, dudley: str, activation: str, model: str,
              classes: str = "binary") -> Theorem:
    chosen = {"massart": massart, "dudley": dudley, "activation": activation, "model": model}
    if classes != CLASSES_BINARY:  # the binary theorem's variants (and renderings) stay as they were
        chosen["classes"] = classes
    overrides = dict(exact_overrides)
    act = {"gelu": REGISTRY["gelu_constants"].constants, "gelu_tanh": lipschitz.gelu_tanh_constants,
           "relu": lipschitz.relu_constants, "silu": REGISTRY["silu_constants"].constants}[activation]
    values = {"C_sm": REGISTRY["softmax_linf_l1"].constants["C_sm"], "L_phi": act["L_phi"],
              "B_phi": act["B_phi"]}
    if model in LS_VARIANTS:
        values["rho_R"] = REGISTRY["rope_attention"].constants["rho_R_exact"]
    values.update(overrides)
    subs = {OVERRIDABLE[name][0]: value for name, value in values.items()}

    def fix(expr):
        return expr.xreplace(subs) if isinstance(expr, sp.Basic) else expr

    lip = REGISTRY["layer_lipschitz"].constants
    head = lip["head_summand"]
    if model in LS_VARIANTS:
        ls = REGISTRY["ls_model"].constants
        suffix = "" if model == "ls" else "_R"
        gam = {key: ls[key + suffix] if key in ("Q", "K", "Vt") else ls[key]
               for key in modern_blocks.LS_MATRIX_KINDS} | {"w": sp.Integer(1)}
        layer, head = ls["layer" + suffix], ls["head_summand"]
    elif model in RESIDUAL_VARIANTS:
        res = REGISTRY["residual_variant"].constants
        gam = {key: res[key] for key in ("A", "V", "M_in", "M_out")} | {"w": sp.Integer(1)}
        layer = res["layer"]
    else:  # plain and causal: masked_softmax leaves every constant unchanged
        gam, layer = REGISTRY["sensitivity_gamma"].constants, lip["layer"]
    net = REGISTRY["network_cover"].constants
    # k classes (k_class.md (c)): the ramp after the margin operator is 2/rho-Lipschitz, so every
    # output scale is rho / 2 where the binary theorem has rho, and the read-out is covered over W
    kc = REGISTRY["k_class"].constants
    lip_m = kc["margin_lipschitz"] if classes == CLASSES_K else sp.Integer(1)
    readout_entropy = kc["readout_entropy"] if classes == CLASSES_K else net["readout_entropy"]
    kap = lip_m * net["matrix_loss_sensitivity"] / rho
    if classes == CLASSES_K and sp.simplify(kap * rho / net["matrix_loss_sensitivity"] - kc["ramp_lipschitz"] * rho):
        raise AssertionError("kappa does not carry the k-class ramp constant")  # pragma: no cover
    rho_out = rho / lip_m  # the output scale the ramp's loss scale u maps to (u -> rho u / lip_m)

    # entropies, with a common radius symbol eps
    H_sch = REGISTRY["schatten_cover"].covering
    H_rank = REGISTRY["rank_cover"].covering
    H_vol = REGISTRY["lowrank_cover"].constants["unconstrained"]  # m n_c log(1 + 2c/eps), sharpenings S1
    eps_w = next(iter(readout_entropy.free_symbols - {N, B_w, symbols.k_cls}))
    H_w = readout_entropy.xreplace({eps_w: eps})

    coeff = REGISTRY["massart_single_scale"].constants[
        "coefficient" if massart == "centred" else "coefficient_uncentred"]

    # closed form: restrict u >= 1/n, so eps_j = u/kappa >= 1/(n kappa) and the log factor is frozen
    K_s = REGISTRY["schatten_cover"].constants["K_schatten"]
    K_r = REGISTRY["rank_cover"].constants["K_rank"]
    lbar = sp.log(1 + K_s * c / eps).xreplace({eps: 1 / (n * kappa)})
    lbar_rank = sp.log(1 + K_r * c / eps).xreplace({eps: 1 / (n * kappa)})
    r_bound = REGISTRY["schatten_cover"].constants["r_p_bound"]  # s 2^p eps^-p
    a_sch = r_bound.xreplace({eps: 1 / kappa}) * d * lbar  # H_j(u/kappa) <= a_j u^-p
    a_rank = sp.Min(s, r_max) * d * lbar_rank
    bal = REGISTRY["balance_single_scale"].constants
    Cp = bal["C_p"]
    term = Cp * (coeff * a_sch) ** (1 / (p + 2)) + 1 / n
    term_rank = bal["C_0"] * sp.sqrt(coeff * a_rank) + 1 / n
    ell_w = H_w.xreplace({eps: rho_out / n}) / N  # log(1 + 2 n B_w / rho) (binary)
    readout_term = sp.sqrt(coeff * N * ell_w) + 1 / n

    # Dudley
    dd = REGISTRY["dudley"].constants
    upper = dd["upper" if dudley == "centred" else "upper_uncentred"]
    I_p, I_2 = _dudley_integrals(upper)
    aD = r_bound.xreplace({eps: vartheta / kappa}) * d * sp.log(1 + K_s * c / eps).xreplace(
        {eps: vartheta * alpha_D / kappa})
    aD_rank = sp.Min(s, r_max) * d * sp.log(1 + K_r * c / eps).xreplace({eps: vartheta * alpha_D / kappa})
    dd_read = sp.sqrt(H_w.xreplace({eps: vartheta_w * rho_out * alpha_D})) * (upper - alpha_D)
    dd_closed = dd["alpha_coeff"] * alpha_D + dd["integral_coeff"] / sp.sqrt(n) * (D_sum + dd_read)

    ph = REGISTRY["posthoc_union"].constants
    lam = ph["lambda"]
    conf_base = REGISTRY["rademacher_generalization"].constants["confidence"]
    confidence = conf_base.xreplace({sp.log(1 / delta): sp.log(1 / delta) + Lambda})
    if confidence == conf_base:  # pragma: no cover - guards the substitution above
        raise AssertionError("could not add Lambda to the confidence term")
    bound = emp + REGISTRY["rademacher_generalization"].constants["rademacher_coeff"] * sp.Min(SS, DD) \
        + confidence
    ss_closed = T_sum + readout_term
    cor_term = 2 * 2 * (coeff * a_sch) ** (1 / (p + 2))  # 2 C_p <= 4 on (0, 2]

    exprs = dict(
        head_summand=head,
        layer_lipschitz=layer,
        alpha_step=lip["alpha_step"],
        kappa=kap,
        entropy_schatten=H_sch,
        entropy_rank=H_rank,
        entropy_readout=H_w,
        entropy_volumetric=H_vol,
        ss_matrix_entropy=sp.Min(H_sch, H_vol).xreplace({eps: u / kappa}),
        ss_matrix_entropy_rank=sp.Min(H_rank, H_vol).xreplace({eps: u / kappa}),
        ss_readout_entropy=H_w.xreplace({eps: rho_out * u_w}),
        ss_objective=U_total + sp.sqrt(coeff * H_total),
        C_p=Cp,
        a_matrix=a_sch,
        a_matrix_rank=a_rank,
        ss_matrix_term=term,
        ss_matrix_term_rank=term_rank,
        ss_readout_term=readout_term,
        ss_closed=ss_closed,
        dd_upper=upper,
        dd_matrix_entropy=sp.Min(H_sch, H_vol).xreplace({eps: vartheta * u / kappa}),
        dd_matrix_entropy_rank=sp.Min(H_rank, H_vol).xreplace({eps: vartheta * u / kappa}),
        dd_readout_entropy=H_w.xreplace({eps: vartheta_w * rho_out * u}),
        dd_integral=dd["alpha_coeff"] * alpha_D
        + dd["integral_coeff"] / sp.sqrt(n) * sp.Integral(sp.sqrt(H_total), (u, alpha_D, upper)),
        dd_I_p=I_p,
        dd_I_2=I_2,
        dd_a_matrix=aD,
        dd_a_matrix_rank=aD_rank,
        dd_matrix_piece=sp.sqrt(aD) * I_p,
        dd_matrix_piece_rank=sp.sqrt(aD_rank) * I_p.xreplace({p: 0}),
        dd_matrix_piece_p2=sp.sqrt(aD.xreplace({p: 2})) * I_2,
        dd_readout_piece=dd_read,
        dd_closed=dd_closed,
        lambda_k=lam,
        grid_m=ph["m"],
        log_grid=ph["log_grid"],
        log_rank_prior=ph["log_rank_prior"],
        lambda_matrix=ph["log_grid"] + lam.xreplace({k: k_c}) + lam.xreplace({k: k_s}),
        lambda_matrix_rank=ph["log_grid"] + lam.xreplace({k: k_c}) + ph["log_rank_prior"],
        Lambda_total=lam.xreplace({k: k_w}) + lam.xreplace({k: k_rho}) + Lambda_sum,
        confidence=confidence,
        bound=bound,
        corollary=bound.xreplace({sp.Min(SS, DD): ss_closed}),
        corollary_matrix_term=cor_term,
        corollary_explicit=emp + T4_sum + 2 * sp.sqrt(coeff * N * ell_w) + 2 * (J + 1) / n + confidence,
    )
    dependent = sample_dependent_complexity(exprs)
    if dependent:  # the one-step confidence is proven only for SS, DD bounding hat_R_S for EVERY S
        raise DerivationError(
            "the one-McDiarmid-step confidence (proofs_notes/sharpenings.md S3) needs SS and DD independent "
            f"of the sample; {', '.join(dependent)} depend(s) on it: use confidence_two_step")
    # Substitute the constants in force into EVERY expression, so no field can leak a free C_sm.
    return Theorem(
        constants=MappingProxyType(values),
        overridden=tuple(sorted(overrides)),
        variants=MappingProxyType(chosen),
        gamma=MappingProxyType({key: fix(val) for key, val in gam.items()}),
        lemmas=MappingProxyType({name: REGISTRY[name] for name in MODEL_LEMMAS[model]
                                 + (("k_class",) if classes == CLASSES_K else ())}),
        **{name: fix(expr) for name, expr in exprs.items()},
    )


COMPLEXITY_FIELDS = (
    "kappa", "entropy_schatten", "entropy_rank", "entropy_readout", "entropy_volumetric",
    "ss_matrix_entropy", "ss_matrix_entropy_rank", "ss_readout_entropy", "ss_objective", "a_matrix",
    "a_matrix_rank", "ss_matrix_term", "ss_matrix_term_rank", "ss_readout_term", "ss_closed", "dd_a_matrix",
    "dd_a_matrix_rank", "dd_matrix_piece", "dd_matrix_piece_rank", "dd_matrix_piece_p2", "dd_readout_piece",
    "dd_closed",
)
"""The fields SS and DD are built from: each must be a function of the grid point, n and the choices only
(proofs_notes/sharpenings.md S3) for the one-McDiarmid-step confidence to hold."""


def sample_dependent_complexity(exprs: Mapping[str, sp.Expr]) -> list[str]:
    """Names of the :data:`COMPLEXITY_FIELDS` in ``exprs`` that contain a quantity measured on the
    sample (:data:`~specbound.derivation.symbols.SAMPLE_SYMBOLS`); empty when SS and DD are
    data-independent, the condition of the one-step confidence."""
    out = []
    for name in COMPLEXITY_FIELDS:
        expr = exprs.get(name)
        if isinstance(expr, sp.Basic) and expr.free_symbols & SAMPLE_SYMBOLS:
            out.append(name)
    return out


def diff_report(a: Theorem, b: Theorem) -> list[str]:
    """Names of the expressions that differ between two assembled theorems, each with both forms.

    Returns lines ``name: <a> -> <b>`` (an empty list when the theorems agree expression by
    expression; comparison is structural after ``sympy.simplify`` of the difference).
    """
    out = []
    bd = dict(b.items())
    for name, ea in a.items():
        eb = bd[name]
        if ea == eb:
            continue
        try:
            same = sp.simplify(ea - eb) == 0
        except TypeError:  # relationals, integrals
            same = False
        if not same:
            out.append(f"{name}: {sp.sstr(ea)} -> {sp.sstr(eb)}")
    for key in sorted(set(a.constants) | set(b.constants)):
        if a.constants.get(key) != b.constants.get(key):
            out.insert(0, f"constant {key}: {a.constants.get(key)} -> {b.constants.get(key)}")
    return out


def theorem_for(settings, activation: str, model: str = "plain", classes: str = "binary") -> Theorem:
    """The assembled theorem in force for bound settings, a network's activation and its model
    variant (``AnalysisWeights.variant``).

    ``settings`` is any object with ``.overrides`` (pairs name, value), ``.massart`` and
    ``.dudley`` (e.g. :class:`specbound.plan.BoundSettings`); unknown activations raise a
    DerivationError.  Settings stay a value object: assembling a theorem is this layer's job.
    """
    return assemble(dict(settings.overrides) or None, massart=settings.massart,
                    dudley=settings.dudley, activation=activation, model=model, classes=classes)


def unified_diff(a: str, b: str, names: tuple[str, str] = ("a", "b")) -> str:
    """A unified diff of two renderings (used by the golden tests)."""
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), *names))


def readout_free_forms(T: Theorem) -> dict[str, sp.Expr]:
    """The combiners for a *fixed* read-out w (chosen independently of the sample, proofs_notes/theory.md section 7): ``ss_closed``, ``dd_closed`` and ``Lambda_total`` with the read-out's summand
    deleted (no H_w, u_w or lambda(k_w)).  Derived from the theorem's own fields, never retyped;
    each deletion is checked to have removed the read-out completely.
    """
    ss = sp.expand(T.ss_closed - T.ss_readout_term)
    dd = T.dd_closed.xreplace({T.dd_readout_piece: sp.Integer(0)})
    lam = T.Lambda_total - T.lambda_k.xreplace({k: k_w})
    if ss.has(B_w) or dd.has(vartheta_w) or lam.has(k_w):
        raise AssertionError("could not remove the read-out summand from the theorem")
    return {"ss_closed": ss, "dd_closed": dd, "Lambda_total": lam}


def proven_constants(activation: str = "gelu", model: str = "plain") -> dict[str, sp.Expr]:
    """The proven value of every overridable constant in force for ``activation`` and ``model``.

    These are the values the lemmas establish (proofs_notes/); an override at or above them keeps
    the theorem true (every constant enters the bound monotonically increasing), below them it is
    an unproven claim.
    """
    return dict(assemble(None, activation=activation, model=model).constants)


def unproven_overrides(overrides, activation: str = "gelu", model: str = "plain") -> tuple[str, ...]:
    """Names of the overrides (pairs or a mapping name -> value) *below* the proven value.

    The theorem is proven only with each constant at least its proven value (the bound increases
    in C_sm, L_phi, B_phi and rho_R); a smaller value is a claim nobody has proven, so a bound built
    with it is NOT A PROVEN BOUND.  Comparison is exact (SymPy rationals/algebraics, no floats).
    Unknown names and non-positive values raise :class:`DerivationError` as in :func:`assemble`.
    """
    pairs = dict(overrides.items() if isinstance(overrides, Mapping) else overrides)
    proven = proven_constants(activation, model)
    unknown = sorted(set(pairs) - set(proven))
    if unknown:
        raise DerivationError(f"unknown constant(s) {unknown}; overridable here: {sorted(proven)}")
    low = []
    for name, value in sorted(pairs.items()):
        given = _exact(name, value)
        if bool(sp.Lt(given, proven[name])):
            low.append(name)
    return tuple(low)


def overrides_record(overrides, activation: str = "gelu", model: str = "plain") -> list[dict]:
    """Every override as ``{"name", "value", "proven_value", "proven"}`` (values as strings).

    ``proven`` is True iff the value is at least the proven one (:func:`unproven_overrides`).
    """
    pairs = dict(overrides.items() if isinstance(overrides, Mapping) else overrides)
    proven = proven_constants(activation, model)
    low = set(unproven_overrides(pairs, activation, model))
    return [{"name": name, "value": str(value), "proven_value": sp.sstr(proven[name]),
             "proven": name not in low} for name, value in sorted(pairs.items())]

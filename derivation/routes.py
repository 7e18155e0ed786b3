"""The theorem by route: the Occam route assembled into a theorem variant, and both routes at once.

proofs_notes/occam_route.md: with C = H_theta(gamma) + Lambda + lambda(k_gamma) + log(1/delta),

    P(y f(X) <= 0) <= BinInv(n, K^, e^-C) <= klInv(K^/n, C/n).

:func:`assemble_occam` assembles the route from the lemma objects of derivation/occam.py on top of the
Rademacher theorem's Lipschitz constants, sensitivities and per-matrix entropies (all unchanged);
:func:`assemble_routes` gives both routes with delta split between them (log 2 in each) and the
reported bound, their minimum.

Sums over the covered matrices follow theorem.py's **summand + combiner** convention: per-matrix
summands over the generic symbols (``s, c, p, r_max, d, kappa, vartheta``), combiners over the
placeholders ``Omega_sum`` (allocation weights), ``H_sum`` (entropies), ``Lambda_sum`` (prices).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Iterator, Mapping

import sympy as sp

from .lemma import Lemma
from .occam import LEMMAS, BinInv, klInv
from .symbols import (
    B_w, C_mass, H_sum, K_hat, Lambda_sum, N, Omega, Omega_sum, delta, eps, gamma, gamma_m, k, k_gamma, k_w,
    kappa, n, rho, vartheta,
)
from .theorem import CLASSES_K, REGISTRY, Theorem, assemble

ROUTES = ("rademacher", "occam", "both")
"""The routes ``specbound theorem --route`` renders; ``rademacher`` is the theorem of main_theorem.md."""

#: lemmas of the Rademacher route only (not used by the Occam route)
RADEMACHER_ONLY = ("ramp_loss_cover", "massart_single_scale", "dudley", "rademacher_generalization",
                   "balance_single_scale", "allocation_23", "main_theorem")


@dataclass(frozen=True)
class OccamTheorem:
    """The Occam route assembled from the lemma objects, constants substituted.

    Per-matrix summands are over ``s, c, p, r_max, d, kappa, vartheta`` (``kappa`` from the field
    ``kappa``, ``vartheta = omega / Omega`` from ``share``); combiners over ``Omega_sum``, ``H_sum``,
    ``Lambda_sum``, ``H_theta`` and ``C``.
    """

    constants: Mapping[str, sp.Expr]
    overridden: tuple[str, ...]
    variants: Mapping[str, str]  #: route, activation, model, delta (the level this route runs at)

    head_summand: sp.Expr
    layer_lipschitz: sp.Expr
    alpha_step: sp.Expr
    gamma: Mapping[str, sp.Expr]
    kappa: sp.Expr  #: B_w alpha gamma / gamma_m (the Rademacher kappa with rho -> gamma_m)

    weight: sp.Expr  #: omega_j, p > 0: min(r_max d, m n_c)
    weight_rank: sp.Expr  #: omega_j, p = 0: min(min(s, r_max) d, m n_c)
    weight_readout: sp.Expr  #: omega_w = N
    Omega_total: sp.Expr  #: over Omega_sum
    share: sp.Expr  #: vartheta_j = omega / Omega
    share_readout: sp.Expr  #: vartheta_w = N / Omega

    eps_matrix: sp.Expr  #: vartheta / (2 kappa)
    eps_readout: sp.Expr  #: vartheta_w gamma_m / 2
    entropy_matrix: sp.Expr  #: min(H_j(eps_j), m n_c log(1 + 2c/eps_j)), p > 0
    entropy_matrix_rank: sp.Expr  #: the same with the rank cover, p = 0
    entropy_readout: sp.Expr  #: N log(1 + 2 B_w / eps_w)
    H_total: sp.Expr  #: over H_sum: H_theta(gamma_m)

    lambda_k: sp.Expr
    lambda_matrix: sp.Expr
    lambda_matrix_rank: sp.Expr
    Lambda_total: sp.Expr  #: over Lambda_sum, k_w, k_gamma
    margin: sp.Expr  #: beta^k_gamma
    margin_index: sp.Expr  #: floor(log_beta x): a float margin rounded down to the grid

    confidence_mass: sp.Expr  #: C over H_theta, Lambda, delta (+ log 2 under the split)
    kl: sp.Expr
    bound: sp.Expr  #: BinInv(n, hat_K, exp(-C))
    bound_kl: sp.Expr  #: klInv(hat_K/n, C/n)
    bound_k0: sp.Expr  #: 1 - exp(-C/n) (hat_K = 0)

    lemmas: Mapping[str, Lemma] = field(default_factory=dict, repr=False)

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


def assemble_occam(overrides: Mapping | None = None, *, activation: str = "gelu", model: str = "plain",
                   split: bool = False, classes: str = "binary") -> OccamTheorem:
    """The Occam route for ``model`` and ``activation`` with the lemma constants in force (``overrides``
    as in :func:`~specbound.derivation.theorem.assemble`); ``split``: the route runs at delta/2 (log 2 in
    C), as when both routes are reported and the smaller is kept; ``classes`` "k": a k-row read-out
    (output cover at gamma/4, read-out weight k N; proofs_notes/k_class.md (d))."""
    base = assemble(overrides, activation=activation, model=model, classes=classes)  # validates every argument
    return _assemble_occam(base, bool(split))


def occam_on(base: Theorem) -> OccamTheorem:
    """The Occam route (at delta, unsplit) on top of an assembled Rademacher theorem ``base``: what the
    evaluation layers compile (derivation/evaluated.py); the route level is an argument there."""
    return _assemble_occam(base, False)


def _assemble_occam(base: Theorem, split: bool) -> OccamTheorem:
    """The Occam route on top of an assembled Rademacher theorem (its Lipschitz constants, sensitivities
    and per-matrix entropies, all unchanged).  Cheap (a few substitutions), so not cached."""
    occ = dict(REGISTRY["occam_route"].constants)
    binv = REGISTRY["binomial_inversion"].constants
    k_classes = base.variants.get("classes") == CLASSES_K
    if k_classes:  # k_class.md (d): the output cover at gamma/4, the read-out weight k N
        kc = REGISTRY["k_class"].constants
        occ |= {key: kc[key] for key in ("cover_radius", "eps_matrix", "eps_readout", "weight_readout")}
    # eps_j = vartheta gamma_m / (2 B_w alpha gamma) = vartheta / (2 kappa), kappa = B_w alpha gamma / gamma_m
    # (k classes: vartheta gamma_m / (4 B_w alpha gamma) = vartheta / (2 kappa), kappa = 2 B_w alpha gamma / gamma_m)
    kap = base.kappa.xreplace({rho: gamma_m})
    (sensitivity,) = sp.solve(sp.Eq(kap, kappa), gamma)
    eps_j = occ["eps_matrix"].xreplace({gamma: sensitivity})
    if eps_j != vartheta / (2 * kappa):  # pragma: no cover - guards the rewriting above
        raise AssertionError(f"eps_matrix is not vartheta/(2 kappa): {eps_j}")
    H_sch = sp.Min(REGISTRY["schatten_cover"].covering, base.entropy_volumetric)  # sharpenings S1
    H_rank = sp.Min(REGISTRY["rank_cover"].covering, base.entropy_volumetric)
    H_w = base.entropy_readout.xreplace({eps: occ["eps_readout"]})
    lam = REGISTRY["posthoc_union"].constants["lambda"]
    mass = occ["confidence_mass"] + (occ["route_split"] if split else 0)
    level = sp.exp(-C_mass)
    omega_total = Omega_sum + occ["weight_readout"]
    exprs = dict(
        kappa=kap,
        weight=sp.Min(occ["weight"], occ["weight_volumetric"]),
        weight_rank=sp.Min(occ["weight_rank"], occ["weight_volumetric"]),
        weight_readout=occ["weight_readout"],
        Omega_total=omega_total,
        share=occ["share"],
        share_readout=occ["weight_readout"] / Omega,
        eps_matrix=eps_j,
        eps_readout=occ["eps_readout"],
        entropy_matrix=H_sch.xreplace({eps: eps_j}),
        entropy_matrix_rank=H_rank.xreplace({eps: eps_j}),
        entropy_readout=H_w,
        H_total=H_sum + H_w,
        lambda_k=base.lambda_k,
        lambda_matrix=base.lambda_matrix,
        lambda_matrix_rank=base.lambda_matrix_rank,
        Lambda_total=Lambda_sum + lam.xreplace({k: k_w}) + lam.xreplace({k: k_gamma}),
        margin=occ["margin_grid"],
        margin_index=occ["margin_round"],
        confidence_mass=mass,
        kl=binv["kl"],
        bound=BinInv(n, K_hat, level),
        bound_kl=klInv(K_hat / n, C_mass / n),
        bound_k0=binv["bininv_k0"],
    )
    names = [name for name in base.lemmas if name not in RADEMACHER_ONLY + ("k_class",)] + [lem.name for lem in LEMMAS]
    names += ["k_class"] if k_classes else []
    variants = {"route": "occam", "activation": base.variants["activation"], "model": base.variants["model"],
                **({"classes": base.variants["classes"]} if k_classes else {}),
                "delta": "delta/2 (both routes reported)" if split else "delta"}
    return OccamTheorem(
        constants=base.constants, overridden=base.overridden, variants=MappingProxyType(variants),
        head_summand=base.head_summand, layer_lipschitz=base.layer_lipschitz, alpha_step=base.alpha_step,
        gamma=base.gamma, lemmas=MappingProxyType({name: REGISTRY[name] for name in names}), **exprs,
    )


def occam_readout_free_forms(T: OccamTheorem) -> dict[str, sp.Expr]:
    """The combiners for a read-out fixed before S (occam_route.md, "Fixed read-out"): no read-out
    weight, entropy or price.  Derived from the theorem's fields; each deletion is checked."""
    omega_total = T.Omega_total - T.weight_readout
    h_total = T.H_total - T.entropy_readout
    lam = T.Lambda_total - T.lambda_k.xreplace({k: k_w})
    if omega_total.has(N) or h_total.has(B_w) or lam.has(k_w):
        raise AssertionError("could not remove the read-out from the Occam theorem")
    return {"Omega_total": omega_total, "H_total": h_total, "Lambda_total": lam}


@dataclass(frozen=True)
class Routes:
    """Both routes on one sample, each at delta/2, and the reported bound (their minimum)."""

    rademacher: Theorem  #: the main theorem as assembled (at delta)
    occam: OccamTheorem  #: the Occam route at delta/2
    confidence: sp.Expr  #: the Rademacher confidence term at delta/2
    rademacher_bound: sp.Expr  #: the Rademacher bound at delta/2
    reported: sp.Expr  #: Min(rademacher_bound, occam bound)

    @property
    def constants(self) -> Mapping[str, sp.Expr]:
        return self.rademacher.constants

    @property
    def overridden(self) -> tuple[str, ...]:
        return self.rademacher.overridden

    @property
    def variants(self) -> Mapping[str, str]:
        return MappingProxyType({"route": "both", **{k: v for k, v in self.rademacher.variants.items()},
                                 "delta": "delta/2 per route"})

    @property
    def lemmas(self) -> Mapping[str, Lemma]:
        return MappingProxyType(dict(self.rademacher.lemmas) | dict(self.occam.lemmas))


def assemble_routes(overrides: Mapping | None = None, *, massart: str = "centred", dudley: str = "centred",
                    activation: str = "gelu", model: str = "plain", classes: str = "binary") -> Routes:
    """Both routes with delta split: the Rademacher route's log(1/delta) becomes log(2/delta), log 2 is
    added to the Occam mass C, and the smaller bound is the reported one (occam_route.md step 5)."""
    rad = assemble(overrides, massart=massart, dudley=dudley, activation=activation, model=model, classes=classes)
    occ = _assemble_occam(assemble(overrides, activation=activation, model=model, classes=classes), True)
    half = {delta: delta / 2}
    confidence = rad.confidence.xreplace(half)
    bound = rad.bound.xreplace({rad.confidence: confidence})
    if confidence == rad.confidence or bound == rad.bound:  # pragma: no cover - guards the substitution
        raise AssertionError("could not split delta in the Rademacher route")
    return Routes(rademacher=rad, occam=occ, confidence=confidence, rademacher_bound=bound,
                  reported=sp.Min(bound, occ.bound))

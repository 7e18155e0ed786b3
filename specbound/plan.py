"""What a bound evaluation is asked for (:class:`BoundSettings`) and the float choices that the
fast path makes for it (:class:`BoundPlan`).

The split mirrors the rule "floats choose, Arb evaluates": every field of a :class:`BoundPlan` is a
*choice* (a Schatten index from the grid P_m, a margin on the grid beta_rho^k, loss scales u_j, Dudley
weights and lower limit).  proofs_notes/theory.md sections 6-7 show that the theorem holds simultaneously for
every such choice, so a plan can never make a certified value invalid -- only looser.  Radii
(k_c, k_s, k_w) are *not* choices: the certified layer derives them from upper enclosures.
"""

from __future__ import annotations

import sys

from dataclasses import dataclass, field
from fractions import Fraction

from .errors import SpecboundError
from .vocabulary import READOUT_TRAINED, READOUTS, ROUTE_RADEMACHER, ROUTES


MAX_TRIES = 10**9
"""The most bound samples a record may say were tried (delta / K stays a small exact rational)."""


@dataclass(frozen=True)
class BoundSettings:
    """Parameters fixed before looking at the sample (proofs_notes/theory.md section 6), plus the user's inputs.

    ``n``: sample size of the empirical term; ``delta``: confidence; ``margin``: the margin rho
    (None: chosen on the grid by the planner); ``empirical``: a user-supplied empirical ramp loss
    (None: measured on a data set, certified); ``beta_*``: grid bases (``beta_c`` None means
    1 + 1/(4L)); ``grid_m`` None means m = ceil(L + ln N); ``readout``: "trained" (w fitted on the
    sample: covered and paid for) or "fixed" (w chosen independently of the sample, B_w = ||w||; a
    checkpoint without a read-out gets a fixed unit vector); ``overrides``: lemma constants
    (C_sm, L_phi, B_phi) replaced by the user.  ``beta_gamma``: the Occam route's margin base
    (proofs_notes/occam_route.md); ``routes``: the routes evaluated on the sample, each at level
    ``delta / (K len(routes))`` (the smallest bound is reported; fixed before the sample is seen).
    Default bases: proofs_notes/sharpenings.md S2 (beta_w = 17/16, beta_c = 1 + 1/(16L)).
    ``tries``: K, the number of bound samples (data seed, n) tried for this network in all, this one
    included (a training record's statement), charged by applying the theorem at delta / K
    (proofs_notes/selection.md, item 4).
    """

    n: int
    delta: float = 0.05
    margin: float | None = None
    empirical: float | None = None
    beta_c: Fraction | None = None
    beta_s: Fraction = Fraction(2)
    beta_w: Fraction = Fraction(17, 16)
    beta_rho: Fraction = Fraction(2)
    beta_gamma: Fraction = Fraction(17, 16)
    grid_m: int | None = None
    massart: str = "centred"
    dudley: str = "centred"
    readout: str = READOUT_TRAINED
    overrides: tuple[tuple[str, float], ...] = ()
    routes: tuple[str, ...] = (ROUTE_RADEMACHER,)
    tries: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.tries, bool) or not isinstance(self.tries, int) or not 1 <= self.tries <= MAX_TRIES:
            raise SpecboundError(f"tries (bound samples tried, K) must be an integer in [1, {MAX_TRIES}], "
                                 f"got {self.tries!r}")
        if not (isinstance(self.n, int) and self.n >= 1):
            raise SpecboundError(f"n must be a positive integer, got {self.n!r}")
        if not (0.0 < self.delta < 1.0):
            raise SpecboundError(f"delta must lie in (0, 1), got {self.delta!r}")
        if self.margin is not None and not (self.margin > 0.0 and self.margin < float("inf")):
            raise SpecboundError(f"margin must be a positive finite number, got {self.margin!r}")
        if self.empirical is not None and not (0.0 <= self.empirical <= 1.0):
            raise SpecboundError(f"empirical loss must lie in [0, 1], got {self.empirical!r}")
        for name in ("beta_s", "beta_w", "beta_rho", "beta_gamma"):
            if Fraction(getattr(self, name)) <= 1:
                raise SpecboundError(f"{name} must be > 1")
        if self.beta_c is not None and Fraction(self.beta_c) <= 1:
            raise SpecboundError("beta_c must be > 1")
        if self.readout not in READOUTS:
            raise SpecboundError(f"readout must be 'trained' or 'fixed', got {self.readout!r}")
        routes = tuple(self.routes)
        if len(set(routes)) != len(routes) or not set(routes) <= set(ROUTES) or ROUTE_RADEMACHER not in routes:
            raise SpecboundError(f"routes must be distinct names out of {ROUTES} including {ROUTE_RADEMACHER!r}, "
                                 f"got {self.routes!r}")
        object.__setattr__(self, "routes", routes)

    def charged_delta(self) -> Fraction:
        """delta / K: the user's delta (the rational they typed) shared by a union bound over the
        K = ``tries`` bound samples tried (proofs_notes/selection.md, item 4); K = 1 gives delta."""
        return Fraction(repr(float(self.delta))) / self.tries

    def route_level(self) -> Fraction:
        """The confidence level each route runs at: :meth:`charged_delta` (delta / K) split evenly
        between the routes (occam_route.md step 5: any split fixed in advance is valid)."""
        return self.charged_delta() / len(self.routes)

    def level_phrase(self) -> str:
        """:meth:`route_level` in words for the outputs: "delta", "delta/2", "delta/K" or "delta/K/2"."""
        return ("delta" + (f"/{self.tries}" if self.tries > 1 else "")
                + (f"/{len(self.routes)}" if len(self.routes) > 1 else ""))

    def base_c(self, num_layers: int, model: str = "plain") -> Fraction:
        """beta_c, by default 1 + 1/(4L), 1 + 1/(6L) for the LS variants (proofs_notes/theory.md
        section 6, recommended bases; :func:`specbound.derivation.assembly.beta_c_expression`)."""
        if self.beta_c is not None:
            return Fraction(self.beta_c)
        # printed from assembly.beta_c_expression (no SymPy import on the run paths)
        from specbound.numeric.generated import BETA_C
        if model not in BETA_C:
            raise SpecboundError(f"unknown model variant {model!r}; expected one of {sorted(BETA_C)}")
        return BETA_C[model](int(num_layers))


@dataclass(frozen=True)
class BoundPlan:
    """Float choices for one evaluation; any values are valid (they only change tightness).

    Per matrix j (in the canonical order of ``AnalysisWeights.matrices``): ``p_index[j]`` = i with
    p_j = i/m (0 selects the rank forms); ``u[j]`` the single-scale loss scale; ``vartheta[j]`` > 0 the
    Dudley weight.  ``u_w``/``vartheta_w`` are the read-out's (ignored for a fixed read-out).
    ``k_rho``: the margin is beta_rho^k_rho.  ``alpha_D`` in (0, 1/4].
    """

    m: int
    p_index: tuple[int, ...]
    k_rho: int
    u: tuple[float, ...]
    u_w: float
    alpha_D: float
    vartheta: tuple[float, ...]
    vartheta_w: float
    notes: dict = field(default_factory=dict, compare=False)

    occam: OccamPlan | None = field(default=None, compare=False)
    """The Occam route's choices (None: the route is not planned)."""

    def p(self, j: int) -> Fraction:
        return Fraction(self.p_index[j], self.m)

    def margin(self, settings: BoundSettings) -> Fraction:
        """The margin this plan evaluates at: ``rho = beta_rho^k_rho``."""
        return Fraction(settings.beta_rho) ** int(self.k_rho)


@dataclass(frozen=True)
class OccamPlan:
    """Float choices of the Occam route (proofs_notes/occam_route.md); any values are valid.

    ``p_index[j]``: p_j = i/m (chosen for this route, independently of the Rademacher plan's: the
    union over the grid covers every choice); ``k_gamma``: the margin ``gamma = beta_gamma^k_gamma``, a
    float margin rounded *down* to the grid (the count is taken at gamma itself).  The allocation of the
    cover radius over the matrices is not a choice: it is the rule fixed in advance (condition C2).
    """

    m: int
    p_index: tuple[int, ...]
    k_gamma: int
    notes: dict = field(default_factory=dict, compare=False)

    def p(self, j: int) -> Fraction:
        return Fraction(self.p_index[j], self.m)

    def margin(self, settings: BoundSettings) -> Fraction:
        """The margin this plan evaluates at: ``gamma = beta_gamma^k_gamma``."""
        return Fraction(settings.beta_gamma) ** int(self.k_gamma)


def generated_theorem_applies(settings: BoundSettings) -> bool:
    """Whether the theorem in force for ``settings`` is the one certified/generated.py and
    numeric/generated.py were printed from: no lemma constant overridden, and the derivation's
    register the shipped one (a test may swap a lemma).  Otherwise both layers compile the theorem
    from the SymPy source at run time."""
    if settings.overrides:
        return False
    th = sys.modules.get("specbound.derivation.theorem")
    return th is None or th.REGISTRY is th.SHIPPED_REGISTRY

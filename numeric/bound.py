"""The whole bound of proofs_notes/theory.md section 7 in floating point: the public entry point of the fast path.

:func:`evaluate` evaluates the bound at a plan; given none, it asks the planner
(:func:`numeric.planner.choose_plan`) for one -- choosing is only the planner's job, evaluating only
:mod:`numeric.evaluation`'s.  The building blocks live in :mod:`numeric.terms`.  Import graph:
terms <- evaluation <- planner <- bound (no cycle).
"""

from __future__ import annotations

import numpy as np

from specbound.matrices import AnalysisWeights
from specbound.plan import BoundPlan, BoundSettings

from .evaluation import (
    FLOAT32_DERIVED_REL_TOL, FLOAT64_REL_TOL, NumericBound, NumericMatrixTerm, evaluate_facts,
    evaluate_plan,
)
from .planner import plan_for
from .terms import compiled_theorem, dtype_name, network_facts, singular_values

__all__ = ["FLOAT32_DERIVED_REL_TOL", "FLOAT64_REL_TOL", "NumericBound", "NumericMatrixTerm", "evaluate",
           "singular_values"]


def evaluate(
    weights: AnalysisWeights,
    settings: BoundSettings,
    plan: BoundPlan | None = None,
    *,
    margins: np.ndarray | None = None,
    spectra=None,
    dtype="float64",
    device="cpu",
) -> NumericBound:
    """The bound of proofs_notes/theory.md section 7 in floating point at ``plan`` (None: the planner's plan (:func:`numeric.planner.plan_for`) for
    these weights, settings and margins, from the float spectra).

    ``margins`` (float y_i f(X_i)) give the empirical ramp loss when ``settings.empirical`` is None;
    ``spectra`` reuses precomputed singular values; ``dtype`` is the precision of the spectra
    (torch.float64 or torch.float32; everything after them is float64 numpy); ``device`` where torch
    computes the spectra (CPU or CUDA).
    """
    if plan is None:
        # one set of facts (at the requested dtype) for planning and evaluating
        dtype_name(dtype)  # float64 or float32 only, checked before any work
        ct = compiled_theorem(settings, weights.activation, weights.variant, weights.num_outputs)
        facts = network_facts(weights, spectra=spectra, dtype=dtype, device=device)
        return evaluate_facts(ct, facts, settings, plan_for(ct, facts, settings, margins), margins=margins,
                              dtype=dtype)
    return evaluate_plan(weights, settings, plan, margins=margins, spectra=spectra, dtype=dtype, device=device)

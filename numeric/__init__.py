"""The fast, uncertified float layer (docs/design.md section 2, "numeric"), float64 by default,
batched over all matrices and the whole grid P_m.  The spectra (the one heavy step) run in numpy on
CPU or in torch (CPU or CUDA); the closed forms of the bound run in numpy through code printed from
the derivation (numeric/generated.py), so the planner and the evaluation import neither torch nor SymPy.

Public names are re-exported lazily (PEP 562), so importing one submodule (``numeric.spectra`` for
the ``spectra`` command) does not pay for the others.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "evaluate": "bound", "NumericBound": "evaluation", "NumericMatrixTerm": "evaluation", "NumpyContext": "context",
    "FLOAT32_DERIVED_REL_TOL": "evaluation", "FLOAT64_REL_TOL": "evaluation", "evaluate_plan": "evaluation",
    "singular_values": "terms", "FLOAT32_SVD_REL_TOL": "spectra",
    "choose_plan": "planner",
    "crosscheck": "crosscheck", "CrossCheckReport": "crosscheck", "Disagreement": "crosscheck",
    "compute_spectra": "spectra", "Spectra": "spectra", "norm_summaries": "spectra",
    "paper_proxies": "proxies",
    "architecture_grid": "grid", "grid_size": "grid", "schatten_grid": "grid",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

"""Rigorous layer: python-flint (Arb) balls that provably contain the true real values.

Public names are re-exported lazily (importing ``specbound.certified.arb`` must not pay for SymPy):

* :func:`certify_bound`, :class:`CertifiedBound`, :class:`CertifiedMatrixTerm` (``certified.bound``);
* :func:`evaluate`, the one driver of the bound (``certified.evaluation``), :class:`ArbContext`
  (``certified.context``), :class:`CompiledTheorem` (``certified.compiled``);
* :func:`index_up`, :func:`index_down`, :func:`round_matrix`, :func:`dominates` (``certified.radii``);
* :func:`to_json`, :class:`VerificationReport` (``certified.certificate``; verifying a certificate
  against its inputs is the application's :mod:`specbound.verification`);
* :func:`enclose` (``certified.factored``), :func:`certified_ramp_loss` (``certified.ramp_loss``).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "certify_bound": "bound", "CertifiedBound": "bound", "CertifiedMatrixTerm": "bound",
    "evaluate": "evaluation", "ArbContext": "context", "CompiledTheorem": "compiled",
    "index_up": "radii", "index_down": "radii", "round_matrix": "radii", "dominates": "radii",
    "MatrixRounding": "radii",
    "to_json": "certificate", "VerificationReport": "certificate",
    "CertificateError": "certificate",
    "enclose": "factored", "certified_ramp_loss": "ramp_loss", "RampLossCertificate": "ramp_loss",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'specbound.certified' has no attribute {name!r}")
    return getattr(importlib.import_module(f"specbound.certified.{module}"), name)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

"""How the bound's parts are put together, shared by the certified (Arb) and the fast (torch) layers.

:data:`GAMMA_KEY` names, for each matrix type, the theorem's sensitivity (``Theorem.gamma``) that
applies to it.  This module imports neither torch nor flint: both layers build on it.
"""

from __future__ import annotations

GAMMA_KEY = {"QK": "A", "V_tilde": "V", "M_in": "M_in", "M_out": "M_out"}
"""Theorem's sensitivity key (``Theorem.gamma``) of each matrix type."""

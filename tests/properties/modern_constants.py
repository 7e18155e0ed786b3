"""Values of the modern-block constants, evaluated from the derivation's own expressions.

``ModernConstants(activation, rho_R, symbols=..., scale=..., group="sum")`` evaluates a lemma
constant of register entries 24-30 (``REGISTRY[lemma].constants[name]``) with C_sm, L_phi, B_phi
and rho_R taken from ``assemble(model="ls", activation=...)`` (so the activation's constants are the
derivation's).  The only numbers not from the derivation are the mutation factors: ``symbols``
multiplies a lemma symbol, ``scale`` one (lemma, name) value, ``group="one_head"`` replaces the group
sum of ``shared_matrix_sensitivity`` by the largest single head (a wrong rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from specbound.derivation import REGISTRY, assemble




@lru_cache(maxsize=None)
def symbol_values(activation: str, rho_R: float = 1.0) -> dict[str, float]:
    th = assemble({"rho_R": rho_R} if rho_R != 1.0 else {}, model="ls", activation=activation)
    return {k: float(v) for k, v in th.constants.items()}


@lru_cache(maxsize=None)
def _compiled(expr: sp.Expr):
    syms = tuple(sorted(expr.free_symbols, key=lambda s: s.name))
    return tuple(s.name for s in syms), sp.lambdify(syms, expr, modules="math")


@dataclass(frozen=True)
class ModernConstants:
    activation: str = "silu"
    rho_R: float = 1.0
    symbols: tuple = ()  # ((name, factor), ...)
    scale: tuple = ()  # (((lemma, name), factor), ...)
    group: str = "sum"

    def sym(self, name: str) -> float:
        return symbol_values(self.activation, self.rho_R)[name] * dict(self.symbols).get(name, 1.0)

    def expr_value(self, expr: sp.Expr, **values) -> float:
        names, fn = _compiled(expr)
        args = [values[n] if n in values else self.sym(n) for n in names]
        return float(fn(*args))

    def __call__(self, lemma: str, name: str, **values) -> float:
        value = self.expr_value(REGISTRY[lemma].constants[name], **values)
        return value * dict(self.scale).get((lemma, name), 1.0)

    def assembled(self, model: str, field_name: str, **values) -> float:
        """A field of the assembled LS theorem (``gamma.<kind>`` for sensitivities)."""
        th = assemble({"rho_R": self.rho_R} if self.rho_R != 1.0 else {}, model=model,
                      activation=self.activation)
        expr = th.gamma[field_name[6:]] if field_name.startswith("gamma.") else getattr(th, field_name)
        return self.expr_value(expr, **values) * dict(self.scale).get(("theorem", field_name), 1.0)


DERIVED = {act: ModernConstants(act) for act in ("silu", "gelu", "gelu_tanh")}

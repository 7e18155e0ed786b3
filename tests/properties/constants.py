"""The ONLY place the property suite obtains constants: from ``specbound.derivation``.

Every number a property compares against is a SymPy expression of the derivation layer evaluated
at the sampled norms (mpmath, 40 digits): a lemma constant looked up by (lemma, name) in
``REGISTRY``, a statement's right side, a covering bound, or a field of the assembled
``Theorem`` (``assemble(overrides, activation=..., model=...)``).  Nothing is retyped here.  The
only numbers that do *not* come from the derivation are the deliberately wrong ones in
:data:`COMPANION` and the mutation factors of ``test_mutation.py``.

A *mutation* is a :class:`Constants` built with ``overrides={"C_sm": 0.9}`` (passed to
``assemble``, so it flows through the derivation itself), ``scale={(lemma, name): factor}``
(multiply one derived value) or ``replace={(lemma, name): expr}`` (swap in another expression,
e.g. the companion code's gamma).
"""

from __future__ import annotations

from functools import lru_cache

import mpmath
import sympy as sp

from specbound.derivation import REGISTRY, assemble
from specbound.derivation import symbols as S
from specbound.derivation.theorem import VARIANTS

DPS = 40

#: activations the derivation has constants for (what ``assemble(activation=...)`` accepts)
ACTIVATIONS_DERIVED: tuple[str, ...] = tuple(VARIANTS["activation"])


@lru_cache(maxsize=None)
def theorem(overrides: tuple = (), activation: str = "gelu", model: str = "plain", massart: str = "centred"):
    """The derivation's assembled theorem (cached: one assembly takes about a second)."""
    return assemble(dict(overrides), activation=activation, model=model, massart=massart)


def expression(lemma: str, name: str) -> sp.Expr:
    """The derivation's SymPy expression for constant ``name`` of ``lemma``."""
    return REGISTRY[lemma].constants[name]


@lru_cache(maxsize=None)
def _compiled(expr: sp.Expr):
    symbols = tuple(sorted(expr.free_symbols, key=lambda s: s.name))
    return symbols, sp.lambdify(symbols, expr, modules="mpmath")


def _mp(value):
    return value if isinstance(value, (int, mpmath.mpf)) else mpmath.mpf(value)


class Constants:
    """Numerical values of the derivation's constants (optionally mutated) for one activation."""

    def __init__(self, activation="gelu", overrides=None, scale=None, replace=None, massart="centred"):
        self.activation = activation
        self.massart = massart
        self.overrides = dict(overrides or {})
        self.scale = dict(scale or {})
        self.replace = dict(replace or {})

    def __repr__(self) -> str:
        return (f"Constants({self.activation!r}, overrides={self.overrides}, scale={self.scale}, "
                f"replace={list(self.replace)})")

    def has_activation(self) -> bool:
        return self.activation in ACTIVATIONS_DERIVED

    def theorem(self, model: str = "plain"):
        """The assembled theorem for this activation, model, Massart variant and overrides."""
        return theorem(tuple(sorted(self.overrides.items())), self.activation, model, self.massart)

    def symbol(self, name: str) -> mpmath.mpf:
        """Value in force of a lemma symbol (C_sm, L_phi or B_phi) in the assembled theorem."""
        with mpmath.workdps(DPS):
            value = mpmath.mpf(sp.N(self.theorem().constants[name], DPS))
            return value * self.scale.get(("symbol", name), 1)

    def _eval(self, lemma: str, name: str, expr, values: dict) -> mpmath.mpf:
        with mpmath.workdps(DPS):
            symbols, fn = _compiled(sp.sympify(expr))
            args = []
            for sym in symbols:
                if sym.name in values:
                    args.append(_mp(values[sym.name]))
                elif sym.name in ("C_sm", "L_phi", "B_phi"):
                    args.append(self.symbol(sym.name))
                else:
                    raise KeyError(f"{lemma}.{name}: no value for symbol {sym.name}")
            return fn(*args) * self.scale.get((lemma, name), 1)

    def __call__(self, lemma: str, name: str, **values) -> mpmath.mpf:
        """Constant ``name`` of ``lemma`` at the given symbol values (C_sm, L_phi, B_phi default)."""
        expr = self.replace.get((lemma, name))
        if expr is None:
            expr = expression(lemma, name)
        return self._eval(lemma, name, expr, values)

    def covering(self, lemma: str, **values) -> mpmath.mpf:
        """The lemma's log-covering bound (``Lemma.covering``); key (lemma, "covering")."""
        expr = self.replace.get((lemma, "covering"), REGISTRY[lemma].covering)
        return self._eval(lemma, "covering", expr, values)

    def statement_rhs(self, lemma: str, **values) -> mpmath.mpf:
        """Right side of the lemma's statement; key (lemma, "statement_rhs")."""
        expr = self.replace.get((lemma, "statement_rhs"), REGISTRY[lemma].statement.rhs)
        return self._eval(lemma, "statement_rhs", expr, values)

    def assembled(self, field: str, model: str = "plain", **values) -> mpmath.mpf:
        """A field of the assembled :class:`Theorem` (``"gamma.A"`` for gamma entries).

        Key ("theorem", field) for replace/scale.
        """
        expr = self.replace.get(("theorem", field))
        if expr is None:
            th = self.theorem(model)
            expr = th.gamma[field[6:]] if field.startswith("gamma.") else getattr(th, field)
        return self._eval("theorem", field, expr, values)

    def evaluate(self, expr: sp.Expr, **values) -> mpmath.mpf:
        """Any derivation expression, evaluated like a constant."""
        return self._eval("(expression)", str(expr), expr, values)


DERIVED = Constants()

#: The companion code's (smaller) constants (docs/design.md section 6), used ONLY as mutations that the
#: suite must catch.  Keys are what they would replace.
COMPANION: dict[tuple[str, str], sp.Expr] = {
    ("theorem", "gamma.V"): S.c_in * S.c_out,
    ("theorem", "gamma.M_in"): S.c_out,
    ("theorem", "gamma.M_out"): sp.Integer(1),
    ("ff_lipschitz", "M_in"): S.c_out,
    ("ff_lipschitz", "M_out"): sp.Integer(1),
}

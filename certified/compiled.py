"""The theorem compiled for one arithmetic: every field of the one list, called by name.

:class:`CompiledTheorem` holds callables of every field of
:func:`specbound.derivation.evaluated.fields` for one theorem variant and one arithmetic: Arb balls
(``certified/generated.py``) or float64 numpy (``numeric/generated.py``).  Both generated modules
are printed from the SymPy source by scripts/generate_derived.py and have the same shape (a
*table*: ``THEOREMS``, ``FUNCTIONS``, ``ARGS``, ``CONSTANTS``, ``LAYOUTS``, ``NAMES``,
``BACKEND``).  When a lemma constant is overridden (or a test patched the register) the same fields
are compiled from the SymPy source at run time instead, by the backend the table names; the caller
cannot tell the two apart except by ``origin``.

Contract of a call ``ct(name, **values)``: the field's value at the given symbol values (names the
field does not use are ignored; a missing one is a ``TypeError``).  Arb: a ball containing the
exact value at every point of the input balls (ceilings round the upper endpoint up, see
:mod:`specbound.derivation.backends`); numpy: the float64 value, broadcasting over arrays.

This module imports neither SymPy (only the fallback does, when it runs) nor the numeric layer: the
float layer hands in its own table.
"""

from __future__ import annotations

from fractions import Fraction
from types import ModuleType
from typing import Callable, Mapping

import numpy as np

from specbound.plan import BoundSettings, generated_theorem_applies

VARIANT_NAMES = ("massart", "dudley", "activation", "model")
"""The fields of a theorem variant key, in the order of the generated ``THEOREMS`` tables."""

KCLASS_PREFIX = "kclass_"
"""A generated row's prefix of the k-class twin of a field (``specbound.derivation.evaluated.KCLASS_PREFIX``)."""

OUTPUTS_SYMBOL = "k_cls"
"""The name of the symbol ``k`` (read-out rows) in the k-class fields; a k-class compiled theorem is bound to
the model's k (:meth:`CompiledTheorem.bound_to`), so its callers never pass it."""


class CompiledTheorem:
    """Callables of every theorem field in one arithmetic, called by name.

    ``dd_upper``: the upper end of the Dudley integral (exact); ``rho_R``: the rotation bound of
    the rotary variants (exact, or None); ``layout``: the variant's matrix layout (symbol names);
    ``names``: the names of the symbols fed besides the radii (``head_sum``, ``group_sum``);
    ``variants``: the theorem variant; ``backend``: "arb" or "numpy"; ``origin``: "generated" or
    "sympy" (see :func:`compiled_theorem`).
    """

    def __init__(self, fns: Mapping[str, Callable], args: Mapping[str, tuple[str, ...]], constants: Mapping,
                 layout: Mapping, names: Mapping[str, str], variants: Mapping[str, str], backend: str,
                 origin: str):
        self.fns, self.args = dict(fns), dict(args)
        self.dd_upper = Fraction(constants["dd_upper"])
        self.rho_R = Fraction(constants["rho_R"]) if "rho_R" in constants else None
        self.layout, self.names, self.variants = layout, dict(names), dict(variants)
        self.backend, self.origin = backend, origin

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field name (the one list, :func:`specbound.derivation.evaluated.fields`)."""
        return tuple(self.fns)

    def function(self, name: str) -> tuple[Callable, tuple[str, ...]]:
        """The positional callable of field ``name`` and the names of its arguments, in order."""
        try:
            return self.fns[name], self.args[name]
        except KeyError:
            raise KeyError(f"the theorem has no field {name!r}") from None

    def bound_to(self, **fixed) -> CompiledTheorem:
        """This theorem with the symbols ``fixed`` (name -> value) fixed in every field that takes them: the
        returned fields no longer take them as arguments (e.g. ``k_cls`` = the model's read-out rows)."""
        fns, args = {}, {}
        for name, fn in self.fns.items():
            names = self.args[name]
            hit = [i for i, a in enumerate(names) if a in fixed]
            if not hit:
                fns[name], args[name] = fn, names
                continue
            fns[name] = _partial(fn, len(names), {i: fixed[names[i]] for i in hit})
            args[name] = tuple(a for a in names if a not in fixed)
        out = CompiledTheorem.__new__(CompiledTheorem)
        out.__dict__.update(self.__dict__)
        out.fns, out.args = fns, args
        out.variants = {**self.variants, **{key: str(v) for key, v in fixed.items()}}
        return out

    def __call__(self, name: str, **values):
        fn, names = self.function(name)
        try:
            ordered = [values[a] for a in names]
        except KeyError as exc:
            raise TypeError(f"{name} needs {list(names)}, missing {exc}") from None
        out = fn(*ordered)
        return np.asarray(out, dtype=np.float64) if self.backend == "numpy" else out


def _partial(fn: Callable, arity: int, fixed: Mapping[int, object]) -> Callable:
    """``fn`` with the positional arguments at the indices of ``fixed`` given (the rest in order)."""
    def call(*rest):
        it = iter(rest)
        return fn(*(fixed[i] if i in fixed else next(it) for i in range(arity)))
    return call


CACHE: dict[tuple, CompiledTheorem] = {}
"""Compiled generated theorems by (backend, variant key); a SymPy compilation is never cached (the
register may change between calls)."""


def _generated(table: ModuleType, key: tuple, classes: str = "binary") -> CompiledTheorem | None:
    """The generated row of ``key``: the binary fields, or with ``classes`` "k" each field replaced by its
    k-class twin ``kclass_<name>`` where the row has one (the twins are dropped either way)."""
    row = table.THEOREMS.get(key)
    if row is None:
        return None
    plain = {name: i for name, i in row.items() if not name.startswith(KCLASS_PREFIX)}
    if classes != "binary":
        plain |= {name[len(KCLASS_PREFIX):]: i for name, i in row.items() if name.startswith(KCLASS_PREFIX)}
    fns = {name: table.FUNCTIONS[i] for name, i in plain.items()}
    args = {name: table.ARGS[i] for name, i in plain.items()}
    variants = dict(zip(VARIANT_NAMES, key)) | ({"classes": classes} if classes != "binary" else {})
    return CompiledTheorem(fns, args, table.CONSTANTS[key], table.LAYOUTS[key[3]], table.NAMES,
                           variants, table.BACKEND, "generated")


def _from_sympy(table: ModuleType, settings: BoundSettings, activation: str, model: str,
                classes: str = "binary") -> CompiledTheorem:
    from specbound.derivation import evaluated
    from specbound.derivation.backends import compile_expr
    from specbound.derivation.theorem import theorem_for

    T = theorem_for(settings, activation, model, classes)
    fns, args = {}, {}
    for name, expr in evaluated.fields(T).items():
        fn = compile_expr(expr, table.BACKEND, evaluated.arguments(expr))
        fns[name], args[name] = fn, tuple(str(a) for a in fn.args)
    return CompiledTheorem(fns, args, evaluated.constants_of(T), evaluated.layouts()[model], evaluated.NAMES,
                           dict(T.variants), table.BACKEND, "sympy")


def compiled_theorem(table: ModuleType, settings: BoundSettings, activation: str,
                     model: str = "plain", outputs: int = 1) -> CompiledTheorem:
    """The theorem in force for ``settings``, ``activation`` and ``model`` in the arithmetic of
    ``table`` (``certified.generated`` or ``numeric.generated``): the generated callables unless a
    lemma constant is overridden or the register patched (:func:`generated_theorem_applies`), then
    compiled from the SymPy source.  ``outputs``: the model's read-out rows k; 1 is the binary theorem,
    k >= 2 the k-class theorem (proofs_notes/k_class.md) with ``k_cls`` fixed to k."""
    k = int(outputs)
    if k < 1:
        raise ValueError(f"a model has at least one read-out row, got {outputs!r}")
    classes = "binary" if k == 1 else "k"
    if not generated_theorem_applies(settings):
        hit = _from_sympy(table, settings, activation, model, classes)
    else:
        key = (settings.massart, settings.dudley, activation, model)
        hit = CACHE.get((table.BACKEND, classes) + key)
        if hit is None:
            hit = _generated(table, key, classes)
            if hit is None:  # an unknown variant: the derivation layer says why, in one line
                hit = _from_sympy(table, settings, activation, model, classes)
            CACHE[(table.BACKEND, classes) + key] = hit
    return hit if k == 1 else hit.bound_to(**{OUTPUTS_SYMBOL: k})

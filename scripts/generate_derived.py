"""Write numeric/generated.py and certified/generated.py: code printed from the SymPy source.

The generated modules let the run paths (``specbound certify``, ``proxies``, ``spectra``) evaluate
the derivation's expressions without importing SymPy (0.6 s import, ~1 s of assembly and
compilation per run):

* numeric/generated.py: plain-Python / numpy printings (float64, uncertified) of the grid
  expressions and of every theorem field (:func:`specbound.derivation.evaluated.fields`, the one
  list), for every variant;
* certified/generated.py: the Arb printings of the same fields, for every variant.  Each function is
  exactly the source :func:`specbound.derivation.backends.to_arb` compiles at run time (same printer,
  same helpers, same argument conversion), so it computes the same ball.

Both tables have the same shape (``THEOREMS[variant key] = {field name: index into FUNCTIONS}``,
``ARGS[index]`` the argument names), read by the one
:class:`specbound.certified.compiled.CompiledTheorem`; every field is called by name.

derivation/ stays the one source of truth: the files are never edited by hand, and
tests/derivation/test_generated.py regenerates them and compares.

    .venv/bin/python scripts/generate_derived.py          # rewrite both files
"""

from __future__ import annotations

import os

import sympy as sp

from specbound.derivation import assembly, posthoc

from specbound.derivation import evaluated
from specbound.derivation.backends import ARB_HELPERS, NUMPY_HELPERS, arb_source, numpy_source, rounding_violations

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, "numeric", "generated.py")
CERTIFIED_TARGET = os.path.join(ROOT, "certified", "generated.py")

#: (function name, expression, its arguments in order, what it is)
FUNCTIONS = (
    ("grid_size_float", posthoc.M_DEFAULT, (posthoc.L, posthoc.N),
     "posthoc.M_DEFAULT = ceil(L + log N), evaluated in float64 (callers guard near-integer cases)"),
    ("grid_point", posthoc.GRID_POINT, tuple(sorted(posthoc.GRID_POINT.free_symbols, key=str)),
     "posthoc.GRID_POINT = i / m (with Python ints: the correctly rounded float64 of the rational)"),
)


class _Functions:
    """Distinct printed functions (deduplicated by source and argument names), in first-seen order."""

    def __init__(self, printer, convert: bool):
        self.printer, self.convert = printer, convert
        self.index: dict[tuple[str, tuple[str, ...]], int] = {}

    def add(self, expr, args) -> int:
        names = tuple(str(a) for a in args)
        key = (self.printer(expr, args), names)
        return self.index.setdefault(key, len(self.index))

    def lines(self, prefix: str) -> list[str]:
        out = []
        for (src, names), i in self.index.items():
            params = ", ".join(f"_x{k}" for k in range(len(names)))
            out += ["", f"def {prefix}{i}({params}):"]
            if self.convert and names:
                out.append(f"    {params} = "
                           + ", ".join(f"_as_arb(_x{k})" for k in range(len(names))))
            out += [f"    return {src}", ""]
        out.append("")
        out.append(f"FUNCTIONS = ({', '.join(f'{prefix}{i}' for i in range(len(self.index)))},)")
        out.append("ARGS = (")
        out += [f"    {names!r}," for (_src, names) in self.index]
        out.append(")")
        return out


def _checked_arb_source(expr, args) -> str:
    bad = rounding_violations(expr)  # the check to_arb makes before compiling
    if bad:
        raise ValueError("Arb backend: rounding not provably safe: " + "; ".join(bad))
    return arb_source(expr, args)


def _table(fns: _Functions, backend: str) -> list[str]:
    """THEOREMS, CONSTANTS, LAYOUTS, NAMES and BACKEND of a generated module (same for both)."""
    table, constants = [], []
    for key in evaluated.variant_keys():
        T = evaluated.theorem_of(key)
        row = {name: fns.add(expr, evaluated.arguments(expr)) for name, expr in evaluated.table_row(key).items()}
        table.append(f"    {key!r}: {row!r},")
        constants.append(f"    {key!r}: {evaluated.constants_of(T)!r},")
    lines = fns.lines("_e" if backend == "arb" else "_n")
    lines += ["", "#: (massart, dudley, activation, model) -> {field name: index into FUNCTIONS}; every",
              "#: function takes the sorted free symbols of its expression (names in ARGS)",
              "THEOREMS = {"] + table + ["}", "",
              "#: (massart, dudley, activation, model) -> exact constants (\"p/q\" strings)",
              "CONSTANTS = {"] + constants + ["}", "",
              "#: model variant -> layout with symbol names (specbound.derivation.assembly.layout)",
              f"LAYOUTS = {evaluated.layouts()!r}", "",
              "#: names of the symbols an evaluation feeds besides the layout's radii",
              f"NAMES = {evaluated.NAMES!r}", "",
              "#: the arithmetic these functions compute in (derivation.backends.compile_expr's name)",
              f"BACKEND = {backend!r}", ""]
    return lines


def certified_source() -> str:
    """The text of certified/generated.py (deterministic)."""
    lines = [
        '"""GENERATED by scripts/generate_derived.py from specbound.derivation -- do not edit.',
        "",
        "The Arb evaluation of every theorem field (specbound.derivation.evaluated.fields), for every",
        "(massart, dudley, activation, model) variant with the proven constants.  Each function is the",
        "source that specbound.derivation.backends.to_arb compiles from the SymPy expression (same",
        "printer, same helpers, same exact conversion of the arguments), so it returns the same ball; no",
        "SymPy import.  tests/derivation/test_generated.py regenerates this file and compares.",
        '"""',
        "",
        "from flint import arb, fmpq, fmpz",
        "",
        ARB_HELPERS.strip("\n"),
        "",
    ]
    return "\n".join(lines + _table(_Functions(_checked_arb_source, convert=True), "arb"))


def source() -> str:
    """The text of numeric/generated.py (deterministic)."""
    lines = [
        '"""GENERATED by scripts/generate_derived.py from specbound.derivation -- do not edit.',
        "",
        "Plain-Python printings (sympy.pycode) of derivation expressions, for float paths that must not",
        "import SymPy.  tests/derivation/test_generated.py regenerates this file and compares.",
        '"""',
        "",
        "import math",
        "from fractions import Fraction",
        "",
    ]
    for name, expr, args, what in FUNCTIONS:
        params = ", ".join(str(a) for a in args)
        lines += ["", f"def {name}({params}):", f'    """{what}."""', f"    return {sp.pycode(expr)}", ""]
    for model in evaluated.VARIANTS["model"]:
        num, den = sp.fraction(sp.together(assembly.beta_c_expression(model)))
        lines += ["", f"def _beta_c_{model}(L):",
                  f'    """Default beta_c of the {model} variant (assembly.beta_c_expression), exact."""',
                  f"    return Fraction({sp.pycode(sp.expand(num))}, {sp.pycode(sp.expand(den))})", ""]
    lines += ["", "#: model variant -> L -> the default spectral grid base beta_c (a Fraction)",
              "BETA_C = {" + ", ".join(f"{m!r}: _beta_c_{m}" for m in evaluated.VARIANTS["model"]) + "}", ""]
    lines += ["", "# -- the theorem's fields in numpy (float64, uncertified) " + "-" * 38,
              "", "import numpy as np", "", NUMPY_HELPERS.strip("\n"), ""]
    return "\n".join(lines + _table(_Functions(numpy_source, convert=False), "numpy"))


def main() -> None:
    for target, text in ((TARGET, source()), (CERTIFIED_TARGET, certified_source())):
        with open(target, "w") as fh:
            fh.write(text)
        print(f"wrote {target}")


if __name__ == "__main__":
    main()

"""Turn theorem expressions into callables: mpmath (reference), torch (fast), Arb (certified).

Each ``to_*`` takes a SymPy expression and the ordered symbols that become the positional
arguments, and returns a Python callable.  The torch and Arb code is produced by the printers
below; an expression node that a printer does not know raises ``TypeError`` at build time (never a
silent fallback).

**Rounding functions in Arb.**  ``ceiling(x)`` is printed as the *exact* integer ceiling of the
ball's **upper** endpoint, and ``floor(x)`` as the exact floor of the **lower** endpoint.  The
result is an integer that is >= (resp. <=) the true value, not an enclosure of it.  This is valid
because every ceiling in the theorem sits where the bound is nondecreasing in it (and every floor
where it is nonincreasing); :func:`rounding_violations` checks that structurally, and the tests
assert it for every field of the assembled theorem.
"""

from __future__ import annotations

from typing import Callable, Sequence

import sympy as sp
from sympy.printing.printer import Printer


def _argnames(args: Sequence[sp.Symbol]) -> dict[sp.Symbol, str]:
    # positional names, so a symbol name that is not a Python identifier (hat_E, Sigma_h) is harmless
    return {a: f"_x{i}" for i, a in enumerate(args)}


class _CodePrinter(Printer):
    """Shared tree walk: each node type maps to one backend call; unknown nodes are errors."""

    def __init__(self, names: dict[sp.Symbol, str]):
        super().__init__()
        self._names = names

    def emptyPrinter(self, expr):  # noqa: N802 - SymPy's hook name
        raise TypeError(f"{type(self).__name__}: no rule for {type(expr).__name__}: {expr}")

    def _print_Symbol(self, expr):
        try:
            return self._names[expr]
        except KeyError:
            raise TypeError(f"free symbol {expr} is not among the callable's arguments") from None

    _print_Dummy = _print_Symbol

    def _print_Add(self, expr):
        return "(" + " + ".join(self._print(a) for a in expr.args) + ")"

    def _print_Mul(self, expr):
        return "(" + " * ".join(self._print(a) for a in expr.args) + ")"


class ArbPrinter(_CodePrinter):
    """Python source over ``flint.arb``: every operation is a ball operation.

    Integers and Rationals are exact (``arb(int)``, ``arb(fmpq)``, the latter correctly rounded to
    a ball when not dyadic); ``pi``/``E`` are Arb constants; ``x**(p/q)`` uses ``root``;
    ``ceiling``/``floor`` round the upper/lower endpoint (see module docstring); ``Min``/``Max`` are
    ball min/max.
    """

    printmethod = "_arb"

    def _print_Integer(self, expr):
        return f"arb({int(expr)})"

    _print_Zero = _print_One = _print_NegativeOne = _print_Integer

    def _print_Rational(self, expr):
        return f"arb(fmpq({int(expr.p)}, {int(expr.q)}))"

    _print_Half = _print_Rational

    def _print_Float(self, expr):
        return self._print_Rational(sp.Rational(expr))  # exact binary value of the float

    def _print_Pi(self, expr):
        return "arb.pi()"

    def _print_Exp1(self, expr):
        return "arb.const_e()"

    def _print_Pow(self, expr):
        base, e = self._print(expr.base), expr.exp
        if e.is_Integer:
            return f"_powi({base}, {int(e)})"
        if e.is_Rational:
            return f"_powq({base}, {int(e.p)}, {int(e.q)})"
        return f"_pow({base}, {self._print(e)})"

    def _unary(self, method):
        return lambda expr: f"{self._print(expr.args[0])}.{method}()"

    def _print_exp(self, expr):
        return f"{self._print(expr.args[0])}.exp()"

    def _print_log(self, expr):
        if len(expr.args) != 1:
            raise TypeError("two-argument log is not printed; write log(x)/log(b)")
        return f"{self._print(expr.args[0])}.log()"

    def _print_erf(self, expr):
        return f"{self._print(expr.args[0])}.erf()"

    def _print_Abs(self, expr):
        return f"abs({self._print(expr.args[0])})"

    def _print_ceiling(self, expr):
        return f"_ceil_up({self._print(expr.args[0])})"

    def _print_floor(self, expr):
        return f"_floor_down({self._print(expr.args[0])})"

    def _print_Min(self, expr):
        return "_min(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Max(self, expr):
        return "_max(" + ", ".join(self._print(a) for a in expr.args) + ")"


class TorchPrinter(_CodePrinter):
    """Python source over ``torch``: broadcasts over tensors; numbers become float literals."""

    printmethod = "_torch_specbound"

    def _print_Integer(self, expr):
        return repr(int(expr))

    _print_Zero = _print_One = _print_NegativeOne = _print_Integer

    def _print_Rational(self, expr):
        return repr(float(expr))

    _print_Half = _print_Float = _print_Rational

    def _print_Pi(self, expr):
        return repr(float(sp.pi))

    def _print_Exp1(self, expr):
        return repr(float(sp.E))

    def _print_Pow(self, expr):
        base, e = self._print(expr.base), expr.exp
        if e == sp.Rational(1, 2):
            return f"torch.sqrt(_t({base}))"
        return f"torch.pow(_t({base}), {self._print(e)})"

    def _print_exp(self, expr):
        return f"torch.exp(_t({self._print(expr.args[0])}))"

    def _print_log(self, expr):
        return f"torch.log(_t({self._print(expr.args[0])}))"

    def _print_erf(self, expr):
        return f"torch.special.erf(_t({self._print(expr.args[0])}))"

    def _print_Abs(self, expr):
        return f"torch.abs(_t({self._print(expr.args[0])}))"

    def _print_ceiling(self, expr):
        return f"torch.ceil(_t({self._print(expr.args[0])}))"

    def _print_floor(self, expr):
        return f"torch.floor(_t({self._print(expr.args[0])}))"

    def _print_Min(self, expr):
        return "_min(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Max(self, expr):
        return "_max(" + ", ".join(self._print(a) for a in expr.args) + ")"


class NumpyPrinter(_CodePrinter):
    """Python source over ``numpy`` (``np``): broadcasts over arrays, float64.  A subexpression
    without free symbols (a lemma constant such as an ``erf`` of a number) becomes one float literal
    (its value to 30 digits, rounded once); ``_f`` makes an operand a float64 array."""

    printmethod = "_numpy_specbound"

    def _print(self, expr, **kwargs):
        if isinstance(expr, sp.Expr) and expr.is_number and not expr.is_Integer:
            return repr(float(sp.N(expr, 30)))
        return super()._print(expr, **kwargs)

    def _print_Integer(self, expr):
        return repr(int(expr))

    _print_Zero = _print_One = _print_NegativeOne = _print_Integer

    def _print_Pow(self, expr):
        base, e = self._print(expr.base), expr.exp
        if e == sp.Rational(1, 2):
            return f"np.sqrt(_f({base}))"
        return f"np.power(_f({base}), {self._print(e)})"

    def _print_exp(self, expr):
        return f"np.exp(_f({self._print(expr.args[0])}))"

    def _print_log(self, expr):
        return f"np.log(_f({self._print(expr.args[0])}))"

    def _print_Abs(self, expr):
        return f"np.abs(_f({self._print(expr.args[0])}))"

    def _print_ceiling(self, expr):
        return f"np.ceil(_f({self._print(expr.args[0])}))"

    def _print_floor(self, expr):
        return f"np.floor(_f({self._print(expr.args[0])}))"

    def _print_Min(self, expr):
        return "_min(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Max(self, expr):
        return "_max(" + ", ".join(self._print(a) for a in expr.args) + ")"


NUMPY_HELPERS = '''
def _f(v):
    return np.asarray(v, dtype=np.float64)


def _min(*xs):
    out = _f(xs[0])
    for v in xs[1:]:
        out = np.minimum(out, _f(v))
    return out


def _max(*xs):
    out = _f(xs[0])
    for v in xs[1:]:
        out = np.maximum(out, _f(v))
    return out
'''
"""Source of the helpers every numpy callable uses; copied into the generated numpy module."""


def numpy_source(expr: sp.Expr, args: Sequence[sp.Symbol]) -> str:
    """The Python source (over numpy) of ``expr`` with positional arguments ``_x0, _x1, ...``."""
    return NumpyPrinter(_argnames(args)).doprint(expr)


def to_numpy(expr: sp.Expr, args: Sequence[sp.Symbol]) -> Callable:
    """Callable over numpy arrays (float64, broadcasting); plain float arithmetic, no error bounds."""
    import numpy as np

    ns = {"np": np}
    exec(compile(NUMPY_HELPERS, "<specbound.derivation.backends.NUMPY_HELPERS>", "exec"), ns)  # noqa: S102
    inner = _compile(numpy_source(expr, args), ns, len(args))
    f = _f_wrap = lambda *values: ns["_f"](inner(*values))  # noqa: E731
    f.source = inner.source
    return _f_wrap


def _compile(source: str, namespace: dict, nargs: int) -> Callable:
    params = ", ".join(f"_x{i}" for i in range(nargs))
    # named apart from the helpers (the numpy helper ``_f`` converts values): a shared name would
    # make the expression's own ``_f(...)`` calls, and the wrapper's conversion, call the expression
    code = f"def _expression({params}):\n    return {source}\n"
    exec(compile(code, "<specbound.derivation.backends>", "exec"), namespace)  # noqa: S102
    fn = namespace["_expression"]
    fn.source = code
    return fn


# -- Arb ------------------------------------------------------------------------------------------

ARB_HELPERS = '''
def _as_arb(v):
    if isinstance(v, arb):
        return v
    if isinstance(v, (int, fmpz, fmpq)) and not isinstance(v, bool):
        return arb(v)
    if isinstance(v, float):
        return arb(v)  # exact: a binary64 value is a dyadic rational
    raise TypeError(f"Arb backend: cannot take {type(v).__name__} exactly")


def _powi(b, e):
    return b**e if e >= 0 else 1 / (b ** (-e))


def _powq(b, num, den):
    if den == 2 and num == 1:
        return b.sqrt()
    if den == 2 and num == -1:
        return b.rsqrt()
    rt = b.root(den)  # real root, b >= 0
    return _powi(rt, num)


def _pow(b, e):
    return b**e


def _ceil_up(x):
    # exact integer >= every point of the ball (see the module docstring of
    # specbound.derivation.backends for why this is valid)
    return x.upper().ceil()


def _floor_down(x):
    return x.lower().floor()


def _min(*xs):
    out = xs[0]
    for v in xs[1:]:
        out = arb.min(out, v)
    return out


def _max(*xs):
    out = xs[0]
    for v in xs[1:]:
        out = arb.max(out, v)
    return out
'''
"""Source of the helpers every Arb callable uses (over ``arb, fmpq, fmpz`` from python-flint).
Defined once here; scripts/generate_derived.py copies it verbatim into the generated Arb module."""


def _arb_namespace() -> dict:
    # flint is imported here, not at module import: derivation/ stays free of any numeric backend
    # (the SymPy layer and the CLI's start-up load neither flint nor torch).
    from flint import arb, fmpq, fmpz

    ns = {"arb": arb, "fmpq": fmpq, "fmpz": fmpz}
    exec(compile(ARB_HELPERS, "<specbound.derivation.backends.ARB_HELPERS>", "exec"), ns)  # noqa: S102
    return ns


def arb_source(expr: sp.Expr, args: Sequence[sp.Symbol]) -> str:
    """The Python source the Arb callable evaluates (for inspection and tests)."""
    return ArbPrinter(_argnames(args)).doprint(expr)


def to_arb(expr: sp.Expr, args: Sequence[sp.Symbol], *, check_rounding: bool = True) -> Callable:
    """Callable over ``flint.arb`` balls: the result is a ball enclosing ``expr`` at every point
    of the input balls, except that ceilings/floors round the upper/lower endpoint (module
    docstring), so with them the result is an upper bound.  Inputs may be ``arb``, ``int``,
    ``fmpq``, ``fmpz`` or ``float`` (taken as its exact binary value).  Precision: ``flint.ctx.prec``.

    ``check_rounding``: refuse (``ValueError``) an expression with a ceiling where it is not
    provably nondecreasing, or a floor where it is not provably nonincreasing
    (:func:`rounding_violations`).  Pass ``False`` only for a bare rounding whose *caller* uses the
    result in the right direction (e.g. ``floor(log(rho)/log(beta))`` for the margin grid).
    """
    if check_rounding:
        bad = rounding_violations(expr)
        if bad:
            raise ValueError("Arb backend: rounding not provably safe: " + "; ".join(bad))
    ns = _arb_namespace()
    inner = _compile(arb_source(expr, args), ns, len(args))
    as_arb = ns["_as_arb"]

    def f(*values):
        if len(values) != len(args):
            raise TypeError(f"expected {len(args)} arguments ({', '.join(map(str, args))})")
        return inner(*(as_arb(v) for v in values))

    f.source = inner.source
    return f


# -- torch ----------------------------------------------------------------------------------------

def to_torch(expr: sp.Expr, args: Sequence[sp.Symbol], dtype=None) -> Callable:
    """Callable over torch tensors (broadcasting; CPU or CUDA; float64 unless ``dtype``).

    Every argument is converted to ``dtype`` (default float64; float32 inputs are promoted), and
    Python numbers are placed on the device of the first tensor argument.
    torch is imported here, not at module import: derivation/ stays free of numeric backends and
    the CLI stays fast.
    """
    import torch

    out_dtype = dtype or torch.float64

    def t(v):
        if isinstance(v, torch.Tensor):
            return v
        return torch.as_tensor(v, dtype=out_dtype)

    def common(*xs):
        ref = next((x for x in xs if isinstance(x, torch.Tensor)), None)
        return [x if isinstance(x, torch.Tensor) else torch.as_tensor(
            x, dtype=out_dtype,
            device=ref.device if ref is not None else None) for x in xs]

    def min_(*xs):
        xs = common(*xs)
        out = xs[0]
        for v in xs[1:]:
            out = torch.minimum(out, v)
        return out

    def max_(*xs):
        xs = common(*xs)
        out = xs[0]
        for v in xs[1:]:
            out = torch.maximum(out, v)
        return out

    ns = {"torch": torch, "_t": t, "_min": min_, "_max": max_}
    source = TorchPrinter(_argnames(args)).doprint(expr)
    inner = _compile(source, ns, len(args))

    def f(*values):
        if len(values) != len(args):
            raise TypeError(f"expected {len(args)} arguments ({', '.join(map(str, args))})")
        # one dtype for everything (float64 unless asked), on the device of the first tensor
        vals = [v.to(out_dtype) for v in common(*values)]
        return t(inner(*vals))

    f.source = inner.source
    return f


# -- mpmath ---------------------------------------------------------------------------------------

def to_mpmath(expr: sp.Expr, args: Sequence[sp.Symbol]) -> Callable:
    """Callable over mpmath numbers at the current ``mpmath.mp.dps`` (the independent reference)."""
    return sp.lambdify(list(args), expr, modules="mpmath")


# -- the rounding check ---------------------------------------------------------------------------

def _direction(parent: sp.Basic, child_index: int) -> int | None:
    """+1 / -1 if ``parent`` is nondecreasing / nonincreasing in its child, None if unknown."""
    child = parent.args[child_index]
    if isinstance(parent, (sp.Add, sp.Min, sp.Max, sp.exp, sp.log, sp.erf, sp.ceiling, sp.floor)):
        return 1
    if isinstance(parent, sp.Mul):
        others = sp.Mul(*(a for i, a in enumerate(parent.args) if i != child_index))
        if others.is_nonnegative:
            return 1
        if others.is_nonpositive:
            return -1
        return None
    if isinstance(parent, sp.Pow):
        if child is parent.base or child_index == 0:
            if parent.exp.is_nonnegative and parent.base.is_nonnegative is not False:
                return 1
            if parent.exp.is_negative:
                return -1
            return None
        if (parent.base - 1).is_nonnegative:
            return 1
        if parent.base.is_positive and (1 - parent.base).is_nonnegative:
            return -1
    return None


def rounding_violations(expr: sp.Basic) -> list[str]:
    """Ceilings (floors) in ``expr`` at which ``expr`` is not provably nondecreasing
    (nonincreasing) in the rounded value.  Empty list: rounding the upper endpoint up (lower
    endpoint down) can only increase ``expr``, so the Arb evaluation stays an upper bound.

    The check is structural: along the path from the root to the rounding node every parent must
    be monotone in that child with SymPy-provable sign (Add, Min/Max, exp/log/erf, Mul by a
    nonnegative factor, Pow with a nonnegative exponent ...).
    """
    bad: list[str] = []

    def walk(node, sign):
        if sign is None:
            return
        if isinstance(node, (sp.ceiling, sp.floor)):
            want = 1 if isinstance(node, sp.ceiling) else -1
            if sign != want:
                bad.append(f"{node} (expression is {'in' if sign > 0 else 'de'}creasing in it)")
        for i, child in enumerate(node.args):
            if not isinstance(child, sp.Basic) or not child.has(sp.ceiling, sp.floor):
                continue
            dirn = _direction(node, i)
            if dirn is None:
                bad.append(f"{child} inside {type(node).__name__}: monotonicity not provable")
                continue
            walk(child, sign * dirn)

    walk(expr, 1)
    return bad


# -- convenience ----------------------------------------------------------------------------------

BACKENDS = {"arb": to_arb, "torch": to_torch, "mpmath": to_mpmath, "numpy": to_numpy}


def default_args(expr: sp.Basic) -> tuple[sp.Symbol, ...]:
    """The free symbols of ``expr`` sorted by name: the default positional argument order."""
    return tuple(sorted(expr.free_symbols, key=lambda s: s.name))


def compile_expr(expr: sp.Expr, backend: str, args: Sequence[sp.Symbol] | None = None,
                 **options) -> Callable:
    """``to_<backend>(expr, args)`` with ``args`` defaulting to :func:`default_args`; the callable
    gets an ``args`` attribute naming its positional arguments."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {sorted(BACKENDS)}")
    args = tuple(args) if args is not None else default_args(expr)
    fn = BACKENDS[backend](expr, args, **options)
    fn.args = args
    return fn

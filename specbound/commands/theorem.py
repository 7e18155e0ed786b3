"""``specbound theorem``: print the theorem assembled from the SymPy lemma objects (``--route``: the
Rademacher route, the Occam route, or both with delta split) by :func:`specbound.api.theorem`."""

from __future__ import annotations

import argparse
import re
import sys

from specbound.vocabulary import ACTIVATIONS, MODEL_VARIANTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "markdown", "latex"), default="text",
                        help="output format (default: text)")
    parser.add_argument("--massart", choices=("centred", "uncentred"), default="centred",
                        help="single-scale chaining form (default: centred, proofs_notes/theory.md section 10.1)")
    parser.add_argument("--dudley", choices=("centred", "uncentred"), default="centred",
                        help="Dudley form (default: centred, upper limit 1/4)")
    parser.add_argument("--activation", choices=ACTIVATIONS, default=ACTIVATIONS[0],
                        help="feed-forward activation phi; its proven constants L_phi, B_phi enter the "
                             f"theorem (default: {ACTIVATIONS[0]})")
    parser.add_argument("--model", choices=("analysis",) + MODEL_VARIANTS[1:], default="analysis",
                        help="analysis model (default), its residual variant, causal GPT-2 style, "
                             "Llama style (ls: RoPE, grouped keys, gated feed-forward)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a lemma constant (C_sm, L_phi, B_phi), e.g. --set C_sm=2")
    parser.add_argument("--route", choices=("rademacher", "occam", "both"), default="rademacher",
                        help="rademacher (default): the main theorem; occam: the union over the cover's "
                             "centres with a margin count and the binomial tail (--massart/--dudley do not "
                             "apply); both: each at delta/2, the smaller reported (proofs_notes/occam_route.md)")
    parser.add_argument("--classes", type=int, default=1, metavar="K",
                        help="read-out rows k: 1 (default) the binary theorem (labels +-1); K >= 2 the k-class "
                             "theorem (margin f_y - max_{c != y} f_c; the same for every K, printed with the "
                             "symbol k_cls; proofs_notes/k_class.md)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (every expression as text and LaTeX) instead of --format")


#: an override is a plain decimal or fraction of modest size (never handed to an expression parser)
_NUMBER = re.compile(r"^[+-]?(\d{1,30}(\.\d{0,30})?|\.\d{1,30})([eE][+-]?\d{1,2})?(/\d{1,30})?$")


def _number(name: str, text: str):
    """The exact rational a --set value denotes (decimal, exponent up to 2 digits, or p/q)."""
    from fractions import Fraction

    import sympy as sp

    from specbound.derivation.theorem import DerivationError

    if not _NUMBER.match(text):
        raise DerivationError(f"--set {name}: expected a decimal number or a fraction p/q of modest "
                              f"size, got {text[:40]!r}{'...' if len(text) > 40 else ''}")
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise DerivationError(f"--set {name}: not a number: {text!r}") from None
    return sp.Rational(value.numerator, value.denominator)


def run(args: argparse.Namespace) -> int:
    from specbound.api import theorem
    from specbound.derivation.render import render
    from specbound.derivation.theorem import DerivationError

    overrides = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise DerivationError(f"--set expects NAME=VALUE, got {item!r}")
        overrides[name.strip()] = _number(name.strip(), value.strip())
    model = {"analysis": "plain"}.get(args.model, args.model)
    assembled = theorem(args.route, overrides=overrides, massart=args.massart, dudley=args.dudley,
                        activation=args.activation, model=model, classes=args.classes)
    if args.json:
        import json

        from specbound.derivation.render import to_dict

        sys.stdout.write(json.dumps(to_dict(assembled), indent=2) + "\n")
        return 0
    sys.stdout.write(render(assembled, args.format))
    return 0

"""``specbound plan [CHECKPOINT]``: the sample size n at which the float ESTIMATE of each route reaches a
target bound.

Parses the options, calls :func:`specbound.api.plan_n` (:mod:`specbound.planning`) and renders its
:class:`~specbound.planning.SampleSizePlan`: one row per target with the n of the Occam route, of the
Rademacher route and of the smaller of the two (what ``certify`` reports), each with n per parameter and
the estimate's main part there, under the assumptions the estimate makes (norms, margin distribution,
levels).  Estimates, not bounds: the table says so in its title and every assumption is printed.
"""

from __future__ import annotations

import argparse
import json
import sys

from specbound.commands.certify import _float, _int
from specbound.errors import SpecboundError
from specbound.vocabulary import ACTIVATIONS, MODEL_VARIANTS

ARCHITECTURE_FLAGS: dict[str, str] = {"layers": "num_layers", "heads": "num_heads", "width": "width",
                                      "head_dim": "head_dim", "ff_dim": "ff_dim"}
"""Command-line flag (dest) -> architecture key, for the keys an architecture must give."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a pilot model (untrained, partly or fully trained), anything certify reads; default "
                             "(without architecture flags): the embedded model")
    parser.add_argument("--target", nargs="+", default=None, metavar="T",
                        help="target bound(s) in (0, 1) (default 0.5)")
    arch = parser.add_argument_group("an architecture instead of a model (planned at the reference initialisation)")
    arch.add_argument("--layers", default=None, metavar="L", help="number of layers")
    arch.add_argument("--heads", default=None, metavar="H", help="attention heads per layer")
    arch.add_argument("--width", default=None, metavar="N", help="model width N")
    arch.add_argument("--head-dim", default=None, metavar="D", help="head dimension d_h")
    arch.add_argument("--ff-dim", default=None, metavar="F", help="feed-forward width d_ff")
    arch.add_argument("--variant", default=None, help=f"one of {', '.join(MODEL_VARIANTS)} (default plain)")
    arch.add_argument("--activation", default=None, help=f"one of {', '.join(ACTIVATIONS)} (default gelu)")
    arch.add_argument("--kv-heads", default=None, metavar="G", help="key/value groups (ls variants)")
    arch.add_argument("--outputs", default=None, metavar="K", help="read-out outputs k (k >= 2: the k-class theorem, margins f_y - max of the others)")
    arch.add_argument("--init-seed", default=None, metavar="S", help="seed of the initialisation (default 0)")
    pilot = parser.add_argument_group("the margin distribution")
    pilot.add_argument("--data", default=None, metavar="FILE",
                       help="pilot sample (.npz: labels + tokens or inputs): the pilot model's margins on it")
    pilot.add_argument("--samples", default=None, metavar="N",
                       help="pilot sample: N fresh samples of the model's recorded task (default 2000)")
    pilot.add_argument("--seed", default=None, metavar="S", help="seed of those samples (default 3)")
    pilot.add_argument("--margin", default=None, metavar="F",
                       help="assume every margin is F ||w|| (F in (0, 1]; default 0.5 when there is no pilot sample)")
    pilot.add_argument("--error", default=None, metavar="E",
                       help="assume a fraction E in [0, 1) of the examples at margin -F ||w|| (default 0)")
    parser.add_argument("--delta", default="0.05", metavar="D", help="confidence parameter in (0, 1)")
    parser.add_argument("--num-heads", default=None, metavar="H",
                        help="attention heads (needed for a BERT state dict without config.json)")
    parser.add_argument("--max-n", default=None, metavar="N", help="largest n searched (default 10^12)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def _architecture(args: argparse.Namespace) -> dict | None:
    """The architecture the flags give (None when none of them is given)."""
    given = {dest: getattr(args, dest) for dest in ARCHITECTURE_FLAGS}
    extra = {"variant": args.variant, "activation": args.activation, "kv_heads": args.kv_heads,
             "outputs": args.outputs, "init_seed": args.init_seed}
    if all(v is None for v in (*given.values(), *extra.values())):
        return None
    missing = [f"--{d.replace('_', '-')}" for d, v in given.items() if v is None]
    if missing:
        raise SpecboundError(f"an architecture needs --layers --heads --width --head-dim --ff-dim: give "
                             f"{' '.join(missing)}")
    out = {key: _int(given[dest], f"--{dest.replace('_', '-')}") for dest, key in ARCHITECTURE_FLAGS.items()}
    if args.variant is not None:
        out["variant"] = args.variant
    if args.activation is not None:
        out["activation"] = args.activation
    if args.kv_heads is not None:
        out["num_kv_heads"] = _int(args.kv_heads, "--kv-heads", 0)
    if args.outputs is not None:
        out["num_outputs"] = _int(args.outputs, "--outputs")
    return out


def run(args: argparse.Namespace) -> int:
    from specbound.api import plan_n

    arch = _architecture(args)
    if arch is not None and args.checkpoint is not None:
        raise SpecboundError("give a CHECKPOINT or the architecture flags (--layers ...), not both")
    targets = [_float(t, "--target") for t in args.target] if args.target is not None else None
    options = {"data": args.data, "samples": _int(args.samples, "--samples"), "seed": _int(args.seed, "--seed", 0),
               "margin": _float(args.margin, "--margin"), "error": _float(args.error, "--error"),
               "delta": _float(args.delta, "--delta"), "num_heads": _int(args.num_heads, "--num-heads")}
    if args.max_n is not None:
        options["max_n"] = _int(args.max_n, "--max-n")
    if args.init_seed is not None:
        options["init_seed"] = _int(args.init_seed, "--init-seed", 0)
    if targets is not None:
        options["target"] = targets
    result = plan_n(args.checkpoint, architecture=arch, **options)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return 0
    render(result)
    return 0


def _count(n: int) -> str:
    """``10^k`` for a power of ten, else the number with thousands separators."""
    k = len(str(n)) - 1
    return f"10^{k}" if n == 10**k and k > 2 else f"{n:,}"


def _n(row: dict) -> str:
    if row["n"] is None:
        return "not reached"
    return f"{row['n']:,}  ({row['n_per_parameter']:.3g}/param)"


def render(result) -> None:
    """The plan as a table (one row per target) under its assumptions."""
    from specbound.commands.proxies import console
    from specbound.table import Table
    from specbound.terminal import print_table
    from specbound.planning import PLAN_ROUTES

    out = console()
    say = lambda text: out.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    say(f"sample-size plan for {result.model} ({result.parameters:,} parameters): the n at which the float "
        "ESTIMATE of each route reaches the target")
    say("ESTIMATES, NOT BOUNDS -- they assume:")
    for line in result.assumptions:
        say(f"  - {line}")
    table = Table(f"n at which the float estimate reaches the target ('not reached': not by n = "
                  f"{_count(result.max_n)})",
                  ["target", "Occam route", "Rademacher route", "smaller (what certify reports)"], ["right"] * 4)
    targets = sorted({r["target"] for r in result.rows}, reverse=True)
    for t in targets:
        cells = [_n(next(r for r in result.rows if r["target"] == t and r["route"] == route))
                 for route in PLAN_ROUTES]
        table.add_row(f"{t:g}", *cells)
    print_table(out, table)
    for t in targets:
        occ = next(r for r in result.rows if r["target"] == t and r["route"] == PLAN_ROUTES[0])
        if occ["n"] is not None:
            say(f"  target {t:g}, Occam route at n = {occ['n']:,}: H = {occ['occam_H']:.6g} nats "
                      f"({occ['occam_H'] / result.parameters:.3g} per parameter), K = {occ['occam_count']} at "
                      f"gamma = {occ['occam_gamma']:.4g}, estimate {occ['estimate']:.4g}")
    say("Run `specbound certify` on the trained model and its real sample for a bound.")

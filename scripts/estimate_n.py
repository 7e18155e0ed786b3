"""Float64 PLANNING estimate of both routes' bounds of a trained checkpoint at sample sizes it was not
certified at (issue 26: choosing n before S is drawn).  NOT a bound: nothing printed here is certified.

    .venv/bin/python scripts/estimate_n.py CKPT.safetensors --samples 100000 --n 1e5,3e5,1e6,3e6

The float margins ``y f(X)`` of ``--samples`` fresh draws of the checkpoint's recorded task (seed
``--seed``, default 4: a stream used by no training sample or certified S) stand in for the margins of
an S of size n: they are tiled (and truncated) to n entries, i.e. the margin distribution is assumed not
to change with n.  For each n the planner (:mod:`numeric.planner`, both routes at delta/2 each) is run
on the float spectra; the printed Occam estimate is its float ``BinInv(n, K(gamma), C)`` and the
Rademacher estimate the numeric bound of the same plan.  Use it to pick n; report only the certified
numbers of ``specbound certify``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from specbound.checkpoint import load_weights
from specbound.empirical import resolve
from specbound.numeric.evaluation import evaluate_facts
from specbound.numeric.planner import plan_for
from specbound.numeric.terms import compiled_theorem, network_facts
from specbound.pipeline import float_margins
from specbound.plan import BoundSettings
from specbound.vocabulary import ROUTES


def _sizes(text: str) -> list[int]:
    return [int(float(t)) for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--samples", type=int, default=100_000, help="fresh draws whose margins stand in for S")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--n", default="1e5,3e5,1e6,3e6", help="comma-separated sample sizes")
    parser.add_argument("--delta", type=float, default=0.05)
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    weights = load_weights(args.checkpoint)
    _, data, _ = resolve(weights, args.checkpoint, None, n=None, empirical=None, samples=args.samples,
                         seed=args.seed)
    margins = np.asarray(float_margins(weights, data), dtype=np.float64)
    print(f"{args.samples} fresh margins (seed {args.seed}) in {time.perf_counter() - t0:.1f} s: "
          f"float errors {int((margins <= 0).sum())}, min {margins.min():.3g}, "
          f"median {np.median(margins):.3g}")
    facts = network_facts(weights)
    print("FLOAT ESTIMATES (planning only, not bounds):")
    for n in _sizes(args.n):
        reps = -(-n // margins.size)
        marg = np.tile(margins, reps)[:n]
        settings = BoundSettings(n=n, delta=args.delta, routes=ROUTES)
        ct = compiled_theorem(settings, weights.activation, weights.variant)
        plan = plan_for(ct, facts, settings, marg)
        rad = evaluate_facts(ct, facts, settings, plan, margins=marg)
        o = plan.occam.notes if plan.occam is not None else {}
        print(f"  n = {n:>10d}: Occam ~ {o.get('estimate', float('nan')):.4g} (K {o.get('count')}, "
              f"H {o.get('H', float('nan')):.6g}, C {o.get('C', float('nan')):.6g}, gamma {o.get('gamma', float('nan')):.4g});"
              f" Rademacher ~ {float(rad.bound):.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

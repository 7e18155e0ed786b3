"""Benchmark: the certified binomial inversion (certified/binomial.py), per call, by regime.

Plain script (no pytest).  For each (n, k, C) it reports the median time of ``bininv_upper`` over
--reps calls, the method that gave the reported value, and the relative distance between the kl
form and the reported (tail) form, i.e. what the exact tail buys over the kl relaxation.

    .venv/bin/python benchmarks/bench_binomial.py [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from specbound.certified.binomial import invert

REGIMES = (
    ("embedded default: n 1e6, K 1e3, C 1e4", 10**6, 1000, 1e4),
    ("separated sample: n 1e6, K 0, C 1e4", 10**6, 0, 1e4),
    ("L4 N64: n 1e5, K 50, C 3e4", 10**5, 50, 3e4),
    ("large n: n 1e9, K 1e5, C 1e4", 10**9, 10**5, 1e4),
    ("tiny C/n: n 1e9, K 1e3, C 1e-3", 10**9, 1000, 1e-3),
    ("huge C/n: n 1e6, K 10, C 1e9", 10**6, 10, 1e9),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    print(f"{'regime':42s} {'median s':>9s} {'method':>7s} {'kl/reported - 1':>16s}")
    for name, n, k, C in REGIMES:
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            inv = invert(n, k, C)
            times.append(time.perf_counter() - t0)
        value, kl = float(inv.value.mid()), float(inv.kl.mid())
        print(f"{name:42s} {statistics.median(times):9.4f} {inv.method:>7s} {kl / value - 1:16.3e}")


if __name__ == "__main__":
    main()

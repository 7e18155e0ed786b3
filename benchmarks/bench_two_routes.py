"""Benchmark: the cost of the second route, ``specbound certify`` (embedded default) side by side.

Plain script (no pytest).  Every side is a fresh subprocess ``specbound certify --json`` (interpreter
start-up, imports, the fast certified pass over the 10^6 training examples, both routes); rounds are
paired and alternate their order, and the report gives medians of wall time, of child CPU time and of
the per-round ratios against a baseline:

  * ``--baseline DIR``: another checkout's ``DIR/.venv/bin/specbound`` (e.g. the main branch before the
    Occam route) -- the target of issue 23 is a ratio <= 1.2;
  * without it: the same checkout with the Occam route switched off (``routes=("rademacher",)``
    through the Python API), which isolates the route's own cost.

Also printed: each side's reported bound (so a faster side that certifies something else is seen).

    .venv/bin/python benchmarks/bench_two_routes.py [--reps 5] [--baseline /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RADEMACHER_ONLY = r'''
import json, sys
from specbound.pipeline import certify
r = certify(None, routes=("rademacher",))
print(json.dumps({"result": {"bound_upper": r.to_dict()["result"]["bound_upper"]}}))
'''


def _run(argv: list[str], env: dict) -> tuple[float, float, dict]:
    """(wall seconds, child CPU seconds, parsed JSON of stdout) of one subprocess."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", default=None, help="another checkout whose certify is the baseline")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    ours = [os.path.join(HERE, ".venv", "bin", "specbound"), "certify", "--json"]
    if args.baseline:
        base = [os.path.join(args.baseline, ".venv", "bin", "specbound"), "certify", "--json"]
        base_env = env
        label = f"baseline {args.baseline}"
    else:
        base, base_env, label = [sys.executable, "-c", RADEMACHER_ONLY], env, "this checkout, Rademacher route only"
    walls, cpus, ratios, bounds = {"ours": [], "base": []}, {"ours": [], "base": []}, [], {}
    for rep in range(args.reps):
        order = (("ours", ours, env), ("base", base, base_env))
        if rep % 2:
            order = order[::-1]
        got = {}
        for name, argv, e in order:
            wall, cpu, out = _run(argv, e)
            walls[name].append(wall)
            cpus[name].append(cpu)
            got[name] = wall
            bounds[name] = out["result"]["bound_upper"]
        ratios.append(got["ours"] / got["base"])
        print(f"round {rep + 1}: ours {got['ours']:.1f} s, base {got['base']:.1f} s, ratio {ratios[-1]:.3f}",
              flush=True)
    med = statistics.median
    print(f"baseline: {label}")
    print(f"wall  median: ours {med(walls['ours']):.1f} s, base {med(walls['base']):.1f} s; "
          f"median per-round ratio {med(ratios):.3f}")
    print(f"CPU   median: ours {med(cpus['ours']):.1f} s, base {med(cpus['base']):.1f} s; "
          f"ratio of medians {med(cpus['ours']) / med(cpus['base']):.3f}")
    print(f"bound: ours {bounds['ours']}, base {bounds['base']}")


if __name__ == "__main__":
    main()

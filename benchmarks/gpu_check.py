"""CUDA check of the numeric path (docs/design.md section 4): BERT-base shapes on CUDA vs CPU float64.

Run through ``benchmarks/gpu_check.sh``.  No network access and no installs.  Exits 0 with a clear
message when no CUDA device is present; exits 1 when a device value disagrees with the CPU float64
one beyond the stated tolerances:

* float64 on the device vs float64 on the CPU (default path), same plan: every singular value within 1e-12 sigma_1,
  the bound and its parts within 1e-10 relative (different LAPACK/cuSOLVER orderings only);
* float32 on the device: within ``2 FLOAT32_DERIVED_REL_TOL`` (numeric.bound) of the CPU float64 values.

``--cpu`` is the fall-back that CI runs on machines without CUDA: the very same checks and timings with
torch on the CPU as the "device" (shapes from ``--layers``/``--width``/``--heads``), so the script's
logic is exercised where no GPU is lent.  Its figures say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_numeric import bert_like, plain_svdvals  # noqa: E402

from specbound.numeric.bound import FLOAT32_DERIVED_REL_TOL, evaluate  # noqa: E402
from specbound.plan import BoundSettings  # noqa: E402


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _median(fn, dev: torch.device, reps=3):
    fn()
    out = []
    for _ in range(reps):
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _arguments(argv):
    ap = argparse.ArgumentParser(description="the numeric path on CUDA (or, with --cpu, torch on the CPU) "
                                             "cross-checked against CPU float64 numpy")
    ap.add_argument("--cpu", action="store_true", help="run the checks with torch on the CPU (the CI fall-back)")
    ap.add_argument("--layers", type=int, default=int(os.environ.get("GPU_CHECK_LAYERS", "12")))
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = _arguments(argv)
    if args.cpu:
        dev = torch.device("cpu")
        print(f"gpu_check: CPU fall-back (torch {torch.__version__} on the CPU as the device; no GPU figures)")
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device available (torch.cuda.is_available() is False); nothing to check.")
        return 0
    else:
        dev = torch.device("cuda")
        print(f"gpu_check: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}")
    layers, name = args.layers, "BERT-base" if (args.width, args.heads) == (768, 12) else f"N={args.width} H={args.heads}"
    w = bert_like(layers=layers, heads=args.heads, width=args.width, ff=4 * args.width)
    st = BoundSettings(n=100_000, margin=1.0, empirical=0.0)

    t0 = time.perf_counter()
    cpu = evaluate(w, st)
    t_cpu = time.perf_counter() - t0
    gpu = evaluate(w, st, cpu.plan, device=dev)
    g32 = evaluate(w, st, cpu.plan, device=dev, dtype=torch.float32)
    planned = evaluate(w, st, device=dev)  # the planner on CUDA too

    failures = []
    s1 = cpu.singular_values[:, :1]
    sv_err = float(np.max(np.abs(gpu.singular_values - cpu.singular_values) / np.maximum(s1, 1e-300)))
    if sv_err > 1e-12:
        failures.append(f"float64 singular values differ by {sv_err:.2e} sigma_1")
    for key in ("ss_closed", "ss_objective", "dd", "Lambda", "confidence", "bound"):
        a, b, c = getattr(cpu, key), getattr(gpu, key), getattr(g32, key)
        if abs(b - a) > 1e-10 * abs(a):
            failures.append(f"float64 {key}: {dev.type} {b!r} vs cpu {a!r}")
        if abs(c - a) > 2 * FLOAT32_DERIVED_REL_TOL * abs(a):
            failures.append(f"float32 {key}: {dev.type} {c!r} vs cpu float64 {a!r}")
    for rc, rg in zip(cpu.matrices, gpu.matrices):
        if abs(rc.ss_term - rg.ss_term) > 1e-10 * abs(rc.ss_term):
            failures.append(f"{rc.name} contribution: {dev.type} {rg.ss_term!r} vs cpu {rc.ss_term!r}")
    if planned.plan.p_index != cpu.plan.p_index:
        diff = sum(a != b for a, b in zip(planned.plan.p_index, cpu.plan.p_index))
        print(f"note: the planner on {dev.type} chose a different p for {diff} matrices (float ties); "
              f"bound {dev.type} {planned.bound!r} vs cpu {cpu.bound!r}")

    t_gpu = _median(lambda: evaluate(w, st, device=dev), dev)
    t_g32 = _median(lambda: evaluate(w, st, device=dev, dtype=torch.float32), dev)
    t_svd = _median(lambda: plain_svdvals(w, dev), dev)
    d = dev.type
    print(f"{name} shapes, {layers} layers, {len(w.matrices)} matrices")
    print(f"  cpu float64 full bound (one run) {t_cpu:14.3f} s")
    print(f"  {d} float64 full bound (median 3) {t_gpu:12.3f} s")
    print(f"  {d} float32 full bound (median 3) {t_g32:12.3f} s")
    print(f"  {d} plain float64 svdvals         {t_svd:12.3f} s   ratio bound/svdvals {t_gpu / t_svd:.3f}")
    if d == "cuda":
        print(f"  cuda max allocated {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    print(f"  bound cpu {cpu.bound!r}  {d}64 {gpu.bound!r}  {d}32 {g32.bound!r}; max sigma diff {sv_err:.2e} sigma_1")
    if failures:
        print("gpu_check: FAILED")
        for f in failures[:40]:
            print("  " + f)
        return 1
    print(f"gpu_check: OK ({d} agrees with CPU float64 within the stated tolerances)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

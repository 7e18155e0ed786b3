"""CUDA check of the numeric path (docs/design.md section 4): BERT-base shapes on CUDA vs CPU float64.

Run through ``benchmarks/gpu_check.sh``.  No network access and no installs.  Exits 0 with a clear
message when no CUDA device is present; exits 1 when a CUDA value disagrees with the CPU float64
one beyond the stated tolerances:

* float64 on CUDA vs float64 on CPU, same plan: every singular value within 1e-12 sigma_1, the bound
  and its parts within 1e-10 relative (different LAPACK/cuSOLVER orderings only);
* float32 on CUDA: within ``FLOAT32_DERIVED_REL_TOL`` (numeric.bound) of the CPU float64 values.
"""

from __future__ import annotations

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


def _median(fn, reps=3):
    fn()
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device available (torch.cuda.is_available() is False); nothing to check.")
        return 0
    dev = torch.device("cuda")
    print(f"gpu_check: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}")
    layers = int(os.environ.get("GPU_CHECK_LAYERS", "12"))
    w = bert_like(layers=layers)
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
            failures.append(f"float64 {key}: cuda {b!r} vs cpu {a!r}")
        if abs(c - a) > 2 * FLOAT32_DERIVED_REL_TOL * abs(a):
            failures.append(f"float32 {key}: cuda {c!r} vs cpu float64 {a!r}")
    for rc, rg in zip(cpu.matrices, gpu.matrices):
        if abs(rc.ss_term - rg.ss_term) > 1e-10 * abs(rc.ss_term):
            failures.append(f"{rc.name} contribution: cuda {rg.ss_term!r} vs cpu {rc.ss_term!r}")
    if planned.plan.p_index != cpu.plan.p_index:
        diff = sum(a != b for a, b in zip(planned.plan.p_index, cpu.plan.p_index))
        print(f"note: the planner on CUDA chose a different p for {diff} matrices (float ties); "
              f"bound cuda {planned.bound!r} vs cpu {cpu.bound!r}")

    t_gpu = _median(lambda: evaluate(w, st, device=dev))
    t_g32 = _median(lambda: evaluate(w, st, device=dev, dtype=torch.float32))
    t_svd = _median(lambda: plain_svdvals(w, dev))
    print(f"BERT-base shapes, {layers} layers, {len(w.matrices)} matrices")
    print(f"  cpu float64 full bound (one run)   {t_cpu:8.3f} s")
    print(f"  cuda float64 full bound (median 3) {t_gpu:8.3f} s")
    print(f"  cuda float32 full bound (median 3) {t_g32:8.3f} s")
    print(f"  cuda plain float64 svdvals         {t_svd:8.3f} s   ratio bound/svdvals {t_gpu / t_svd:.3f}")
    print(f"  cuda max allocated {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    print(f"  bound cpu {cpu.bound!r}  cuda64 {gpu.bound!r}  cuda32 {g32.bound!r}; max sigma diff {sv_err:.2e} sigma_1")
    if failures:
        print("gpu_check: FAILED")
        for f in failures[:40]:
            print("  " + f)
        return 1
    print("gpu_check: OK (CUDA agrees with CPU float64 within the stated tolerances)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

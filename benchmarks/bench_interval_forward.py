"""Benchmark: the per-sample certified pass and the certified ramp-loss route vs a float64 forward.

Plain script (no pytest).  For each model (the toy, then every checkpoint given) and n fresh samples of
its recorded task it times, interleaved in one run, medians of --reps repetitions:
  float     = the fastest of a batched numpy float64 forward (libm exp, scipy erf / numpy tanh) of the same
              program at 64, 128, 256 and 1024 samples per batch and the model's own torch float64 forward,
              all on one thread: what a float forward costs;
  interval  = certified.interval_forward on every sample (reading the token table built once per run, as the
              float forward does; the table's Arb cost is timed on its own), per-layer radius only;
  refined   = the same with the adjoint refinement (proofs_notes/interval_adjoint.md) aiming at --target
              (run only on the samples whose per-layer radius misses it): the certified pass of issue 25;
  route     = certified_ramp_loss(..., forward="fast") end to end at margin --rho (the a-priori pass where its
              epsilon is small, the per-sample pass otherwise or on the a-priori pass's straddlers, Arb
              for what still straddles 0 or rho).
Each method is timed in process CPU time (user + system: what it costs, whatever else the shared machine
runs) and in wall time; the ratios to the float forward are printed for both, with the load average.  It
prints the widths (max radius / (1 + |margin|)), the fraction of samples the refinement ran on, the
samples redone in Arb and whether any of them lies at least 1e-6 from every threshold.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_interval_forward.py [CKPT ...] [--n 4096] [--reps 5]

Measured (one run, n = 4096, 7 reps, load average 0.8-1.0 on 2 cores; CPU time, wall within 1%; ratio to the
fastest float forward; width max radius / (1 + |margin|) after the refinement; compiled loops on; README (e)):
  toy L2 N32 d_h 1 d_ff 2        per-layer 71,760/s 1.82x   certified 66,717/s 1.95x   0.05% refined  7.3e-10
  (a) L4 N64 d_h 1 residual      per-layer 19,911/s 1.83x   certified 12,545/s 2.90x   100% refined   9.8e-10
  (b) L4 H4 N64 d_h 16 d_ff 128  per-layer  4,064/s 1.36x   certified  3,518/s 1.57x   99.2% refined  9.6e-10
  (c) LS L2 H4 N32 SiLU          per-layer 17,389/s 1.60x   certified 14,503/s 1.92x   100% refined   7.1e-10
  ((a) alone, three runs of the same code: 2.87-2.94x.)
  no sample redone in Arb by the route on any of them.

The toy (L2 N32 d_h 1 d_ff 2) is --toy PATH, by default specbound/data/toy.safetensors when it exists, else
the embedded default checkpoint (which was the toy before the default changed).  The L4 N64 models of
docs/experiments.md 2c and the Llama-style model are rebuilt by the recipes printed with --recipes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from specbound.certified.fast_forward import project_rows_float, token_table  # noqa: E402
from specbound.certified.interval_adjoint import refined_pass  # noqa: E402
from specbound.certified.interval_forward import batch_size, prepare  # noqa: E402
from specbound.certified.ramp_loss import certified_ramp_loss, fast_pass  # noqa: E402
from specbound.checkpoint import load_weights  # noqa: E402
from specbound.data_file import dataset_from_arrays  # noqa: E402
from specbound.empirical import task_record  # noqa: E402
from specbound.tasks import Task  # noqa: E402

RECIPES = """\
L4 N64 residual (docs/experiments.md 2c, the moonshot: a-priori epsilon 11.5 on its task):
  specbound experiment run --variant residual --task symbol_majority --layers 4 --width 64 --heads 2 \\
    --head-dim 1 --ff 2 --steps 2000 --lr 1e-2 --batch 512 --n-train 100000 --reg 0 --reg-kind none \\
    --data-seed 13 --sample fresh --n 2000 --margin 2 --save moon.safetensors
L4 H4 N64 d_h 16 d_ff 128 residual (a-priori epsilon 5.8; lr 1e-2 stays at chance for this shape):
  the same with --heads 4 --head-dim 16 --ff 128 --steps 1000 --lr 3e-3 --batch 256 --save l4h4.safetensors
Llama-style L2 (H 4, 2 key/value groups, SiLU):
  specbound experiment run --variant ls --activation silu --task symbol_majority --layers 2 --width 32 \\
    --heads 4 --kv-heads 2 --head-dim 8 --ff 64 --steps 2000 --lr 3e-3 --batch 512 --n-train 100000 \\
    --reg 0 --reg-kind none --data-seed 13 --sample fresh --n 2000 --margin 2 --save ls2.safetensors"""


def _erf():
    try:
        from scipy.special import erf

        return erf
    except ImportError:  # torch is a project dependency
        import torch

        return lambda x: torch.special.erf(torch.from_numpy(x)).numpy()


def _phi(name: str, erf):
    if name == "gelu":
        return lambda u: u * (0.5 * (1.0 + erf(u * 0.7071067811865476)))
    if name == "gelu_tanh":
        return lambda u: 0.5 * u * (1.0 + np.tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)))
    if name == "silu":
        return lambda u: u / (1.0 + np.exp(-u))
    return lambda u: np.maximum(u, 0.0)


def numpy_forward(net, x: np.ndarray, phi) -> np.ndarray:
    """The plain float64 forward of the same layout and batch (libm exp; no bounds)."""
    B, T, N = x.shape
    L = net.num_layers
    tau = T - 1 if net.causal else 0
    for l, lay in enumerate(net.layers):
        H, G, d, dv = lay.num_heads, lay.num_groups, lay.dq, lay.dv
        xq = x[:, tau:tau + 1] if l == L - 1 else x
        Tq = xq.shape[1]
        q = (xq.reshape(-1, N) @ lay.wq).reshape(B, Tq, H, d)
        k = (x.reshape(-1, N) @ lay.wk).reshape(B, T, G, d)
        v = (x.reshape(-1, N) @ lay.wv).reshape(B, T, G, dv)
        if net.rope:
            half = d // 2
            first = tau if Tq == 1 else 0
            for name, arr, t0 in (("q", q, first), ("k", k, 0)):
                # (a c - b s, a s + b c) on whole rows, x [c, c] + (b, a) [-s, s]: the faster form, which the
                # certified pass uses too (the half-row form runs numpy's loops d/2 entries at a time)
                Tr, Gr = arr.shape[1], arr.shape[2]
                c = net.cos[t0:t0 + Tr]
                s = net.sin[t0:t0 + Tr]
                c2 = np.broadcast_to(np.concatenate([c, c], -1)[:, None], (Tr, Gr, d))
                s2 = np.broadcast_to(np.concatenate([-s, s], -1)[:, None], (Tr, Gr, d))
                sw = np.concatenate([arr[..., half:], arr[..., :half]], axis=-1)
                sw *= s2
                rot = arr * c2
                rot += sw
                q, k = (rot, k) if name == "q" else (q, rot)
        kh, vh = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
        if G != H:
            kh, vh = kh[:, lay.group], vh[:, lay.group]
        s = q.transpose(0, 2, 1, 3) @ kh
        if net.causal and Tq > 1:
            s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
        s -= s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        e /= e.sum(axis=-1, keepdims=True)
        att = ((e @ vh).transpose(0, 2, 1, 3).reshape(B * Tq, H * dv) @ lay.wo).reshape(B, Tq, N)
        if net.residual:
            att += xq
        y = project_rows_float(att)
        y2 = y.reshape(B * Tq, N)
        if lay.gated:
            z = (phi(y2 @ lay.ff[0]) * (y2 @ lay.ff[1])) @ lay.ff[2]
        else:
            z = phi(y2 @ lay.ff[0]) @ lay.ff[1]
        z = z.reshape(B, Tq, N)
        if net.residual:
            z += y
        x = project_rows_float(z)
    return x[:, 0] @ net.readout.T if L else x[:, tau] @ net.readout.T


def _torch_forward(path, tokens):
    try:
        import torch

        from specbound.model import AnalysisTransformer
    except ImportError:
        return None
    torch.set_num_threads(1)
    model = AnalysisTransformer.load(path).double()
    tok = torch.from_numpy(tokens)

    def run():
        with torch.no_grad():
            for a in range(0, tokens.shape[0], 4096):
                model(tok[a:a + 4096])
    return run


FLOAT_BATCHES = (64, 128, 256, 1024)


def toy_path(given: str | None) -> Path:
    """The toy checkpoint: ``given``, else specbound/data/toy.safetensors when it exists, else the embedded
    default checkpoint (the toy until the default changed)."""
    if given:
        return Path(given)
    from specbound.data import default_checkpoint_path

    default = default_checkpoint_path()
    toy = default.with_name("toy.safetensors")
    return toy if toy.is_file() else default


def _clock() -> tuple[float, float]:
    """(wall, process CPU time: user + system of this process, high resolution)."""
    return time.perf_counter(), time.process_time()


def bench(path: Path, n: int, reps: int, rho: float, target: float, fallback: Path) -> None:
    w = load_weights(str(path))
    # the model's own task record, else the toy's (the L4 N64 model of 2c records only its config)
    task = Task.from_record(task_record(w, str(path)) or task_record(w, str(fallback)))
    tokens, labels = task.sample(n, np.random.default_rng(3))
    E, P = w.extra["embedding.E"], w.extra.get("embedding.P")
    ip = prepare(w)
    ip_ref = refined_pass(w, target)
    net = ip.net
    phi = _phi(w.activation, _erf())
    tt = token_table(E, P, tokens)
    table = tt[0]
    pos = np.arange(tokens.shape[1])
    data = dataset_from_arrays(labels, tokens=tokens)

    def numpy_run(b):
        def run():
            for a in range(0, n, b):
                numpy_forward(net, table[pos, tokens[a:a + b]], phi)
        return run

    runs = {f"numpy{b}": numpy_run(b) for b in FLOAT_BATCHES}
    torch_run = _torch_forward(path, tokens)
    if torch_run is not None:
        runs["torch"] = torch_run
    out = {}
    # the per-sample passes read the Arb table of (position, token) rows built once per run, as the float
    # forwards above and the certified route do; its one-off cost is timed on its own ("table")
    runs["table"] = lambda: token_table(E, P, tokens)
    runs["interval"] = lambda: out.__setitem__("interval", ip.tokens(E, P, tokens, table=tt[:2]))
    runs["refined"] = lambda: out.__setitem__("refined", ip_ref.tokens(E, P, tokens, table=tt[:2]))
    runs["route"] = lambda: out.__setitem__("route", certified_ramp_loss(w, data, rho))
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    load0 = os.getloadavg()[0]
    for _ in range(reps):  # interleaved, so load drifts hit every method alike
        for key, run in runs.items():
            w0, c0 = _clock()
            run()
            w1, c1 = _clock()
            wall[key].append(w1 - w0)
            cpu[key].append(c1 - c0)
    load1 = os.getloadavg()[0]
    med_w = {k: statistics.median(v) for k, v in wall.items()}
    med_c = {k: statistics.median(v) for k, v in cpu.items()}
    floats = [k for k in runs if k.startswith(("numpy", "torch"))]
    pairs = np.stack([np.broadcast_to(pos, tokens.shape), tokens], axis=-1).reshape(-1, 2)
    distinct = np.unique(pairs, axis=0).shape[0]
    fc = min(floats, key=lambda k: med_c[k])
    fw = min(floats, key=lambda k: med_w[k])
    f, rad, ok = out["interval"]
    g = f[:, 0] * labels
    scale = 1 + np.abs(g)
    widths = rad[:, 0] / scale
    missed = ~(rad <= target * (1.0 + np.abs(f))).all(axis=1)
    rad_r = out["refined"][1]
    widths_r = rad_r[:, 0] / scale
    cert = out["route"]
    fp = fast_pass(w, data)
    print(f"{path}: {w.variant} L={w.num_layers} H={w.num_heads} N={w.width} d_h={w.head_dim} d_ff={w.ff_dim} "
          f"{w.activation}; n = {n}, reps = {reps} (medians, one thread); load average {load0:.1f} -> {load1:.1f} "
          f"on {os.cpu_count()} cores; certified batch {batch_size(net, tokens.shape[1])}")
    print("  float64 forward   " + "   ".join(f"{k} {n / med_c[k]:.0f}/s" for k in floats) +
          f"  (CPU; fastest: {fc} by CPU, {fw} by wall)")

    def line(label, key, extra=""):
        print(f"  {label:<17} {n / med_c[key]:>8.0f} samples/s CPU ({n / med_w[key]:>8.0f} wall)   ratio to float "
              f"{med_c[key] / med_c[fc]:.2f} CPU, {med_w[key] / med_w[fw]:.2f} wall{extra}")
    line("interval pass", "interval")
    line("refined pass", "refined", f"   (target {target:g}; refinement run on {int(missed.sum())} samples, "
         f"{missed.mean():.2%})")
    print(f"  token table       {med_c['table'] * 1e3:8.1f} ms CPU, once per run ({distinct} distinct (position, token) "
          f"rows in Arb; {med_c['table'] / med_c['refined']:.1%} of the refined pass on these {n} samples; not in "
          f"the two passes above, in the route below)")
    line("certified route", "route", f"   (rho = {rho}; first pass: {fp.method}; per-sample pass on "
         f"{cert.interval}, Arb on {cert.redone})")
    thresholds = np.array([0.0, rho])
    redo = fp.enclosures(data).straddling([0.0, rho]) if fp.method == "interval" else np.array([], dtype=int)
    far = int(np.count_nonzero(np.abs(g[redo, None] - thresholds[None, :]).min(axis=1) >= 1e-6)) if redo.size else 0
    print(f"  interval widths: max radius {rad.max():.3e}, max radius/(1+|margin|) {widths.max():.3e} "
          f"(median {np.median(widths):.3e}); not certified {int((~ok).sum())}; "
          f"redone at >= 1e-6 from every threshold: {far}")
    print(f"  refined widths:  max radius {rad_r.max():.3e}, max radius/(1+|margin|) {widths_r.max():.3e} "
          f"(median {np.median(widths_r):.3e}); target {target:g}: "
          f"{'met on every sample' if (widths_r <= target).all() else 'MISSED'}")
    if fp.epsilon is not None:
        print(f"  a-priori epsilon {float(fp.epsilon.upper()):.3e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="further checkpoints (with their .json training records)")
    ap.add_argument("--toy", help="the toy checkpoint (default: specbound/data/toy.safetensors, else the "
                    "embedded default)")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rho", type=float, default=2.0)
    ap.add_argument("--target", type=float, default=1e-9, help="the refined pass's relative width goal")
    ap.add_argument("--no-toy", "--no-default", action="store_true", help="skip the toy")
    ap.add_argument("--recipes", action="store_true", help="print the recipes of the L4 models and exit")
    args = ap.parse_args()
    if args.recipes:
        print(RECIPES)
        return
    toy = toy_path(args.toy)
    paths = ([] if args.no_toy else [toy]) + [Path(m) for m in args.models]
    for path in paths:
        bench(path, args.n, args.reps, args.rho, args.target, toy)


if __name__ == "__main__":
    main()

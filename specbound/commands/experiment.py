"""``specbound experiment run|scaling``: reference models, bound vs observed error, scaling study.

``run`` trains one analysis-model Transformer (deterministic, CPU), then prints the test error with
its exact Clopper-Pearson interval, the certified empirical ramp loss on the bound sample, the
certified bound with its parts, and bound / test error (:func:`specbound.api.experiment`).

``scaling`` trains a depth x width grid and writes a Markdown table, fitted growth exponents and
plots (:func:`specbound.api.scaling_study`).
"""

from __future__ import annotations

import argparse
import json
import sys

from specbound.vocabulary import ACTIVATIONS, LS_VARIANTS, MODEL_VARIANTS


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _training_arguments(p: argparse.ArgumentParser, *, steps: int, layers: bool = True) -> None:
    g = p.add_argument_group("training (specbound.train.TrainConfig)")
    if layers:
        g.add_argument("--layers", type=int, default=2, metavar="L", help="depth L (default 2)")
        g.add_argument("--width", type=int, default=32, metavar="N", help="width N (default 32)")
    g.add_argument("--heads", type=int, default=None if layers else 2, metavar="H",
                   help="heads per layer (default 2)")
    if layers:
        g.add_argument("--head-dim", type=int, default=None, metavar="D", help="head dim (default N/(2H))")
        g.add_argument("--ff", type=int, default=None, metavar="F", help="feed-forward width (default 2N)")
    g.add_argument("--activation", default="gelu", choices=ACTIVATIONS)
    g.add_argument("--variant", default="plain", choices=MODEL_VARIANTS,
                   help="analysis model: plain (default), residual, causal (GPT-2 style), ls, ls_residual "
                        "(Llama style: RoPE, grouped keys, gated feed-forward; use --activation silu)")
    g.add_argument("--kv-heads", type=int, default=0, metavar="G",
                   help="key/value groups of the LS variants (default: one per head)")
    g.add_argument("--task", default="sparse_majority",
                   help="sparse_majority (default), sparse_parity (2^(seq_len-1) inputs: enumerable) or "
                        "symbol_majority (--symbols symbols: not enumerable)")
    g.add_argument("--symbols", type=int, default=None,
                   help="symbols of symbol_majority (default 16; the binary tasks have 2)")
    g.add_argument("--seq-len", type=int, default=17, help="tokens per sequence, CLS included (default 17)")
    g.add_argument("--data-seed", type=int, default=1, help="seed of the training sample S (default 1)")
    g.add_argument("--k", type=int, default=3, help="hidden positions (default 3)")
    g.add_argument("--steps", type=int, default=steps, metavar="S", help=f"Adam steps (default {steps})")
    g.add_argument("--lr", type=float, default=3e-3, help="learning rate (default 3e-3)")
    g.add_argument("--batch", type=int, default=128, help="minibatch size (default 128)")
    g.add_argument("--n-train", type=int, default=4096, metavar="K", help="training sample size (default 4096)")
    g.add_argument("--loss", default="logistic", choices=("logistic", "hinge"))
    g.add_argument("--reg", type=float, default=1e-3, help="regularisation strength (default 1e-3)")
    g.add_argument("--reg-kind", default="schatten", choices=("none", "schatten", "spectral"),
                   help="schatten (default; p = --reg-p, 1 = nuclear) or spectral")
    g.add_argument("--reg-p", type=float, default=1.0, help="Schatten index of the regulariser (default 1)")
    g.add_argument("--seed", type=int, default=0, help="initialisation / minibatch seed (default 0)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    run = sub.add_parser("run", help="train one model; certified bound vs observed test error",
                         description="Train one model (deterministic, CPU); report test error (exact "
                                     "95% Clopper-Pearson), certified empirical ramp loss, certified "
                                     "bound and its parts, and bound / test error.")
    _training_arguments(run, steps=400)
    b = run.add_argument_group("bound and evaluation")
    b.add_argument("--n", type=int, default=None, metavar="M",
                   help="the theorem's n: size of the bound sample S (default n_train). With --sample "
                        "fresh, S is M new i.i.d. draws of the task (the bound holds for all weights "
                        "simultaneously, so S need not be the training sample)")
    b.add_argument("--sample", default="fresh", choices=("fresh", "train"),
                   help="the bound sample S: fresh draws (default) or the training sample (n = n_train)")
    b.add_argument("--n-test", "--n-eval", dest="n_test", type=int, default=10_000, metavar="M",
                   help="fresh samples for the observed test error (default 10000)")
    b.add_argument("--margin", type=float, default=None, metavar="RHO",
                   help="margin rho (default: chosen by the planner on the grid 2^k)")
    b.add_argument("--delta", type=float, default=0.05, help="failure probability of the bound (default 0.05)")
    b.add_argument("--workers", type=int, default=2,
                   help="processes that certify: 1 is this process, N >= 2 a local pool of N worker processes "
                        "(default 2)")
    run.add_argument("--save", metavar="CKPT",
                     help="also save the trained model (safetensors) and CKPT.json, its training record "
                          "(bound to it by sha256 and architecture; with --sample train it asks certify for "
                          "S = the training sample)")
    run.add_argument("--out", metavar="FILE", help="write the full result as JSON")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    sc = sub.add_parser("scaling", help="depth/width grid: proxies, bound, test error, exponents, plots",
                        description="Train a depth x width grid and print a Markdown table with fitted "
                                    "exponents. Nothing is written unless asked: --out MD writes the table "
                                    "(as the scaling section of MD) and the plots (into --figures, default "
                                    "figures/ beside MD); --figures DIR alone writes only the plots.")
    sc.add_argument("--depths", type=_ints, default=(1, 2, 4), help="comma-separated depths (default 1,2,4)")
    sc.add_argument("--widths", type=_ints, default=(16, 32, 64), help="comma-separated widths (default 16,32,64)")
    _training_arguments(sc, steps=400, layers=False)
    sc.add_argument("--head-dim-rule", default="half", choices=("half", "full"),
                    help="head dimension of every grid model: half = N/(2H) (default, the first study's), "
                         "full = N/H (the conventional shape)")
    sc.add_argument("--n-test", type=int, default=10_000, help="fresh test samples per model (default 10000)")
    sc.add_argument("--delta", type=float, default=0.05)
    sc.add_argument("--bound", default="numeric", choices=("numeric", "certified"),
                    help="numeric (default, fast, uncertified) or certified (certified forward passes)")
    sc.add_argument("--out", default=None, metavar="MD",
                    help="Markdown file whose scaling section is (re)written, created if missing (default: "
                         "none, the table is only printed; the project's own is docs/experiments.md)")
    sc.add_argument("--figures", default=None, metavar="DIR",
                    help="folder for the PNG plots (default: figures/ beside --out; none without --out)")
    sc.add_argument("--data", metavar="FILE", help="also write the raw results as JSON")
    sc.add_argument("--cache", metavar="DIR", help="keep one JSON per trained model here and reuse it on reruns")
    sc.add_argument("--json", action="store_true", help="print the results as JSON instead of progress lines")


def _train_config(args: argparse.Namespace, layers: int, width: int):
    from specbound.train import TrainConfig

    heads = args.heads or 2
    return TrainConfig(
        task=args.task, seq_len=args.seq_len, k=args.k,
        symbols=args.symbols or (16 if args.task == "symbol_majority" else 2), num_layers=layers, num_heads=heads, width=width,
        head_dim=getattr(args, "head_dim", None) or max(1, width // (2 * heads)),
        ff_dim=getattr(args, "ff", None) or 2 * width, activation=args.activation, steps=args.steps,
        lr=args.lr, batch=args.batch, n_train=args.n_train, seed=args.seed, data_seed=args.data_seed, loss=args.loss,
        reg=args.reg, reg_kind=args.reg_kind, reg_p=args.reg_p,
        variant=getattr(args, "variant", "plain"), num_kv_heads=getattr(args, "kv_heads", 0))


def run(args: argparse.Namespace) -> int:
    if args.action == "run":
        return _run_one(args)
    return _run_scaling(args)


def _say(enabled: bool):
    def say(msg: str) -> None:
        if enabled:
            print(msg, file=sys.stderr, flush=True)
    return say


def _run_one(args: argparse.Namespace) -> int:
    from specbound.api import experiment
    from specbound.experiment import ExperimentConfig

    from specbound.destination import check_file

    check_file(args.out, "--out")  # destinations before hours of training
    if args.save is not None:
        from pathlib import Path

        check_file(args.save, "--save")
        check_file(Path(args.save).with_suffix(".json"), "--save")
    config = ExperimentConfig(train=_train_config(args, args.layers, args.width), n=args.n, sample=args.sample,
                              n_test=args.n_test, margin=args.margin, delta=args.delta, workers=args.workers)
    result = experiment(config, progress=_say(not args.json))
    out = result.as_dict()
    # everything is computed; now write (nothing half-written on failure above)
    if args.save is not None:
        from specbound.output import write_json_atomic
        from pathlib import Path

        from specbound.checkpoint import load_layers
        from specbound.empirical import bound_training_record

        result.model.save(args.save)
        record = dict(result.training)
        record["test"] = result.test.as_dict()
        # bound to the file just written (its sha256 and architecture, as certify will read them), and
        # asking for S = the training sample when the experiment's bound used it
        record = bound_training_record(record, load_layers(args.save, ()),
                                       bound_on_training_sample=config.sample == "train")
        write_json_atomic(Path(args.save).with_suffix(".json"), record)
    if args.out is not None:
        from specbound.output import write_json_atomic

        write_json_atomic(args.out, out)
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0
    _print_run(out)
    return 0


def _print_run(out: dict) -> None:
    cfg, t, b = out["config"], out["test"], out["bound"]
    tc = cfg["train"]
    tr = out["training"].get("train", {})
    emp = b["empirical_sample"]
    variant = tc.get("variant", "plain")
    kv = f" kv-groups={tc.get('num_kv_heads') or tc['num_heads']}" if variant in LS_VARIANTS else ""
    print(f"model ({variant}{kv}): L={tc['num_layers']} H={tc['num_heads']} N={tc['width']} d_h={tc['head_dim']} "
          f"d_ff={tc['ff_dim']} {tc['activation']}; task {tc['task']}; {tc['steps']} steps, "
          f"reg {tc['reg_kind']} {tc['reg']}; train accuracy {tr.get('accuracy', float('nan')):.4f} "
          f"(n_train {tc['n_train']})")
    if out["training"].get("warning"):
        print(f"WARNING: {out['training']['warning']}")
    print(f"test error (float64 forward, {t['n']} fresh samples, seed {t['seed']}): {t['errors']}/{t['n']} = "
          f"{t['rate']:.6g}, exact {100 * t['confidence']:.0f}% Clopper-Pearson [{t['lower']:.6g}, {t['upper']:.6g}]")
    print(f"bound sample S: {emp['kind']} ({'fresh i.i.d. draws' if emp['kind'] == 'fresh' else 'training sample'}"
          f"), n = {emp['n']}; certified ramp loss in [{emp['certified_lower']:.6g}, {emp['certified_upper']:.6g}] "
          f"({emp['per_sample_ms']:.1f} ms/sample, {emp['undecided']} undecided signs)")
    if emp.get("assumption"):
        print(f"  {emp['assumption']}")
    p = b["parts"]
    routes = b.get("routes") or {}
    two = "occam" in routes
    print(f"certified bound (delta = {b['delta']:.3g}, n = {b['n']}): {b['value']:.6g}"
          + ("  vacuous (>= 1)" if b.get("vacuous") else "")
          + (f"  (route {b.get('route')}; each route at delta/2, the smaller reported)" if two else ""))
    if two and routes.get("occam") is not None:
        o = routes["occam_parts"]
        print(f"  Occam route {routes['occam']:.6g}: gamma {o['gamma']:.6g}, K^ {o['count']}, H {o['H']:.6g}, "
              f"Lambda {o['Lambda']:.6g}, C {o['C']:.6g}")
    if two and routes.get("rademacher") is not None:
        print(f"  Rademacher route {routes['rademacher']:.6g}:")
    print(f"  = empirical {p['empirical']:.6g} + 2 min(SS, DD) {p['complexity']:.6g} + confidence "
          f"{p['confidence']:.6g}   [SS {p['SS']:.6g} (closed {p['ss_closed']:.6g}, exact {p['ss_exact']:.6g}), "
          f"DD {p['DD']:.6g}, Lambda {p['Lambda']:.6g}, rho {p['rho']:.6g}, B_w {p['B_w']:.6g}]")
    print(f"  largest part: {b['dominant']}; route: {b['complexity_route']}")
    ratio = out["bound_over_test_error"]
    h = out.get("heldout_same_n")
    if h is not None:
        print(f"held-out bound an auditor could use instead (n = {h['n']} fresh samples, seed {h['seed']}): "
              f"{h['errors']}/{h['n']} errors, one-sided {100 * h['one_sided_level']:.0f}% Clopper-Pearson "
              f"upper limit {h['upper']:.6g}")
    if out.get("exact_risk") is not None:
        print(f"exact risk (every input enumerated, float64 forward): {out['exact_risk']:.6g}")
    print("bound / test error: " + ("inf (no test error observed)" if ratio is None else f"{ratio:.6g}")
          + f"; bound / CP upper limit: {out['bound_over_test_upper']:.6g}")
    pr = out["proxies"]
    if pr["paper_ours"] is None:
        print(f"paper proxies: none ({pr['note']})")
    else:
        print(f"paper proxies (not bounds): ours {pr['paper_ours']:.6g}, Edelman-style {pr['paper_edelman']:.6g}")


def _run_scaling(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specbound.destination import check_file, check_folder
    from specbound.api import scaling_study
    from specbound.experiment import ScalingConfig, scaling_markdown, scaling_plots, write_scaling_section

    figures_dir = args.figures
    if figures_dir is None and args.out is not None:
        figures_dir = str(Path(args.out).parent / "figures")
    check_file(args.out, "--out")
    check_folder(figures_dir, "--figures")
    check_file(args.data, "--data")
    check_folder(args.cache, "--cache")
    config = ScalingConfig(depths=args.depths, widths=args.widths, heads=args.heads or 2,
                           base=_train_config(args, 1, max(args.widths)), n_test=args.n_test,
                           delta=args.delta, bound=args.bound, head_dim_rule=args.head_dim_rule)
    say = _say(not args.json)
    study = scaling_study(config, progress=say, cache=args.cache)
    # everything is computed; now write, only where asked
    written = []
    figures = scaling_plots(study, figures_dir) if figures_dir is not None else []
    written += [str(f) for f in figures]
    base = Path(args.out).parent if args.out is not None else Path.cwd()
    rel = [str(Path(f).resolve().relative_to(base.resolve())) if _below(f, base) else str(f) for f in figures]
    if args.out is not None:
        write_scaling_section(Path(args.out), scaling_markdown(study, rel))
        written.append(f"{args.out} (scaling section)")
    public = {"config": study["config"], "exponents": study["exponents"],
              "rows": [{k: v for k, v in r.items() if not k.startswith("_")} for r in study["rows"]]}
    if args.data:
        from specbound.output import write_json_atomic

        write_json_atomic(args.data, public)
        written.append(args.data)
    if args.json:
        sys.stdout.write(json.dumps(public, indent=2) + "\n")
    else:
        print(scaling_markdown(study, rel))
    for path in written:
        say(f"wrote {path}")
    if not written:
        say("nothing written (give --out MD and/or --figures DIR to keep the table and the plots)")
    return 0


def _below(path, folder) -> bool:
    from pathlib import Path

    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
        return True
    except ValueError:
        return False

"""``specbound proxies CHECKPOINT``: the paper's BERT-adapted proxies (docs/design.md section 6), exactly.

Calls :func:`specbound.api.proxies` and prints a per-matrix table and the two proxy values, and says
where our rigorous theorem differs.  These numbers are the paper's *proxies*, not bounds (see
:mod:`specbound.numeric.proxies`).
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint file (.safetensors/.pt/.bin/.npz/.gguf), "
                        "Hugging Face folder or cached repo id")
    parser.add_argument("--num-heads", type=int, default=None, metavar="H",
                        help="attention heads (needed for a BERT state dict without config.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--csv", metavar="FILE", help="also write the per-matrix records as CSV")
    parser.add_argument("--report", metavar="DIR",
                        help="write contribution_vs_p.png and spectral_decay.png into DIR")
    parser.add_argument("--device", default="cpu", help="cpu (default: numpy, no torch) or a torch device (cuda)")
    from specbound.engine import add_engine_arguments

    add_engine_arguments(parser)


def check_destinations(args: argparse.Namespace) -> None:
    """--csv FILE and --report DIR: checked before any work (one line, nothing computed)."""
    from specbound.destination import check_file, check_folder, checkpoint_inputs
    from specbound.report import CONTRIBUTION_PNG, SPECTRAL_DECAY_PNG

    inputs = checkpoint_inputs(args.checkpoint)
    check_file(args.csv, "--csv", inputs)
    check_folder(args.report, "--report", inputs, (SPECTRAL_DECAY_PNG, CONTRIBUTION_PNG))


def say_written(paths) -> None:
    """``wrote PATH`` on stdout for every file a command wrote besides its output, after the table
    (never with ``--json``: machine use sees the JSON document and nothing else, stderr included)."""
    from specbound.report import written_lines

    for line in written_lines(paths):
        print(line)


def console():
    from specbound.terminal import console as terminal_console

    return terminal_console()


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def run(args: argparse.Namespace) -> int:
    from specbound.api import proxies
    from specbound.engine import engine_options
    from specbound.numeric.proxies import DIFFERENCES
    from specbound.progress import should_show

    check_destinations(args)
    # the proxy view (no score scale): the companion code's convention
    proxy = proxies(args.checkpoint, num_heads=args.num_heads, device=args.device,
                    show_progress=should_show(args.json), **engine_options(args))
    result = proxy.result

    # Compute everything first, then write: a failure above leaves no file behind.
    written = []
    if args.csv is not None:
        from specbound.report import write_csv

        write_csv(args.csv, proxy.rows())
        written.append(args.csv)
    if args.report is not None:
        from specbound.report import plot_contribution_vs_p, plot_spectral_decay

        written.append(plot_contribution_vs_p(result, args.report))
        written.append(plot_spectral_decay(proxy.spectra, args.report))

    if args.json:
        sys.stdout.write(json.dumps(proxy.to_dict(), indent=2) + "\n")
        return 0

    from specbound.table import Table
    from specbound.terminal import print_table

    out = console()
    columns = ["layer", "head", "kind", "spectral", "(2,1)", "num. rank", "p_opt", "contribution", "gamma", "alpha",
               "scale"]
    table = Table(f"Paper proxies (docs/design.md section 6): {args.checkpoint}", columns,
                  ["left" if col == "kind" else "right" for col in columns])
    for r in result.matrices:
        table.add_row(str(r.layer), "-" if r.head < 0 else str(r.head), r.kind, _fmt(r.spectral),
                      _fmt(r.norm_21), str(r.numerical_rank), f"{r.p_opt:.4g}", _fmt(r.contribution),
                      _fmt(r.gamma), _fmt(r.alpha), _fmt(r.scale))
    print_table(out, table)
    # soft_wrap: whole lines in a file or pipe (a terminal wraps them itself)
    out.print(f"L = {result.num_layers}, N = {result.width}, grid P_m with m = {result.m} "
              f"({len(result.grid)} points)", soft_wrap=True)
    out.print(f"ours (paper proxy)    = {result.ours:.12g}", soft_wrap=True)
    out.print(f"edelman (paper proxy) = {result.edelman:.12g}", soft_wrap=True)
    out.print("These are the paper's proxies, not bounds. Where our rigorous theorem differs:", soft_wrap=True)
    for line in DIFFERENCES:
        out.print(f"  - {line}", soft_wrap=True, markup=False)
    say_written(written)
    return 0

"""``specbound spectra CHECKPOINT``: singular values and a norm summary of every covered matrix.

Calls :func:`specbound.api.spectra` and renders it.  Fast float64 path (uncertified).  Columns:
spectral, Frobenius, nuclear, (2,1) (sum of column l2 norms), (1,1), numerical rank (docs/design.md
section 6 threshold) and stable rank.
"""

from __future__ import annotations

import argparse
import json
import sys

from specbound.commands.proxies import check_destinations, console, say_written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint file (.safetensors/.pt/.bin/.npz/.gguf), "
                        "Hugging Face folder or cached repo id")
    parser.add_argument("--view", choices=("analysis", "scores", "proxy"), default="analysis",
                        help="analysis: the adapter's analysis model, score scale on the query side "
                             "(default); scores: per-head score and value-output matrices; proxy: "
                             "no score scale (the proxies' convention)")
    parser.add_argument("--num-heads", type=int, default=None, metavar="H",
                        help="attention heads (needed for a BERT state dict without config.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--values", action="store_true",
                        help="with --json: include every singular value of every matrix")
    parser.add_argument("--csv", metavar="FILE", help="also write the norm summary as CSV")
    parser.add_argument("--report", metavar="DIR", help="write spectral_decay.png into DIR")
    parser.add_argument("--device", default="cpu", help="cpu (default: numpy, no torch) or a torch device (cuda)")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                        help="SVD precision (float32: |error| <= 1e-5 * sigma_1, see numeric.spectra)")
    parser.add_argument("--dense-products", action="store_true",
                        help="take a factored matrix's singular values from the SVD of its float64 product, "
                             "as proxies does (slower; the values beyond its inner dimension are then rounding "
                             "noise, not 0); default: from the r x r core of its factors")
    from specbound.engine import add_engine_arguments

    add_engine_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from specbound.api import spectra
    from specbound.engine import engine_options
    from specbound.progress import should_show

    check_destinations(args)
    result = spectra(args.checkpoint, view=args.view, num_heads=args.num_heads, dtype=args.dtype,
                     device=args.device, show_progress=should_show(args.json),
                     products="dense" if args.dense_products else "factored", **engine_options(args))
    summaries = result.summaries

    written = []
    if args.csv is not None:
        from specbound.report import write_csv

        write_csv(args.csv, result.rows())
        written.append(args.csv)
    if args.report is not None:
        from specbound.report import plot_spectral_decay

        written.append(plot_spectral_decay(result.spectra, args.report))

    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(values=args.values), indent=2) + "\n")
        return 0

    from specbound.table import Table
    from specbound.terminal import print_table

    columns = ["matrix", "shape", "spectral", "Frobenius", "nuclear", "(2,1)", "(1,1)", "num. rank", "stable rank"]
    table = Table(f"Norm summary ({args.dtype}, {result.products} products, uncertified): {args.checkpoint}",
                  columns, ["left" if col in ("matrix", "shape") else "right" for col in columns])
    for s in summaries:
        table.add_row(s.name, f"{s.rows}x{s.cols}", f"{s.spectral:.6g}", f"{s.frobenius:.6g}",
                      f"{s.nuclear:.6g}", f"{s.norm_21:.6g}", f"{s.norm_11:.6g}", str(s.numerical_rank),
                      f"{s.stable_rank:.4g}")
    print_table(console(), table)
    say_written(written)
    return 0

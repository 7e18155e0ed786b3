"""``specbound proxies CHECKPOINT``: the paper's BERT-adapted proxies (docs/design.md section 6), exactly.

Prints a per-matrix table and the two proxy values, and says where our rigorous theorem differs.
These numbers are the paper's *proxies*, not bounds (see :mod:`specbound.numeric.proxies`).
"""

from __future__ import annotations

import argparse
import json
import sys

from specbound.errors import SpecboundError


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


def device_of(name: str):
    """``"cpu"`` (the numpy path), else the torch device for ``--device``, as a one-line
    SpecboundError if it cannot be used."""
    if name == "cpu":
        return "cpu"
    from specbound.numeric.spectra import resolve_device

    try:
        return resolve_device(name)
    except ValueError as exc:
        raise SpecboundError(str(exc)) from None


def load(args: argparse.Namespace, view: str = "analysis"):
    from specbound.checkpoint import load_weights

    return load_weights(args.checkpoint, num_heads=getattr(args, "num_heads", None), view=view)


def weights_and_spectra(args: argparse.Namespace, view: str, *, dtype: str = "float64", json_output: bool = False):
    """(weights, float spectra) for spectra and proxies: in process, or by the tasks of the engine of
    ``--workers`` / ``--scheduler`` (then the weights returned are the structure only: the workers
    read the layers)."""
    from specbound.engine import engine_of_args, source_of, spectra_of
    from specbound.numeric.spectra import spectra_on
    from specbound.progress import progress_bar

    device = device_of(args.device)
    with engine_of_args(args) as engine:
        if not engine.distributed and device != "cpu":
            weights = load(args, view=view)
            with progress_bar(len(weights.matrices), "singular values", enabled=not json_output) as bar:
                return weights, spectra_on(weights, device=device, dtype=dtype, progress=bar)
        if device != "cpu":
            raise SpecboundError("--workers/--scheduler compute on the workers' CPUs: give them without --device")
        # on CPU, in process too: the same layer-wise tasks as on a cluster, run here in order, so
        # that one layer's weights are held at a time (peak memory: the structure, one layer and
        # its products, whatever the depth), with the same values as the whole-model computation
        from specbound.checkpoint import load_layers

        num_heads = getattr(args, "num_heads", None)
        weights = load_layers(args.checkpoint, (), num_heads=num_heads, view=view)
        source = source_of(args.checkpoint, num_heads=num_heads, view=view, sha256=weights.sha256)
        with progress_bar(len(weights.matrices), "singular values", enabled=not json_output) as bar:
            return weights, spectra_of(engine, source, weights, dtype=dtype, progress=bar)


def check_destinations(args: argparse.Namespace) -> None:
    """--csv FILE and --report DIR: checked before any work (one line, nothing computed)."""
    from specbound.destination import check_file, check_folder, input_files

    check_file(args.csv, "--csv", input_files(args.checkpoint))
    check_folder(args.report, "--report")


def console():
    from rich.console import Console

    # Piped output keeps whole rows instead of rich's 80-column default.
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=160)
    return out


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def run(args: argparse.Namespace) -> int:
    from specbound.numeric.proxies import DIFFERENCES, paper_proxies

    check_destinations(args)
    # no score scale: the companion code's convention
    weights, spectra = weights_and_spectra(args, "proxy", json_output=args.json)
    try:
        result = paper_proxies(weights, spectra=spectra)
    except ValueError as exc:
        raise SpecboundError(f"{args.checkpoint}: {exc}") from None

    # Compute everything first, then write: a failure above leaves no file behind.
    if args.csv is not None:
        from specbound.report import write_csv

        write_csv(args.csv, [r.as_dict() for r in result.matrices])
    if args.report is not None:
        from specbound.report import plot_contribution_vs_p, plot_spectral_decay

        plot_contribution_vs_p(result, args.report)
        plot_spectral_decay(spectra, args.report)

    if args.json:
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
        return 0

    from rich.table import Table

    out = console()
    table = Table(title=f"Paper proxies (docs/design.md section 6): {args.checkpoint}")
    for col in ("layer", "head", "type", "spectral", "(2,1)", "num. rank", "p_opt", "contribution",
                "gamma", "alpha", "scale"):
        table.add_column(col, justify="left" if col == "type" else "right")
    for r in result.matrices:
        table.add_row(str(r.layer), "-" if r.head < 0 else str(r.head), r.type, _fmt(r.spectral),
                      _fmt(r.norm_21), str(r.numerical_rank), f"{r.p_opt:.4g}", _fmt(r.contribution),
                      _fmt(r.gamma), _fmt(r.alpha), _fmt(r.scale))
    out.print(table)
    out.print(f"L = {result.num_layers}, N = {result.width}, grid P_m with m = {result.m} "
              f"({len(result.grid)} points)")
    out.print(f"ours (paper proxy)    = {result.ours:.12g}")
    out.print(f"edelman (paper proxy) = {result.edelman:.12g}")
    out.print("These are the paper's proxies, not bounds. Where our rigorous theorem differs:")
    for line in DIFFERENCES:
        out.print(f"  - {line}")
    return 0

"""``specbound certify [CHECKPOINT]``: the certified bound of a checkpoint (default: the embedded model).

Parses the options, calls :func:`specbound.api.certify` and renders its :class:`Certification`: the
verdict's headline first (the bound, an upper endpoint of an Arb ball, with every qualification; the
smaller of the two routes when both are evaluated, each at delta/2), both routes' parts (Occam: margin
gamma, certified count K^, entropy H, Lambda, mass C; Rademacher: empirical term with its source,
complexity term 2 min(SS, DD), confidence term), the scope (and, for a foreign checkpoint, what its
number is), the settings, a per-matrix table with each matrix's share of the Occam entropy H (one row
per matrix kind for a model with more than :data:`ROWS_IN_FULL` matrices), and the headline again.
``--quiet`` keeps the headline and the scope, ``--verbose`` one row per matrix and the legend
(:mod:`specbound.legend`, also ``--explain``); ``--json`` is the certificate, unchanged.  Without data
and without ``--empirical-loss`` for a checkpoint with no recorded task (e.g. BERT) only the certified
complexity + confidence part is printed, headed as NOT a bound.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from specbound.errors import SpecboundError
from specbound.vocabulary import (
    EMPIRICAL_DATA, EMPIRICAL_TASK, EMPIRICAL_TRAIN, EMPIRICAL_USER, FORWARD_METHODS, READOUT_TRAINED, READOUTS,
)

if TYPE_CHECKING:  # pragma: no cover
    from specbound.certification import Certification


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a .safetensors file or a sharded folder (model.safetensors.index.json), a "
                             "PyTorch state dict (.pt/.pth/.bin), .npz, .gguf (also a chunk .gguf.part00), "
                             "a Hugging Face folder (config.json + weights), or a repo id already in the "
                             "local Hugging Face cache (offline). Default: the embedded model, its empirical "
                             "term certified on its own training sample S (n = 10^6 examples, regenerated "
                             "from the recorded seed)")
    parser.add_argument("--n", default=None, metavar="N", help="sample size of the empirical term")
    parser.add_argument("--delta", default="0.05", metavar="D", help="confidence parameter in (0, 1)")
    parser.add_argument("--margin", default=None, metavar="RHO",
                        help="margin rho (rounded down onto the grid); default: chosen by the planner")
    parser.add_argument("--empirical-loss", default=None, metavar="E",
                        help="user-supplied empirical ramp loss in [0, 1] (NOT certified; needs --n): it must be "
                             "the ramp loss of the ANALYSIS MODEL (not the checkpoint's own network or loss) on "
                             "your sample S at the rounded margin rho~ that certify prints; give --margin to fix it")
    parser.add_argument("--data", default=None, metavar="FILE",
                        help=".npz data file (labels + tokens or inputs): certified empirical loss")
    parser.add_argument("--samples", default=None, metavar="N",
                        help="use N fresh samples of the model's recorded task as S (default: the sample its "
                             "record names, for the embedded model its 10^6-example training sample; a "
                             "recorded task without one: 2000 fresh samples)")
    parser.add_argument("--seed", default=None, metavar="S", help="seed of those samples (default 3)")
    parser.add_argument("--num-heads", default=None, metavar="H",
                        help="attention heads (needed for a BERT state dict without config.json)")
    parser.add_argument("--readout", choices=READOUTS, default=READOUT_TRAINED,
                        help="trained: the read-out w is treated as fitted on S and its cover is paid for "
                             "(default); fixed: an ASSUMPTION that w was chosen independently of S (its cover "
                             "is dropped; the bound is invalid if w was fitted on S)")
    parser.add_argument("--out", default=None, metavar="CERT.json", help="write the certificate JSON")
    parser.add_argument("--json", action="store_true", help="print the certificate JSON instead of tables")
    detail = parser.add_mutually_exclusive_group()
    detail.add_argument("--quiet", action="store_true",
                        help="print only the headline (first and last) and the scope")
    detail.add_argument("--verbose", action="store_true",
                        help=f"print one row per matrix (by default a model with more than {ROWS_IN_FULL} "
                             "matrices gets one row per matrix kind) and the legend")
    parser.add_argument("--explain", action="store_true",
                        help="also print what SS, DD, Lambda, rho~, gamma~, K^, H, C, grid m and p mean")
    parser.add_argument("--report", default=None, metavar="DIR",
                        help="write spectral_decay.png (certified singular values to each matrix's proven "
                             "rank) and contributions_by_layer.png into DIR")
    parser.add_argument("--forward", choices=FORWARD_METHODS, default=FORWARD_METHODS[0],
                        help="certified forward pass of the empirical term: fast (binary64 programs with "
                             "proven error bounds; default), interval (the per-sample bound on every "
                             "sample) or arb (Arb ball arithmetic, slow); the Occam route's count K^ always "
                             "comes from the margin enclosures of the fast or per-sample pass")
    parser.add_argument("--cross-check", action="store_true",
                        help="also check the fast float path against the certified values")
    from specbound.engine import add_engine_arguments

    add_engine_arguments(parser)


#: the margins --margin accepts (outputs f are O(||w||) on unit-row inputs; far outside this range
#: the bound is vacuous or its float choices under/overflow)
MIN_MARGIN, MAX_MARGIN = 1e-30, 1e30


def _int(text, what: str, minimum: int = 1) -> int | None:
    if text is None:
        return None
    try:
        value = int(str(text))
    except ValueError:
        raise SpecboundError(f"{what} must be an integer, got {text!r}") from None
    if value < minimum:
        raise SpecboundError(f"{what} must be >= {minimum}, got {value}")
    return value


def _float(text, what: str) -> float | None:
    if text is None:
        return None
    try:
        value = float(str(text))
    except ValueError:
        raise SpecboundError(f"{what} must be a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise SpecboundError(f"{what} must be finite, got {text!r}")
    return value


def _settings_kwargs(args) -> dict:
    from specbound.plan import BoundSettings

    n = _int(args.n, "--n")
    delta = _float(args.delta, "--delta")
    margin = _float(args.margin, "--margin")
    if margin is not None and not MIN_MARGIN <= margin <= MAX_MARGIN:
        raise SpecboundError(f"--margin must lie in [{MIN_MARGIN:g}, {MAX_MARGIN:g}], got {args.margin!r} "
                             "(beyond it every ramp loss is 1 or the margin's powers under/overflow)")
    emp = _float(args.empirical_loss, "--empirical-loss")
    # validate early (one line, before any work)
    BoundSettings(n=n or 1, delta=delta, margin=margin, empirical=emp, readout=args.readout)
    if args.data is not None and emp is not None:
        raise SpecboundError("give either --data or --empirical-loss, not both")
    return {"n": n, "delta": delta, "margin": margin, "empirical": emp, "readout": args.readout,
            "samples": _int(args.samples, "--samples"), "seed": _int(args.seed, "--seed", 0),
            "num_heads": _int(args.num_heads, "--num-heads"), "forward": args.forward}


def _up(x) -> str:
    from specbound.certified.certificate import decimal_up

    return decimal_up(x, 6)


def _source_line(result) -> str:
    src = result.source
    if src.kind == EMPIRICAL_DATA:
        return f"certified on data file {src.detail.get('path')} (n = {result.bound.settings.n})"
    if src.kind == EMPIRICAL_TASK:
        d = src.detail
        return f"certified on {d['n']} fresh samples of task {d['task']['name']} (seed {d['seed']})"
    if src.kind == EMPIRICAL_TRAIN:
        d = src.detail
        return (f"certified on S = the training sample (n = {d['n']} training examples of task "
                f"{d['task']['name']}, data seed {d['data_seed']})")
    if src.kind == EMPIRICAL_USER:
        return "user-supplied, NOT certified"
    return "missing"


QUIET, DEFAULT, VERBOSE = "quiet", "default", "verbose"
"""How much ``certify`` prints: the headline and the scope; plus the parts, settings and a per-matrix
summary; plus one row per matrix and the legend."""

ROWS_IN_FULL = 24
"""At most this many covered matrices get one row each by default; a larger model gets one row per
matrix kind (``--verbose``: one row per matrix)."""


def print_result(result: Certification, detail: str = DEFAULT, explain: bool = False,
                 before_last: tuple[str, ...] = ()) -> None:
    """The certificate as text: the verdict's headline first (and again last), the routes' parts,
    the scope, the settings, a per-matrix table (one row per kind for a large model unless
    ``detail`` is VERBOSE) and the time; ``detail`` QUIET keeps the headline and the scope only.
    ``before_last``: lines printed just before the repeated headline (e.g. the cross-check's summary).
    Text lines are never wrapped (a terminal wraps them itself; a file or pipe gets whole lines)."""
    from specbound.commands.proxies import console
    from specbound.terminal import print_table
    from specbound.scope import pretrained_note, scope_lines

    b = result.bound
    out = console()
    say = _sayer(out)
    headline = _headline(result)
    say(headline, bold=True)
    if detail != QUIET:
        if b.bound is None:
            say("no empirical term (no data, no task, no --empirical-loss): this is NOT a bound")
        _print_parts(say, result)
    say(f"checkpoint: {result.checkpoint['path']}  (sha256 {result.checkpoint['sha256'][:16]}...)")
    for line in scope_lines(result.scope):
        say(line)
    for line in pretrained_note(bool(result.weights.scope and result.weights.scope.own_network)):
        say(line)
    if detail != QUIET:
        st = b.settings
        charged = f" (applied at delta / K = {st.charged_delta()}: K = {st.tries} tries)" if st.tries > 1 else ""
        say(f"n = {st.n}, delta = {b.delta}{charged}, margin rho~ = {_up(b.rho)} (beta_rho^{b.k_rho}), "
            f"read-out {b.readout}, grid m = {b.m}")
        for note in b.notes.values():
            say(f"note: {note}")
        full = detail == VERBOSE or len(b.matrices) <= ROWS_IN_FULL
        print_table(out, _matrix_table(b) if full else _kind_table(b))
        if not full:
            say(f"{len(b.matrices)} matrices, one row per kind; --verbose prints one row per matrix")
        sec = result.seconds
        say("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in sec.items()))
    if explain or detail == VERBOSE:
        from specbound.legend import legend_lines

        for line in legend_lines():
            say(line)
    elif detail != QUIET:
        say("--explain: what SS, DD, Lambda, rho~, gamma~, K^, H, C, grid m and p mean")
    for line in before_last:
        say(line)
    say(headline, bold=True)


def _sayer(out):
    """One text line on ``out``: markup escaped, never wrapped (``soft_wrap``)."""
    from rich.markup import escape

    def say(text: str, bold: bool = False) -> None:
        text = escape(text)
        out.print(f"[bold]{text}[/bold]" if bold else text, soft_wrap=True)

    return say


def _headline(result) -> str:
    b = result.bound
    two = len(b.routes) > 1
    return result.verdict.headline + (f"  (route: {b.route}; each route at {b.settings.level_phrase()}, the "
                                      "smaller is reported)" if two and b.route else "")


def _print_parts(say, result) -> None:
    """Both routes' parts: the Occam route's, then the Rademacher route's."""
    b = result.bound
    if b.occam is not None:
        _print_occam(say, b)
    if len(b.routes) > 1:
        rad = "no bound (no empirical term)" if b.rademacher is None else _up(b.rademacher)
        say(f"  Rademacher route ({b.settings.level_phrase()} = {b.settings.route_level()}): {rad}")
    if b.empirical is not None:
        say(f"  empirical ramp loss  {_up(b.empirical)}   ({_source_line(result)})")
    say(f"  complexity 2min(SS,DD) {_up(b.complexity)}   (SS = {_up(b.SS)}, DD = {_up(b.DD)})")
    say(f"  confidence             {_up(b.confidence)}   (Lambda = {_up(b.Lambda)})")


def _table(b, title: str, columns: list[str], occam_columns: list[str]):
    """An empty table with ``columns`` (and the Occam route's when it was evaluated), the kind
    column left-aligned and every number right-aligned."""
    from specbound.table import Table

    columns = columns + (occam_columns if b.occam is not None else [])
    return Table(title, columns, ["left" if col == "kind" else "right" for col in columns])


def _readout_row(table, b, count: str) -> None:
    """The read-out's row (its norm and Occam entropy) when the Occam route covered it."""
    if b.occam is not None and b.occam.entropy_w is not None:
        table.add_row("read-out", count, "-", _up(b.readout_norm), "-", "-", "-", "-", _up(b.occam.entropy_w),
                      _share(b.occam.entropy_w, b.occam.H))


def _matrix_table(b):
    """One row per covered matrix (and the read-out's Occam entropy)."""
    table = _table(b, "per-matrix (certified upper endpoints)",
                   ["kind", "layer", "head", "spectral norm", "p", "proven rank", "contribution"],
                   ["p (Occam)", "H_j (Occam)", "share of H"])
    occ = b.occam.matrices if b.occam is not None else [None] * len(b.matrices)
    for r, o in zip(b.matrices, occ):
        row = [r.kind, str(r.layer), "-" if r.head < 0 else str(r.head), _up(r.spectral_norm), str(r.p),
               str(r.proven_rank), _up(r.contribution)]
        if o is not None:
            row += [str(o.p), _up(o.entropy), _share(o.entropy, b.occam.H)]
        table.add_row(*row)
    _readout_row(table, b, "-")
    return table


def _kind_table(b):
    """One row per matrix kind: how many, in which layers, the largest spectral norm and proven rank,
    the range of p, the sum of the contributions (and of the Occam entropies H_j), each a certified
    upper endpoint (an Arb sum; the largest upper endpoint)."""
    from specbound.certified.arb import sum_arb

    table = _table(b, "per matrix kind (certified upper endpoints: max or sum over the kind)",
                   ["kind", "matrices", "layers", "spectral norm (max)", "p", "proven rank (max)", "contribution (sum)"],
                   ["p (Occam)", "H_j (sum)", "share of H"])
    occ = b.occam.matrices if b.occam is not None else [None] * len(b.matrices)
    kinds: dict[str, list] = {}
    for r, o in zip(b.matrices, occ):
        kinds.setdefault(r.kind, []).append((r, o))
    for kind, pairs in kinds.items():
        rows = [r for r, _ in pairs]
        layers = sorted({r.layer for r in rows})
        row = [kind, str(len(rows)), _span(layers), _max_up(r.spectral_norm for r in rows),
               _span(sorted({r.p for r in rows})), str(max(r.proven_rank for r in rows)),
               _up(sum_arb(r.contribution for r in rows))]
        if b.occam is not None:
            ents = sum_arb(o.entropy for _, o in pairs)
            row += [_span(sorted({o.p for _, o in pairs})), _up(ents), _share(ents, b.occam.H)]
        table.add_row(*row)
    _readout_row(table, b, "1")
    return table


def _span(values: list) -> str:
    """A sorted list of values as "a" or "a..b"."""
    return str(values[0]) if len(values) == 1 else f"{values[0]}..{values[-1]}"


def _max_up(balls) -> str:
    """The largest upper endpoint of some balls (compared exactly), as a decimal >= it."""
    from specbound.certified.radii import exact_value

    return _up(max(balls, key=lambda a: exact_value(a.upper())))


def _share(part, whole) -> str:
    """A part's share of a total, as a percentage (float, informational)."""
    total = float(whole.mid())
    return f"{100 * float(part.mid()) / total:.1f}%" if total > 0 else "-"


def _print_occam(say, b) -> None:
    """The Occam route's line and its parts (proofs_notes/occam_route.md)."""
    o = b.occam
    level = f" ({b.settings.level_phrase()} = {o.level})" if len(b.routes) > 1 else ""
    if o.bound is None:
        say(f"  Occam route{level}: no bound (no certified margin count)")
    else:
        say(f"  Occam route{level}: {_up(o.bound)}   (BinInv(n, K^, e^-C), certified by its {o.inversion.method} form)")
    count = "-" if o.count is None else f"{o.count} of n = {b.settings.n}"
    say(f"    margin gamma~ = {_up(o.gamma)} (beta_gamma^{o.k_gamma}), K^ = {count} "
        f"(certified upper count of y f <= gamma{'; ' + o.count_method if o.count_method else ''})")
    say(f"    H = {_up(o.H)} nats, Lambda = {_up(o.Lambda)}, C = H + Lambda + log(1/level) = {_up(o.mass)}")


def run(args: argparse.Namespace) -> int:
    from specbound.api import certify
    from specbound.engine import engine_options
    from specbound.progress import should_show
    from specbound.commands.proxies import say_written

    kw = _settings_kwargs(args)
    engine = engine_options(args)
    _check_destination(args)
    result = certify(args.checkpoint, data=args.data, cross_check=args.cross_check,
                     show_progress=should_show(args.json), **engine, **kw)
    cert = result.to_dict()
    failed = args.cross_check and result.cross_check["ok"] is False
    if args.out is not None:
        _write(args.out, cert)
    figures = []
    if args.report is not None:
        from specbound.report import certify_report

        figures = certify_report(result, args.report)
    if args.json:
        sys.stdout.write(json.dumps(cert, indent=2) + "\n")
        return 1 if failed else 0
    print_result(result, QUIET if args.quiet else VERBOSE if args.verbose else DEFAULT, args.explain,
                 (result.cross_check["summary"],) if args.cross_check else ())
    if args.out:
        print(f"certificate written to {args.out}")
    say_written(figures)
    return 1 if failed else 0


def _check_destination(args) -> None:
    """--out: writable, and never one of this command's inputs (checked before any work)."""
    from specbound.destination import check_file, check_folder, checkpoint_inputs, input_files
    from specbound.report import CONTRIBUTIONS_BY_LAYER_PNG, SPECTRAL_DECAY_PNG

    inputs = checkpoint_inputs(args.checkpoint) + input_files(args.data)
    check_file(args.out, "--out", inputs)
    check_folder(args.report, "--report", inputs, (SPECTRAL_DECAY_PNG, CONTRIBUTIONS_BY_LAYER_PNG))


def _write(path, cert) -> None:
    from specbound.output import write_json_atomic

    write_json_atomic(path, cert)

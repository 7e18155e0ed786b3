"""Command-line shell over the Python API: ``specbound <command> ...``.

Each command lives in ``specbound.commands.<name>`` and exposes ``add_arguments(parser)`` and
``run(args) -> int``.  Modules are imported only when their command runs, so ``specbound theorem``
does not pay for torch.  Any :class:`~specbound.errors.SpecboundError` becomes one line on stderr
and exit status 2; nothing half-written is left behind (commands write outputs atomically).  A
reader that stops early (``specbound verify cert.json | head``) ends the command quietly with
:data:`BROKEN_PIPE_STATUS`, never a traceback or a status that means something else.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import warnings

from . import __version__
from .errors import SpecboundError, one_line


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (the usage is one ``--help`` away)."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")

DESCRIPTION = ("Certified spectrum-adaptive generalization bounds for trained Transformers: every number "
               "reported as a bound is the upper endpoint of an Arb ball. Run 'specbound COMMAND --help' "
               "for a command's options.")

BROKEN_PIPE_STATUS = 141
"""Exit status when stdout's reader went away (128 + SIGPIPE, what the shell reports for a tool
killed by SIGPIPE): distinct from 0 (done / VALID), 1 (INVALID) and 2 (bad input)."""

COMMANDS: dict[str, str] = {
    "certify": "certified bound of a checkpoint (default: the embedded model)",
    "verify": "re-check a certificate JSON independently",
    "proxies": "the paper's BERT-adapted proxies (docs/design.md section 6), exactly",
    "spectra": "singular values and norm summary per matrix",
    "inspect": "what is read from a checkpoint: family, config, tensors read and ignored, scope",
    "theorem": "the assembled theorem rendered from SymPy",
    "plan": "the sample size n at which each route's float estimate reaches a target (estimates, not bounds)",
    "experiment": "train/evaluate reference models: bound vs observed error, scaling study",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser; with ``only`` set, import just that command's module (fast start-up)."""
    parser = OneLineParser(prog="specbound", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"specbound {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is not None and name != only:
            continue
        module = _command_module(name)
        if module is not None:
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
        else:  # pragma: no cover - only while a command is not yet built
            p.set_defaults(_run=None)
    _mark_parsers(parser)
    return parser


def _mark_parsers(parser: argparse.ArgumentParser) -> None:
    """Record on every (sub)command parser that it is the one parsing, so that an unknown option is
    reported by the innermost command ('see specbound experiment run --help'), not the top level."""
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.set_defaults(_parser=child)
                _mark_parsers(child)


def _command_module(name: str):
    try:
        return importlib.import_module(f"specbound.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"specbound.commands.{name}":
            return None
        raise


SINGLE_THREAD_BLAS = ("certify", "verify")
"""Commands whose BLAS calls are many small products and eigensolves (batched heads, one Gram per
feed-forward matrix): one BLAS thread is faster there, and far faster when other processes share
the cores (idle OpenBLAS threads spin).  Set before numpy loads; the user's own setting wins."""


FLOAT_WARNINGS = r"(overflow|invalid value|divide by zero|underflow) encountered"
"""numpy's floating-point warnings: float choices may overflow (they only choose; the certified
evaluation decides), and such a warning must never precede a result or the one error line."""

def main(argv: list[str] | None = None) -> int:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FLOAT_WARNINGS, category=RuntimeWarning)
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "numpy" not in sys.modules and any(a in SINGLE_THREAD_BLAS for a in argv):
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        previous = signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread (an embedding application): leave signals alone
        previous = None
    try:
        # Import only the command that runs: torch-free commands then start quickly.  Inside the
        # try: an interrupt during those imports is one line too, not a traceback.
        only = next((a for a in argv if not a.startswith("-")), None)
        parser = build_parser(only if only in COMMANDS else None)
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
        if args._run is None:
            print(f"specbound: error: command '{args.command}' is not available yet", file=sys.stderr)
            return 2
        status = int(args._run(args) or 0)
        sys.stdout.flush()  # inside the try: a reader gone by now is a broken pipe, handled below
        return status
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE_STATUS
    except SpecboundError as exc:
        print(f"specbound: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specbound: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("specbound: terminated", file=sys.stderr)
        return 143
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again (the
    recipe of the Python documentation for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a file (embedded, captured)
        pass


class Terminated(BaseException):
    """SIGTERM as an exception, so that every exit path runs (worker pools are terminated)."""


def _terminated(signum, frame):
    raise Terminated()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``specbound verify CERT.json [CHECKPOINT]``: re-check a certificate independently.

Calls :func:`specbound.api.verify` and prints its report: ``VALID (N checks)`` with what was
verified -- the verdict's label, its headline (the bound or the partial value) and the scope in one
line, then the scope block -- (exit 0), or ``INVALID`` and every mismatch as
``field: recorded ..., recomputed ...`` (exit 1).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("certificate", help="certificate JSON written by specbound certify --out")
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="the weights (default: the path recorded in the certificate)")
    parser.add_argument("--trust-empirical", action="store_true",
                        help="do not re-run the certified forward passes of the empirical term")


def run(args: argparse.Namespace) -> int:
    from specbound.api import verify

    report = verify(args.certificate, args.checkpoint, recompute_empirical=not args.trust_empirical)
    for line in report.lines():
        print(line)
    return 0 if report.valid else 1

"""``specbound verify CERT.json [CHECKPOINT] [--data FILE]``: re-check a certificate independently.

Calls :func:`specbound.api.verify` and prints its report: ``VALID (N checks)`` with what was
verified -- the verdict's label, its headline (the bound or the partial value) and the scope in one
line, then the scope block -- (exit 0), or ``INVALID`` and every mismatch as
``field: recorded ..., recomputed ...`` (exit 1).  With ``--trust-empirical`` the certified
empirical term is not recomputed, so a report without mismatch is
``VALID EXCEPT EMPIRICAL TERM (not recomputed)`` (exit 3), never plain VALID: a consistent forgery
of that term would pass.  ``--json``: the same report as one JSON object (with the verdict and the
status), same exit status.  ``--data``: the sample S certify was given (default: the recorded data
file); its canonical SHA-256 must match the recorded ``data_sha256``.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("certificate", help="certificate JSON written by specbound certify --out")
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="the weights (default: the absolute path recorded in the certificate); give it "
                             "when the checkpoint has moved (its sha256 must match)")
    parser.add_argument("--data", default=None, metavar="FILE",
                        help="the .npz data file certify was given (default: the path recorded in the certificate); "
                             "its sha256 of the canonical arrays must match the recorded one")
    parser.add_argument("--trust-empirical", action="store_true",
                        help="do not re-run the certified forward passes of the empirical term: the report "
                             "is then at best 'VALID EXCEPT EMPIRICAL TERM (not recomputed)', exit status 3")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def run(args: argparse.Namespace) -> int:
    from specbound.api import verify

    report = verify(args.certificate, args.checkpoint, data=args.data, recompute_empirical=not args.trust_empirical)
    if args.json:
        import json

        print(json.dumps(report.as_dict(), indent=2))
        return report.exit_status
    for line in report.lines():
        print(line)
    return report.exit_status

"""The result of ``certify``: one typed record, whatever the caller (command, API, experiments).

:class:`Certification` holds the certified bound with its provenance and its :class:`Verdict`
(computed once, by :func:`specbound.pipeline.certify`); ``to_dict()`` is the certificate that
``specbound certify --json`` prints and ``--out`` writes, ``to_dataframe()`` the per-matrix frame
(:mod:`specbound.frames`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .verdict import Verdict

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .certified.bound import CertifiedBound
    from .certified.enclosure import SingularValueEnclosure
    from .empirical import EmpiricalSource
    from .matrices import AnalysisWeights


@dataclass(frozen=True)
class Certification:
    """A certified bound (or, without an empirical term, its certified complexity + confidence).

    ``bound``: the Arb balls of every term (``bound.bound`` is None without an empirical term);
    ``weights``: the analysis model certified (its structure; matrix values only when they were
    read); ``checkpoint``: the certificate's checkpoint block (path or label, sha256, layout);
    ``source``: where the empirical term came from; ``enclosures``: each matrix's singular-value
    enclosure; ``scope``: what the number is a bound *for* (:func:`specbound.scope.scope_block`);
    ``verdict``: what the number is (:class:`specbound.verdict.Verdict`); ``seconds``: wall time
    per step; ``cross_check``: the float path against the certified values, when asked for.
    """

    bound: CertifiedBound
    weights: AnalysisWeights
    checkpoint: dict[str, Any]
    source: EmpiricalSource
    enclosures: tuple[SingularValueEnclosure, ...] = field(repr=False)
    scope: dict[str, Any] = field(repr=False)
    verdict: Verdict
    seconds: dict[str, float] = field(default_factory=dict)
    cross_check: dict[str, Any] | None = None

    @property
    def enclosure_methods(self) -> tuple[str, ...]:
        """The enclosure route of each matrix, in canonical order."""
        return tuple(e.method for e in self.enclosures)

    @property
    def proven(self) -> bool:
        """False when a lemma constant was overridden below its proven value (NOT A PROVEN BOUND)."""
        return self.verdict.proven

    @property
    def vacuous(self) -> bool | None:
        """The verdict's ``vacuous`` (True: the value is >= 1; None: no bound, partial value < 1)."""
        return self.verdict.vacuous

    def to_dict(self) -> dict[str, Any]:
        """The certificate (``specbound certify --json``), with the cross-check when there is one."""
        from .certified.certificate import to_json

        cert = to_json(self)
        if self.cross_check is not None:
            cert["cross_check"] = dict(self.cross_check)
        return cert

    def rows(self) -> list[dict[str, Any]]:
        """One dict per covered matrix (:func:`specbound.frames.certify_rows`)."""
        from .frames import certify_rows

        return certify_rows(self)

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per covered matrix: identity columns, then the certified per-matrix values."""
        from .frames import dataframe

        return dataframe(self.rows())

    def plot(self, folder: str | os.PathLike) -> list[Path]:
        """Write the figures of ``certify --report`` into ``folder``
        (:func:`specbound.report.certify_report`); the paths."""
        from .report import certify_report

        return certify_report(self, folder)

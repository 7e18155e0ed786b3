"""The result of ``certify``: one typed record, whatever the caller (command, API, experiments).

:class:`Certification` holds the certified bound with its provenance and its :class:`Verdict`
(computed once, by :func:`specbound.pipeline.certify`); ``to_dict()`` is the certificate that
``specbound certify --json`` prints and ``--out`` writes, ``to_dataframe()`` the per-matrix frame
and ``summary()`` the headline numbers as one plain dict (:mod:`specbound.frames`).  The numbers a
script reads first are plain attributes: ``bound_upper`` (a float >= the certified bound; None
without an empirical term), ``partial_upper``, ``label``, ``is_bound``, ``proven``, ``vacuous``.
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
    def bound_upper(self) -> float | None:
        """A float >= the certified bound (its certificate's ``result.bound_upper``); None without
        an empirical term (then there is no bound: see :attr:`partial_upper`)."""
        from .certified.certificate import float_endpoints

        return None if self.bound.bound is None else float_endpoints(self.bound.bound)[0]

    @property
    def partial_upper(self) -> float:
        """A float >= the certified complexity + confidence (every bound built on it is larger)."""
        from .certified.certificate import float_endpoints

        return float_endpoints(self.bound.partial)[0]

    @property
    def label(self) -> str:
        """The verdict's short label ("certified bound", "NOT A BOUND (no empirical term)", ...)."""
        return self.verdict.label

    @property
    def is_bound(self) -> bool:
        """Whether the number is a bound on the 0-1 risk (an empirical term is present)."""
        return self.verdict.is_bound

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

    def summary(self) -> dict[str, Any]:
        """The headline numbers as one plain dict (:func:`specbound.frames.certify_summary`)."""
        from .frames import certify_summary

        return certify_summary(self)

    def summary_frame(self) -> pandas.DataFrame:
        """:meth:`summary` as a one-row data frame (needs pandas)."""
        from .frames import dataframe

        return dataframe([self.summary()])

    def __repr__(self) -> str:
        up = self.bound_upper
        shown = f"bound_upper={up!r}" if up is not None else f"bound_upper=None, partial_upper={self.partial_upper!r}"
        return (f"Certification({shown} [{self.label}], checkpoint={self.checkpoint.get('path')!r}, "
                f"n={self.bound.settings.n}, matrices={len(self.bound.matrices)})")

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

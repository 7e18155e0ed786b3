"""The rows of the per-matrix data frames of ``certify``, ``spectra`` and ``proxies``: one schema.

Every frame starts with the same identity columns (:data:`IDENTITY`: ``name, layer, head, kind,
rows, cols``, the matrix's place in the network as :class:`specbound.matrices.NamedMatrix` names it)
followed by its job's value columns.  The columns of each frame are defined here and nowhere else:
the results' ``to_dataframe()`` and the ``matrices`` rows of ``spectra --json`` / ``proxies --json``
read these functions.  The certificate keeps its own versioned format (``certificate.matrix_json``);
the certify frame carries its per-matrix values as the certificate's exact ball strings, each with
the certificate's float endpoints ``<field>_upper`` / ``<field>_lower`` beside it (the schema rule
``certificate.with_floats``), and :func:`certify_summary` is the one-row frame of its headline numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Protocol

from .errors import SpecboundError

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .certification import Certification
    from .matrices import AnalysisWeights
    from .numeric.proxies import ProxyResult
    from .numeric.spectra import NormSummary

IDENTITY = ("name", "layer", "head", "kind", "rows", "cols")
"""The identity columns every per-matrix frame starts with (``head`` is -1 for layer-wise matrices)."""


class _Placed(Protocol):
    name: str
    layer: int
    head: int
    kind: str
    shape: tuple[int, int]


def identity(mat: _Placed) -> dict[str, Any]:
    """The :data:`IDENTITY` columns of one matrix (anything with name, layer, head, kind, shape)."""
    rows, cols = mat.shape
    return {"name": mat.name, "layer": int(mat.layer), "head": int(mat.head), "kind": mat.kind,
            "rows": int(rows), "cols": int(cols)}


def _values(record: dict[str, Any], drop: Iterable[str]) -> dict[str, Any]:
    gone = set(drop)
    return {k: v for k, v in record.items() if k not in gone}


def certify_rows(result: Certification) -> list[dict[str, Any]]:
    """One row per covered matrix: identity, then the certificate's per-matrix values (exact ball
    strings ``"[mid +/- rad]"``, each followed by its float endpoints ``<field>_upper`` >= the ball
    and ``<field>_lower`` <= it; fractions as strings, the enclosure route), and when the Occam route
    was evaluated its per-matrix values under ``occam_*`` (p, weight, share, entropy, each ball with
    its float endpoints, and the matrix's share of the entropy H, a float)."""
    from .certified.certificate import matrix_json, occam_matrix_json, with_floats

    b = result.bound
    occam = [{} for _ in b.matrices] if b.occam is None else [
        {f"occam_{k}": v for k, v in occam_matrix_json(o, b.occam.H).items()} for o in b.occam.matrices]
    return [with_floats({**identity(rec), **_values(matrix_json(rec, method), ("layer", "head", "type", "shape")),
                         **occ})
            for rec, method, occ in zip(b.matrices, result.enclosure_methods, occam)]


SUMMARY_BALLS = ("bound", "empirical", "complexity", "confidence", "partial", "SS", "DD", "Lambda", "rho")
"""The balls of :func:`certify_summary`, each as its float upper endpoint ``<name>_upper``."""


def certify_summary(result: Certification) -> dict[str, Any]:
    """The headline numbers of one certify result as one flat row of plain values (``summary()``,
    like WeightWatcher's ``get_summary()``): what the number is (label, is_bound, proven, vacuous),
    the upper float endpoints of the bound and its parts (``*_upper``: >= the certified ball, as
    the certificate writes them; None where there is no such term), the settings and the model."""
    from .certified.certificate import float_endpoints

    b, v = result.bound, result.verdict
    row: dict[str, Any] = {"checkpoint": str(result.checkpoint.get("path")), "label": v.label,
                           "is_bound": v.is_bound, "proven": v.proven, "vacuous": v.vacuous}
    for name in SUMMARY_BALLS:
        value = getattr(b, name)
        row[f"{name}_upper"] = None if value is None else float_endpoints(value)[0]
    row.update(empirical_source=result.source.kind, empirical_certified=bool(result.source.certified),
               n=int(b.settings.n), delta=float(b.delta), readout=b.readout, grid_m=int(b.m),
               family=result.scope.get("family"), variant=result.weights.variant,
               num_layers=int(result.weights.num_layers), num_matrices=len(b.matrices))
    return row


def spectra_rows(summaries: Iterable[NormSummary]) -> list[dict[str, Any]]:
    """One row per covered matrix: identity, then the float norm summary (not certified)."""
    rows = []
    for s in summaries:
        record = s.as_dict()
        rows.append({**{k: record[k] for k in IDENTITY}, **_values(record, IDENTITY)})
    return rows


def proxies_rows(weights: AnalysisWeights, result: ProxyResult) -> list[dict[str, Any]]:
    """One row per covered matrix: identity (from the structure ``weights``), then the paper
    proxy's per-matrix record (floats; proxies, not bounds)."""
    if len(weights.matrices) != len(result.matrices):
        raise SpecboundError("internal: the proxy records do not match the covered matrices")
    rows = []
    for mat, rec in zip(weights.matrices, result.matrices):
        if (mat.layer, mat.head, mat.kind) != (rec.layer, rec.head, rec.kind):
            raise SpecboundError(f"internal: proxy record {rec.layer}/{rec.head}/{rec.kind} is not {mat.name}")
        rows.append({**identity(mat), **_values(rec.as_dict(), ("layer", "head", "kind"))})
    return rows


def dataframe(rows: list[dict[str, Any]]) -> pandas.DataFrame:
    """``pandas.DataFrame(rows)``; a one-line SpecboundError when pandas is not installed."""
    try:
        import pandas
    except ImportError:
        raise SpecboundError("to_dataframe() needs pandas: pip install 'specbound[pandas]'") from None
    return pandas.DataFrame(rows, columns=list(rows[0]) if rows else list(IDENTITY))

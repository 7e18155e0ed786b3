"""The Python API: ``certify``, ``spectra``, ``proxies`` and ``load_weights`` on any model source.

A *model source* is anything :func:`specbound.checkpoint.open_checkpoint` accepts: a path (file,
Hugging Face folder, sharded folder, ``.gguf``), a repo id already in the local Hugging Face cache
(resolved offline), a state dict ``Mapping[str, torch.Tensor | numpy.ndarray]``, a
``torch.nn.Module`` or a ``transformers`` model.  Each function computes exactly what the command
of the same name computes (they share :mod:`specbound.pipeline`, :mod:`specbound.numeric.spectra`
and :mod:`specbound.numeric.proxies`) and returns a result with ``to_dict()`` (plain JSON-ready
values) and ``to_dataframe()`` (one row per matrix; needs the optional ``pandas``, extra
``specbound[pandas]``).  Bad input raises a :class:`~specbound.errors.SpecboundError` whose
message is one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .checkpoint import CheckpointSource
from .checkpoint import load_weights as _load_weights
from .errors import SpecboundError
from .formats.state_dict import InMemorySource, describe, is_in_memory

# The numeric layers (torch) and the pipeline are imported inside the functions that need them, so
# that ``specbound.load_weights`` on a file never imports torch.
if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .matrices import AnalysisWeights


def _dataframe(rows: list[dict]) -> pandas.DataFrame:
    """``pandas.DataFrame(rows)``; a one-line SpecboundError when pandas is not installed."""
    try:
        import pandas
    except ImportError:
        raise SpecboundError(
            "to_dataframe() needs pandas: pip install 'specbound[pandas]'"
        ) from None
    return pandas.DataFrame(rows)


def _label(model: CheckpointSource | None) -> str:
    if model is None:
        return "<embedded default>"
    return describe(model) if is_in_memory(model) else str(model)


def _source(model: CheckpointSource | None) -> CheckpointSource | None:
    """What is handed to the pipeline: in-memory weights wrapped so they print as their label."""
    if model is not None and is_in_memory(model) and not isinstance(model, InMemorySource):
        return InMemorySource(model)
    return model


def load_weights(
    model: CheckpointSource | None = None,
    *,
    num_heads: int | None = None,
    activation: str | None = None,
    view: str = "analysis",
) -> AnalysisWeights:
    """The covered matrices of ``model`` (None: the embedded default) in ``view`` (``analysis``,
    ``scores`` or ``proxy``); see :func:`specbound.checkpoint.load_weights`."""
    return _load_weights(_source(model), num_heads=num_heads, activation=activation, view=view)


@dataclass(frozen=True)
class SpectraResult:
    """Singular values and norm summary of every covered matrix (float path; not certified)."""

    checkpoint: str
    dtype: str
    weights: Any = field(repr=False)  #: AnalysisWeights
    spectra: Any = field(repr=False)  #: specbound.numeric.spectra.Spectra
    summaries: tuple = field(repr=False)  #: NormSummary per matrix

    def to_dict(self, values: bool = False) -> dict:
        """The ``specbound spectra --json`` document (``values``: every singular value too)."""
        rows = []
        for j, s in enumerate(self.summaries):
            row = s.as_dict()
            if values:
                row["singular_values"] = self.spectra.sigma(j).tolist()
            rows.append(row)
        w = self.weights
        return {"checkpoint": self.checkpoint, "dtype": self.dtype,
                "view": w.extra.get("view", "analysis"), "layout": w.layout, "variant": w.variant,
                "num_layers": w.num_layers, "num_heads": w.num_heads, "width": w.width,
                "matrices": rows}

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per matrix: the norm summary columns."""
        return _dataframe([s.as_dict() for s in self.summaries])


def spectra(
    model: CheckpointSource | None = None,
    *,
    num_heads: int | None = None,
    device: str = "cpu",
    dtype: str = "float64",
    view: str = "analysis",
    workers: int | None = None,
    scheduler: str | None = None,
    engine: Any = None,
) -> SpectraResult:
    """Singular values of every covered matrix of ``model`` (in ``view``), as ``specbound spectra``
    computes them (:func:`weights_and_spectra`).  ``weights`` of the result is the model's structure
    (its matrices' values are not held; :func:`load_weights` reads them)."""
    from .numeric.spectra import norm_summaries

    weights, values = weights_and_spectra(model, view=view, num_heads=num_heads, dtype=dtype, device=device,
                                          workers=workers, scheduler=scheduler, engine=engine)
    return SpectraResult(_label(model), dtype, weights, values, tuple(norm_summaries(values)))


def weights_and_spectra(
    model: CheckpointSource | None,
    *,
    view: str = "analysis",
    num_heads: int | None = None,
    dtype: str = "float64",
    device: str = "cpu",
    workers: int | None = None,
    scheduler: str | None = None,
    engine: Any = None,
    show_progress: bool = False,
) -> tuple[AnalysisWeights, Any]:
    """(the structure of ``model`` in ``view``, the float Spectra of its covered matrices): the one
    path of ``spectra`` and ``proxies``, command and API alike.

    The singular values are tasks of the engine of ``workers`` / ``scheduler`` / ``engine``
    (:func:`specbound.engine.open_engine`; in process by default): on the CPU one task per layer and
    matrix kind, so that one layer's weights are held at a time (peak memory: the structure, one
    layer and its products, whatever the depth), with the values of the whole-model computation;
    on a torch ``device`` one task of the whole model, in this process."""
    from .checkpoint import load_layers
    from .engine import open_engine, source_of, spectra_of
    from .progress import progress_bar

    if dtype not in ("float64", "float32"):
        raise SpecboundError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    dev = device_of(device)
    if dev != "cpu" and (scheduler is not None or (workers is not None and workers != 1)):
        raise SpecboundError("--workers/--scheduler compute on the workers' CPUs: give them without --device")
    source = _source(model)
    with open_engine(workers=workers, scheduler=scheduler, engine=engine) as eng:
        weights = load_layers(source, (), num_heads=num_heads, view=view)
        task_source = source_of(source, num_heads=num_heads, view=view, sha256=weights.sha256)
        with progress_bar(len(weights.matrices), "singular values", enabled=show_progress) as bar:
            return weights, spectra_of(eng, task_source, weights, dtype=dtype, device=dev, progress=bar)


def device_of(name: str):
    """``"cpu"`` (the numpy path), else the torch device for ``device`` / ``--device``, as a
    one-line SpecboundError if it cannot be used."""
    if name == "cpu":
        return "cpu"
    from .numeric.spectra import resolve_device

    try:
        return resolve_device(name)
    except ValueError as exc:
        raise SpecboundError(str(exc)) from None


@dataclass(frozen=True)
class ProxiesResult:
    """The paper's two proxies with their per-matrix parts (proxies, not bounds)."""

    checkpoint: str
    result: Any = field(repr=False)  #: specbound.numeric.proxies.ProxyResult

    @property
    def ours(self) -> float:
        return self.result.ours

    @property
    def edelman(self) -> float:
        return self.result.edelman

    def to_dict(self) -> dict:
        """The ``specbound proxies --json`` document plus the checkpoint label."""
        return {"checkpoint": self.checkpoint, **self.result.as_dict()}

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per matrix: the per-matrix proxy records."""
        return _dataframe([r.as_dict() for r in self.result.matrices])


def proxies(
    model: CheckpointSource | None = None,
    *,
    num_heads: int | None = None,
    device: str = "cpu",
    workers: int | None = None,
    scheduler: str | None = None,
    engine: Any = None,
) -> ProxiesResult:
    """Both paper proxies of ``model``, as ``specbound proxies`` computes them (the singular values
    by :func:`weights_and_spectra` in the ``proxy`` view: no score scale, the proxies' convention)."""
    from .numeric.proxies import paper_proxies

    weights, values = weights_and_spectra(model, view="proxy", num_heads=num_heads, device=device,
                                          workers=workers, scheduler=scheduler, engine=engine)
    try:
        result = paper_proxies(weights, spectra=values)
    except ValueError as exc:
        raise SpecboundError(f"{_label(model)}: {exc}") from None
    return ProxiesResult(_label(model), result)


@dataclass(frozen=True)
class CertifyResult:
    """A certified bound; ``to_dict()`` is the certificate ``specbound certify --json`` prints."""

    checkpoint: str
    result: Any = field(repr=False)  #: specbound.pipeline.CertifyResult

    @property
    def bound(self) -> Any:
        """The certified bound record (Arb balls; ``.bound`` is None without an empirical term)."""
        return self.result.bound

    @property
    def scope(self) -> dict:
        """What the number is a bound for (the certificate's scope block)."""
        return self.result.scope

    @property
    def proven(self) -> bool:
        """False when a lemma constant was overridden below its proven value (NOT A PROVEN BOUND)."""
        return self.result.proven

    @property
    def vacuous(self) -> bool | None:
        """True when the bound is >= 1; None when there is no empirical term (no bound)."""
        return self.result.vacuous

    def to_dict(self) -> dict:
        from .certified.certificate import to_json

        return to_json(self.result)

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per matrix: the certificate's per-matrix records."""
        return _dataframe(list(self.to_dict().get("matrices", [])))


def certify(model: CheckpointSource | None = None, data: Any = None, **options: Any) -> CertifyResult:
    """Certify the bound of ``model`` (None: the embedded default) like ``specbound certify``.

    ``data`` and every keyword (``n``, ``delta``, ``margin``, ``empirical``, ``samples``, ``seed``,
    ``num_heads``, ``readout``, ``settings``, ``forward`` = "fast" | "arb", ``workers``,
    ``scheduler``, ``engine``...) are those of :func:`specbound.pipeline.certify`, the path of the
    command too.
    """
    from .pipeline import certify as run_certify

    return CertifyResult(_label(model), run_certify(_source(model), data=data, **options))


def inspect(model: CheckpointSource, *, num_heads: int | None = None) -> Any:
    """What specbound reads from ``model``: the :class:`specbound.inspection.Inspection` that
    ``specbound inspect`` prints (``to_dict()``: its ``--json``)."""
    from .inspection import inspect_checkpoint

    return inspect_checkpoint(_source(model), num_heads=num_heads)


__all__ = [
    "CertifyResult", "ProxiesResult", "SpectraResult",
    "certify", "inspect", "load_weights", "proxies", "spectra",
]

"""The Python API: one function per job, the path of the command of the same name too.

``certify``, ``verify``, ``spectra``, ``proxies``, ``inspect``, ``theorem``, ``plan_n``, ``experiment`` and
``scaling_study`` each compute exactly what ``specbound <job>`` computes: every command parses its
arguments, calls the function here and renders the typed result it returns (this module never
imports :mod:`specbound.commands`; tests/test_import_graph.py holds it to that).  ``load_weights``
gives the covered matrices themselves.

A *model source* is anything :func:`specbound.checkpoint.open_checkpoint` accepts: a path (file,
Hugging Face folder, sharded folder, ``.gguf``), a repo id already in the local Hugging Face cache
(resolved offline), a state dict ``Mapping[str, torch.Tensor | numpy.ndarray]``, a
``torch.nn.Module`` or a ``transformers`` model.  The results: :class:`Certification` (certify; its
``verdict`` says what the number is), :class:`SpectraResult`, :class:`ProxiesResult`,
:class:`~specbound.certified.certificate.VerificationReport` and
:class:`~specbound.inspection.Inspection`; ``to_dict()`` gives plain JSON-ready values (the
command's ``--json``) and ``to_dataframe()`` one row per matrix with the identity columns of
:mod:`specbound.frames` (needs the optional ``pandas``, extra ``specbound[pandas]``).  Bad input
raises a :class:`~specbound.errors.SpecboundError` whose message is one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .certification import Certification
from .checkpoint import CheckpointSource
from .checkpoint import load_weights as _load_weights
from .errors import SpecboundError, option
from .module_source import label_of, source_of
from .frames import dataframe, proxies_rows, spectra_rows

# The numeric layers (torch) and the pipeline are imported inside the functions that need them, so
# that ``specbound.load_weights`` on a file never imports torch.
if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .certified.certificate import VerificationReport
    from .derivation.routes import OccamTheorem, Routes
    from .derivation.theorem import Theorem
    from .engine import Engine
    from .experiment import ExperimentConfig, ExperimentResult, ScalingConfig
    from .inspection import Inspection
    from .matrices import AnalysisWeights
    from .numeric.proxies import ProxyResult
    from .planning import SampleSizePlan
    from .numeric.spectra import NormSummary, Spectra


_label = label_of
_source = source_of  # what is handed to the pipeline: in-memory weights wrapped so they print as their label


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


# ------------------------------------------------------------------------------------------------
# certify and verify


def certify(model: CheckpointSource | None = None, data: Any = None, *, cross_check: bool = False,
            **options: Any) -> Certification:
    """Certify the bound of ``model`` (None: the embedded default) like ``specbound certify``.

    ``data``: a ``.npz`` path, a :class:`~specbound.dataset.DataSet` or a mapping
    ``{"labels": ..., "tokens": ...}`` (or ``"inputs"``), the sample S of a certified empirical term.
    ``data`` and every keyword (``settings`` or the loose ``n``, ``delta``, ``margin``,
    ``empirical``, ``readout``; ``samples``, ``seed``, ``num_heads``, ``forward`` = "fast" | "arb",
    ``workers``, ``scheduler``, ``engine``, ``show_progress``, ``routes``...) are those of
    :func:`specbound.pipeline.certify`.  ``cross_check``: also evaluate the fast float path at the
    same plan against the certified values (:func:`cross_check`; in ``result.cross_check``).
    """
    from .pipeline import certify as run_certify

    source = _source(model)
    result = run_certify(source, data=data, **options)
    if cross_check:
        result = replace(result, cross_check=_cross_check(result, source, options.get("num_heads")))
    return result


def _cross_check(result: Certification, source: CheckpointSource | None, num_heads: int | None) -> dict[str, Any]:
    """The fast float path (numeric.bound.evaluate) at the certificate's plan against its certified
    balls, on the whole model (the certify run may have held its structure only): ``ok`` (None when
    the numeric layer is not installed), ``checked`` and a one-line ``summary``."""
    try:
        from .numeric.bound import evaluate
        from .numeric.crosscheck import crosscheck
    except ImportError:
        return {"ok": None, "summary": "unavailable (specbound.numeric.crosscheck is not installed)"}
    from .adapters.helpers import is_placeholder
    from .certified.arb import float_upper

    b = result.bound
    st = b.settings
    if st.empirical is None and b.empirical is not None:
        st = replace(st, empirical=min(1.0, float_upper(b.empirical)))
    weights = result.weights
    if any(is_placeholder(m.left) for m in weights.matrices):
        weights = _load_weights(source, num_heads=num_heads)
    rep = crosscheck(evaluate(weights, st, b.plan), b, result.enclosures)
    return {"ok": rep.ok, "checked": rep.checked, "summary": rep.summary()}


def verify(certificate: str | os.PathLike | Mapping[str, Any], model: CheckpointSource | None = None, *,
           data: Any = None, recompute_empirical: bool = True) -> VerificationReport:
    """Re-check a certificate (a path, JSON text or dict) independently from the raw weights, like
    ``specbound verify`` (:func:`specbound.verification.verify`): the report is ``valid`` or lists
    every mismatch; a valid report carries the recomputed ``verdict`` and ``scope``.  ``data``: the
    sample as ``certify`` was given it (needed when it was given in memory; any form ``certify``
    takes), checked against the certificate's ``data_sha256``.  With ``recompute_empirical=False``
    the certified empirical term is taken from the certificate, and a report without mismatch has
    ``status`` "VALID EXCEPT EMPIRICAL TERM (not recomputed)" and ``valid`` False."""
    from .verification import verify as run_verify

    if isinstance(certificate, Mapping):
        certificate = dict(certificate)
    elif isinstance(certificate, os.PathLike):
        certificate = os.fspath(certificate)
    return run_verify(certificate, _source(model), data=data, recompute_empirical=recompute_empirical)


# ------------------------------------------------------------------------------------------------
# spectra and proxies (float path; not certified)


@dataclass(frozen=True)
class SpectraResult:
    """Singular values and norm summary of every covered matrix (float path; not certified)."""

    checkpoint: str
    dtype: str
    view: str  #: the view asked for: analysis, scores or proxy
    weights: AnalysisWeights = field(repr=False)  #: the structure (matrix values not held)
    spectra: Spectra = field(repr=False)
    summaries: tuple[NormSummary, ...] = field(repr=False)
    products: str = "factored"  #: how factored matrices' values were taken (numeric.spectra.PRODUCTS)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per matrix (:func:`specbound.frames.spectra_rows`)."""
        return spectra_rows(self.summaries)

    def to_dict(self, values: bool = False) -> dict[str, Any]:
        """The ``specbound spectra --json`` document (``values``: every singular value too)."""
        rows = self.rows()
        if values:
            for j, row in enumerate(rows):
                row["singular_values"] = self.spectra.sigma(j).tolist()
        w = self.weights
        return {"checkpoint": self.checkpoint, "dtype": self.dtype, "products": self.products,
                "view": self.view, "layout": w.layout, "variant": w.variant,
                "num_layers": w.num_layers, "num_heads": w.num_heads, "width": w.width,
                "matrices": rows}

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per matrix: identity columns, then the norm summary."""
        return dataframe(self.rows())

    def plot(self, folder: str | os.PathLike) -> list[Path]:
        """Write ``spectral_decay.png`` into ``folder`` (what ``spectra --report`` draws); the paths."""
        from .report import plot_spectral_decay

        return [plot_spectral_decay(self.spectra, folder)]


def spectra(
    model: CheckpointSource | None = None,
    *,
    num_heads: int | None = None,
    device: str = "cpu",
    dtype: str = "float64",
    view: str = "analysis",
    workers: int | None = None,
    scheduler: str | None = None,
    engine: Engine | None = None,
    show_progress: bool = False,
    products: str = "factored",
) -> SpectraResult:
    """Singular values of every covered matrix of ``model`` (in ``view``), as ``specbound spectra``
    computes them (:func:`weights_and_spectra`).  ``weights`` of the result is the model's structure
    (its matrices' values are not held; :func:`load_weights` reads them).  ``products``: a factored
    matrix's values from its factors' core ("factored", exact zeros beyond the inner dimension) or
    from the SVD of its float64 product ("dense", as ``proxies`` takes them;
    :mod:`specbound.numeric.spectra`)."""
    from .numeric.spectra import norm_summaries

    weights, values = weights_and_spectra(model, view=view, num_heads=num_heads, dtype=dtype, device=device,
                                          workers=workers, scheduler=scheduler, engine=engine,
                                          show_progress=show_progress, products=products)
    return SpectraResult(_label(model), dtype, view, weights, values, tuple(norm_summaries(values)), products)


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
    products: str = "dense",
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
    from .numeric.spectra import PRODUCTS

    if products not in PRODUCTS:
        raise SpecboundError(f"products must be one of {', '.join(PRODUCTS)}, got {products!r}")
    dev = device_of(device)
    if dev != "cpu" and (scheduler is not None or (workers is not None and workers != 1)):
        raise SpecboundError(f"{option('workers')} and {option('scheduler')} compute on the workers' CPUs: "
                             f"give them without {option('device')}")
    source = _source(model)
    with open_engine(workers=workers, scheduler=scheduler, engine=engine) as eng:
        weights = load_layers(source, (), num_heads=num_heads, view=view)
        task_source = source_of(source, num_heads=num_heads, view=view, sha256=weights.sha256)
        with progress_bar(len(weights.matrices), "singular values", enabled=show_progress,
                          unit="matrices") as bar:
            return weights, spectra_of(eng, task_source, weights, dtype=dtype, device=dev, progress=bar,
                                       products=products)


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
    weights: AnalysisWeights = field(repr=False)  #: the structure, in the ``proxy`` view
    spectra: Spectra = field(repr=False)  #: the float singular values the proxies read
    result: ProxyResult = field(repr=False)

    @property
    def ours(self) -> float:
        return self.result.ours

    @property
    def edelman(self) -> float:
        return self.result.edelman

    def rows(self) -> list[dict[str, Any]]:
        """One dict per matrix (:func:`specbound.frames.proxies_rows`)."""
        return proxies_rows(self.weights, self.result)

    def to_dict(self) -> dict[str, Any]:
        """The ``specbound proxies --json`` document: the checkpoint label, both proxies and their
        parts, and the per-matrix rows of the frame."""
        return {"checkpoint": self.checkpoint, **self.result.as_dict(), "matrices": self.rows()}

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per matrix: identity columns, then the per-matrix proxy records."""
        return dataframe(self.rows())

    def plot(self, folder: str | os.PathLike) -> list[Path]:
        """Write ``contribution_vs_p.png`` into ``folder`` (drawn by ``proxies --report`` too); the paths."""
        from .report import plot_contribution_vs_p

        return [plot_contribution_vs_p(self.result, folder)]


def proxies(
    model: CheckpointSource | None = None,
    *,
    num_heads: int | None = None,
    device: str = "cpu",
    workers: int | None = None,
    scheduler: str | None = None,
    engine: Engine | None = None,
    show_progress: bool = False,
) -> ProxiesResult:
    """Both paper proxies of ``model``, as ``specbound proxies`` computes them (the singular values
    by :func:`weights_and_spectra` in the ``proxy`` view: no score scale, the proxies' convention)."""
    from .numeric.proxies import paper_proxies

    weights, values = weights_and_spectra(model, view="proxy", num_heads=num_heads, device=device,
                                          workers=workers, scheduler=scheduler, engine=engine,
                                          show_progress=show_progress)
    try:
        result = paper_proxies(weights, spectra=values)
    except ValueError as exc:
        raise SpecboundError(f"{_label(model)}: {exc}") from None
    return ProxiesResult(_label(model), weights, values, result)


# ------------------------------------------------------------------------------------------------
# inspect, theorem, experiments


def inspect(model: CheckpointSource, *, num_heads: int | None = None) -> Inspection:
    """What specbound reads from ``model``: the :class:`specbound.inspection.Inspection` that
    ``specbound inspect`` prints (``to_dict()``: its ``--json``)."""
    from .inspection import inspect_checkpoint

    return inspect_checkpoint(_source(model), num_heads=num_heads)


THEOREM_ROUTES = ("rademacher", "occam", "both")
"""The routes :func:`theorem` assembles (``specbound theorem --route``)."""


def theorem(route: str = "rademacher", *, overrides: Mapping[str, Any] | None = None, massart: str = "centred",
            dudley: str = "centred", activation: str = "gelu", model: str = "plain",
            classes: int = 1) -> Theorem | OccamTheorem | Routes:
    """The theorem assembled from the SymPy lemma objects, as ``specbound theorem`` renders it
    (:func:`specbound.derivation.render.render`): ``route`` "rademacher" (the main theorem),
    "occam" (``massart`` / ``dudley`` do not apply) or "both" (each at delta/2); ``overrides``
    maps a lemma constant (C_sm, L_phi, B_phi) to its exact value; ``model`` a model variant;
    ``classes`` the read-out rows k: 1 (default) the binary theorem, k >= 2 the k-class theorem
    (proofs_notes/k_class.md; the same for every k, which it keeps as the symbol ``k_cls``)."""
    from .derivation.routes import assemble_occam, assemble_routes
    from .derivation.theorem import DerivationError, assemble

    overrides = dict(overrides or {})
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 1:
        raise DerivationError(f"classes must be an integer k >= 1 (the read-out rows), got {classes!r}")
    form = "binary" if classes == 1 else "k"
    if route == "occam":
        return assemble_occam(overrides, activation=activation, model=model, classes=form)
    if route == "both":
        return assemble_routes(overrides, massart=massart, dudley=dudley, activation=activation, model=model,
                               classes=form)
    if route != "rademacher":
        raise DerivationError(f"unknown route {route!r}; expected one of {', '.join(THEOREM_ROUTES)}")
    return assemble(overrides, massart=massart, dudley=dudley, activation=activation, model=model, classes=form)


def plan_n(model: CheckpointSource | None = None, target: float | Sequence[float] | None = None,
           **options: Any) -> SampleSizePlan:
    """The n at which the float ESTIMATE of each route reaches each ``target``, as ``specbound plan``
    prints it (:func:`specbound.planning.plan_n`: a pilot ``model`` with its ``data``, or an
    ``architecture=`` at its initialisation; estimates, not bounds, under the assumptions the result states)."""
    from .planning import plan_n as run_plan

    return run_plan(model, target, **options)


def experiment(config: ExperimentConfig, *, progress: Callable[[str], None] | None = None) -> ExperimentResult:
    """Train one reference model and measure it, as ``specbound experiment run`` does
    (:func:`specbound.experiment.run_experiment`)."""
    from .experiment import run_experiment

    return run_experiment(config, progress=progress)


def scaling_study(config: ScalingConfig, *, progress: Callable[[str], None] | None = None,
                  cache: str | os.PathLike | None = None) -> dict[str, Any]:
    """The depth x width study of ``specbound experiment scaling``
    (:func:`specbound.experiment.scaling_study`)."""
    from .experiment import scaling_study as run_study

    return run_study(config, progress=progress, cache=cache)


__all__ = [
    "Certification", "ProxiesResult", "SpectraResult",
    "certify", "experiment", "inspect", "load_weights", "plan_n", "proxies", "scaling_study", "spectra", "theorem",
    "verify",
]

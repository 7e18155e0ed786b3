"""Plots and tables for ``--report DIR`` and ``--csv FILE`` (matplotlib, Agg backend; no display).

Every figure follows the model: one panel per matrix kind the model covers, in the canonical order
(QK, V_tilde, M_in, M_out for the plain kinds; Q, K, V_tilde, G, U, D for the Llama-style model), so
no panel is empty.  Curves are coloured by layer (a legend up to :data:`LEGEND_MAX_LAYERS` layers,
a colour bar beyond).  A spectrum is drawn only up to the matrix's proven rank: the singular values
of a factored product beyond its inner dimension are exactly 0, and the float64 values there are
rounding noise that would take most of the axis.

Every file is written whole or not at all: the figure is rendered to memory first and then placed
with an atomic rename, so an interrupted run never leaves a half-written PNG or CSV.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from specbound.output import write_bytes_atomic, write_text_atomic
from specbound.vocabulary import ALL_MATRIX_KINDS, LS_MATRIX_KINDS, MATRIX_KINDS

SPECTRAL_DECAY_PNG = "spectral_decay.png"
CONTRIBUTION_PNG = "contribution_vs_p.png"
CONTRIBUTIONS_BY_LAYER_PNG = "contributions_by_layer.png"

LEGEND_MAX_LAYERS = 8
"""Up to this many layers the colours are named in a legend; beyond, a colour bar shows them."""

PANEL_COLUMNS = 3
"""Panels per row once a model has more kinds than fit on one row (the Llama-style six)."""

Curve = tuple[str, int, np.ndarray]
"""(matrix kind, layer, decreasing positive values): one line of a spectral-decay panel."""


def _save_figure(fig, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    write_bytes_atomic(path, buffer.getvalue())


def _pyplot():
    # local on purpose: the Agg backend must be selected before pyplot is imported, and matplotlib
    # costs start-up time to commands that draw nothing
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def write_csv(path: str | os.PathLike, rows: Sequence[Mapping]) -> None:
    """Write ``rows`` (dicts with the same keys) as CSV, atomically; header from the first row."""
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0].keys()), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


# --------------------------------------------------------------------------- layout


def panel_kinds(kinds: Iterable[str]) -> tuple[str, ...]:
    """The distinct kinds of ``kinds`` in their model's canonical order (:data:`MATRIX_KINDS` or
    :data:`LS_MATRIX_KINDS`, else :data:`ALL_MATRIX_KINDS`), any other kind after them in order of
    appearance: one panel each."""
    seen = list(dict.fromkeys(kinds))
    order = next(o for o in (MATRIX_KINDS, LS_MATRIX_KINDS, ALL_MATRIX_KINDS)
                 if all(k in o for k in seen if k in ALL_MATRIX_KINDS))
    return tuple(k for k in order if k in seen) + tuple(k for k in seen if k not in ALL_MATRIX_KINDS)


def _panels(plt, count: int, *, width: float = 4.0, height: float = 3.4):
    """A figure with ``count`` panels: one row up to 4, else rows of :data:`PANEL_COLUMNS`."""
    cols = count if count <= 4 else PANEL_COLUMNS
    rows = max(1, math.ceil(count / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[count:]:
        fig.delaxes(ax)
    return fig, flat[:count]


def _layer_colours(plt, layers: Sequence[int]) -> dict[int, tuple]:
    cmap = plt.get_cmap("viridis")
    return {layer: cmap(i / max(len(layers) - 1, 1)) for i, layer in enumerate(layers)}


def _layer_key(plt, fig, axes, layers: Sequence[int], colours: Mapping[int, tuple]) -> None:
    """Name the layer colours: a legend right of the panels, or a colour bar for many layers."""
    if not layers:
        return
    if len(layers) <= LEGEND_MAX_LAYERS:
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], color=colours[layer], lw=1.5) for layer in layers]
        fig.legend(handles, [f"layer {layer}" for layer in layers], loc="center left",
                   bbox_to_anchor=(1.0, 0.5), fontsize="small", title="colour")
        return
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    mappable = ScalarMappable(norm=Normalize(min(layers), max(layers)), cmap=plt.get_cmap("viridis"))
    fig.colorbar(mappable, ax=axes, label="layer", fraction=0.03, pad=0.02)


# --------------------------------------------------------------------------- spectral decay


def _mean_curve(rows: list[np.ndarray]) -> np.ndarray:
    """The i-th entry: mean over the rows that have an i-th value (heads may differ in rank)."""
    k = max((len(r) for r in rows), default=0)
    padded = np.full((len(rows), k), np.nan)
    for i, r in enumerate(rows):
        padded[i, :len(r)] = r
    with np.errstate(invalid="ignore"):
        return np.nanmean(padded, axis=0) if k else np.zeros(0)


def _grouped(items: Iterable[tuple[str, int, np.ndarray]]) -> list[Curve]:
    groups: dict[tuple[str, int], list[np.ndarray]] = {}
    for kind, layer, values in items:
        groups.setdefault((kind, int(layer)), []).append(np.asarray(values, dtype=np.float64))
    return [(kind, layer, _mean_curve(rows)) for (kind, layer), rows in groups.items()]


def decay_curves(spectra) -> list[Curve]:
    """Per (kind, layer): the mean over the layer's matrices of that kind (its heads) of the i-th
    largest float singular value, each matrix cut at its proven (structural) rank."""
    values = spectra.values if isinstance(spectra.values, np.ndarray) else spectra.values.cpu().numpy()
    counts = spectra.counts if isinstance(spectra.counts, np.ndarray) else spectra.counts.cpu().numpy()
    return _grouped((m.kind, m.layer, values[j, :min(int(counts[j]), m.rank_cap)])
                    for j, m in enumerate(spectra.matrices))


def certified_decay_curves(matrices: Sequence, enclosures: Sequence) -> list[Curve]:
    """As :func:`decay_curves` from certified enclosures: upper endpoints up to the proven rank."""
    return _grouped((m.kind, m.layer, enc.upper_floats()[:enc.rank_upper]) for m, enc in zip(matrices, enclosures))


def spectral_decay_figure(curves: Sequence[Curve], title: str, ylabel: str = "singular value sigma_i"):
    """The figure: one panel per kind (:func:`panel_kinds`), one line per layer (log scale).

    Exact zeros are not drawn (log scale); a kind whose matrices are all zero says so in its panel.
    """
    plt = _pyplot()
    kinds = panel_kinds(kind for kind, _, _ in curves)
    layers = sorted({layer for _, layer, _ in curves})
    colours = _layer_colours(plt, layers)
    fig, axes = _panels(plt, len(kinds))
    for ax, kind in zip(axes, kinds):
        drawn = False
        for kind_, layer, curve in sorted(curves, key=lambda c: c[1]):
            if kind_ != kind:
                continue
            index = np.arange(1, len(curve) + 1)
            keep = np.isfinite(curve) & (curve > 0)
            if keep.any():
                ax.semilogy(index[keep], curve[keep], color=colours[layer], lw=1.2,
                            marker="." if keep.sum() <= 12 else None)
                drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "every singular value is 0", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(kind)
        ax.set_xlabel("index i")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[::PANEL_COLUMNS if len(axes) > 4 else len(axes)]:
        ax.set_ylabel(ylabel)
    fig.suptitle(title, y=1.02)
    fig.tight_layout()
    _layer_key(plt, fig, axes, layers, colours)
    return fig


def _write(fig, folder, name: str) -> Path:
    path = Path(folder) / name
    try:
        _save_figure(fig, path)
    finally:
        _pyplot().close(fig)
    return path


def plot_spectral_decay(spectra, folder: str | os.PathLike) -> Path:
    """``spectral_decay.png`` of float spectra (:func:`decay_curves`) into ``folder``; its path."""
    fig = spectral_decay_figure(
        decay_curves(spectra),
        "Spectral decay (float64, uncertified): mean over heads of sigma_i per layer, to the proven rank")
    return _write(fig, folder, SPECTRAL_DECAY_PNG)


# --------------------------------------------------------------------------- the proxies' contributions


def contribution_figure(result):
    """Paper-proxy contribution ``c_j(p) / c_j(0)`` against ``p``: one panel per kind, one line per
    matrix (per head) coloured by layer; a dot marks each matrix's chosen ``p_opt``."""
    plt = _pyplot()
    grid = np.asarray(result.grid)
    c = np.asarray(result.contributions)
    kinds = panel_kinds(rec.kind for rec in result.matrices)
    layers = sorted({rec.layer for rec in result.matrices})
    colours = _layer_colours(plt, layers)
    fig, axes = _panels(plt, len(kinds))
    for ax, kind in zip(axes, kinds):
        drawn = False
        for j, rec in enumerate(result.matrices):
            if rec.kind != kind or not c[j, 0] > 0:
                continue
            ax.semilogy(grid, c[j] / c[j, 0], color=colours[rec.layer], lw=0.8, alpha=0.7)
            ax.plot([rec.p_opt], [rec.contribution / c[j, 0]], ".", color="k", ms=3)
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "every matrix is 0", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(kind)
        ax.set_xlabel("p")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[::PANEL_COLUMNS if len(axes) > 4 else len(axes)]:
        ax.set_ylabel("c(p) / c(0)")
    fig.suptitle("Paper proxy (not a bound): contribution vs p per matrix (one line per head), "
                 "normalised at p = 0; dots: chosen p", y=1.02)
    fig.tight_layout()
    _layer_key(plt, fig, axes, layers, colours)
    return fig


def plot_contribution_vs_p(result, folder: str | os.PathLike) -> Path:
    """``contribution_vs_p.png`` of a :class:`~specbound.numeric.proxies.ProxyResult`; its path."""
    return _write(contribution_figure(result), folder, CONTRIBUTION_PNG)


# --------------------------------------------------------------------------- certify --report


def contributions_by_layer_figure(bound):
    """The certified per-matrix contributions (upper endpoints) summed per layer, stacked by kind."""
    from specbound.certified.arb import float_upper

    plt = _pyplot()
    kinds = panel_kinds(r.kind for r in bound.matrices)
    layers = sorted({r.layer for r in bound.matrices})
    sums = {(k, layer): 0.0 for k in kinds for layer in layers}
    for r in bound.matrices:
        sums[(r.kind, r.layer)] += float_upper(r.contribution)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(layers) + 3), 3.6))
    bottom = np.zeros(len(layers))
    for i, kind in enumerate(kinds):
        heights = np.array([sums[(kind, layer)] for layer in layers])
        ax.bar([str(layer) for layer in layers], heights, bottom=bottom, color=f"C{i % 10}", label=kind)
        bottom += heights
    ax.set_xlabel("layer")
    ax.set_ylabel("sum of per-matrix contributions")
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5), title="kind")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("Where the complexity term comes from (certified upper endpoints, per layer and kind)")
    fig.tight_layout()
    return fig


def certify_report(result, folder: str | os.PathLike) -> list[Path]:
    """The figures of ``certify --report DIR`` (and ``result.plot(DIR)``) for a
    :class:`specbound.certification.Certification`: ``spectral_decay.png`` from the certified enclosures
    (upper endpoints to each matrix's proven rank) and ``contributions_by_layer.png``."""
    matrices = result.weights.matrices
    fig = spectral_decay_figure(
        certified_decay_curves(matrices, result.enclosures),
        "Spectral decay (certified upper endpoints): mean over heads of sigma_i per layer, to the proven rank")
    paths = [_write(fig, folder, SPECTRAL_DECAY_PNG)]
    paths.append(_write(contributions_by_layer_figure(result.bound), folder, CONTRIBUTIONS_BY_LAYER_PNG))
    return paths


def written_lines(paths: Iterable[str | os.PathLike]) -> list[str]:
    """``wrote PATH`` per file, the line a command prints after writing a report or a table."""
    return [f"wrote {p}" for p in paths]

"""Plots and tables for ``--report DIR`` and ``--csv FILE`` (matplotlib, Agg backend; no display).

Every file is written whole or not at all: the figure is rendered to memory first and then placed
with an atomic rename, so an interrupted run never leaves a half-written PNG or CSV.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from specbound.vocabulary import MATRIX_KINDS
from specbound.output import write_bytes_atomic, write_text_atomic

SPECTRAL_DECAY_PNG = "spectral_decay.png"
CONTRIBUTION_PNG = "contribution_vs_p.png"


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


def plot_spectral_decay(spectra, folder: str | os.PathLike) -> Path:
    """Spectral decay, one panel per matrix type and one curve per layer (log scale).

    For head-wise types (QK, V_tilde) a layer's curve is the mean over its heads of the i-th largest
    singular value.  Exact zeros and padding are not drawn (log scale).  Returns the PNG path.
    """
    plt = _pyplot()
    values = np.asarray(spectra.values) if isinstance(spectra.values, np.ndarray) else spectra.values.cpu().numpy()
    counts = np.asarray(spectra.counts) if isinstance(spectra.counts, np.ndarray) else spectra.counts.cpu().numpy()
    layers = sorted({m.layer for m in spectra.matrices})
    fig, axes = plt.subplots(1, len(MATRIX_KINDS), figsize=(4 * len(MATRIX_KINDS), 3.5), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, kind in zip(axes[0], MATRIX_KINDS):
        for i, layer in enumerate(layers):
            rows = [j for j, m in enumerate(spectra.matrices) if m.kind == kind and m.layer == layer]
            if not rows:
                continue
            k = int(counts[rows].min())
            curve = values[rows, :k].mean(axis=0)
            index = np.arange(1, k + 1)
            keep = curve > 0
            color = cmap(i / max(len(layers) - 1, 1))
            ax.semilogy(index[keep], curve[keep], color=color, lw=1.2, label=f"layer {layer}")
        ax.set_title(kind)
        ax.set_xlabel("index i")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("singular value sigma_i")
    axes[0][-1].legend(fontsize="small")
    fig.suptitle("Spectral decay (float64, uncertified)", y=1.03)
    path = Path(folder) / SPECTRAL_DECAY_PNG
    _save_figure(fig, path)
    plt.close(fig)
    return path


def plot_contribution_vs_p(result, folder: str | os.PathLike) -> Path:
    """Paper-proxy contribution ``c_j(p) / c_j(0)`` against ``p``, one curve per matrix (per head).

    One panel per matrix type; a dot marks each matrix's chosen ``p_opt``.  Returns the PNG path.
    """
    plt = _pyplot()
    grid = np.asarray(result.grid)
    c = np.asarray(result.contributions)
    fig, axes = plt.subplots(1, len(MATRIX_KINDS), figsize=(4 * len(MATRIX_KINDS), 3.5), squeeze=False)
    for ax, kind in zip(axes[0], MATRIX_KINDS):
        for j, rec in enumerate(result.matrices):
            if rec.kind != kind or not c[j, 0] > 0:
                continue
            curve = c[j] / c[j, 0]
            ax.semilogy(grid, curve, lw=0.8, alpha=0.6)
            ax.plot([rec.p_opt], [rec.contribution / c[j, 0]], "k.", ms=3)
        ax.set_title(kind)
        ax.set_xlabel("p")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("c(p) / c(0)")
    fig.suptitle("Paper proxy: contribution vs p per matrix, normalised at p = 0 (not a bound)", y=1.03)
    path = Path(folder) / CONTRIBUTION_PNG
    _save_figure(fig, path)
    plt.close(fig)
    return path

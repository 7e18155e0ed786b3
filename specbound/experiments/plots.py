"""The scaling study's figures (matplotlib, an optional dependency: imported where used)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from specbound.experiments.scaling import QUANTITIES, TRAINED_ACCURACY, _quantity, trained
from specbound.output import write_bytes_atomic
from specbound.vocabulary import MATRIX_KINDS


# --------------------------------------------------------------------------- report


def _save_figure(fig, path: Path) -> None:
    """Render to memory, then place the PNG atomically (never a half-written file)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    write_bytes_atomic(path, buffer.getvalue())


def scaling_plots(study: dict, folder: str | Path) -> list[Path]:
    """``bound_vs_depth.png``, ``bound_vs_width.png`` and ``contribution_vs_p.png`` into ``folder``."""
    # local on purpose: the Agg backend must be selected before pyplot is imported, and matplotlib
    # costs start-up time to commands that draw nothing
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only, never a display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    folder = Path(folder)
    rows = study["rows"]
    depths = sorted({r["L"] for r in rows})
    widths = sorted({r["N"] for r in rows})
    at = {(r["L"], r["N"]): r for r in rows}
    styles = {"paper_ours": "o-", "paper_edelman": "s--", "complexity_ss": "^-", "bound": "v:",
              "rademacher_estimate": "D-.", "occam_estimate": "P-", "occam_H": "X--"}
    paths = []
    for name, outer, inner, xlabel in (("bound_vs_depth.png", widths, depths, "depth L"),
                                       ("bound_vs_width.png", depths, widths, "width N")):
        fig, axes = plt.subplots(1, len(outer), figsize=(4 * len(outer), 3.4), squeeze=False)
        untrained_seen = False
        for ax, o in zip(axes[0], outer):
            ax.axhline(1.0, color="0.4", lw=0.9, ls="-.", label="1 (a bound above it is vacuous)")
            for key, label in QUANTITIES.items():
                xs, ys, bad = [], [], []
                for i in inner:
                    r = at.get((o, i) if xlabel == "width N" else (i, o))
                    if r is not None and _quantity(r, key) > 0:  # NaN (no estimate recorded) is skipped
                        xs.append(i)
                        ys.append(_quantity(r, key))
                        if not trained(r):
                            bad.append((i, _quantity(r, key)))
                # fixed colours: the circles below must not shift the colour cycle between panels
                ax.loglog(xs, ys, styles[key], color=f"C{list(QUANTITIES).index(key)}", label=label, ms=4)
                if bad:
                    untrained_seen = True
                    ax.loglog(*zip(*bad), "o", ms=10, mfc="none", mec="red", mew=1.4,
                              label=f"not trained (train accuracy < {TRAINED_ACCURACY})")
            ax.set_title(("N = " if xlabel == "depth L" else "L = ") + str(o))
            ax.set_xlabel(xlabel)
            ax.set_xticks(inner)
            ax.set_xticklabels([str(i) for i in inner])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].set_ylabel("value (log scale)")
        handles, labels = [], []
        for ax in axes[0]:  # one legend entry per label, the red circles only if some model is untrained
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
        note = "; circled: not trained, left out of the fits" if untrained_seen else ""
        fig.suptitle(f"Proxies and float estimates (not bounds), our numeric bound vs {xlabel}{note}", y=1.03)
        fig.tight_layout()
        path = folder / name
        _save_figure(fig, path)
        plt.close(fig)
        paths.append(path)

    # contribution vs p for the middle model
    mid = at.get((depths[len(depths) // 2], widths[len(widths) // 2]), rows[0])
    c = mid["_contributions"]
    grid = np.asarray(c["grid"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    colours = {kind: f"C{i}" for i, kind in enumerate(MATRIX_KINDS)}
    for ax, key, title in ((axes[0], "ours", "our closed-form term (numeric)"),
                           (axes[1], "paper", "paper proxy c_j(p) (not a bound)")):
        seen = set()
        for j, kind in enumerate(c["types"]):
            ax.semilogy(grid, c[key][j], color=colours.get(kind, "k"), lw=0.8, alpha=0.7,
                        label=None if kind in seen else kind)
            seen.add(kind)
        ax.set_title(title)
        ax.set_xlabel("p")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("per-matrix term (log scale)")
    axes[0].legend(fontsize="x-small", title="kind")
    fig.suptitle(f"Per-matrix contribution vs p (L = {mid['L']}, N = {mid['N']})", y=1.03)
    path = folder / "contribution_vs_p.png"
    _save_figure(fig, path)
    plt.close(fig)
    paths.append(path)
    return paths

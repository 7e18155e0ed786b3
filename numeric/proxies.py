"""The paper's BERT-adapted proxies, reproduced exactly (docs/design.md section 6).

**Paper proxy, not a bound.**  These are the formulas of the companion experiment code of Sakai &
Imaizumi (2026), kept here verbatim so ``specbound proxies`` reproduces its numbers (float64,
relative 1e-9).  They are *not* our theorem and carry no guarantee; our rigorous bound is assembled
from ``specbound.derivation`` and evaluated by ``specbound.certified``.  Where the two differ is
listed in :data:`DIFFERENCES`.

Per layer ``l`` (0-based, ``L`` layers, width ``N``), with spectral norms ``||.||``:

- Lipschitz ``Lip_l = Lphi * ||M_in|| ||M_out|| * sum_h ||V_tilde_h|| (1 + 4 ||QK_h||)``, ``Lphi = 1.13``;
- ``alpha_l = prod_{k > l} Lip_k`` (``alpha_{L-1} = 1``);
- ``gamma``: QK ``2 ||V_tilde_h|| ||M_out|| ||M_in||``; V_tilde ``||M_out|| ||M_in||``;
  M_in ``||M_out||``; M_out ``1``;
- ``scale_j = gamma_j * alpha_l * L``;
- ``c_j(p) = S_p^(1/(p+2)) * scale_j^(p/(p+2)) * N^((p+1)/(p+2))`` on ``P_m`` (``numeric.grid``),
  ``S_0`` = numerical rank; ``p_opt`` = first minimiser;
- ours ``= sum_j min_p c_j(p) + sqrt(L)``;
- Edelman-style ``(1 + sum_l alpha_l^(2/3) xi_l)^(3/2)`` with
  ``xi_l = sum_h [(||M_out|| ||M_in|| ||V_h|| ||QK_h||_{2,1})^(2/3) + (||M_out|| ||M_in|| ||V_h||_{2,1})^(2/3)]
  + (||M_out|| ||M_in||_{2,1})^(2/3) + ||M_out||_{2,1}^(2/3)``.

Everything is vectorised over matrices and the whole grid (no loop over ``p``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specbound.matrices import AnalysisWeights

from .grid import architecture_grid, grid_size
from .spectra import Spectra, compute_spectra, compute_spectra_numpy, norm_summaries, schatten_powers

LPHI_PAPER = 1.13
"""The paper's GELU Lipschitz constant (a valid upper bound: sup|GELU'| = 1.128904...)."""

DIFFERENCES: tuple[str, ...] = (
    "rank: the proxy's S_0 is a numerical rank of the float64 product (threshold 1e-10*k*max(s1,1)); "
    "our bound uses a proven rank (structural head dim, or values not certified zero).",
    "dimension: the proxy has N^((p+1)/(p+2)); our covering term is linear in d_j = 2N (QK, V) or "
    "N + d_ff (MLP), times a log, with n^(-1/(p+2)) explicit.",
    "gamma: the proxy omits Lphi from gamma(V_tilde) and gamma(M_in) and uses gamma(M_out) = 1; "
    "ours has Lphi*||M_in|| ||M_out||, Lphi*||M_out|| and B_phi*||M_in|| (proofs_notes/theory.md section 2).",
    "depth: the proxy's scale carries a factor L and adds sqrt(L); ours gives each matrix its own "
    "scale and pays a union bound log(2m+1) per matrix over the grid P_m (proofs_notes/theory.md section 6).",
)


@dataclass(frozen=True)
class MatrixProxy:
    """Per-matrix record of the paper proxy; ``head`` is -1 for layer-wise matrices."""

    layer: int
    head: int
    kind: str
    spectral: float
    frobenius: float
    nuclear: float
    norm_21: float
    norm_11: float
    numerical_rank: int
    stable_rank: float
    p_opt: float
    contribution: float
    gamma: float
    alpha: float
    scale: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True, eq=False)
class ProxyResult:
    """Both proxies with their parts.

    ``contributions[j, i]`` is ``c_j(grid[i])``; ``lipschitz[l]`` and ``alphas[l]`` are per layer.
    """

    ours: float
    edelman: float
    matrices: tuple[MatrixProxy, ...]
    grid: np.ndarray
    m: int
    num_layers: int
    width: int
    contributions: np.ndarray
    lipschitz: np.ndarray
    alphas: np.ndarray

    def as_dict(self) -> dict:
        return {
            "ours": self.ours,
            "edelman": self.edelman,
            "num_layers": self.num_layers,
            "width": self.width,
            "grid_m": self.m,
            "lipschitz": self.lipschitz.tolist(),
            "alpha": self.alphas.tolist(),
            "note": "paper proxies (docs/design.md section 6), not a bound",
            "differences": list(DIFFERENCES),
            "matrices": [r.as_dict() for r in self.matrices],
        }


def _np(x) -> np.ndarray:
    """float64 numpy view of a numpy array or a (CPU or CUDA) torch tensor."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _index(spectra: Spectra, num_layers: int, num_heads: int) -> dict[tuple[int, str], np.ndarray]:
    """Row indices of each (layer, type): heads in order for QK/V_tilde, one row for M_in/M_out."""
    rows: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for j, mat in enumerate(spectra.matrices):
        rows.setdefault((mat.layer, mat.kind), []).append((mat.head, j))
    out = {}
    for layer in range(num_layers):
        for kind, expected in (("QK", num_heads), ("V_tilde", num_heads), ("M_in", 1), ("M_out", 1)):
            found = sorted(rows.get((layer, kind), []))
            if len(found) != expected:
                raise ValueError(f"layer {layer} has {len(found)} {kind} matrices, expected {expected}")
            out[(layer, kind)] = np.array([j for _, j in found], dtype=np.int64)
    return out


def layer_lipschitz(qk, v, m_in, m_out) -> np.ndarray:
    """Paper's ``Lip_l = 1.13 ||M_in|| ||M_out|| sum_h ||V_h|| (1 + 4||QK_h||)``.

    ``qk``, ``v``: (L, H) spectral norms; ``m_in``, ``m_out``: (L,).  Arrays or CPU tensors in, numpy out.
    """
    qk, v, m_in, m_out = _np(qk), _np(v), _np(m_in), _np(m_out)
    return LPHI_PAPER * m_in * m_out * (v * (1.0 + 4.0 * qk)).sum(axis=1)


def alphas_after(lipschitz) -> np.ndarray:
    """``alpha_l = prod_{k > l} Lip_k`` for every layer (empty product 1 for the last layer)."""
    lip = _np(lipschitz)
    shifted = np.concatenate([lip[1:], np.ones(1, dtype=lip.dtype)])
    return np.flip(np.cumprod(np.flip(shifted)))


def contributions(schatten, scale, ps, width: int) -> np.ndarray:
    """``c_j(p) = S_p^(1/(p+2)) scale_j^(p/(p+2)) N^((p+1)/(p+2))`` for all j and p: (J, P)."""
    schatten, scale, ps = _np(schatten), _np(scale), _np(ps).astype(np.float64)
    denom = ps + 2.0
    n = float(width)
    return (
        schatten ** (1.0 / denom)[None, :]
        * scale[:, None] ** (ps / denom)[None, :]
        * (n ** ((ps + 1.0) / denom))[None, :]
    )


def paper_proxies(
    weights: AnalysisWeights,
    *,
    device=None,
    spectra: Spectra | None = None,
    progress=None,
) -> ProxyResult:
    """Both paper proxies of ``weights`` (float64 throughout; see the module docstring).

    ``spectra`` may be passed to reuse singular values already computed (they must be float64
    values of ``weights.matrices``; torch tensors from ``--device cuda`` are brought to the host).
    Without it they are computed by numpy (``device`` None or "cpu") or by torch on ``device``.
    The combination over the grid is numpy: it is a (J, P) table.  Raises ``ValueError`` if a
    layer lacks a matrix.
    """
    if any(m.kind not in ("QK", "V_tilde", "M_in", "M_out") for m in weights.matrices):
        raise ValueError(f"the paper proxies are defined for the plain matrix kinds only; these weights "
                         f"are the {weights.variant!r} analysis model")
    if spectra is None:
        cpu = device is None or str(device) == "cpu"
        spectra = (compute_spectra_numpy(weights, progress=progress) if cpu
                   else compute_spectra(weights, device=device, progress=progress))
    L, H, N = weights.num_layers, weights.num_heads, weights.width
    at = _index(spectra, L, H)
    values, counts = _np(spectra.values), _np(spectra.counts)
    sn = values[:, 0] if values.shape[1] else np.zeros(values.shape[0])

    def per_layer(kind: str) -> np.ndarray:
        return np.stack([sn[at[(layer, kind)]] for layer in range(L)])

    qk, v = per_layer("QK"), per_layer("V_tilde")  # (L, H)
    m_in, m_out = per_layer("M_in")[:, 0], per_layer("M_out")[:, 0]  # (L,)
    lip = layer_lipschitz(qk, v, m_in, m_out)
    alpha = alphas_after(lip)

    # gamma and alpha of every matrix, scattered into the order of spectra.matrices.
    gamma = np.empty_like(sn)
    alpha_j = np.empty_like(sn)
    for layer in range(L):
        mlp = m_out[layer] * m_in[layer]
        gamma[at[(layer, "QK")]] = 2.0 * v[layer] * mlp
        gamma[at[(layer, "V_tilde")]] = mlp
        gamma[at[(layer, "M_in")]] = m_out[layer]
        gamma[at[(layer, "M_out")]] = 1.0
        for kind in ("QK", "V_tilde", "M_in", "M_out"):
            alpha_j[at[(layer, kind)]] = alpha[layer]
    scale = gamma * alpha_j * float(L)

    m = grid_size(L, N)
    grid = architecture_grid(L, N)
    ps = np.asarray(grid, dtype=np.float64)
    c = contributions(schatten_powers(values, counts, ps), scale, ps, N)
    best = np.argmin(c, axis=1)  # the first minimiser
    c_min = np.take_along_axis(c, best[:, None], axis=1)[:, 0]
    ours = float(c_min.sum()) + math.sqrt(L)

    # Edelman-style proxy.
    n21 = _np(spectra.norm_21)
    two3 = 2.0 / 3.0
    xi = np.empty(L, dtype=np.float64)
    for layer in range(L):
        mlp = m_out[layer] * m_in[layer]
        heads = (mlp * v[layer] * n21[at[(layer, "QK")]]) ** two3 + (mlp * n21[at[(layer, "V_tilde")]]) ** two3
        xi[layer] = (
            heads.sum()
            + (m_out[layer] * n21[at[(layer, "M_in")]][0]) ** two3
            + n21[at[(layer, "M_out")]][0] ** two3
        )
    edelman = float((1.0 + (alpha**two3 * xi).sum()) ** 1.5)

    summaries = norm_summaries(spectra)
    p_opt = ps[best].tolist()
    c_list, g_list, a_list, s_list = c_min.tolist(), gamma.tolist(), alpha_j.tolist(), scale.tolist()
    records = tuple(
        MatrixProxy(
            layer=s.layer,
            head=s.head,
            kind=s.kind,
            spectral=s.spectral,
            frobenius=s.frobenius,
            nuclear=s.nuclear,
            norm_21=s.norm_21,
            norm_11=s.norm_11,
            numerical_rank=s.numerical_rank,
            stable_rank=s.stable_rank,
            p_opt=p_opt[j],
            contribution=c_list[j],
            gamma=g_list[j],
            alpha=a_list[j],
            scale=s_list[j],
        )
        for j, s in enumerate(summaries)
    )
    return ProxyResult(
        ours=ours,
        edelman=edelman,
        matrices=records,
        grid=grid,
        m=m,
        num_layers=L,
        width=N,
        contributions=c,
        lipschitz=lip,
        alphas=alpha,
    )

"""Building blocks of the float bound (proofs_notes/theory.md section 7), shared by the evaluation and the planner.

The numpy compiled theorem (:func:`compiled_theorem`: the one
:class:`specbound.certified.compiled.CompiledTheorem` over numeric/generated.py), the network facts
fed to it (:class:`NetworkFacts`: singular values, structural rank caps, the layout's index
arrays), grid rounding onto ``beta^k``, Schatten tables, the sensitivities (the driver's
:func:`specbound.certified.evaluation.network_sensitivities` in the numpy context, for any number of
margins at once) and the combiners of Lambda, SS and DD that the planner evaluates on whole grids.
Every formula is a field of the assembled theorem; this module only feeds and combines their values.
It imports neither the evaluation (:mod:`numeric.evaluation`) nor the planner (:mod:`numeric.planner`):
both build on it.

numpy, float64.  The theorem's fields are evaluated through numeric/generated.py (numpy source
printed from the SymPy expressions by scripts/generate_derived.py; tests/derivation/test_generated.py
keeps it equal to a fresh printing and checks its values against SymPy), so this path imports neither
SymPy nor torch; with an overridden lemma constant (or a patched register) the expressions are
compiled from SymPy at run time instead.  torch is the path of the heavy linear algebra only (the
spectra, on CPU or CUDA: :func:`singular_values`); the closed forms act on a few hundred numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from specbound.certified.compiled import CompiledTheorem
from specbound.certified.compiled import compiled_theorem as _compiled
from specbound.certified import evaluation as combiners
from specbound.certified.evaluation import Structure, network_sensitivities, structure_of
from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights, NamedMatrix
from specbound.plan import BoundSettings
from specbound.vocabulary import READOUT_FIXED, READOUT_TRAINED

from . import generated
from .context import NumpyContext
from .margin_sample import MarginSample
from .spectra import Spectra


def as_margins(margins) -> np.ndarray | MarginSample | None:
    """Float margins y_i f(X_i) as a flat float64 array (None stays None, a
    :class:`~numeric.margin_sample.MarginSample` stays itself); empty or non-finite input is a
    SpecboundError."""
    if margins is None or isinstance(margins, MarginSample):
        return margins
    arr = np.asarray(margins, dtype=np.float64).reshape(-1)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise SpecboundError("margins must be a non-empty array of finite numbers")
    return arr


# -- the theorem, compiled ------------------------------------------------------------------------

def compiled_theorem(settings: BoundSettings, activation: str, model: str = "plain",
                     outputs: int = 1) -> CompiledTheorem:
    """The theorem in force for ``settings``, ``activation``, ``model`` and ``outputs`` (read-out rows k:
    1 binary, k >= 2 the k-class theorem) as numpy callables
    (:class:`specbound.certified.compiled.CompiledTheorem` over numeric/generated.py; compiled from
    the SymPy source when a lemma constant is overridden or the register patched)."""
    return _compiled(generated, settings, activation, model, outputs)


# -- float facts about the network ----------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class NetworkFacts:
    """What the bound needs from the weights, as float64 numpy arrays.

    ``values[j, :rank_cap[j]]`` are the top singular values of matrix j (decreasing), zero beyond;
    ``proven_rank[j]`` is the rank bound used at p = 0 (``rank_cap``; 0 when a factor is exactly
    zero); ``dims[j] = m_j + n_j`` (floats).  ``structure``: which matrix feeds which theorem symbol
    (:class:`specbound.certified.evaluation.Structure`).  ``readout_norm`` is ``||w||`` (None: no
    read-out in the checkpoint).  ``device`` is where the singular values were computed.
    """

    matrices: tuple[NamedMatrix, ...]
    values: np.ndarray
    rank_cap: np.ndarray
    proven_rank: np.ndarray
    dims: np.ndarray
    structure: Structure
    width: int
    num_layers: int
    readout_norm: float | None
    variant: str = "plain"
    device: str = "cpu"

    @property
    def spectral(self) -> np.ndarray:
        return self.values[:, 0]


def dtype_name(dtype) -> str:
    """"float64" or "float32" for a torch or numpy dtype (or its name); SpecboundError otherwise."""
    name = str(dtype).replace("torch.", "")
    if name not in ("float64", "float32"):
        raise SpecboundError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    return name


def _group_key(matrix: NamedMatrix) -> tuple[int, int, int]:
    m, n = matrix.shape
    return (m, n, int(matrix.left.shape[1]) if matrix.is_factored else -1)


def singular_values(matrices: Sequence[NamedMatrix], *, dtype="float64", device="cpu") -> np.ndarray:
    """Top ``rank_cap`` singular values of every matrix, (J, max cap), float64 numpy, zero-padded.

    Computed in torch (``dtype`` float64 or float32, on ``device``: the GPU path), one batched call
    per shape group.  A factored ``W = F G`` with inner dimension r below ``min(m, n)`` is reduced
    exactly (in real arithmetic) to an r x r core: with ``F = Q_F R_F`` and ``G^T = Q_G R_G``,
    ``W = Q_F (R_F R_G^T) Q_G^T`` has the singular values of ``R_F R_G^T``.  This is both faster than
    the SVD of the dense product and free of its rounding-noise tail.
    """
    import torch  # only here: the spectra are the one heavy step, and torch is their GPU path

    tdtype = getattr(torch, dtype_name(dtype))
    device = torch.device(device)

    def stack(arrays):
        return torch.as_tensor(np.stack([np.asarray(a, dtype=np.float64) for a in arrays])).to(
            device=device, dtype=tdtype)

    caps = [m.rank_cap for m in matrices]
    out = np.zeros((len(matrices), max(caps, default=0)), dtype=np.float64)
    groups: dict[tuple[int, int, int], list[int]] = {}
    for j, mat in enumerate(matrices):
        groups.setdefault(_group_key(mat), []).append(j)
    for (m, n, r), idx in groups.items():
        k = min(m, n) if r < 0 else min(m, n, r)
        if k == 0:
            continue
        left = stack([matrices[j].left for j in idx])
        if r < 0:
            # same singular values, but LAPACK's SVD is far faster on tall matrices than wide ones,
            # and faster still on the square triangular factor of a tall one
            core = left.transpose(-1, -2) if m < n else left
            if max(m, n) >= 2 * min(m, n):
                core = torch.linalg.qr(core, mode="r")[1]
        else:
            right = stack([matrices[j].right for j in idx])
            if r < min(m, n):
                r_f = torch.linalg.qr(left, mode="r")[1]
                r_g = torch.linalg.qr(right.transpose(-1, -2), mode="r")[1]
                core = r_f @ r_g.transpose(-1, -2)
            else:
                core = left @ right
        sig = torch.linalg.svdvals(core).to("cpu", torch.float64).numpy()[:, :k]
        if any(matrices[j].scale_sq != 1 for j in idx):  # sigma(cW) = c sigma(W), c > 0
            sig = sig * np.array([matrices[j].scale for j in idx], dtype=np.float64)[:, None]
        out[np.array(idx), :k] = sig
    return out


def enclosure_midpoints(enclosures: Sequence) -> np.ndarray:
    """Float midpoints ``(lower_i + upper_i) / 2`` of certified singular-value enclosures
    (``certified.enclosure.SingularValueEnclosure``, one per matrix in canonical order), as a
    (J, max k) float64 array, zero-padded, non-increasing in each row.

    Used by the planner instead of a second float SVD: the planner only *chooses*, so any float
    stand-in for the singular values keeps the certified bound valid.
    """
    rows = [[(float(lo) + float(up)) / 2.0 for lo, up in zip(e.lower, e.upper)] for e in enclosures]
    out = np.zeros((len(rows), max((len(r) for r in rows), default=0)), dtype=np.float64)
    for j, row in enumerate(rows):
        out[j, :len(row)] = row
    return out


def _is_structurally_zero(mat: NamedMatrix) -> bool:
    # exact: a zero factor makes the exact product zero, so rank 0 is proven
    if not np.any(mat.left):
        return True
    return mat.right is not None and not np.any(mat.right)


def network_facts(weights: AnalysisWeights, *, spectra=None, dtype="float64", device="cpu") -> NetworkFacts:
    """:class:`NetworkFacts` of ``weights``; ``spectra`` (a ``numeric.spectra.Spectra``, a (J, K)
    array or tensor of decreasing singular values) is reused when given, truncated to each rank cap;
    otherwise :func:`singular_values` computes them (torch, ``dtype`` on ``device``)."""
    mats = tuple(weights.matrices)
    caps = np.array([m.rank_cap for m in mats], dtype=np.int64)
    if spectra is None:
        values = singular_values(mats, dtype=dtype, device=device)
    else:
        raw = spectra.values if isinstance(spectra, Spectra) else spectra
        if hasattr(raw, "detach"):  # a torch tensor, possibly on a GPU
            raw = raw.detach().to("cpu").double().numpy()
        raw = np.asarray(raw, dtype=np.float64)
        width = int(caps.max()) if len(mats) else 0
        values = np.zeros((len(mats), width), dtype=np.float64)
        k = min(width, raw.shape[1])
        keep = np.arange(k)[None, :] < caps[:, None]
        values[:, :k] = np.where(keep, raw[:, :k], 0.0)
    zero = np.array([_is_structurally_zero(m) for m in mats], dtype=bool)
    rank_cap = caps.astype(np.float64)
    proven = np.where(zero, 0.0, rank_cap)
    values = np.where(zero[:, None], 0.0, values)
    dims = np.array([float(sum(m.shape)) for m in mats], dtype=np.float64)
    if weights.variant not in generated.LAYOUTS:
        raise SpecboundError(f"unknown model variant {weights.variant!r}; expected one of {sorted(generated.LAYOUTS)}")
    structure = structure_of(weights, generated.LAYOUTS[weights.variant])
    w = weights.readout
    # the read-out radius: ||w||, or the largest row norm of a k-row W (proofs_notes/k_class.md (b))
    norm = None if w is None else float(np.linalg.norm(np.atleast_2d(np.asarray(w, dtype=np.float64)), axis=1).max())
    return NetworkFacts(mats, values, rank_cap, proven, dims, structure,
                        int(weights.width), int(weights.num_layers), norm, weights.variant, str(device))


BLOCK_ELEMENTS = 1 << 20
"""Elements of one block of a per-matrix grid array: the closed forms are evaluated over blocks of
matrices so that their temporaries stay a few MB whatever the number of matrices (a 48-layer model
has thousands, times the grid, times the margins)."""


def row_blocks(rows: int, per_row: int) -> list[slice]:
    """Consecutive slices of ``range(rows)`` with about :data:`BLOCK_ELEMENTS` / ``per_row`` rows each."""
    step = max(1, BLOCK_ELEMENTS // max(1, per_row))
    return [slice(a, min(rows, a + step)) for a in range(0, rows, step)]


# -- grids and radii ------------------------------------------------------------------------------

def grid_up(x, beta: Fraction | float) -> np.ndarray:
    """The least integer k with ``beta^k >= x`` (float64 decision), for x > 0; 0 where x <= 0.

    proofs_notes/theory.md section 6: k = ceil(log_beta x).  The float log is corrected by one step either
    way so that, in float64, ``beta^(k-1) < x <= beta^k``.
    """
    b = float(beta)
    x = np.asarray(x, dtype=np.float64)
    pos = x > 0
    safe = np.where(pos, x, 1.0)
    k = np.ceil(np.log(safe) / math.log(b))
    k = np.where(np.power(b, k) < safe, k + 1, k)
    k = np.where(np.power(b, k - 1) >= safe, k - 1, k)
    return np.where(pos, k, 0.0)


def grid_down(x: float, beta: Fraction) -> int:
    """The greatest integer k with ``beta^k <= x`` (exact rational comparison), for x > 0."""
    b, q = Fraction(beta), Fraction(x)
    k = math.floor(math.log(x) / math.log(float(b)))
    while b ** k > q:
        k -= 1
    while b ** (k + 1) <= q:
        k += 1
    return k


def power(beta: Fraction, k) -> np.ndarray | float:
    """``beta^k`` in float64 (k integer-valued): an array for an array k, else the rounded exact power."""
    if isinstance(k, np.ndarray):
        return np.power(float(beta), k)
    return float(Fraction(beta) ** int(k))


def schatten_table(values: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """``S_p = sum_i sigma_i^p`` for every row and every p in ``ps`` (one array op): (J, P).

    Zero singular values (padding included) contribute 0 for every p > 0.  The p = 0 column is
    *not* meaningful here (the caller uses a proven rank).
    """
    J, K = values.shape
    out = np.zeros((J, ps.shape[0]), dtype=np.float64)
    for b in row_blocks(J, K * ps.shape[0]):  # (J, K, P) at once would be GBs for a large model
        pos = values[b] > 0
        logs = np.log(np.where(pos, values[b], 1.0))
        powers = np.exp(logs[:, :, None] * ps[None, None, :])
        out[b] = np.where(pos[:, :, None], powers, 0.0).sum(axis=1)
    return out


def schatten_at(values: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """``S_{p_j}`` of row j for one p per row (p > 0): (J,)."""
    pos = values > 0
    logs = np.log(np.where(pos, values, 1.0))
    return np.where(pos, np.exp(logs * ps[:, None]), 0.0).sum(axis=1)


@dataclass(frozen=True, eq=False)
class Sensitivities:
    """Radii and loss-scale sensitivities of one rounding (float64 arrays).

    ``k_c``/``c``: spectral radii c~ = beta_c^k_c (J,); ``lipschitz``/``alpha``: (L,);
    ``gamma`` (J,); ``B_w``, ``k_w``: read-out radius; ``kappa``: (..., J) for the margins given.
    """

    k_c: np.ndarray
    c: np.ndarray
    lipschitz: np.ndarray
    alpha: np.ndarray
    gamma: np.ndarray
    B_w: float
    k_w: int
    readout: str
    kappa: np.ndarray


def readout_radius(facts: NetworkFacts, settings: BoundSettings) -> tuple[str, float, int]:
    """("trained"|"fixed", B_w, k_w).  Trained: B~_w = beta_w^ceil(log ||w||); fixed: B_w = ||w||
    (a checkpoint without read-out: a fixed unit vector, B_w = 1)."""
    if facts.readout_norm is None:
        return READOUT_FIXED, 1.0, 0
    if settings.readout == READOUT_FIXED:
        return READOUT_FIXED, facts.readout_norm, 0
    k_w = int(grid_up(np.array([facts.readout_norm]), settings.beta_w)[0])
    return READOUT_TRAINED, power(settings.beta_w, k_w), k_w


def sensitivities(
    ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, rho
) -> Sensitivities:
    """Radii c~, layer constants and kappa_j = B_w alpha_l(j) gamma_j / rho for every margin in
    ``rho`` (any shape; kappa gets shape ``rho.shape + (J,)``): the driver's
    :func:`specbound.certified.evaluation.network_sensitivities` in the numpy context."""
    beta_c = settings.base_c(facts.num_layers, facts.variant)
    k_c = grid_up(facts.spectral, beta_c)
    c = power(beta_c, k_c)
    readout, B_w, k_w = readout_radius(facts, settings)
    rho = np.asarray(rho, dtype=np.float64)
    lip, alpha, gamma, kappa = network_sensitivities(NumpyContext(ct), facts.structure, c, B_w, rho[..., None])
    return Sensitivities(k_c, c, np.asarray(lip, dtype=np.float64), alpha, gamma, B_w, k_w, readout, kappa)


# -- per-matrix pieces on the whole grid ----------------------------------------------------------

@dataclass(frozen=True, eq=False)
class GridTerms:
    """Every matrix at every grid point p (float64 arrays, shape (J, P), or (..., J, P) where the
    margin enters): Schatten powers ``S``, their radii ``k_s``/``s``, the closed-form single-scale
    terms ``ss`` (the theorem's ``ss_matrix_term`` for p > 0, ``ss_matrix_term_rank`` at p = 0;
    +inf where p > 0 is not allowed: a structurally zero matrix) and the per-matrix part of Lambda
    ``lam``."""

    ps: np.ndarray
    S: np.ndarray
    k_s: np.ndarray
    s: np.ndarray
    ss: np.ndarray
    lam: np.ndarray


def grid_terms(
    ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, sens: Sensitivities,
    ps: np.ndarray, m: int,
) -> GridTerms:
    """:class:`GridTerms` for all matrices and all of ``ps`` at once (no loop over p; blocks of
    matrices bound the temporaries)."""
    ps = np.asarray(ps, dtype=np.float64)
    S = schatten_table(facts.values, ps)
    k_s = grid_up(S, settings.beta_s)
    s = power(settings.beta_s, k_s)
    zero_p = ps == 0
    p_pos = np.where(zero_p, 1.0, ps)  # keep p = 0 out of the p > 0 formulas
    kap = sens.kappa[..., :, None]
    c, d = sens.c[:, None], facts.dims[:, None]
    n = float(settings.n)
    zero_m = (facts.proven_rank == 0) | (facts.spectral == 0)
    J, P = S.shape
    lead = sens.kappa.shape[:-1]
    ss = np.empty(lead + (J, P), dtype=np.float64)
    for b in row_blocks(J, P * max(1, int(np.prod(lead, dtype=np.int64)))):
        with np.errstate(all="ignore"):  # inf/nan where a formula does not apply; masked below
            pos = ct("ss_matrix_term", c=c[b], d=d[b], kappa=kap[..., b, :], n=n, p=p_pos, s=s[b])
            rank = ct("ss_matrix_term_rank", c=c[b], d=d[b], kappa=kap[..., b, :], n=n,
                      r_max=facts.rank_cap[b, None], s=facts.proven_rank[b, None])
        pos = np.where(zero_m[b, None], np.inf, pos)
        ss[..., b, :] = np.where(zero_p, rank, pos)
    mg = float(m)
    lam_pos = ct("lambda_matrix", k_c=sens.k_c[:, None], k_s=k_s, m_grid=mg)
    lam_rank = ct("lambda_matrix_rank", k_c=sens.k_c[:, None], m_grid=mg, r_max=facts.rank_cap[:, None])
    lam = np.where(zero_p, np.broadcast_to(lam_rank, lam_pos.shape), lam_pos)
    return GridTerms(ps, S, k_s, s, ss, lam)


def lambda_total(ct: CompiledTheorem, lam_sum, k_rho, sens: Sensitivities) -> np.ndarray:
    """Lambda(theta) from the per-matrix sum (:func:`specbound.certified.evaluation.lambda_total`)."""
    trained = sens.readout == READOUT_TRAINED
    return combiners.lambda_total(ct, trained, lam_sum, k_rho=k_rho, k_w=float(sens.k_w) if trained else None)


def ss_closed(ct: CompiledTheorem, sens: Sensitivities, T_sum, N: float, n: float, rho) -> np.ndarray:
    """SS closed form from the sum of the matrix terms (:func:`specbound.certified.evaluation.ss_closed`)."""
    return combiners.ss_closed(ct, sens.readout == READOUT_TRAINED, T_sum, B_w=sens.B_w, N=N, n=n, rho=rho)


def dd_closed(ct: CompiledTheorem, sens: Sensitivities, D_sum, N: float, n: float, rho, alpha_D,
              vartheta_w) -> np.ndarray:
    """Dudley closed form from the sum of the matrix pieces (:func:`specbound.certified.evaluation.dd_closed`)."""
    return combiners.dd_closed(ct, sens.readout == READOUT_TRAINED, D_sum, B_w=sens.B_w, N=N, n=n, rho=rho,
                               alpha_D=alpha_D, vartheta_w=vartheta_w)

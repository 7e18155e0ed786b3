"""Fast singular values and norm summaries of all covered matrices, batched with torch.

This is the *uncertified* fast path (docs/design.md section 2, "numeric"): plain floating point, no error
bounds.  Matrices of one network are grouped by shape and each group goes through a single
``torch.linalg.svdvals`` call (split only when a group would exceed a memory budget), on CPU or CUDA
with the same code.

Factored matrices (QK = W_Q W_K^T, V_tilde = W_V W_O) are first multiplied out in float64.  Their
exact rank is at most the head dimension ``r``; the ``min(m, n) - r`` trailing singular values of
the float64 product are rounding noise of size about ``eps * sigma_1`` (not zeros).  This mirrors
the companion code of the paper, which takes the SVD of the dense product; the certified layer uses
the factored structure instead and knows those values are exactly 0.

Precision.  ``dtype=torch.float64`` (default) is what the proxies and every comparison use.
``dtype=torch.float32`` runs the SVD on the float64 matrix rounded to float32; by Weyl's inequality
plus the backward stability of the SVD each singular value is then within about
``1e-5 * sigma_1`` of the float64 one for matrices up to a few thousand rows (stated tolerance
``FLOAT32_SVD_REL_TOL``, relative to sigma_1).  The Frobenius, (2,1) and (1,1) norms are always taken from
the float64 entries.  The numerical rank's 1e-10 threshold is meant for float64 values: float32
rounding noise (~1e-7 * sigma_1) lies above it, so with float32 the rank of a factored product
reads as full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from specbound.matrices import AnalysisWeights, NamedMatrix

FLOAT32_SVD_REL_TOL = 1e-5
"""Stated tolerance of the float32 path: ``|sigma_i(float32) - sigma_i| <= FLOAT32_SVD_REL_TOL * sigma_1``."""

RANK_RTOL = 1e-10
"""Relative threshold of the numerical rank (docs/design.md section 6): ``sigma_i > RANK_RTOL * max(k,1) * max(sigma_1, 1)``."""

DEFAULT_BATCH_BYTES = 1 << 30
"""Largest float64 stack of dense matrices handed to one svdvals call (1 GiB)."""


@dataclass(frozen=True, eq=False)
class Spectra:
    """Singular values of every matrix of a network, zero-padded into one tensor.

    ``values[j, :counts[j]]`` are the singular values of ``matrices[j]`` in decreasing order
    (``counts[j] = min(rows, cols)``); ``values[j, counts[j]:]`` is padding and is exactly 0.
    ``frobenius``, ``norm_21`` (sum of column l2 norms) and ``norm_11`` (sum of |entries|) come from
    the float64 entries.  All tensors are float64 (``counts`` int64) on ``values.device``.
    """

    matrices: tuple[NamedMatrix, ...]
    values: torch.Tensor
    counts: torch.Tensor
    frobenius: torch.Tensor
    norm_21: torch.Tensor
    norm_11: torch.Tensor

    def __len__(self) -> int:
        return len(self.matrices)

    def sigma(self, j: int) -> np.ndarray:
        """The singular values of matrix ``j`` (without padding) as a float64 numpy array."""
        return self.values[j, : int(self.counts[j])].cpu().numpy()

    @property
    def spectral(self) -> torch.Tensor:
        """Spectral norms ``sigma_1`` (0 for an empty matrix)."""
        return self.values[:, 0] if self.values.shape[1] else torch.zeros_like(self.frobenius)

    @property
    def nuclear(self) -> torch.Tensor:
        return self.values.sum(dim=1)


def _as_matrices(weights: AnalysisWeights | Sequence[NamedMatrix]) -> tuple[NamedMatrix, ...]:
    if isinstance(weights, AnalysisWeights):
        return tuple(weights.matrices)
    return tuple(weights)


def _group_key(matrix: NamedMatrix) -> tuple[int, int, int]:
    # Factors are stacked, so a group must share the inner dimension too (-1 marks dense).
    m, n = matrix.shape
    return (m, n, int(matrix.left.shape[1]) if matrix.is_factored else -1)


def _dense_stack(chunk: Sequence[NamedMatrix], device: torch.device) -> torch.Tensor:
    """float64 values of the matrices of one chunk, shape (B, m, n), on ``device``."""
    left = torch.stack([torch.as_tensor(np.asarray(c.left), dtype=torch.float64) for c in chunk])
    left = left.to(device)
    if chunk[0].is_factored:
        right = torch.stack([torch.as_tensor(np.asarray(c.right), dtype=torch.float64) for c in chunk])
        left = torch.matmul(left, right.to(device))
    if any(c.scale_sq != 1 for c in chunk):  # a score scale not folded into the factors (float path)
        left = left * torch.tensor([c.scale for c in chunk], dtype=torch.float64, device=device)[:, None, None]
    return left


def compute_spectra(
    weights: AnalysisWeights | Sequence[NamedMatrix],
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    progress=None,
    max_batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> Spectra:
    """Singular values and entry norms of all matrices, one ``svdvals`` call per shape group.

    ``progress`` (optional) gets ``advance(k)`` after each batch of ``k`` matrices.  The result is
    float64 on ``device`` whatever ``dtype`` the SVD ran in (see the module note on float32).
    """
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    device = torch.device(device)
    matrices = _as_matrices(weights)
    count = len(matrices)
    width = max((min(m.shape) for m in matrices), default=0)
    values = torch.zeros((count, width), dtype=torch.float64, device=device)
    frob = torch.zeros(count, dtype=torch.float64, device=device)
    n21 = torch.zeros_like(frob)
    n11 = torch.zeros_like(frob)

    groups: dict[tuple[int, int, int], list[int]] = {}
    for j, matrix in enumerate(matrices):
        groups.setdefault(_group_key(matrix), []).append(j)

    for (m, n, _), members in groups.items():
        per_matrix = max(1, m * n * 8)
        step = max(1, max_batch_bytes // per_matrix)
        for start in range(0, len(members), step):
            idx = members[start : start + step]
            dense = _dense_stack([matrices[j] for j in idx], device)
            where = torch.tensor(idx, device=device)
            k = min(m, n)
            if k:
                sig = torch.linalg.svdvals(dense.to(dtype)).to(torch.float64)
                values[where, :k] = sig
            frob[where] = torch.linalg.matrix_norm(dense, ord="fro")
            n21[where] = torch.linalg.vector_norm(dense, dim=-2).sum(dim=-1)
            n11[where] = dense.abs().sum(dim=(-2, -1))
            del dense
            if progress is not None:
                progress.advance(len(idx))

    counts = torch.tensor([min(m.shape) for m in matrices], dtype=torch.int64, device=device)
    return Spectra(matrices, values, counts, frob, n21, n11)


def numerical_rank(values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``#{i : sigma_i > 1e-10 * max(k,1) * max(sigma_1, 1)}`` per row (docs/design.md section 6), int64.

    ``values`` is (J, K) zero-padded as in :class:`Spectra`; padding never counts because the
    threshold is positive.
    """
    if values.shape[1] == 0:
        return torch.zeros(values.shape[0], dtype=torch.int64, device=values.device)
    k = counts.clamp(min=1).to(values.dtype)
    threshold = RANK_RTOL * k * values[:, 0].clamp(min=1.0)
    return (values > threshold[:, None]).sum(dim=1)


def schatten_powers(values: torch.Tensor, counts: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    """``S_p = sum_i sigma_i^p`` for every row of ``values`` and every ``p`` in ``ps``: shape (J, P).

    One tensor operation over the whole grid.  For ``p > 0`` zero singular values (and padding)
    contribute ``0^p = 0``; for ``p = 0`` the entry is the numerical rank (the paper's ``S_0``),
    not the count of nonzero values, because rounding noise is never exactly zero.
    """
    ps = ps.to(device=values.device, dtype=values.dtype)
    positive = (values > 0)[:, :, None]
    powers = torch.where(positive, values[:, :, None] ** ps[None, None, :], values.new_zeros(()))
    sums = powers.sum(dim=1)
    rank = numerical_rank(values, counts).to(values.dtype)
    return torch.where((ps == 0)[None, :], rank[:, None], sums)


@dataclass(frozen=True)
class NormSummary:
    """Norms of one matrix (float64 fast path; not certified).

    ``stable_rank = ||W||_F^2 / ||W||_2^2`` (0 for the zero matrix); ``numerical_rank`` uses the
    docs/design.md section 6 threshold.
    """

    name: str
    layer: int
    head: int
    type: str
    rows: int
    cols: int
    spectral: float
    frobenius: float
    nuclear: float
    norm_21: float
    norm_11: float
    numerical_rank: int
    stable_rank: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def norm_summaries(spectra: Spectra) -> tuple[NormSummary, ...]:
    """One :class:`NormSummary` per matrix, in the order of ``spectra.matrices``."""
    spectral = spectra.spectral
    stable = torch.where(
        spectral > 0, spectra.frobenius**2 / torch.where(spectral > 0, spectral, 1.0) ** 2, 0.0
    )
    columns = {
        "spectral": spectral.tolist(),
        "frobenius": spectra.frobenius.tolist(),
        "nuclear": spectra.nuclear.tolist(),
        "norm_21": spectra.norm_21.tolist(),
        "norm_11": spectra.norm_11.tolist(),
        "numerical_rank": numerical_rank(spectra.values, spectra.counts).tolist(),
        "stable_rank": stable.tolist(),
    }
    out = []
    for j, matrix in enumerate(spectra.matrices):
        rows, cols = matrix.shape
        out.append(
            NormSummary(
                name=matrix.name,
                layer=matrix.layer,
                head=matrix.head,
                type=matrix.kind,
                rows=rows,
                cols=cols,
                **{key: col[j] for key, col in columns.items()},
            )
        )
    return tuple(out)


def resolve_device(name: str | torch.device) -> torch.device:
    """``torch.device(name)``, refusing (ValueError, one line) a CUDA device that is not present."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {name!r} ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    return device

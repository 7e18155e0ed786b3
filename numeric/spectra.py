"""Fast singular values and norm summaries of all covered matrices: numpy on the CPU, torch on request.

This is the *uncertified* fast path (docs/design.md section 2, "numeric"): plain floating point, no error
bounds.  Two backends compute the same values: :func:`compute_spectra_numpy` (the CPU default of
``specbound spectra`` / ``proxies``; no torch import) forms each dense float64 matrix and takes its
singular values with LAPACK, a few matrices at a time so that peak memory stays near one matrix;
:func:`compute_spectra` (torch, for ``--device cuda``) groups matrices by shape and hands each group to
one ``torch.linalg.svdvals`` call (split only when a group would exceed a memory budget).  The
helpers below accept the arrays of either backend.

Factored matrices (QK = W_Q W_K^T, V_tilde = W_V W_O) have exact rank at most their inner (head)
dimension ``r``.  Their singular values are taken one of two ways (``products``, :data:`PRODUCTS`):
``"dense"`` multiplies them out in float64 and takes the SVD of the product, whose ``min(m, n) - r``
trailing values are rounding noise of size about ``eps * sigma_1`` (not zeros).  This mirrors the
companion code of the paper, whose proxies are defined on that computation (at small Schatten
exponents the noise tail counts), so the proxies use it.  ``"factored"`` (what ``spectra`` uses)
takes ``R_L`` and ``R_R`` from QR factorisations of the left factor and of the right factor's
transpose and the SVD of the small core ``R_L R_R^T``: the same leading values up to rounding (both
routes are backward stable with errors of order ``eps ||L|| ||R||``), exact zeros beyond ``r``, and
O(m r^2) work instead of O(m n min(m, n)).  The entry norms are taken from the dense product either way.

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

from specbound.matrices import AnalysisWeights, NamedMatrix

FLOAT32_SVD_REL_TOL = 1e-5
"""Stated tolerance of the float32 path: ``|sigma_i(float32) - sigma_i| <= FLOAT32_SVD_REL_TOL * sigma_1``."""

RANK_RTOL = 1e-10
"""Relative threshold of the numerical rank (docs/design.md section 6): ``sigma_i > RANK_RTOL * max(k,1) * max(sigma_1, 1)``."""

DEFAULT_BATCH_BYTES = 1 << 30
"""Largest float64 stack of dense matrices handed to one svdvals call (1 GiB)."""

NUMPY_BATCH_BYTES = 1 << 22
"""Largest float64 stack of dense matrices formed at once by the numpy backend (4 MiB): LAPACK
loops over a stack anyway, so small chunks cost no time and keep peak memory near one matrix."""

PRODUCTS = ("dense", "factored")
"""How the singular values of a factored matrix are taken (module note): the SVD of the float64
product, or of the r x r core of its factors (used only where ``r < min(m, n)``; else dense)."""

SCHATTEN_BLOCK_ELEMENTS = 1 << 18
"""Entries of the (rows, K, P) table of powers :func:`schatten_powers` forms at once (2 MiB)."""


@dataclass(frozen=True, eq=False)
class Spectra:
    """Singular values of every matrix of a network, zero-padded into one tensor.

    ``values[j, :counts[j]]`` are the singular values of ``matrices[j]`` in decreasing order
    (``counts[j] = min(rows, cols)``); ``values[j, counts[j]:]`` is padding and is exactly 0.
    ``frobenius``, ``norm_21`` (sum of column l2 norms) and ``norm_11`` (sum of |entries|) come from
    the float64 entries.  All arrays are float64 (``counts`` int64): numpy arrays from
    :func:`compute_spectra_numpy`, torch tensors on ``values.device`` from :func:`compute_spectra`.
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
        row = self.values[j, : int(self.counts[j])]
        return row if isinstance(row, np.ndarray) else row.cpu().numpy()

    @property
    def spectral(self):
        """Spectral norms ``sigma_1`` (0 for an empty matrix)."""
        return self.values[:, 0] if self.values.shape[1] else self.frobenius * 0

    @property
    def nuclear(self):
        return self.values.sum(1)


def _as_matrices(weights: AnalysisWeights | Sequence[NamedMatrix]) -> tuple[NamedMatrix, ...]:
    if isinstance(weights, AnalysisWeights):
        return tuple(weights.matrices)
    return tuple(weights)


def _group_key(matrix: NamedMatrix) -> tuple[int, int, int]:
    # Factors are stacked, so a group must share the inner dimension too (-1 marks dense).
    m, n = matrix.shape
    return (m, n, int(matrix.left.shape[1]) if matrix.is_factored else -1)


def _dense_stack(chunk: Sequence[NamedMatrix], device) -> "torch.Tensor":
    """float64 values of the matrices of one chunk, shape (B, m, n), on ``device``."""
    import torch

    left = torch.stack([torch.as_tensor(np.asarray(c.left), dtype=torch.float64) for c in chunk])
    left = left.to(device)
    if chunk[0].is_factored:
        right = torch.stack([torch.as_tensor(np.asarray(c.right), dtype=torch.float64) for c in chunk])
        left = torch.matmul(left, right.to(device))
    if any(c.scale_sq != 1 for c in chunk):  # a score scale not folded into the factors (float path)
        left = left * torch.tensor([c.scale for c in chunk], dtype=torch.float64, device=device)[:, None, None]
    return left


def _groups(matrices: Sequence[NamedMatrix]) -> dict[tuple[int, int, int], list[int]]:
    groups: dict[tuple[int, int, int], list[int]] = {}
    for j, matrix in enumerate(matrices):
        groups.setdefault(_group_key(matrix), []).append(j)
    return groups


def _check_products(products: str) -> None:
    if products not in PRODUCTS:
        raise ValueError(f"products must be one of {', '.join(PRODUCTS)}, got {products!r}")


def _uses_core(matrix: NamedMatrix, products: str) -> bool:
    """Whether ``matrix``'s singular values come from its factors' core (``r < min(m, n)``)."""
    return products == "factored" and matrix.is_factored and int(matrix.left.shape[1]) < min(matrix.shape)


def _core_values(chunk: Sequence[NamedMatrix], dtype: str) -> np.ndarray:
    """(B, r) singular values of the factored matrices ``chunk`` (same shapes, inner dimension
    ``r < min(m, n)``) from the cores ``R_L R_R^T`` of ``L = Q_L R_L`` and ``R^T = Q_R R_R``: ``L R =
    Q_L (R_L R_R^T) Q_R^T`` with orthonormal columns in ``Q_L``, ``Q_R``, so the nonzero singular
    values of ``L R`` are those of the r x r core; a score scale multiplies them."""
    rl = np.linalg.qr(_stacked([c.left for c in chunk]), mode="r")
    rr = np.linalg.qr(np.swapaxes(_stacked([c.right for c in chunk]), -1, -2), mode="r")
    core = rl @ np.swapaxes(rr, -1, -2)
    values = np.linalg.svd(core if dtype == "float64" else core.astype(dtype), compute_uv=False)
    values = np.asarray(values, dtype=np.float64)
    if any(c.scale_sq != 1 for c in chunk):  # a score scale not folded into the factors (float path)
        values = values * np.array([c.scale for c in chunk], dtype=np.float64)[:, None]
    return values


def compute_spectra_numpy(
    weights: AnalysisWeights | Sequence[NamedMatrix],
    *,
    dtype: str = "float64",
    progress=None,
    max_batch_bytes: int = NUMPY_BATCH_BYTES,
    products: str = "dense",
) -> Spectra:
    """:func:`compute_spectra` with numpy on the CPU (no torch): the same values, numpy arrays.

    Each dense float64 matrix (factored ones multiplied out) goes through LAPACK's
    ``np.linalg.svd(..., compute_uv=False)``; ``dtype="float32"`` runs the SVD on the float64
    matrix rounded to float32 (module note).  With ``products="factored"`` a factored matrix of inner
    dimension ``r < min(m, n)`` takes its values from its factors' r x r core instead (module note;
    values beyond ``r`` exactly 0).  Norms come from the float64 entries.
    """
    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    _check_products(products)
    matrices = _as_matrices(weights)
    count = len(matrices)
    width = max((min(m.shape) for m in matrices), default=0)
    values = np.zeros((count, width), dtype=np.float64)
    frob = np.zeros(count, dtype=np.float64)
    n21 = np.zeros_like(frob)
    n11 = np.zeros_like(frob)
    for (m, n, _), members in _groups(matrices).items():
        step = max(1, max_batch_bytes // max(1, m * n * 8))
        k = min(m, n)
        for start in range(0, len(members), step):
            idx = members[start : start + step]
            chunk = [matrices[j] for j in idx]
            dense = _dense_chunk(chunk)
            if k and _uses_core(chunk[0], products):
                core = _core_values(chunk, dtype)
                values[idx, : core.shape[1]] = core
            elif k:
                values[idx, :k] = np.linalg.svd(dense if dtype == "float64" else dense.astype(dtype),
                                                compute_uv=False)
            frob[idx], n21[idx], n11[idx] = _entry_norms(dense)
            del dense
            if progress is not None:
                progress.advance(len(idx))
    counts = np.array([min(m.shape) for m in matrices], dtype=np.int64)
    return Spectra(matrices, values, counts, frob, n21, n11)


def _stacked(arrays: list) -> np.ndarray:
    """float64 stack (B, m, n) of ``arrays``; one float64 array is a view, not a copy (the large
    feed-forward matrices come one per chunk)."""
    if len(arrays) == 1:
        return np.ascontiguousarray(arrays[0], dtype=np.float64)[None]
    return np.stack([np.asarray(a, dtype=np.float64) for a in arrays])


def _dense_chunk(chunk: Sequence[NamedMatrix]) -> np.ndarray:
    """The float64 values of a chunk of same-shape matrices, (B, m, n): factored ones multiplied
    out, a left-over score scale applied (in place on a product, which is this function's own)."""
    dense = _stacked([c.left for c in chunk])
    scale = [c.scale for c in chunk] if any(c.scale_sq != 1 for c in chunk) else None
    if chunk[0].is_factored:
        dense = dense @ _stacked([c.right for c in chunk])
        if scale is not None:  # a score scale not folded into the factors (float path)
            dense *= np.array(scale, dtype=np.float64)[:, None, None]
    elif scale is not None:
        dense = dense * np.array(scale, dtype=np.float64)[:, None, None]
    return dense


def _entry_norms(dense: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Frobenius, (2,1), (1,1)) norms of each matrix of the stack ``dense`` (B, m, n): one scratch
    array for the squares and then the absolute values (same reductions, same values)."""
    scratch = np.multiply(dense, dense)
    frob = np.sqrt(scratch.sum(axis=(-2, -1)))
    n21 = np.sqrt(scratch.sum(axis=-2)).sum(axis=-1)
    n11 = np.abs(dense, out=scratch).sum(axis=(-2, -1))
    return frob, n21, n11


def compute_spectra(
    weights: AnalysisWeights | Sequence[NamedMatrix],
    *,
    dtype=None,
    device="cpu",
    progress=None,
    max_batch_bytes: int = DEFAULT_BATCH_BYTES,
    products: str = "dense",
) -> Spectra:
    """Singular values and entry norms of all matrices with torch, one ``svdvals`` call per shape group.

    ``dtype``: ``torch.float64`` (None) or ``torch.float32``.  ``progress`` (optional) gets
    ``advance(k)`` after each batch of ``k`` matrices.  The result is float64 on ``device`` whatever
    ``dtype`` the SVD ran in (see the module note on float32).  ``products``: as in
    :func:`compute_spectra_numpy`.
    """
    import torch

    _check_products(products)

    dtype = torch.float64 if dtype is None else dtype
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

    for (m, n, _), members in _groups(matrices).items():
        per_matrix = max(1, m * n * 8)
        step = max(1, max_batch_bytes // per_matrix)
        for start in range(0, len(members), step):
            idx = members[start : start + step]
            chunk = [matrices[j] for j in idx]
            dense = _dense_stack(chunk, device)
            where = torch.tensor(idx, device=device)
            k = min(m, n)
            if k and _uses_core(chunk[0], products):
                sig = _core_values_torch(chunk, dtype, device)
                values[where, : sig.shape[1]] = sig
            elif k:
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


def _core_values_torch(chunk: Sequence[NamedMatrix], dtype, device) -> "torch.Tensor":
    """:func:`_core_values` with torch on ``device`` (float64 result)."""
    import torch

    left = torch.stack([torch.as_tensor(np.asarray(c.left), dtype=torch.float64) for c in chunk]).to(device)
    right = torch.stack([torch.as_tensor(np.asarray(c.right), dtype=torch.float64) for c in chunk]).to(device)
    rl = torch.linalg.qr(left, mode="r").R
    rr = torch.linalg.qr(right.transpose(-1, -2), mode="r").R
    sig = torch.linalg.svdvals((rl @ rr.transpose(-1, -2)).to(dtype)).to(torch.float64)
    if any(c.scale_sq != 1 for c in chunk):
        sig = sig * torch.tensor([c.scale for c in chunk], dtype=torch.float64, device=device)[:, None]
    return sig


def numerical_rank(values, counts):
    """``#{i : sigma_i > 1e-10 * max(k,1) * max(sigma_1, 1)}`` per row (docs/design.md section 6), int64.

    ``values`` is (J, K) zero-padded as in :class:`Spectra`; padding never counts because the
    threshold is positive.  numpy in, numpy out; torch in, torch out.
    """
    if isinstance(values, np.ndarray):
        if values.shape[1] == 0:
            return np.zeros(values.shape[0], dtype=np.int64)
        k = np.maximum(np.asarray(counts), 1).astype(values.dtype)
        threshold = RANK_RTOL * k * np.maximum(values[:, 0], 1.0)
        return (values > threshold[:, None]).sum(axis=1).astype(np.int64)
    import torch

    if values.shape[1] == 0:
        return torch.zeros(values.shape[0], dtype=torch.int64, device=values.device)
    k = counts.clamp(min=1).to(values.dtype)
    threshold = RANK_RTOL * k * values[:, 0].clamp(min=1.0)
    return (values > threshold[:, None]).sum(dim=1)


def schatten_powers(values, counts, ps):
    """``S_p = sum_i sigma_i^p`` for every row of ``values`` and every ``p`` in ``ps``: shape (J, P).

    One tensor operation over the whole grid.  For ``p > 0`` zero singular values (and padding)
    contribute ``0^p = 0``; for ``p = 0`` the entry is the numerical rank (the paper's ``S_0``),
    not the count of nonzero values, because rounding noise is never exactly zero.  numpy in,
    numpy out; torch in, torch out.
    """
    if isinstance(values, np.ndarray):
        ps = np.asarray(ps, dtype=values.dtype)
        sums = np.empty((values.shape[0], ps.size), dtype=values.dtype)
        # a few rows at a time: the (rows, K, P) table of powers stays small (cache, no page faults);
        # each row's sums are the same reductions as over the whole table
        step = max(1, SCHATTEN_BLOCK_ELEMENTS // max(1, values.shape[1] * ps.size))
        for start in range(0, values.shape[0], step):
            block = values[start : start + step, :, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                powers = np.where(block > 0, block ** ps[None, None, :], 0.0)
            sums[start : start + step] = powers.sum(axis=1)
        rank = numerical_rank(values, counts).astype(values.dtype)
        return np.where((ps == 0)[None, :], rank[:, None], sums)
    import torch

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
    kind: str
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
    if isinstance(spectral, np.ndarray):
        safe = np.where(spectral > 0, spectral, 1.0)
        stable = np.where(spectral > 0, spectra.frobenius**2 / safe**2, 0.0)
    else:
        import torch

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
                kind=matrix.kind,
                rows=rows,
                cols=cols,
                **{key: col[j] for key, col in columns.items()},
            )
        )
    return tuple(out)


def spectra_on(weights, *, device: str = "cpu", dtype: str = "float64", progress=None,
               products: str = "dense") -> Spectra:
    """The spectra of ``weights`` as the commands compute them: numpy for ``device="cpu"`` (torch is
    not imported), torch on any other device (checked by :func:`resolve_device`); ``products`` as in
    :func:`compute_spectra_numpy` (``spectra``: "factored"; ``proxies``: "dense")."""
    if str(device) == "cpu":
        return compute_spectra_numpy(weights, dtype=dtype, progress=progress, products=products)
    import torch

    return compute_spectra(weights, dtype=getattr(torch, dtype), device=resolve_device(device), progress=progress,
                           products=products)


def resolve_device(name):
    """``torch.device(name)``, refusing (ValueError, one line) a CUDA device that is not present."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {name!r} ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    return device

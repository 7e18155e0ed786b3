"""Building blocks of the torch bound (proofs_notes/theory.md section 7), shared by the evaluation and the planner.

The compiled theorem (:class:`CompiledTheorem`), the network facts fed to it (:class:`NetworkFacts`:
singular values, structural rank caps, layer indices), grid rounding onto ``beta^k``, Schatten
tables, the sensitivities (Lipschitz products, alpha, kappa) and the combiners of Lambda, SS and DD.
Every formula is a field of the assembled theorem compiled by :mod:`specbound.derivation.backends`;
this module only feeds and combines their values.  It imports neither the evaluation
(:mod:`numeric.bound`) nor the planner (:mod:`numeric.planner`): both build on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Sequence

import numpy as np
import sympy as sp
import torch

from specbound.derivation.assembly import GROUP_SUMMAND, kv_group, layout
from specbound.derivation.backends import compile_expr
from specbound.derivation.theorem import REGISTRY, Theorem, readout_free_forms
from specbound.errors import SpecboundError
from specbound.matrices import AnalysisWeights, NamedMatrix
from specbound.plan import BoundSettings


def as_margins(margins) -> np.ndarray | None:
    """Float margins y_i f(X_i) as a flat float64 array (None stays None); empty or non-finite
    input is a SpecboundError."""
    if margins is None:
        return None
    arr = np.asarray(margins, dtype=np.float64).reshape(-1)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise SpecboundError("margins must be a non-empty array of finite numbers")
    return arr


# -- the theorem, compiled ------------------------------------------------------------------------

_COMPILED: dict = {}


class CompiledTheorem:
    """Torch callables of the theorem's fields, called by argument *name*.

    ``ct("kappa", B_w=..., alpha=..., gamma=..., rho=...)`` evaluates the field ``kappa``;
    tensors broadcast.  Compilation happens once per (theorem, field, dtype).
    """

    def __init__(self, theorem: Theorem, dtype: torch.dtype = torch.float64):
        self.theorem = theorem
        self.dtype = dtype

    def expression(self, name: str) -> sp.Expr:
        if name.startswith("gamma_"):
            return self.theorem.gamma[name[len("gamma_"):]]
        extra = _extra_expressions(self.theorem)
        if name in extra:
            return extra[name]
        return getattr(self.theorem, name)

    def fn(self, name: str):
        key = (id(self.theorem), name, self.dtype)
        hit = _COMPILED.get(key)
        if hit is None or hit[0] is not self.theorem:
            hit = (self.theorem, compile_expr(self.expression(name), "torch", dtype=self.dtype))
            _COMPILED[key] = hit
        return hit[1]

    def __call__(self, name: str, **values) -> torch.Tensor:
        fn = self.fn(name)
        try:
            ordered = [values[str(a)] for a in fn.args]
        except KeyError as exc:
            raise TypeError(f"{name} needs {[str(a) for a in fn.args]}, missing {exc}") from None
        return fn(*ordered)


_EXTRA: dict = {}


def _extra_expressions(theorem: Theorem) -> Mapping[str, sp.Expr]:
    """Expressions composed from register objects (not retyped): the balance point ``u_star`` of a
    closed-form term with ``b = c_M a_j``, and the ramp loss."""
    hit = _EXTRA.get(id(theorem))
    if hit is not None and hit[0] is theorem:
        return hit[1]
    bal = REGISTRY["balance_single_scale"].constants
    (b_sym,) = bal["u_star"].free_symbols - {sp.Symbol("p", positive=True)}
    massart = REGISTRY["massart_single_scale"].constants
    coeff = massart["coefficient" if theorem.variants["massart"] == "centred" else "coefficient_uncentred"]
    ramp = REGISTRY["ramp_loss_cover"].constants["ramp"]
    # a fixed read-out's combiners: the theorem's own fields less the read-out summand, derived
    # once in the certified layer (imported so both layers use the same expressions)


    free = readout_free_forms(theorem)
    out = {
        "u_star": bal["u_star"].xreplace({b_sym: coeff * theorem.a_matrix}),
        "ramp": ramp,
        "ss_closed_fixed": free["ss_closed"],
        "dd_closed_fixed": free["dd_closed"],
        "Lambda_total_fixed": free["Lambda_total"],
    }
    _EXTRA[id(theorem)] = (theorem, out)
    return out


# -- float facts about the network ----------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class NetworkFacts:
    """What the bound needs from the weights, as float tensors on one device.

    ``values[j, :rank_cap[j]]`` are the top singular values of matrix j (decreasing), zero beyond;
    ``proven_rank[j]`` is the rank bound used at p = 0 (``rank_cap``; 0 when a factor is exactly
    zero); ``dims[j] = m_j + n_j``.  ``heads`` maps each head symbol of the variant's layout
    (:func:`specbound.derivation.assembly.layout`) to the (L, H) row indices of the matrix feeding
    it (for the shared key matrix: the head's group), ``layers`` each layer symbol to (L,) rows;
    ``group`` (H,) is the key/value group of each head.  ``readout_norm`` is ``||w||`` (None: no
    read-out in the checkpoint).
    """

    matrices: tuple[NamedMatrix, ...]
    values: torch.Tensor
    rank_cap: torch.Tensor
    proven_rank: torch.Tensor
    dims: torch.Tensor
    heads: dict
    layers: dict
    group: torch.Tensor
    width: int
    num_layers: int
    readout_norm: float | None
    variant: str = "plain"

    @property
    def spectral(self) -> torch.Tensor:
        return self.values[:, 0]

    @property
    def device(self) -> torch.device:
        return self.values.device


def _group_key(matrix: NamedMatrix) -> tuple[int, int, int]:
    m, n = matrix.shape
    return (m, n, int(matrix.left.shape[1]) if matrix.is_factored else -1)


def _stack(arrays: Sequence[np.ndarray], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.as_tensor(np.stack([np.asarray(a, dtype=np.float64) for a in arrays])).to(
        device=device, dtype=dtype)


def singular_values(
    matrices: Sequence[NamedMatrix], *, dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Top ``rank_cap`` singular values of every matrix, (J, max cap), float64, zero-padded.

    One batched call per shape group.  A factored ``W = F G`` with inner dimension r below
    ``min(m, n)`` is reduced exactly (in real arithmetic) to an r x r core: with ``F = Q_F R_F`` and
    ``G^T = Q_G R_G``, ``W = Q_F (R_F R_G^T) Q_G^T`` has the singular values of ``R_F R_G^T``.  This
    is both faster than the SVD of the dense product and free of its rounding-noise tail.
    """
    device = torch.device(device)
    caps = [m.rank_cap for m in matrices]
    out = torch.zeros((len(matrices), max(caps, default=0)), dtype=torch.float64, device=device)
    groups: dict[tuple[int, int, int], list[int]] = {}
    for j, mat in enumerate(matrices):
        groups.setdefault(_group_key(mat), []).append(j)
    for (m, n, r), idx in groups.items():
        k = min(m, n) if r < 0 else min(m, n, r)
        if k == 0:
            continue
        left = _stack([matrices[j].left for j in idx], device, dtype)
        if r < 0:
            # same singular values, but LAPACK's SVD is far faster on tall matrices than wide ones,
            # and faster still on the square triangular factor of a tall one
            core = left.transpose(-1, -2) if m < n else left
            if max(m, n) >= 2 * min(m, n):
                core = torch.linalg.qr(core, mode="r")[1]
        else:
            right = _stack([matrices[j].right for j in idx], device, dtype)
            if r < min(m, n):
                r_f = torch.linalg.qr(left, mode="r")[1]
                r_g = torch.linalg.qr(right.transpose(-1, -2), mode="r")[1]
                core = r_f @ r_g.transpose(-1, -2)
            else:
                core = left @ right
        sig = torch.linalg.svdvals(core).to(torch.float64)[:, :k]
        if any(matrices[j].scale_sq != 1 for j in idx):  # sigma(cW) = c sigma(W), c > 0
            sig = sig * torch.tensor([matrices[j].scale for j in idx], dtype=torch.float64,
                                     device=sig.device)[:, None]
        out[torch.tensor(idx, device=device), :k] = sig
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


def _layer_index(weights: AnalysisWeights, matrices: Sequence[NamedMatrix], device):
    """Row indices feeding the variant's head and layer symbols, and the head -> group map."""
    where = {(m.layer, m.kind, m.head): j for j, m in enumerate(matrices)}
    lay = layout(weights.variant)
    H, L = weights.num_heads, weights.num_layers
    group = [kv_group(h, H, weights.num_kv_heads) for h in range(H)]
    as_t = lambda x: torch.tensor(x, dtype=torch.int64, device=device)  # noqa: E731
    try:
        heads = {sym: as_t([[where[(l, kind, group[h] if kind == lay.shared else h)] for h in range(H)]
                            for l in range(L)]) for sym, kind in lay.head.items()}
        layers = {sym: as_t([where[(l, kind, -1)] for l in range(L)]) for sym, kind in lay.layer.items()}
    except KeyError as exc:
        raise SpecboundError(f"weights lack matrix (layer, type, head) = {exc.args[0]}") from None
    return heads, layers, as_t(group)


def network_facts(
    weights: AnalysisWeights, *, spectra=None, dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
) -> NetworkFacts:
    """:class:`NetworkFacts` of ``weights``; ``spectra`` (a ``numeric.spectra.Spectra`` or a (J, K)
    tensor of decreasing singular values) is reused when given, truncated to each rank cap."""
    device = torch.device(device)
    mats = tuple(weights.matrices)
    caps = torch.tensor([m.rank_cap for m in mats], dtype=torch.int64, device=device)
    if spectra is None:
        values = singular_values(mats, dtype=dtype, device=device)
    else:
        raw = spectra if isinstance(spectra, (torch.Tensor, np.ndarray)) else spectra.values
        raw = torch.as_tensor(raw, dtype=torch.float64).to(device)
        width = int(caps.max()) if len(mats) else 0
        values = torch.zeros((len(mats), width), dtype=torch.float64, device=device)
        k = min(width, raw.shape[1])
        keep = torch.arange(k, device=device)[None, :] < caps[:, None]
        values[:, :k] = torch.where(keep, raw[:, :k], 0.0)
    zero = torch.tensor([_is_structurally_zero(m) for m in mats], device=device)
    rank_cap = caps.to(torch.float64)
    proven = torch.where(zero, 0.0, rank_cap)
    values = torch.where(zero[:, None], 0.0, values)
    dims = torch.tensor([float(sum(m.shape)) for m in mats], dtype=torch.float64, device=device)
    heads, layers, group = _layer_index(weights, mats, device)
    w = weights.readout
    norm = None if w is None else float(np.linalg.norm(np.asarray(w, dtype=np.float64)))
    return NetworkFacts(mats, values, rank_cap, proven, dims, heads, layers, group,
                        int(weights.width), int(weights.num_layers), norm, weights.variant)


# -- grids and radii ------------------------------------------------------------------------------

def grid_up(x: torch.Tensor, beta: Fraction | float) -> torch.Tensor:
    """The least integer k with ``beta^k >= x`` (float64 decision), for x > 0; 0 where x <= 0.

    proofs_notes/theory.md section 6: k = ceil(log_beta x).  The float log is corrected by one step either
    way so that, in float64, ``beta^(k-1) < x <= beta^k``.
    """
    b = float(beta)
    pos = x > 0
    safe = torch.where(pos, x, torch.ones_like(x))
    k = torch.ceil(torch.log(safe) / math.log(b))
    k = torch.where(torch.pow(b, k) < safe, k + 1, k)
    k = torch.where(torch.pow(b, k - 1) >= safe, k - 1, k)
    return torch.where(pos, k, torch.zeros_like(k))


def grid_down(x: float, beta: Fraction) -> int:
    """The greatest integer k with ``beta^k <= x`` (exact rational comparison), for x > 0."""
    b, q = Fraction(beta), Fraction(x)
    k = math.floor(math.log(x) / math.log(float(b)))
    while b ** k > q:
        k -= 1
    while b ** (k + 1) <= q:
        k += 1
    return k


def power(beta: Fraction, k: torch.Tensor | int) -> torch.Tensor | float:
    """``beta^k`` in float64 (k integer-valued)."""
    if isinstance(k, torch.Tensor):
        return torch.pow(torch.as_tensor(float(beta), dtype=torch.float64, device=k.device), k)
    return float(Fraction(beta) ** k)


def schatten_table(values: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    """``S_p = sum_i sigma_i^p`` for every row and every p in ``ps`` (one tensor op): (J, P).

    Zero singular values (padding included) contribute 0 for every p > 0.  The p = 0 column is
    *not* meaningful here (the caller uses a proven rank).
    """
    ps = ps.to(values)
    pos = values > 0
    logs = torch.log(torch.where(pos, values, torch.ones_like(values)))
    powers = torch.exp(logs[:, :, None] * ps[None, None, :])
    return torch.where(pos[:, :, None], powers, 0.0).sum(dim=1)


def schatten_at(values: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    """``S_{p_j}`` of row j for one p per row (p > 0): (J,)."""
    pos = values > 0
    logs = torch.log(torch.where(pos, values, torch.ones_like(values)))
    return torch.where(pos, torch.exp(logs * ps[:, None]), 0.0).sum(dim=1)


@dataclass(frozen=True, eq=False)
class Sensitivities:
    """Radii and loss-scale sensitivities of one rounding (float64 tensors).

    ``k_c``/``c``: spectral radii c~ = beta_c^k_c (J,); ``lipschitz``/``alpha``: (L,);
    ``gamma`` (J,); ``B_w``, ``k_w``: read-out radius; ``kappa``: (..., J) for the margins given.
    """

    k_c: torch.Tensor
    c: torch.Tensor
    lipschitz: torch.Tensor
    alpha: torch.Tensor
    gamma: torch.Tensor
    B_w: float
    k_w: int
    readout: str
    kappa: torch.Tensor


def readout_radius(facts: NetworkFacts, settings: BoundSettings) -> tuple[str, float, int]:
    """("trained"|"fixed", B_w, k_w).  Trained: B~_w = beta_w^ceil(log ||w||); fixed: B_w = ||w||
    (a checkpoint without read-out: a fixed unit vector, B_w = 1)."""
    if facts.readout_norm is None:
        return "fixed", 1.0, 0
    if settings.readout == "fixed":
        return "fixed", facts.readout_norm, 0
    k_w = int(grid_up(torch.tensor([facts.readout_norm], dtype=torch.float64), settings.beta_w)[0])
    return "trained", power(settings.beta_w, k_w), k_w


def _call(ct: CompiledTheorem, name: str, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``ct(name)`` with the arguments its expression needs taken from ``values`` by name."""
    fn = ct.fn(name)
    return ct(name, **{str(a): values[str(a)] for a in fn.args})


def sensitivities(
    ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, rho: torch.Tensor
) -> Sensitivities:
    """Radii c~, layer constants and kappa_j = B_w alpha_l(j) gamma_j / rho for every margin in
    ``rho`` (any shape; kappa gets shape ``rho.shape + (J,)``)."""
    beta_c = settings.base_c(facts.num_layers, facts.variant)
    k_c = grid_up(facts.spectral, beta_c)
    c = power(beta_c, k_c)
    lay = layout(facts.variant)
    head_c = {str(sym): c[ix] for sym, ix in facts.heads.items()}  # (L, H) each
    layer_c = {str(sym): c[ix] for sym, ix in facts.layers.items()}  # (L,) each
    head = _call(ct, "head_summand", head_c)
    lip = _call(ct, "layer_lipschitz", layer_c | {"Sigma_h": head.sum(dim=1)})
    # alpha_l = product of the later layers' constants (alpha_L = 1), by the theorem's alpha_step
    alphas = [torch.ones((), dtype=torch.float64, device=c.device)]
    for l in range(facts.num_layers - 1, 0, -1):
        alphas.append(ct("alpha_step", alpha=alphas[-1], mathcal_L=lip[l]))
    alpha = torch.stack(alphas[::-1])
    layer = torch.tensor([m.layer for m in facts.matrices], device=c.device)
    head_of = torch.tensor([max(m.head, 0) for m in facts.matrices], device=c.device)
    gamma = torch.empty_like(c)
    if lay.shared is not None:  # Sigma_g per (layer, group): the heads' GROUP_SUMMAND added up
        one = compile_expr(GROUP_SUMMAND, "torch")
        per_head = one(*(head_c[str(a)] for a in one.args))
        n_groups = int(facts.group.max()) + 1 if facts.group.numel() else 0
        sigma_g = torch.zeros((facts.num_layers, n_groups), dtype=c.dtype, device=c.device)
        sigma_g.index_add_(1, facts.group, per_head)
    for kind, key in lay.gamma_key.items():
        rows = [j for j, m in enumerate(facts.matrices) if m.kind == kind]
        if not rows:
            continue
        ix = torch.tensor(rows, device=c.device)
        args = {name: val[layer[ix]] for name, val in layer_c.items()}
        if kind == lay.shared:
            args["Sigma_g"] = sigma_g[layer[ix], head_of[ix]]
        elif facts.matrices[rows[0]].head >= 0:
            args |= {name: val[layer[ix], head_of[ix]] for name, val in head_c.items()}
        g = _call(ct, "gamma_" + key, args)
        gamma[ix] = torch.broadcast_to(torch.as_tensor(g).to(gamma), ix.shape)
    readout, B_w, k_w = readout_radius(facts, settings)
    rho = torch.as_tensor(rho, dtype=torch.float64, device=c.device)
    kappa = ct("kappa", B_w=B_w, alpha=alpha[layer], gamma=gamma, rho=rho[..., None])
    return Sensitivities(k_c, c, lip, alpha, gamma, B_w, k_w, readout, kappa)


# -- per-matrix pieces on the whole grid ----------------------------------------------------------

@dataclass(frozen=True, eq=False)
class GridTerms:
    """Every matrix at every grid point p (float64 tensors, shape (J, P), or (..., J, P) where the
    margin enters): Schatten powers ``S``, their radii ``k_s``/``s``, the closed-form single-scale
    terms ``ss`` (the theorem's ``ss_matrix_term`` for p > 0, ``ss_matrix_term_rank`` at p = 0;
    +inf where p > 0 is not allowed: a structurally zero matrix) and the per-matrix part of Lambda
    ``lam``."""

    ps: torch.Tensor
    S: torch.Tensor
    k_s: torch.Tensor
    s: torch.Tensor
    ss: torch.Tensor
    lam: torch.Tensor


def grid_terms(
    ct: CompiledTheorem, facts: NetworkFacts, settings: BoundSettings, sens: Sensitivities,
    ps: torch.Tensor, m: int,
) -> GridTerms:
    """:class:`GridTerms` for all matrices and all of ``ps`` at once (no loop over p)."""
    ps = ps.to(facts.values)
    S = schatten_table(facts.values, ps)
    k_s = grid_up(S, settings.beta_s)
    s = power(settings.beta_s, k_s)
    zero_p = ps == 0
    p_pos = torch.where(zero_p, torch.ones_like(ps), ps)  # keep p = 0 out of the p > 0 formulas
    kap = sens.kappa[..., :, None]
    c, d = sens.c[:, None], facts.dims[:, None]
    n = float(settings.n)
    pos = ct("ss_matrix_term", c=c, d=d, kappa=kap, n=n, p=p_pos, s=s)
    rank = ct("ss_matrix_term_rank", c=c, d=d, kappa=kap, n=n, r_max=facts.rank_cap[:, None],
              s=facts.proven_rank[:, None])
    zero_m = (facts.proven_rank == 0) | (facts.spectral == 0)
    pos = torch.where(zero_m[:, None], torch.inf, pos)
    ss = torch.where(zero_p, rank, pos)
    mg = float(m)
    lam_pos = ct("lambda_matrix", k_c=sens.k_c[:, None], k_s=k_s, m_grid=mg)
    lam_rank = ct("lambda_matrix_rank", k_c=sens.k_c[:, None], m_grid=mg, r_max=facts.rank_cap[:, None])
    lam = torch.where(zero_p, torch.broadcast_to(lam_rank, lam_pos.shape), lam_pos)
    return GridTerms(ps, S, k_s, s, ss, lam)


def lambda_total(ct: CompiledTheorem, lam_sum: torch.Tensor, k_rho, sens: Sensitivities) -> torch.Tensor:
    """Lambda(theta) from the per-matrix sum; a fixed read-out is not on the grid, so the
    theorem's form without the lambda(k_w) summand is used (proofs_notes/theory.md section 7, fixed w)."""
    if sens.readout == "fixed":
        return ct("Lambda_total_fixed", Lambda_sum=lam_sum, k_rho=k_rho)
    return ct("Lambda_total", Lambda_sum=lam_sum, k_rho=k_rho, k_w=float(sens.k_w))


def ss_closed(ct: CompiledTheorem, sens: Sensitivities, T_sum, N: float, n: float, rho) -> torch.Tensor:
    """SS closed form from the sum of the matrix terms (without the read-out's term when fixed)."""
    if sens.readout == "fixed":
        return ct("ss_closed_fixed", T_sum=T_sum, n=n)
    return ct("ss_closed", B_w=sens.B_w, N=N, T_sum=T_sum, n=n, rho=rho)


def dd_closed(ct: CompiledTheorem, sens: Sensitivities, D_sum, N: float, n: float, rho, alpha_D,
              vartheta_w) -> torch.Tensor:
    """Dudley closed form from the sum of the matrix pieces (without the read-out's when fixed)."""
    if sens.readout == "fixed":
        return ct("dd_closed_fixed", D_sum=D_sum, alpha_D=alpha_D, n=n)
    return ct("dd_closed", B_w=sens.B_w, D_sum=D_sum, N=N, alpha_D=alpha_D, n=n, rho=rho,
              vartheta_w=vartheta_w)

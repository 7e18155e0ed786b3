"""The network of the per-sample certified pass: binary64 factors plus their certified norm constants.

:class:`IntervalNetwork` holds, for every variant (plain, residual, causal, ls, ls_residual), the
binary64 factors laid out for batched products and, per block of columns that one rounding term of
proofs_notes/interval_forward.md step 2 covers, two binary64 numbers computed once in Arb:
``sigma >= ||W||_2`` (certified singular-value enclosure, capped by the Frobenius norm) and
``rnd >= gamma_n ||W||_F`` (the rounding factor of a product of length n).  Floats never enter these
constants except as exact inputs.

Public API: :class:`IntervalNetwork`, :class:`IntervalLayer`, :class:`Block`, :class:`Backward`,
:func:`projection_constants`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache

import numpy as np
from flint import arb

from specbound.certified.arb import pow2, precision
from specbound.certified.directed import float_up, gamma_arb
from specbound.certified.enclosure import enclose_singular_values, fro_upper
from specbound.certified.factors import InexactScale, float_factors
from specbound.certified.fast_forward import NotApplicable
from specbound.certified.norms import spectral_norm_upper
from specbound.certified.sigmoid import (
    ActivationBounds, activation_bounds, derivative_error_bound, second_derivative_bound,
)
from specbound.errors import CertificationError, LayoutError
from specbound.matrices import AnalysisWeights
from specbound.vocabulary import (
    ACTIVATIONS, BIDIRECTIONAL_VARIANTS, LS_VARIANTS, MODEL_VARIANTS, RESIDUAL_VARIANTS, kv_group,
)

BOUND_PREC = 128
MAX_DIM = 2**30
"""Every dimension must stay below this (the underflow terms of step 2 assume it)."""

VARIANTS = MODEL_VARIANTS
"""Every variant has a per-sample pass; every activation of the vocabulary has a proven routine."""

MAX_PHI_ERROR = 2.0**-20
"""GELU layers whose Phi polynomial error E_Phi on the a-priori range exceeds this are refused (the
Taylor Phi loses accuracy like exp(t_max^2 / 2)); the Arb pass covers them."""

MAX_BACKWARD_FACTOR = 2.0**36
"""The adjoint refinement is skipped for models with a weight of Frobenius norm or an a-priori activation
argument above this (interval_adjoint.md step 9: its underflow allowance needs every factor <= 2^40)."""

MAX_PHI_ARGUMENT = 8.0
"""GELU layers with a larger a-priori argument bound are refused outright (E_Phi would be huge)."""


@dataclass(frozen=True, eq=False)
class Block:
    """One matrix (or a block of columns of one) with ``sigma >= ||W||_2``, ``rnd >= gamma_n ||W||_F``
    (``n`` = rows, the length of every dot product through it) and ``fro >= ||W||_F``, as binary64 upper
    bounds."""

    sigma: float
    rnd: float
    fro: float = math.inf


def _block(w: np.ndarray) -> Block:
    w = np.asarray(w, dtype=np.float64)
    with precision(BOUND_PREC):
        frob = fro_upper(w)
        spec = spectral_norm_upper(enclose_singular_values(w)) if w.size else arb(0)
        sigma = spec if spec < frob else frob
        return Block(float_up(sigma), float_up(gamma_arb(w.shape[0]) * frob), float_up(frob))


@dataclass(frozen=True, eq=False)
class Backward:
    """What the backward program of interval_adjoint.md reads of one layer: the transposed (and, for one
    product, stacked) weights, ``o_fro[h] >= ||W_O^(h)||_F``, the activation's ``L_2 >= sup |phi''|`` and
    ``e_d`` (the computed derivative's error on the layer's a-priori range), the group sum matrix, and for
    a plain feed-forward ``ff_K = fl(fl(M_in^T M_in) o fl(M_out M_out^T))`` with ``ff_K_fro >= ||ff_K||_F`` and
    ``ff_K_err >= ||K - ff_K||_F`` (interval_adjoint.md step 6)."""

    wo_t: np.ndarray
    wq_t: np.ndarray
    wkv_t: np.ndarray
    wqkv_t: np.ndarray
    ff_t: tuple[np.ndarray, ...]
    o_fro: tuple[float, ...]
    L2: float
    e_d: float
    group_sum: np.ndarray | None
    usable: bool
    ff_K: np.ndarray | None = None
    ff_K_fro: float = math.inf
    ff_K_err: float = math.inf


def _backward(wq, wk, wv, wo, ff, group, dv: int, act: ActivationBounds) -> Backward:
    H = group.shape[0]
    with precision(BOUND_PREC):
        o_fro = tuple(float_up(fro_upper(wo[h * dv:(h + 1) * dv])) for h in range(H))
    if len(ff) == 3:  # gated: one product of [ga | gb] with [G U]^T
        ff_t = (np.ascontiguousarray(ff[2].T), np.ascontiguousarray(np.concatenate([ff[0], ff[1]], axis=1).T))
    else:
        ff_t = (np.ascontiguousarray(ff[1].T), np.ascontiguousarray(ff[0].T))
    G = wk.shape[1] // (wq.shape[1] // H) if H else 0
    same = G == H and bool((group == np.arange(H)).all())
    gsum = None if same else (group[:, None] == np.arange(G)[None, :]).astype(np.float64)
    try:
        e_d = derivative_error_bound(act.name, act.t_max)
    except (ValueError, OverflowError):
        e_d = math.inf  # no refinement (the per-layer radius stays)
    with precision(BOUND_PREC):
        fros = [fro_upper(a) for a in (wq, wk, wv, wo, *ff)]
    # interval_adjoint.md step 9: every factor of the backward's absolute program <= 2^40
    usable = math.isfinite(e_d) and act.t_max <= MAX_BACKWARD_FACTOR and all(f < MAX_BACKWARD_FACTOR for f in fros)
    K = kf = ke = None
    if usable and len(ff) == 2:  # plain: ||M_in diag(d) M_out||_F^2 = d^T K d, K = (M_in^T M_in) o (M_out M_out^T)
        m_in, m_out = ff
        K = (m_in.T @ m_in) * (m_out @ m_out.T)  # finite: every entry < 2^144 (factors' norms < 2^36)
        n = m_in.shape[0]
        with precision(BOUND_PREC):
            u, g = pow2(-53), gamma_arb(n)
            kf = float_up(fro_upper(K))
            ke = float_up((g + (1 + g) * g + u * (1 + g) ** 2) * (fro_upper(m_in) * fro_upper(m_out)) ** 2)
    return Backward(
        ff_K=K, ff_K_fro=math.inf if kf is None else kf, ff_K_err=math.inf if ke is None else ke,
        wo_t=np.ascontiguousarray(wo.T), wq_t=np.ascontiguousarray(wq.T),
        wkv_t=np.ascontiguousarray(np.concatenate([wk, wv], axis=1).T),
        wqkv_t=np.ascontiguousarray(np.concatenate([wq, wk, wv], axis=1).T),
        ff_t=ff_t, o_fro=o_fro, L2=second_derivative_bound(act.name), e_d=e_d, group_sum=gsum, usable=usable)


@dataclass(frozen=True, eq=False)
class IntervalLayer:
    """One layer: ``wq`` (N, H dq) heads side by side, ``wk`` (N, G dq) and ``wv`` (N, G dv) per key/value
    group, ``wo`` (H dv, N) heads stacked, ``group[h]`` = g(h); feed-forward ``ff`` = (M_in, M_out) or the
    gated (G, U, D); per-block constants; ``act`` the activation's routine constants on its a-priori
    range (step 10)."""

    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    group: np.ndarray
    q: tuple[Block, ...]
    k: tuple[Block, ...]
    v: tuple[Block, ...]
    o: Block
    ff: tuple[np.ndarray, ...]
    ff_blocks: tuple[Block, ...]
    act: ActivationBounds
    dq: int
    dv: int
    back: Backward | None = field(default=None)

    @property
    def num_heads(self) -> int:
        return int(self.group.shape[0])

    @property
    def num_groups(self) -> int:
        return len(self.k)

    @property
    def gated(self) -> bool:
        return len(self.ff) == 3


@lru_cache(maxsize=None)
def projection_constants(N: int) -> tuple[float, float]:
    """(e_Pi, R_Pi) of proofs_notes/fast_forward.md step 3 for rows of width N, binary64 upper bounds;
    R_Pi includes the division's underflow term sqrt(N) 2^-1075 (interval_forward.md step 9)."""
    with precision(BOUND_PREC):
        u, tiny = pow2(-53), pow2(-1000)
        g = gamma_arb(N) + 4 * tiny
        hi = (1 + g).sqrt() * (1 + u) - 1
        lo = 1 - (1 - g).sqrt() * (1 - u)
        kappa = hi if hi > lo else lo
        r = (1 + u) / (1 - kappa)
        return float_up(r - 1), float_up(r + arb(N).sqrt() * pow2(-1075))


def _max_col_norm(w: np.ndarray) -> arb:
    best = arb(0)
    for j in range(w.shape[1]):
        c = fro_upper(w[:, j])
        if c > best:
            best = c
    return best


def _activation(name: str, inputs: np.ndarray, N: int, r_pi: float) -> ActivationBounds:
    """The activation's constants on the a-priori range of ``fl(y W[:, j])``, ``||y|| <= R_Pi`` (step 10)."""
    with precision(BOUND_PREC):
        t_max = (1 + gamma_arb(N)) * arb(r_pi) * _max_col_norm(inputs) + N * pow2(-1074)
        t_max = float_up(t_max)
    if name == "gelu" and not t_max <= MAX_PHI_ARGUMENT:
        raise NotApplicable(f"GELU arguments up to {t_max:.3g} exceed the Taylor Phi's useful range")
    try:
        act = activation_bounds(name, t_max)
    except (ValueError, OverflowError) as exc:
        raise NotApplicable(f"activation {name!r} on |t| <= {t_max:.3g}: {exc}") from None
    if name == "gelu" and not act.kappa_1 <= MAX_PHI_ERROR:
        raise NotApplicable(f"GELU arguments up to {t_max:.3g}: the Taylor Phi's proven error "
                            f"{act.kappa_1:.2e} is too large for the per-sample pass")
    return act


def _exact_factors(m) -> tuple[np.ndarray, np.ndarray | None]:
    """Binary64 factors whose exact product is the covered matrix, ``sqrt(scale_sq)`` included
    (:func:`specbound.certified.factors.float_factors`); a scale that binary64 factors cannot carry
    exactly is refused (the pass would otherwise compute another network; the Arb pass covers it)."""
    try:
        return float_factors(m)
    except InexactScale as exc:
        raise NotApplicable(str(exc)) from None


def _plain_attention(weights: AnalysisWeights, l: int):
    N, H = int(weights.width), int(weights.num_heads)
    eye = np.eye(N)
    q, k, v, o = [], [], [], []
    for h in range(H):
        ql, qr = _exact_factors(weights.get(l, "QK", h))
        vl, vr = _exact_factors(weights.get(l, "V_tilde", h))
        q.append(ql)
        k.append(eye if qr is None else np.ascontiguousarray(qr.T))
        v.append(vl)
        o.append(eye if vr is None else vr)
    return q, k, v, o, list(range(H))


def _ls_attention(weights: AnalysisWeights, l: int):
    H = int(weights.num_heads)
    q = [_exact_factors(weights.get(l, "Q", h))[0] for h in range(H)]
    keys = sorted((m for m in weights.of_layer(l) if m.kind == "K"), key=lambda m: m.head)
    k = [_exact_factors(m)[0] for m in keys]
    group = [kv_group(h, H, weights.num_kv_heads) for h in range(H)]
    v, o = [None] * len(k), []
    for h in range(H):
        vl, vr = _exact_factors(weights.get(l, "V_tilde", h))
        if vr is None:
            raise LayoutError(f"L{l}.H{h}.V_tilde: the LS pass needs V_tilde factored as W_V W_O")
        g = group[h]
        if g >= len(k):
            raise LayoutError(f"layer {l}: head {h} maps to key/value group {g}, only {len(k)} K matrices")
        if v[g] is None:
            v[g] = vl
        elif not np.array_equal(v[g], vl):
            raise LayoutError(f"L{l}.H{h}.V_tilde: heads of one key/value group have different W_V")
        o.append(vr)
    if any(x is None for x in v):
        raise LayoutError(f"layer {l}: a key/value group without a value matrix")
    return q, k, v, o, group


def _layer(weights: AnalysisWeights, l: int, ls: bool, r_pi: float) -> IntervalLayer:
    N = int(weights.width)
    q, k, v, o, group = (_ls_attention if ls else _plain_attention)(weights, l)
    dq, dv = {a.shape[1] for a in q + k}, {a.shape[1] for a in v}
    if len(dq) != 1 or len(dv) != 1 or {a.shape[0] for a in o} != dv:
        raise NotApplicable(f"layer {l}: heads of unequal inner dimension")
    dq, dv = dq.pop(), dv.pop()
    if ls and dq % 2:
        raise LayoutError(f"layer {l}: rotary embeddings need an even head dimension, got {dq}")
    if ls:
        ff = tuple(_exact_factors(weights.get(l, kind))[0] for kind in ("G", "U", "D"))
    else:
        ff = tuple(_exact_factors(weights.get(l, kind))[0] for kind in ("M_in", "M_out"))
    wo = np.ascontiguousarray(np.concatenate(o, axis=0))
    arrays = q + k + v + [wo, *ff]
    if not all(np.isfinite(a).all() for a in arrays):
        raise LayoutError("weights contain NaN or Inf")
    if max(max(a.shape) for a in arrays) >= MAX_DIM or wo.shape[0] >= MAX_DIM:
        raise NotApplicable("a dimension exceeds the float error model's range")
    wq_s = np.ascontiguousarray(np.concatenate(q, axis=1))
    wk_s = np.ascontiguousarray(np.concatenate(k, axis=1))
    wv_s = np.ascontiguousarray(np.concatenate(v, axis=1))
    grp = np.asarray(group, dtype=np.int64)
    act = _activation(weights.activation, ff[0], N, r_pi)
    return IntervalLayer(
        wq=wq_s, wk=wk_s, wv=wv_s, wo=wo, group=grp,
        q=tuple(_block(a) for a in q), k=tuple(_block(a) for a in k), v=tuple(_block(a) for a in v),
        o=_block(wo), ff=tuple(np.ascontiguousarray(a) for a in ff), ff_blocks=tuple(_block(a) for a in ff),
        act=act, dq=dq, dv=dv, back=_backward(wq_s, wk_s, wv_s, wo, ff, grp, dv, act))


@dataclass(frozen=True, eq=False)
class IntervalNetwork:
    """Every layer, the read-out rows ``readout`` (k, N) with ``readout_norms >= ||w_c||``, the variant's
    switches, and (ls) the rotary tables with ``rho_R >= sqrt(max c^2 + s^2)``."""

    layers: tuple[IntervalLayer, ...]
    readout: np.ndarray
    readout_norms: np.ndarray
    width: int
    activation: str
    residual: bool
    causal: bool
    rope: bool
    cos: np.ndarray | None
    sin: np.ndarray | None
    rho_R: float
    e_pi: float
    r_pi: float

    @cached_property  # an Arb evaluation, read in every refined stage (a frozen dataclass keeps it in __dict__)
    def c_pi(self) -> float:
        """``c_Pi = 4 e_Pi + tau >= ||D Pi(a_hat) - J_Pi||`` (interval_adjoint.md step 4.2), rounded up."""
        with precision(BOUND_PREC):
            return float_up(4 * arb(self.e_pi) + pow2(-1000))

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def k(self) -> int:
        return int(self.readout.shape[0])

    @classmethod
    def from_weights(cls, weights: AnalysisWeights) -> IntervalNetwork:
        variant = getattr(weights, "variant", "plain")
        if variant not in VARIANTS:
            raise NotApplicable(f"model variant {variant!r} has no per-sample pass")
        if weights.activation not in ACTIVATIONS:
            raise NotApplicable(f"activation {weights.activation!r} has no proven float routine")
        if weights.readout is None:
            raise CertificationError(f"{weights.source or 'weights'}: no read-out vector w")
        N = int(weights.width)
        w = np.asarray(weights.readout, dtype=np.float64)
        w = w.reshape(1, -1) if w.ndim == 1 else w
        if w.ndim != 2 or w.shape[1] != N or w.shape[0] < 1:
            raise LayoutError(f"read-out has shape {np.shape(weights.readout)}, expected ({N},) or (k, {N})")
        if not np.isfinite(w).all():
            raise LayoutError("read-out contains NaN or Inf")
        ls = variant in LS_VARIANTS
        e_pi, r_pi = projection_constants(N)
        cos = sin = None
        rho = 1.0
        if ls:
            from specbound.certified.forward_ls import rope_norm_bound, rope_tables_of

            cos, sin = rope_tables_of(weights)
            bound: Fraction = rope_norm_bound(cos, sin)
            with precision(BOUND_PREC):
                rho = float_up((arb(bound.numerator) / arb(bound.denominator)).sqrt())
        layers = tuple(_layer(weights, l, ls, r_pi) for l in range(weights.num_layers))
        with precision(BOUND_PREC):
            norms = np.array([float_up(fro_upper(row)) for row in w])
        return cls(layers, np.ascontiguousarray(w), norms, N, weights.activation,
                   variant in RESIDUAL_VARIANTS, variant not in BIDIRECTIONAL_VARIANTS,
                   ls, cos, sin, rho, e_pi, r_pi)


__all__ = ("Backward", "Block", "IntervalLayer", "IntervalNetwork", "projection_constants")

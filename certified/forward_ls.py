"""Certified forward pass of the Llama-style (LS) analysis model, and the dispatch by variant.

The LS model (proofs_notes/theory.md section 11, proofs_notes/certified_forward.md): ``X0 = Pi(E[tokens])``;
per layer, with query matrices ``Q_h``, key matrices ``K_g`` of the key/value groups,
``V_tilde_h = W_V^(g(h)) W_O^(h)`` (kept factored), and rotary tables ``cos, sin`` (T x d_h/2)::

    q_t = R_t(x_t Q_h),  k_s = R_s(x_s K_g(h))      (pair i = (i, i + d_h/2) rotated by
                                                     [[c, s], [-s, c]] with c = cos[t, i], s = sin[t, i])
    head_h(X)_t = sum_{s <= t} softmax_s(<q_t, k_s>) x_s V_tilde_h        (causal mask)
    Y = Pi(sum_h head_h(X)),   X' = Pi((silu(Y G) * (Y U)) D)
    f(X) = <w, x_T^(L)>                                                   (last token)

Guarantees: every weight, table entry and input is a binary64 number taken as an exact real (weights
read through :func:`specbound.certified.factors.arb_factors`: a left-over score scale enters as an Arb
ball); the
rotation is the exact linear map of the binary64 table values the model uses (not of the true
cos/sin), SiLU is evaluated in Arb; so each ball contains the exact real value of the model with
those tables.  The theorem's rotation bound rho_R must dominate max ``c^2 + s^2`` of the same tables:
:func:`rope_norm_bound` encloses it exactly.

Public API: :class:`ArbLSNetwork`, :func:`network_for`, :func:`certified_forward`, :func:`rotate_rows`,
:func:`rope_norm_bound`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from flint import arb, arb_mat, ctx

from specbound.vocabulary import kv_group
from specbound.errors import CertificationError, LayoutError
from specbound.matrices import AnalysisWeights

from . import forward as plain
from .factors import arb_factors
from .forward import (
    DEFAULT_PREC, ArbNetwork, Factors, _exact_mat, _row, activation, input_ball, project_rows, softmax_rows, times,
)

from specbound.vocabulary import LS_VARIANTS  # noqa: E402  (re-exported: the one definition)
ROPE_COS, ROPE_SIN = "rope.cos", "rope.sin"
"""Keys of the rotary tables in ``AnalysisWeights.extra`` (T x d_h/2 binary64 arrays)."""


@dataclass(frozen=True, eq=False)
class _LSLayer:
    q: tuple[Factors, ...]  # per head (N, d)
    k: tuple[Factors, ...]  # per group (N, d)
    v: tuple[arb_mat, ...]  # per group: left factor W_V^(g) (N, d)
    o: tuple[arb_mat, ...]  # per head: right factor W_O^(h) (d, N), times sqrt(scale_sq) of V_tilde_h
    group: tuple[int, ...]  # g(h)
    G: Factors
    U: Factors
    D: Factors


@dataclass(frozen=True, eq=False)
class ArbLSNetwork:
    """The LS network with every weight and table entry as an exact ball (radius 0)."""

    layers: tuple[_LSLayer, ...]
    readout: arb_mat  # (N, k): the read-out rows as columns
    activation: str
    width: int
    cos: np.ndarray
    sin: np.ndarray
    residual: bool = False

    @classmethod
    def from_weights(cls, weights: AnalysisWeights) -> ArbLSNetwork:
        if weights.readout is None:
            raise CertificationError(f"{weights.source or 'weights'}: no read-out vector w")
        cos, sin = rope_tables_of(weights)
        N, H = int(weights.width), int(weights.num_heads)
        readout = plain.readout_columns(weights.readout, N)
        layers = []
        for l in range(weights.num_layers):
            # every matrix through its exact factors: a left-over score scale sqrt(scale_sq) of Q
            # (e.g. sqrt(1/2) for head dimension 128) enters as an Arb ball, never as a float
            qs = tuple(arb_factors(weights.get(l, "Q", h)) for h in range(H))
            ks = [m for m in weights.of_layer(l) if m.kind == "K"]
            kmats = tuple(arb_factors(m) for m in sorted(ks, key=lambda m: m.head))
            vts = [weights.get(l, "V_tilde", h) for h in range(H)]
            group = tuple(kv_group(h, H, weights.num_kv_heads) for h in range(H))
            lefts: dict[int, arb_mat] = {}
            outs = []
            for h, vt in enumerate(vts):
                if vt.right is None:
                    raise LayoutError(f"{vt.name}: the LS forward pass needs V_tilde factored as W_V W_O")
                # the group's W_V is shared, so a scale of V_tilde_h goes into its own W_O^(h)
                left, right = arb_factors(vt, scale_on="right")
                outs.append(right)
                if group[h] not in lefts:
                    lefts[group[h]] = left
                elif not np.array_equal(vts[group.index(group[h])].left, vt.left):
                    raise LayoutError(f"{vt.name}: heads of one key/value group have different W_V")
            layers.append(_LSLayer(
                q=qs, k=kmats, v=tuple(lefts[g] for g in sorted(lefts)), o=tuple(outs), group=group,
                G=arb_factors(weights.get(l, "G")), U=arb_factors(weights.get(l, "U")),
                D=arb_factors(weights.get(l, "D"))))
        return cls(tuple(layers), readout, weights.activation, N, cos, sin,
                   residual=weights.variant == "ls_residual")


def rope_tables_of(weights: AnalysisWeights) -> tuple[np.ndarray, np.ndarray]:
    """The binary64 rotary tables of LS weights (``extra['rope.cos']``, ``extra['rope.sin']``)."""
    cos, sin = weights.extra.get(ROPE_COS), weights.extra.get(ROPE_SIN)
    if cos is None or sin is None:
        raise CertificationError(f"{weights.source or 'weights'}: LS weights carry no rotary tables "
                                 f"({ROPE_COS}, {ROPE_SIN}); the certified forward pass needs them")
    cos, sin = np.asarray(cos, dtype=np.float64), np.asarray(sin, dtype=np.float64)
    half = int(weights.head_dim) // 2
    if cos.shape != sin.shape or cos.ndim != 2 or cos.shape[1] != half:
        raise LayoutError(f"rotary tables have shapes {cos.shape}, {sin.shape}; expected (T, {half})")
    if not (np.isfinite(cos).all() and np.isfinite(sin).all()):
        raise LayoutError("rotary tables have NaN/Inf entries")
    return cos, sin


def rope_norm_bound(cos: np.ndarray, sin: np.ndarray) -> Fraction:
    """The exact maximum of ``c^2 + s^2`` over the tables (>= every ||R_ts|| = ||R_t R_s^T||,
    proofs_notes/rope_attention.md), 0 for empty tables.

    Exact (proofs_notes/certified_forward.md section 3a): only to *choose* candidates, the tables are
    scaled by the power of two ``2^k`` that brings their largest entry into ``[1/2, 1)``, so the largest
    scaled sum ``x*`` is >= 1/4 and nothing overflows; the float value ``fl(fl(c^2) + fl(s^2))`` of every
    scaled entry is then within a relative ``4u`` plus ``3 * 2**-1074`` (underflow) of its real value, so
    an entry whose float value is below ``1 - 1e-12`` times the largest cannot attain ``x*``.  The
    remaining candidates are compared in rationals on the unscaled tables.
    """
    if cos.size == 0:
        return Fraction(0)
    peak = float(max(np.abs(cos).max(), np.abs(sin).max()))
    if peak == 0.0:
        return Fraction(0)
    k = -math.frexp(peak)[1]  # 2^k peak in [1/2, 1): no square overflows, the largest sum is >= 1/4
    c2, s2 = np.ldexp(cos, k), np.ldexp(sin, k)  # only the filter uses these (off by <= 2**-1075 each)
    approx = c2 * c2 + s2 * s2
    top = float(approx.max())
    cand = np.nonzero(approx >= top * (1 - 1e-12))
    return max(Fraction(float(c)) ** 2 + Fraction(float(s)) ** 2 for c, s in zip(cos[cand], sin[cand]))


def rotate_rows(x: arb_mat, cos: np.ndarray, sin: np.ndarray, first_position: int) -> arb_mat:
    """Row r of ``x`` (token ``first_position + r``) rotated exactly by that token's table blocks:
    ``(a_i, b_i) -> (a_i c - b_i s, a_i s + b_i c)`` for the pair ``(i, i + d/2)``."""
    m, d = x.nrows(), x.ncols()
    half = d // 2
    if first_position + m > cos.shape[0]:
        raise LayoutError(f"sequence length {first_position + m} exceeds the rotary tables' {cos.shape[0]} rows")
    out = arb_mat(m, d)
    for r in range(m):
        t = first_position + r
        for i in range(half):
            c, s = arb(float(cos[t, i])), arb(float(sin[t, i]))
            a, b = x[r, i], x[r, i + half]
            out[r, i] = a * c - b * s
            out[r, i + half] = a * s + b * c
    return out


def _entrywise(x: arb_mat, fn) -> arb_mat:
    return arb_mat(x.nrows(), x.ncols(), [fn(t) for t in x.entries()])


def _hadamard(a: arb_mat, b: arb_mat) -> arb_mat:
    return arb_mat(a.nrows(), a.ncols(), [u * v for u, v in zip(a.entries(), b.entries())])


def _ls_layer(layer: _LSLayer, net: ArbLSNetwork, x: arb_mat, phi, last_only: bool) -> arb_mat:
    """One LS layer; ``last_only`` returns only the last row (exact: the read-out row depends on its
    own attention row only, the feed-forward block and ``Pi`` act row by row)."""
    T = x.nrows()
    first = T - 1 if last_only else 0
    rows = _row(x, T - 1) if last_only else x
    keys = [rotate_rows(times(x, k), net.cos, net.sin, 0) for k in layer.k]
    values = [x * v for v in layer.v]
    att = None
    for h, q in enumerate(layer.q):
        g = layer.group[h]
        qx = rotate_rows(times(rows, q), net.cos, net.sin, first)
        probs = softmax_rows(qx * keys[g].transpose(), first)
        out = (probs * values[g]) * layer.o[h]
        att = out if att is None else att + out
    if net.residual:
        att = att + rows
    y = project_rows(att)
    hidden = times(_hadamard(_entrywise(times(y, layer.G), phi), times(y, layer.U)), layer.D)
    if net.residual:
        hidden = hidden + y
    return project_rows(hidden)


def network_for(weights: AnalysisWeights) -> ArbNetwork | ArbLSNetwork:
    """The certified network of any implemented variant (plain, causal: :class:`ArbNetwork`)."""
    if weights.variant in LS_VARIANTS:
        return ArbLSNetwork.from_weights(weights)
    return ArbNetwork.from_weights(weights)


def certified_forward(network, inputs, prec: int = DEFAULT_PREC) -> arb:
    """A ball containing the exact real output ``f`` of the network (any variant) on ``Pi(inputs)``.

    Plain and causal networks go to :func:`specbound.certified.forward.certified_forward`.  A k-row
    read-out has k outputs: :func:`certified_outputs`.
    """
    if isinstance(network, AnalysisWeights):
        network = network_for(network)
    if not isinstance(network, ArbLSNetwork):
        return plain.certified_forward(network, inputs, prec)
    if network.readout.ncols() != 1:
        raise CertificationError(f"a read-out of {network.readout.ncols()} rows has that many outputs: certified_outputs")
    return certified_outputs(network, inputs, prec)[0]


def certified_outputs(network, inputs, prec: int = DEFAULT_PREC) -> list[arb]:
    """Balls containing the exact outputs ``f_c`` of the network (any variant) on ``Pi(inputs)``, one per
    read-out row (:func:`specbound.certified.forward.certified_outputs` for the plain kinds)."""
    if isinstance(network, AnalysisWeights):
        network = network_for(network)
    if not isinstance(network, ArbLSNetwork):
        return plain.certified_outputs(network, inputs, prec)
    x0 = inputs if isinstance(inputs, arb_mat) else input_ball(inputs)
    if x0.ncols() != network.width:
        raise LayoutError(f"inputs have {x0.ncols()} columns, the network width is {network.width}")
    phi = activation(network.activation)
    with ctx.workprec(prec):
        x = project_rows(x0)
        last = len(network.layers) - 1
        for l, layer in enumerate(network.layers):
            x = _ls_layer(layer, network, x, phi, last_only=(l == last))
        if not network.layers:
            x = _row(x, x.nrows() - 1)
        out = x * network.readout
        return [out[0, c] for c in range(out.ncols())]

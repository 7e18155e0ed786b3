"""Certified forward pass of the analysis model: the network's output as an Arb ball.

The empirical ramp loss built on it is :mod:`specbound.certified.ramp_loss`.  The guarantees:

* every weight and input entry is a binary64 number taken as an exact real (``arb_mat`` converts
  floats exactly), and every weight matrix is read through
  :func:`specbound.certified.factors.arb_factors` (exact factors; a left-over score scale
  ``sqrt(scale_sq)`` enters as an Arb ball, never as a float);
* the forward pass (proofs_notes/theory.md section 1, no residual) is evaluated in Arb ball arithmetic, so
  each computed ball provably contains the exact real intermediate value
  (proofs_notes/certified_forward.md gives the step-by-step argument);

Floats are used only to *choose* things that cannot affect validity: the order of the linear
algebra and the working precision.

The token path never forms the rounded float sum ``E[tok] + P[t]``: the sum is taken in Arb
(:func:`embedded_input_ball`).

Public API: :class:`ArbNetwork`, :func:`input_ball`, :func:`embedded_input_ball`,
:func:`project_rows`, :func:`activation`, :func:`softmax_rows`, :func:`certified_forward`,
:func:`certified_outputs` (k read-out rows), :func:`readout_columns`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

import numpy as np
from flint import arb, arb_mat, ctx

from specbound.certified.factors import arb_factors, exact_mat
from specbound.errors import CertificationError, LayoutError
from specbound.matrices import AnalysisWeights, NamedMatrix
from specbound.vocabulary import PLAIN_KIND_VARIANTS

DEFAULT_PREC = 80
"""Working precision (bits).  It affects only the widths, never validity.  Radii grow by a factor
of a few per ball product (radius propagation adds absolute values), and a 2-layer pass has about
ten successive products: at 53 bits a benign random net ends near 1e-9 relative width, at 80 bits
near 1e-16, for ~10% more time."""

Margin = Union[float, int, str, arb]
"""A margin rho: a float or int (taken exactly), a decimal string or an arb (enclosed)."""

# --------------------------------------------------------------------------- exact conversion


def _exact_mat(a: np.ndarray) -> arb_mat:
    """``arb_mat`` equal (radius 0) to a finite 2-D float64 array."""
    return exact_mat(a)


def _interval(lo: arb, hi: arb) -> arb:
    """A ball containing the real interval ``[lo, hi]`` (``lo <= hi`` exact points).

    python-flint 0.9's ``arb.min/max/union`` can return very wide balls, so intervals are built
    from endpoints here: ``(lo+hi)/2 + [-1, 1] (hi-lo)/2`` contains ``[lo, hi]`` because both
    operations are rigorous ball operations.
    """
    return (lo + hi) / 2 + ((hi - lo) / 2) * arb(0, 1)


# --------------------------------------------------------------------------- the network


@dataclass(frozen=True, eq=False)
class _ArbHead:
    """One head: scores ``(X q)(X k)^T`` (``k is None``: ``(X q) X^T``, dense ``A = q``);
    values ``(X v1) v2`` (``v2 is None``: dense ``V = v1``)."""

    q: arb_mat
    k: arb_mat | None
    v1: arb_mat
    v2: arb_mat | None


Factors = tuple[arb_mat, Union[arb_mat, None]]
"""A weight matrix as the balls ``(L, R)`` of :func:`specbound.certified.factors.arb_factors`
(``R`` None: dense); ``x W`` is ``(x L) R``."""


def times(x: arb_mat, factors: Factors) -> arb_mat:
    """The ball product ``x W`` for ``W`` given by its factors (``(x L) R``, associativity)."""
    left, right = factors
    out = x * left
    return out if right is None else out * right


@dataclass(frozen=True, eq=False)
class _ArbLayer:
    heads: tuple[_ArbHead, ...]
    m_in: Factors
    m_out: Factors


@dataclass(frozen=True, eq=False)
class ArbNetwork:
    """The analysis network with every weight as its exact factors (:func:`~specbound.certified.factors.arb_factors`:
    radius 0, or a ball containing the exact factor times a left-over score scale).

    Built once from :class:`~specbound.matrices.AnalysisWeights` and reused for every sample.
    Factored matrices stay factored (``QK = W_Q W_K^T``, ``V_tilde = W_V W_O``): the certified pass
    multiplies by the exact factors, never by their rounded product.
    """

    layers: tuple[_ArbLayer, ...]
    readout: arb_mat  # (N, k): the read-out rows as columns (k = 1: the vector w)
    activation: str
    width: int
    causal: bool = False
    """The causal (GPT-2-style) variant: token t attends to s <= t, read-out at the last token."""
    residual: bool = False
    """The residual variant (R): Y = Pi(X + Att(X)), X' = Pi(Y + F(Y))."""

    @classmethod
    def from_weights(cls, weights: AnalysisWeights) -> ArbNetwork:
        if weights.readout is None:
            raise CertificationError(
                f"{weights.source or 'weights'}: no read-out vector w; the margin f(X) = <w, x_1> "
                "is defined only for the analysis model"
            )
        N = int(weights.width)
        readout = readout_columns(weights.readout, N)
        layers = []
        for l in range(weights.num_layers):
            heads = []
            for h in range(weights.num_heads):
                qk = weights.get(l, "QK", h)
                vt = weights.get(l, "V_tilde", h)
                heads.append(_head(qk, vt))
            layers.append(
                _ArbLayer(
                    heads=tuple(heads),
                    m_in=arb_factors(weights.get(l, "M_in")),
                    m_out=arb_factors(weights.get(l, "M_out")),
                )
            )
        if weights.variant not in PLAIN_KIND_VARIANTS:
            raise CertificationError(f"the certified forward pass of variant {weights.variant!r} is "
                                     "certified.forward_ls (plain, residual and causal only here)")
        return cls(
            layers=tuple(layers),
            readout=readout,
            activation=weights.activation,
            width=N,
            causal=weights.variant == "causal",
            residual=weights.variant == "residual",
        )


def readout_columns(readout, N: int) -> arb_mat:
    """The read-out as an exact (N, k) ball matrix: the vector w (N,) as one column, the rows of a k-row
    read-out W (k, N) as k columns (proofs_notes/k_class.md)."""
    w = np.asarray(readout, dtype=np.float64)
    if w.ndim == 1 and w.shape == (N,):
        return _exact_mat(w.reshape(N, 1))
    if w.ndim == 2 and w.shape[1] == N and w.shape[0] >= 1:
        return _exact_mat(np.ascontiguousarray(w.T))
    raise LayoutError(f"read-out has shape {w.shape}, expected ({N},) or (k, {N})")


def _head(qk: NamedMatrix, vt: NamedMatrix) -> _ArbHead:
    # The exact factors, a left-over score scale sqrt(scale_sq) multiplied into W_Q (and into W_V for
    # V_tilde) as a ball.  right = W_K^T, so X W_K = X right^T: store right^T to multiply on the right.
    q, kt = arb_factors(qk)
    v1, v2 = arb_factors(vt)
    return _ArbHead(q=q, k=None if kt is None else kt.transpose(), v1=v1, v2=v2)


# --------------------------------------------------------------------------- inputs


def input_ball(inputs: np.ndarray) -> arb_mat:
    """The exact ``(T, N)`` input rows (before ``Pi``) as an ``arb_mat`` of radius 0."""
    inputs = np.asarray(inputs)
    if inputs.ndim != 2 or inputs.shape[0] < 1:
        raise LayoutError(f"inputs must have shape (T, N) with T >= 1, got {inputs.shape}")
    if not np.issubdtype(inputs.dtype, np.floating):
        raise LayoutError(f"inputs must be floating point, got dtype {inputs.dtype}")
    return _exact_mat(inputs.astype(np.float64))  # float16/32 -> float64 is exact


def embedded_input_ball(tokens: np.ndarray, E: np.ndarray, P: np.ndarray | None) -> arb_mat:
    """A ball matrix containing the exact real rows ``E[tokens[t]] + P[t]`` (before ``Pi``).

    The addition is done in Arb (rigorous), never as a rounded float sum.  ``P`` may be None or
    have zero rows (no positional embedding); otherwise it must cover the sequence length.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.shape[0] < 1:
        raise LayoutError(f"tokens must have shape (T,) with T >= 1, got {tokens.shape}")
    V = E.shape[0]
    if tokens.min() < 0 or tokens.max() >= V:
        raise LayoutError(f"token ids must lie in [0, {V}), got range [{tokens.min()}, {tokens.max()}]")
    T = tokens.shape[0]
    x = _exact_mat(E[tokens])
    if P is not None and P.shape[0] > 0:
        if T > P.shape[0]:
            raise LayoutError(f"sequence length {T} exceeds the positional embedding's {P.shape[0]} rows")
        x = x + _exact_mat(P[:T])
    return x


# --------------------------------------------------------------------------- entrywise steps


def _inverse_scale(sq: arb) -> arb | None:
    """Ball containing ``1 / max(1, sqrt(q))`` for every real ``q >= 0`` in the ball ``sq``;
    None when ``Pi`` is certainly the identity (``sqrt(q) <= 1`` for all such ``q``).

    ``sq`` is clipped to ``[0, inf)`` (a squared norm is >= 0) and ``s = sqrt(sq)`` taken.  If
    ``s >= 1`` certainly, the answer is ``1/s``; if ``s <= 1`` certainly, it is 1; if the ball
    straddles 1, ``max(1, sqrt(q))`` lies in ``[1, upper(s)]`` (``max(1, .)`` is monotone), a ball
    we invert.  Each case contains the exact value.
    """
    s = sq.nonnegative_part().sqrt()
    hi = s.upper()
    if hi <= 1:
        return None
    if s.lower() >= 1:
        return 1 / s
    return 1 / _interval(arb(1), hi)


def project_rows(x: arb_mat) -> arb_mat:
    """Row-wise ``Pi(x) = x / max(1, ||x||_2)`` (proofs_notes/theory.md section 1) of a ball matrix.

    The result contains ``Pi`` of every real matrix in the balls.  Squared row norms are the
    diagonal of the ball product ``x x^T`` (an enclosure of ``sum_j x_tj^2``), and the scaling is
    a ball product with a diagonal matrix of the scales from :func:`_inverse_scale`.
    """
    m = x.nrows()
    gram = x * x.transpose()
    scales = [_inverse_scale(gram[t, t]) for t in range(m)]
    if all(c is None for c in scales):
        return x
    d = arb_mat(m, m)
    for t, c in enumerate(scales):
        d[t, t] = 1 if c is None else c
    return d * x


_SQRT1_2: dict[int, arb] = {}
_GELU_TANH: dict[int, tuple[arb, arb]] = {}


def _sqrt1_2() -> arb:
    c = _SQRT1_2.get(ctx.prec)
    if c is None:
        c = _SQRT1_2[ctx.prec] = arb(2).rsqrt()
    return c


def _phi_gelu(t: arb) -> arb:
    # gelu(t) = t Phi(t) = t erfc(-t/sqrt 2)/2; erfc avoids cancelling 1 + erf for t << 0.
    return t * (-t * _sqrt1_2()).erfc() / 2


def _phi_gelu_tanh(t: arb) -> arb:
    # gelu_tanh(t) = t (1 + tanh(sqrt(2/pi) (t + 0.044715 t^3))) / 2, constants as exact-real balls.
    cs = _GELU_TANH.get(ctx.prec)
    if cs is None:
        cs = _GELU_TANH[ctx.prec] = ((2 / arb.pi()).sqrt(), arb("0.044715"))
    k, a = cs
    return t * (1 + (k * (t + a * t * t * t)).tanh()) / 2


def _phi_relu(t: arb) -> arb:
    # relu is monotone: relu([lo, hi]) = [relu(lo), relu(hi)].
    if t >= 0:
        return t
    if t <= 0:
        return arb(0)
    return _interval(arb(0), t.upper())


def _phi_silu(t: arb) -> arb:
    # silu(t) = t / (1 + e^-t): rigorous ball operations (exp never overflows in Arb).
    return t / (1 + (-t).exp())


_ACTIVATIONS: dict[str, Callable[[arb], arb]] = {
    "gelu": _phi_gelu,
    "gelu_tanh": _phi_gelu_tanh,
    "relu": _phi_relu,
    "silu": _phi_silu,
}


def activation(name: str) -> Callable[[arb], arb]:
    """Ball extension of the entrywise ``phi``: the result contains ``phi(t)`` for all ``t`` in the ball."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise LayoutError(f"unknown activation {name!r} (use one of {tuple(_ACTIVATIONS)})") from None


def softmax_rows(scores: arb_mat, first_position: int | None = None) -> arb_mat:
    """Row-wise softmax of a ball matrix; each result row contains the exact softmax row.

    ``first_position`` None: no mask.  Otherwise the causal mask (masked_softmax): row r is token
    ``first_position + r`` and attends to the columns s <= that token; the other entries are
    exactly 0 (softmax over the allowed set, proofs_notes/masked_softmax.md).

    ``exp`` is applied entrywise in Arb, row sums are the ball product with a ones vector, and
    the rows are scaled by a diagonal matrix of reciprocal sums -- all rigorous ball operations.
    No shift ``z - max z`` is applied: softmax is exactly shift invariant, and Arb's exponents are
    arbitrary-size integers, so ``exp`` does not overflow at scores a network can produce (and a
    non-finite ball would still be a valid enclosure); a shift would not narrow the balls either (the width
    of ``exp(z)`` is set by the absolute radius of ``z``, which a shift does not change).
    """
    m, k = scores.nrows(), scores.ncols()
    if first_position is None:
        e = arb_mat(m, k, [z.exp() for z in scores.entries()])
    else:
        e = arb_mat(m, k, [scores[r, s].exp() if s <= first_position + r else arb(0)
                           for r in range(m) for s in range(k)])
    sums = e * arb_mat(k, 1, [1] * k)
    d = arb_mat(m, m)
    for t in range(m):
        d[t, t] = 1 / sums[t, 0]
    return d * e


# --------------------------------------------------------------------------- forward pass


def _first_row(x: arb_mat) -> arb_mat:
    return _row(x, 0)


def _row(x: arb_mat, t: int) -> arb_mat:
    return arb_mat([[x[t, j] for j in range(x.ncols())]])


def _layer(layer: _ArbLayer, x: arb_mat, phi: Callable[[arb], arb], cls_only: bool,
           causal: bool = False, residual: bool = False) -> arb_mat:
    """One analysis-model layer on the ball matrix ``x`` (rows in the unit ball).

    ``cls_only``: return only the read-out row of ``X^(l)`` (row 0; the last row when ``causal``);
    exact, because that row of the output depends on the same row of the attention output alone
    (the FF block and ``Pi`` act row by row), and that row uses only its row of the scores.
    ``causal``: the causal mask (token t attends to s <= t); ``residual``: the variant (R).
    """
    T = x.nrows()
    tau = T - 1 if causal else 0
    rows = _row(x, tau) if cls_only else x
    first = (tau if cls_only else 0) if causal else None
    att = None
    for head in layer.heads:
        qx = rows * head.q
        kx = x if head.k is None else x * head.k
        probs = softmax_rows(qx * kx.transpose(), first)
        # (P (X v1)) v2 = P X V exactly; this order is the cheaper one.
        out = probs * (x * head.v1)
        if head.v2 is not None:
            out = out * head.v2
        att = out if att is None else att + out
    y = project_rows(att + rows if residual else att)
    u = times(y, layer.m_in)
    m, k = u.nrows(), u.ncols()
    hidden = arb_mat(m, k, [phi(t) for t in u.entries()])
    out = times(hidden, layer.m_out)
    return project_rows(out + y if residual else out)


def certified_forward(
    network: ArbNetwork | AnalysisWeights,
    inputs: arb_mat | np.ndarray,
    prec: int = DEFAULT_PREC,
) -> arb:
    """A ball containing the exact real ``f(X) = <w, x_1^(L)>`` for ``X = Pi(inputs)`` (causal
    variant: ``<w, x_T^(L)>`` with the causal mask).

    ``inputs`` is the ``(T, N)`` matrix of rows *before* projection: a float array (taken exactly)
    or a ball matrix (e.g. :func:`embedded_input_ball`), in which case the result contains
    ``f(Pi(X0))`` for every ``X0`` in the balls.  ``prec`` is the Arb working precision in bits
    (:data:`DEFAULT_PREC`); it affects only the width of the result, never its validity.
    A k-row read-out has k outputs: :func:`certified_outputs` (refused here).
    """
    net = network if isinstance(network, ArbNetwork) else ArbNetwork.from_weights(network)
    if net.readout.ncols() != 1:
        raise CertificationError(f"a read-out of {net.readout.ncols()} rows has that many outputs: certified_outputs")
    return certified_outputs(net, inputs, prec)[0]


def certified_outputs(
    network: ArbNetwork | AnalysisWeights,
    inputs: arb_mat | np.ndarray,
    prec: int = DEFAULT_PREC,
) -> list[arb]:
    """Balls containing the exact outputs ``f_c(X) = <w_c, x_1^(L)>``, one per read-out row (one for the
    vector w), for ``X = Pi(inputs)``; otherwise as :func:`certified_forward`."""
    net = network if isinstance(network, ArbNetwork) else ArbNetwork.from_weights(network)
    x0 = inputs if isinstance(inputs, arb_mat) else input_ball(inputs)
    if x0.ncols() != net.width:
        raise LayoutError(f"inputs have {x0.ncols()} columns, the network width is {net.width}")
    phi = activation(net.activation)
    with ctx.workprec(prec):
        x = project_rows(x0)
        last = len(net.layers) - 1
        for l, layer in enumerate(net.layers):
            x = _layer(layer, x, phi, cls_only=(l == last), causal=net.causal, residual=net.residual)
        if not net.layers:  # L = 0: f = <w, Pi(x_tau)>
            x = _row(x, x.nrows() - 1 if net.causal else 0)
        out = x * net.readout
        return [out[0, c] for c in range(out.ncols())]

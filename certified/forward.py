"""Certified forward pass of the analysis model and the certified empirical ramp loss.

The theorem's empirical term is ``(1/n) sum_i l_rho(y_i f(X_i))`` with the ramp
``l_rho(u) = min(1, max(0, 1 - u/rho))`` (proofs_notes/theory.md section 1; the SymPy expression is
``specbound.derivation.rademacher.RAMP``).  This module returns an *upper* bound of it that holds
for the exact real network, whatever the floating-point errors:

* every weight and input entry is a binary64 number taken as an exact real (``arb_mat`` converts
  floats exactly);
* the forward pass (proofs_notes/theory.md section 1, no residual) is evaluated in Arb ball arithmetic, so
  each computed ball provably contains the exact real intermediate value
  (proofs_notes/certified_forward.md gives the step-by-step argument);
* the ramp is nonincreasing in ``u`` (for ``rho > 0``), so ``l_rho(lower(u-ball))`` bounds the
  loss of the sample; it is evaluated rigorously and the upper endpoints are summed exactly.

Floats are used only to *choose* things that cannot affect validity: the order of the linear
algebra, the working precision, and the split of samples among worker processes.

The token path never forms the rounded float sum ``E[tok] + P[t]``: the sum is taken in Arb
(:func:`embedded_input_ball`).

Public API: :class:`ArbNetwork`, :func:`input_ball`, :func:`embedded_input_ball`,
:func:`project_rows`, :func:`activation`, :func:`softmax_rows`, :func:`certified_forward`,
:func:`ramp_upper`, :func:`ramp_lower`, :class:`RampLossCertificate`,
:func:`certified_ramp_loss`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from dataclasses import dataclass
from typing import Union

import numpy as np
from flint import arb, arb_mat, ctx, fmpq

from specbound.errors import CertificationError, LayoutError, SpecboundError
from specbound.dataset import DataSet
from specbound.matrices import AnalysisWeights, NamedMatrix

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
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2:
        raise LayoutError(f"expected a 2-D array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise LayoutError("array has NaN/Inf entries")
    m, n = a.shape
    return arb_mat(m, n, a.ravel().tolist())


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


@dataclass(frozen=True, eq=False)
class _ArbLayer:
    heads: tuple[_ArbHead, ...]
    m_in: arb_mat
    m_out: arb_mat


@dataclass(frozen=True, eq=False)
class ArbNetwork:
    """The analysis network with every weight as an exact ``arb_mat`` (radius 0).

    Built once from :class:`~specbound.matrices.AnalysisWeights` and reused for every sample.
    Factored matrices stay factored (``QK = W_Q W_K^T``, ``V_tilde = W_V W_O``): the certified pass
    multiplies by the exact factors, never by their rounded product.
    """

    layers: tuple[_ArbLayer, ...]
    readout: arb_mat  # (N, 1)
    activation: str
    width: int

    @classmethod
    def from_weights(cls, weights: AnalysisWeights) -> ArbNetwork:
        if weights.readout is None:
            raise CertificationError(
                f"{weights.source or 'weights'}: no read-out vector w; the margin f(X) = <w, x_1> "
                "is defined only for the analysis model"
            )
        N = int(weights.width)
        w = np.asarray(weights.readout, dtype=np.float64)
        if w.shape != (N,):
            raise LayoutError(f"read-out w has shape {w.shape}, expected ({N},)")
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
                    m_in=_exact_mat(weights.get(l, "M_in").dense()),
                    m_out=_exact_mat(weights.get(l, "M_out").dense()),
                )
            )
        return cls(
            layers=tuple(layers),
            readout=_exact_mat(w.reshape(N, 1)),
            activation=weights.activation,
            width=N,
        )


def _head(qk: NamedMatrix, vt: NamedMatrix) -> _ArbHead:
    # right = W_K^T, so X W_K = X right^T: store right^T to multiply on the right directly.
    q = _exact_mat(qk.left)
    k = None if qk.right is None else _exact_mat(np.ascontiguousarray(qk.right.T))
    v1 = _exact_mat(vt.left)
    v2 = None if vt.right is None else _exact_mat(vt.right)
    return _ArbHead(q=q, k=k, v1=v1, v2=v2)


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


_ACTIVATIONS: dict[str, Callable[[arb], arb]] = {
    "gelu": _phi_gelu,
    "gelu_tanh": _phi_gelu_tanh,
    "relu": _phi_relu,
}


def activation(name: str) -> Callable[[arb], arb]:
    """Ball extension of the entrywise ``phi``: the result contains ``phi(t)`` for all ``t`` in the ball."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise LayoutError(f"unknown activation {name!r} (use one of {tuple(_ACTIVATIONS)})") from None


def softmax_rows(scores: arb_mat) -> arb_mat:
    """Row-wise softmax of a ball matrix; each result row contains the exact softmax row.

    ``exp`` is applied entrywise in Arb, row sums are the ball product with a ones vector, and
    the rows are scaled by a diagonal matrix of reciprocal sums -- all rigorous ball operations.
    No shift ``z - max z`` is applied: softmax is exactly shift invariant, and Arb's exponents are
    arbitrary-size integers, so ``exp`` does not overflow at scores a network can produce (and a
    non-finite ball would still be a valid enclosure); a shift would not narrow the balls either (the width
    of ``exp(z)`` is set by the absolute radius of ``z``, which a shift does not change).
    """
    m, k = scores.nrows(), scores.ncols()
    e = arb_mat(m, k, [z.exp() for z in scores.entries()])
    sums = e * arb_mat(k, 1, [1] * k)
    d = arb_mat(m, m)
    for t in range(m):
        d[t, t] = 1 / sums[t, 0]
    return d * e


# --------------------------------------------------------------------------- forward pass


def _first_row(x: arb_mat) -> arb_mat:
    return arb_mat([[x[0, j] for j in range(x.ncols())]])


def _layer(layer: _ArbLayer, x: arb_mat, phi: Callable[[arb], arb], cls_only: bool) -> arb_mat:
    """One analysis-model layer on the ball matrix ``x`` (rows in the unit ball).

    ``cls_only``: return only row 0 of ``X^(l)``; exact, because row 0 of the output depends on
    row 0 of the attention output alone (the FF block and ``Pi`` act row by row), and that row uses
    only row 0 of the scores.
    """
    rows = _first_row(x) if cls_only else x
    att = None
    for head in layer.heads:
        qx = rows * head.q
        kx = x if head.k is None else x * head.k
        probs = softmax_rows(qx * kx.transpose())
        # (P (X v1)) v2 = P X V exactly; this order is the cheaper one.
        out = probs * (x * head.v1)
        if head.v2 is not None:
            out = out * head.v2
        att = out if att is None else att + out
    y = project_rows(att)
    u = y * layer.m_in
    m, k = u.nrows(), u.ncols()
    hidden = arb_mat(m, k, [phi(t) for t in u.entries()])
    return project_rows(hidden * layer.m_out)


def certified_forward(
    network: ArbNetwork | AnalysisWeights,
    inputs: arb_mat | np.ndarray,
    prec: int = DEFAULT_PREC,
) -> arb:
    """A ball containing the exact real ``f(X) = <w, x_1^(L)>`` for ``X = Pi(inputs)``.

    ``inputs`` is the ``(T, N)`` matrix of rows *before* projection: a float array (taken exactly)
    or a ball matrix (e.g. :func:`embedded_input_ball`), in which case the result contains
    ``f(Pi(X0))`` for every ``X0`` in the balls.  ``prec`` is the Arb working precision in bits
    (:data:`DEFAULT_PREC`); it affects only the width of the result, never its validity.
    """
    net = network if isinstance(network, ArbNetwork) else ArbNetwork.from_weights(network)
    x0 = inputs if isinstance(inputs, arb_mat) else input_ball(inputs)
    if x0.ncols() != net.width:
        raise LayoutError(f"inputs have {x0.ncols()} columns, the network width is {net.width}")
    phi = activation(net.activation)
    with ctx.workprec(prec):
        x = project_rows(x0)
        last = len(net.layers) - 1
        for l, layer in enumerate(net.layers):
            x = _layer(layer, x, phi, cls_only=(l == last))
        if not net.layers:  # L = 0: f = <w, Pi(x_1)>
            x = _first_row(x)
        return (x * net.readout)[0, 0]


# --------------------------------------------------------------------------- ramp loss


def _margin_ball(rho: Margin) -> arb:
    """``rho`` as a ball containing the exact real margin (floats exact, strings as decimals)."""
    r = rho if isinstance(rho, arb) else arb(rho)
    if not (r > 0):
        raise SpecboundError(f"margin rho must be a certainly positive real, got {rho!r}")
    return r


def ramp_upper(u: arb, rho: arb) -> arb:
    """An exact point ``>= l_rho(v)`` for every real ``v`` in the ball ``u`` (``rho > 0``).

    ``l_rho`` is nonincreasing, so ``l_rho(v) <= l_rho(lower(u))``; ``1 - lower(u)/rho`` is then
    evaluated in Arb and its upper endpoint clamped to ``[0, 1]`` (clamping is monotone).  A
    non-finite ball gives 1, the ramp's maximum.
    """
    if not u.is_finite():
        return arb(1)
    r = (1 - u.lower() / rho).upper()
    if r >= 1:
        return arb(1)
    if r <= 0:
        return arb(0)
    return r


def ramp_lower(u: arb, rho: arb) -> arb:
    """An exact point ``<= l_rho(v)`` for every real ``v`` in ``u`` (mirror of :func:`ramp_upper`)."""
    if not u.is_finite():
        return arb(0)
    r = (1 - u.upper() / rho).lower()
    if r >= 1:
        return arb(1)
    if r <= 0:
        return arb(0)
    return r


def _exact_fraction(point: arb) -> Fraction:
    """The exact rational value of a radius-0 ball (an endpoint returned by lower()/upper())."""
    man, exp = point.mid().man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


@dataclass(frozen=True)
class RampLossCertificate:
    """Certified enclosure of the empirical ramp loss ``(1/n) sum_i l_rho(y_i f(X_i))``.

    ``upper`` (the number the bound uses) and ``lower`` are exact points (Arb balls of radius 0)
    with ``lower <= empirical loss <= upper`` for the exact real network.  ``undecided`` counts
    samples whose margin ball ``y_i f(X_i)`` contains 0 or is not finite (sign not certified);
    ``errors01`` counts samples certainly misclassified (``y f < 0`` certainly); ``max_radius`` is
    the largest margin-ball radius (float, informational only); ``seconds`` the wall time.
    """

    upper: arb
    lower: arb
    n: int
    rho: arb
    undecided: int
    errors01: int
    max_radius: float
    prec: int
    seconds: float

    @property
    def per_sample_seconds(self) -> float:
        return self.seconds / self.n

    @property
    def upper_float(self) -> float:
        """The least binary64 number ``>= upper`` (safe to hand to float code)."""
        return _float_toward(self.upper, math.inf)

    @property
    def lower_float(self) -> float:
        """The greatest binary64 number ``<= lower``."""
        return _float_toward(self.lower, -math.inf)


def _float_toward(point: arb, direction: float) -> float:
    """Round an exact point to binary64 in ``direction`` (compared exactly, subnormals included)."""
    exact = _exact_fraction(point)
    f = float(exact)  # correctly rounded to nearest
    if (direction > 0 and Fraction(f) < exact) or (direction < 0 and Fraction(f) > exact):
        f = math.nextafter(f, direction)
    return f


@dataclass(frozen=True)
class _Partial:
    """Exact partial sums of per-sample ramp bounds over a block of samples (picklable)."""

    upper: Fraction
    lower: Fraction
    count: int
    undecided: int
    errors01: int
    max_radius: float


def _inputs_of(data: DataSet, weights: AnalysisWeights, embedding) -> Callable[[int], arb_mat]:
    if data.inputs is not None:
        if data.inputs.shape[2] != weights.width:
            raise LayoutError(
                f"{data.source}: inputs have width {data.inputs.shape[2]}, the network width is {weights.width}"
            )
        return lambda i: input_ball(data.inputs[i])
    if embedding is None:
        E = weights.extra.get("embedding.E")
        P = weights.extra.get("embedding.P")
    else:
        E, P = embedding
    if E is None:
        raise LayoutError(
            f"{data.source}: the data holds token ids but the model has no fixed embedding 'embedding.E'"
        )
    E = np.asarray(E, dtype=np.float64)
    P = None if P is None else np.asarray(P, dtype=np.float64)
    if E.ndim != 2 or E.shape[1] != weights.width:
        raise LayoutError(f"embedding E has shape {E.shape}, expected (vocab, {weights.width})")
    if P is not None and (P.ndim != 2 or P.shape[1] != weights.width):
        raise LayoutError(f"embedding P has shape {P.shape}, expected (T, {weights.width})")
    T = data.tokens.shape[1]
    V = E.shape[0]
    if data.tokens.max() >= V:
        raise LayoutError(f"{data.source}: token ids must lie in [0, {V}) for this model, found {data.tokens.max()}")
    if P is not None and P.shape[0] > 0 and T > P.shape[0]:
        raise LayoutError(
            f"{data.source}: sequence length {T} exceeds the model's positional embedding ({P.shape[0]} rows)"
        )
    return lambda i: embedded_input_ball(data.tokens[i], E, P)


def _block(weights, data, rho, embedding, prec, start, stop) -> _Partial:
    """Ramp bounds of samples ``start..stop-1``, summed exactly (runs in a worker process too)."""
    r = _margin_ball(rho)
    net = ArbNetwork.from_weights(weights)
    rows_of = _inputs_of(data, weights, embedding)
    hi = lo = Fraction(0)
    undecided = errors = 0
    max_radius = 0.0
    with ctx.workprec(prec):
        for i in range(start, stop):
            u = certified_forward(net, rows_of(i), prec=prec)
            if int(data.labels[i]) < 0:
                u = -u
            hi += _exact_fraction(ramp_upper(u, r))
            lo += _exact_fraction(ramp_lower(u, r))
            if not u.is_finite() or u.contains(0):
                undecided += 1
            elif u < 0:
                errors += 1
            max_radius = max(max_radius, float(u.rad()) if u.is_finite() else math.inf)
    return _Partial(hi, lo, stop - start, undecided, errors, max_radius)


def certified_ramp_loss(
    weights: AnalysisWeights,
    data: DataSet,
    rho: Margin,
    *,
    embedding: tuple[np.ndarray, np.ndarray | None] | None = None,
    prec: int = DEFAULT_PREC,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> RampLossCertificate:
    """Certified enclosure of the empirical ramp loss of ``weights`` on ``data`` at margin ``rho``.

    ``data`` is a :class:`specbound.dataset.DataSet` (token ids or already-embedded rows, labels
    +-1).  Token ids are embedded with ``embedding = (E, P)`` or, by default, with the model's
    fixed ``weights.extra['embedding.E'/'embedding.P']``.  ``rho`` is a positive float (exact), a
    decimal string (enclosed), or an ``arb``.  ``workers > 1`` spreads samples over processes
    (the result is identical: per-sample bounds are exact rationals summed exactly).
    ``progress(k)`` is called with the number of samples done so far.

    Guarantee: ``result.lower <= (1/n) sum_i l_rho(y_i f(X_i)) <= result.upper`` for the exact real
    network and inputs ``X_i = Pi(rows_i)``.
    """
    began = time.perf_counter()
    r = _margin_ball(rho)
    _inputs_of(data, weights, embedding)  # validate before any work (and before forking)
    n = int(data.labels.shape[0])
    if workers <= 1 or n < 2:
        parts = [_block(weights, data, r, embedding, prec, 0, n)]
        if progress is not None:
            progress(n)
    else:
        parts = _in_processes(weights, data, rho, r, embedding, prec, workers, progress)
    hi = sum((p.upper for p in parts), Fraction(0)) / n
    lo = sum((p.lower for p in parts), Fraction(0)) / n
    with ctx.workprec(prec):
        upper = arb(fmpq(hi.numerator, hi.denominator)).upper()
        lower = arb(fmpq(lo.numerator, lo.denominator)).lower()
    return RampLossCertificate(
        upper=upper,
        lower=lower,
        n=n,
        rho=r,
        undecided=sum(p.undecided for p in parts),
        errors01=sum(p.errors01 for p in parts),
        max_radius=max(p.max_radius for p in parts),
        prec=prec,
        seconds=time.perf_counter() - began,
    )


def _in_processes(weights, data, rho, r, embedding, prec, workers, progress) -> list[_Partial]:
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_all_start_methods, get_context

    # arb objects do not pickle; a ball's decimal string encloses it (arb's printing guarantee).
    rho_arg = r.str(30, radius=True) if isinstance(rho, arb) else rho
    n = int(data.labels.shape[0])
    size = max(1, -(-n // (4 * workers)))  # a few blocks per worker, for progress and balance
    done = 0
    parts = []
    # fork where available: workers only run Arb code, and spawn would re-import an unguarded
    # user script as __main__.
    method = "fork" if "fork" in get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context(method)) as pool:
        futures = [
            pool.submit(_block, weights, data, rho_arg, embedding, prec, a, min(n, a + size))
            for a in range(0, n, size)
        ]
        for fut in as_completed(futures):
            part = fut.result()
            parts.append(part)
            done += part.count
            if progress is not None:
                progress(done)
    return parts


__all__: Sequence[str] = (
    "ArbNetwork",
    "RampLossCertificate",
    "activation",
    "certified_forward",
    "certified_ramp_loss",
    "embedded_input_ball",
    "input_ball",
    "project_rows",
    "ramp_lower",
    "ramp_upper",
    "softmax_rows",
)

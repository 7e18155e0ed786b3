"""Independent brute-force references for the property suite.

Nothing here imports specbound: these are the definitions of proofs_notes/theory.md section 1 written out
naively, so a property test compares the *derived constants* against the *model itself*.

Every array function works on float64 arrays and on numpy ``object`` arrays of ``mpmath.mpf``
(see :func:`to_mp`), so a float64 ratio that looks violated can be re-evaluated at 50 digits
(review edit 4: float cancellation, not the lemma, is what breaks ratios at tiny perturbations).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import mpmath
import numpy as np

MP_DPS = 50

# ---------------------------------------------------------------- precision plumbing


def to_mp(a) -> np.ndarray:
    """Exact conversion of a float64 array to an object array of mpf (binary64 values are exact)."""
    if isinstance(a, np.ndarray) and a.dtype == object:
        return a  # already mpf
    arr = np.asarray(a, dtype=float)
    out = np.empty(arr.shape, dtype=object)
    for idx, v in np.ndenumerate(arr):
        out[idx] = mpmath.mpf(float(v))
    return out


def _is_mp(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == object


def _map(fn_float, fn_mp, a):
    if _is_mp(a):
        return np.vectorize(fn_mp, otypes=[object])(a)
    return fn_float(a)


def exp(a):
    return _map(np.exp, mpmath.exp, a)


def sqrt(a):
    return _map(np.sqrt, mpmath.sqrt, a)


def row_norms(x) -> np.ndarray:
    return sqrt(np.sum(x * x, axis=-1))


def norm_2inf(x) -> float:
    """||X||_{2,inf}: the largest row l2 norm."""
    return np.max(row_norms(x))


def spectral_norm(w) -> float:
    """||W|| in float64 (LAPACK); use :func:`mp_singular_values` where accuracy matters."""
    w = np.asarray(w, dtype=float)
    return float(np.linalg.norm(w, 2)) if w.size else 0.0


def mp_singular_values(w, dps: int = MP_DPS) -> list:
    """Singular values of the exact real matrix w (float64 entries), descending, at ``dps`` digits."""
    w = np.asarray(w, dtype=float)
    m, n = w.shape
    with mpmath.workdps(dps):
        if m == 0 or n == 0:
            return []
        s = mpmath.svd_r(mpmath.matrix(w.tolist()), compute_uv=False)
        return sorted((s[i] for i in range(min(m, n))), reverse=True)


# ---------------------------------------------------------------- model pieces (proofs_notes/theory.md section 1)


def softmax(z):
    """Row-wise softmax (max-shifted; exact in mpmath up to dps)."""
    z = z - np.max(z, axis=-1, keepdims=True)
    e = exp(z)
    return e / np.sum(e, axis=-1, keepdims=True)


def project(x):
    """Pi: each row x -> x / max(1, ||x||_2)."""
    n = row_norms(x)
    one = mpmath.mpf(1) if _is_mp(x) else 1.0
    den = np.array([max(one, v) for v in np.ravel(n)], dtype=object if _is_mp(x) else float)
    return x / den.reshape(np.shape(n) + (1,))


def head(x, a, v):
    """softmax(X A X^T) X V (no 1/sqrt(d) scale)."""
    return softmax(x @ a @ x.T) @ x @ v


def attention(x, a_list, v_list):
    """Att(X) = sum_h head(X; A_h, V_h)."""
    return sum(head(x, a, v) for a, v in zip(a_list, v_list))


def _std_normal_cdf_float(t):
    from scipy.special import ndtr

    return ndtr(t)


def phi_gelu(t):
    """Exact GELU t * Phi(t)."""
    return _map(lambda u: u * _std_normal_cdf_float(u), lambda u: u * mpmath.ncdf(u), t)


def dphi_gelu(t):
    """GELU derivative Phi(t) + t phi(t) (from the product rule; phi the normal density)."""

    def f(u):
        return _std_normal_cdf_float(u) + u * np.exp(-u * u / 2) / math.sqrt(2 * math.pi)

    return _map(f, lambda u: mpmath.ncdf(u) + u * mpmath.npdf(u), t)


_K = math.sqrt(2 / math.pi)


def phi_gelu_tanh(t):
    """tanh-approximate GELU 0.5 t (1 + tanh(sqrt(2/pi)(t + 0.044715 t^3)))."""

    def mp(u):
        k = mpmath.sqrt(2 / mpmath.pi)
        return u / 2 * (1 + mpmath.tanh(k * (u + mpmath.mpf("0.044715") * u**3)))

    return _map(lambda u: 0.5 * u * (1 + np.tanh(_K * (u + 0.044715 * u**3))), mp, t)


def dphi_gelu_tanh(t):
    """Derivative of the tanh GELU (chain rule, written out)."""

    def f(u):
        g = _K * (u + 0.044715 * u**3)
        th = np.tanh(g)
        return 0.5 * (1 + th) + 0.5 * u * (1 - th**2) * _K * (1 + 3 * 0.044715 * u**2)

    def mp(u):
        k = mpmath.sqrt(2 / mpmath.pi)
        c = mpmath.mpf("0.044715")
        th = mpmath.tanh(k * (u + c * u**3))
        return (1 + th) / 2 + u / 2 * (1 - th**2) * k * (1 + 3 * c * u**2)

    return _map(f, mp, t)


def phi_relu(t):
    return _map(lambda u: np.maximum(u, 0.0), lambda u: max(u, mpmath.mpf(0)), t)


ACTIVATIONS = {"gelu": phi_gelu, "gelu_tanh": phi_gelu_tanh, "relu": phi_relu}


def feed_forward(y, m_in, m_out, activation: str = "gelu"):
    """F(Y) = phi(Y M_in) M_out."""
    return ACTIVATIONS[activation](y @ m_in) @ m_out


@dataclass
class Layer:
    """One analysis-model layer: score matrices A_h, value matrices V_h, and the MLP."""

    a: list
    v: list
    m_in: np.ndarray
    m_out: np.ndarray

    def matrices(self) -> dict:
        out = {("A", h): a for h, a in enumerate(self.a)}
        out.update({("V", h): v for h, v in enumerate(self.v)})
        out[("M_in", -1)] = self.m_in
        out[("M_out", -1)] = self.m_out
        return out


@dataclass
class Net:
    """Analysis-model network: layers, read-out w, activation name, residual flag."""

    layers: list
    w: np.ndarray
    activation: str = "gelu"
    residual: bool = False

    def with_matrix(self, layer: int, key: tuple, value) -> "Net":
        """A copy with one matrix replaced (key = ("A"|"V", h) or ("M_in"|"M_out", -1))."""
        layers = [replace(lay, a=list(lay.a), v=list(lay.v)) for lay in self.layers]
        kind, h = key
        lay = layers[layer]
        if kind == "A":
            lay.a[h] = value
        elif kind == "V":
            lay.v[h] = value
        elif kind == "M_in":
            lay.m_in = value
        else:
            lay.m_out = value
        return replace(self, layers=layers)

    def to_mp(self) -> "Net":
        layers = [
            Layer([to_mp(a) for a in lay.a], [to_mp(v) for v in lay.v], to_mp(lay.m_in), to_mp(lay.m_out))
            for lay in self.layers
        ]
        return replace(self, layers=layers, w=to_mp(self.w))


def layer_forward(x, lay: Layer, activation: str, residual: bool):
    """X^(l-1) -> X^(l) (proofs_notes/theory.md section 1; residual variant (R) with Pi when ``residual``)."""
    att = attention(x, lay.a, lay.v)
    y = project(x + att) if residual else project(att)
    ff = feed_forward(y, lay.m_in, lay.m_out, activation)
    return project(y + ff) if residual else project(ff)


def forward(net: Net, x) -> float:
    """f(X) = <w, x_1^(L)> by brute force; X must already lie in X_T."""
    for lay in net.layers:
        x = layer_forward(x, lay, net.activation, net.residual)
    return np.dot(net.w, x[0])


# ---------------------------------------------------------------- losses, packings, Rademacher


def ramp(u: float, rho: float) -> float:
    """l_rho(u) = min(1, max(0, 1 - u/rho))."""
    return min(1.0, max(0.0, 1.0 - u / rho))


def greedy_packing(points: np.ndarray, delta: float, gauge) -> np.ndarray:
    """Greedily keep points whose gauge distance to every kept point exceeds ``delta``.

    The result is delta-separated, so its size is at most the maximal packing number, which
    the volumetric argument bounds by (1 + 2c/delta)^d.
    """
    kept: list[np.ndarray] = []
    for p in points:
        if all(gauge(p - q) > delta for q in kept):
            kept.append(p)
    return np.array(kept)


def rademacher_exact(vectors: np.ndarray) -> float:
    """E_sigma max_a (1/n) <sigma, a> over all 2^n sign vectors, exactly (up to float sums).

    ``vectors`` is (N, n).  Uses mpmath fsum per sign vector so the mean is accurate.
    """
    vectors = np.asarray(vectors, dtype=float)
    n = vectors.shape[1]
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=n)))
    # each inner product is a sum of n <= 12 terms of size <= 1: exact enough in float64
    best = np.max(signs @ vectors.T, axis=1)
    return float(mpmath.fsum(best.tolist()) / (len(signs) * n))


def greedy_cover_sizes(vectors: np.ndarray, metric) -> tuple[np.ndarray, np.ndarray]:
    """Internal greedy u-cover sizes of a finite set, as a step function of u.

    Returns (breakpoints, sizes): for u in [breakpoints[i], breakpoints[i+1]) the greedy cover
    (a point is covered when its distance to a centre is <= u) has ``sizes[i]`` points.  It only
    changes at pairwise distances, so evaluating at each distinct distance is exhaustive.
    A greedy cover is a valid cover, so its size is >= the covering number N(u).
    """
    v = np.asarray(vectors, dtype=float)
    d = np.array([[metric(a - b) for b in v] for a in v])
    cuts = np.unique(np.concatenate(([0.0], d.ravel())))
    sizes = []
    for u in cuts:
        centres: list[int] = []
        for i in range(len(v)):
            if all(d[i, c] > u for c in centres):
                centres.append(i)
        sizes.append(len(centres))
    return cuts, np.array(sizes)


def integral_sqrt_log_step(cuts: np.ndarray, sizes: np.ndarray, lo: float, hi: float) -> float:
    """Exact integral of sqrt(log N(u)) over [lo, hi] for the right-continuous step function."""
    total = 0.0
    edges = list(cuts[1:]) + [math.inf]
    for left, right, size in zip(cuts, edges, sizes):
        a, b = max(left, lo), min(right, hi)
        if b > a:
            total += (b - a) * math.sqrt(math.log(size))
    return total

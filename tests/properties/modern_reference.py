"""Brute-force reference implementations of the modern blocks (numpy / mpmath), written from the
definitions in proofs_notes/{masked_softmax,rope_attention,gated_ff,ls_model}.md and importing
nothing from the code under test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mpmath
import numpy as np
from scipy.special import erf

# -- activations ------------------------------------------------------------------------------


def silu(t):
    return t / (1.0 + np.exp(-t))


def gelu(t):
    return 0.5 * t * (1.0 + erf(t / math.sqrt(2.0)))


def gelu_tanh(t):
    return 0.5 * t * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * t**3)))


ACTIVATIONS = {"silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def mp_silu(t):
    return t / (1 + mpmath.exp(-t))


def mp_gelu(t):
    return t * (1 + mpmath.erf(t / mpmath.sqrt(2))) / 2


def mp_gelu_tanh(t):
    return t * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (t + mpmath.mpf("0.044715") * t**3))) / 2


MP_ACTIVATIONS = {"silu": mp_silu, "gelu": mp_gelu, "gelu_tanh": mp_gelu_tanh}

# -- norms ------------------------------------------------------------------------------------


def op(m) -> float:
    """Spectral norm (largest singular value)."""
    m = np.atleast_2d(np.asarray(m, dtype=float))
    return float(np.linalg.norm(m, 2)) if m.size else 0.0


def norm2inf(x) -> float:
    """max row l2 norm."""
    return float(np.max(np.linalg.norm(np.atleast_2d(x), axis=1)))


def project_rows(x):
    """Pi: each row onto the closed unit l2 ball."""
    nrm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(nrm, 1.0)


# -- masked softmax ---------------------------------------------------------------------------


def masked_softmax(z, mask):
    """softmax of z on the True entries of ``mask`` (nonempty), 0 elsewhere."""
    z = np.asarray(z, dtype=float)
    out = np.zeros_like(z)
    zm = z[mask]
    e = np.exp(zm - zm.max())
    out[mask] = e / e.sum()
    return out


def causal_masks(T: int):
    return np.tril(np.ones((T, T), dtype=bool))


# -- rotations --------------------------------------------------------------------------------


def rope_tables(T: int, d_h: int, base: float = 10000.0):
    """binary64 cos/sin tables as a model computes them: angle t * base^(-2i/d_h)."""
    inv = base ** (-np.arange(0, d_h, 2, dtype=float) / d_h)
    ang = np.outer(np.arange(T, dtype=float), inv)
    return np.cos(ang), np.sin(ang)


def rope_matrix(cos_row, sin_row):
    """Block-diagonal d_h x d_h matrix of 2x2 blocks [[c, s], [-s, c]] (row-vector convention)."""
    d_h = 2 * len(cos_row)
    R = np.zeros((d_h, d_h))
    for i, (c, s) in enumerate(zip(cos_row, sin_row)):
        R[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    return R


def rope_pair_matrices(T: int, d_h: int):
    """R_ts = R_t R_s^T from the binary64 tables (what q_t R_t (k_s R_s)^T amounts to)."""
    cos, sin = rope_tables(T, d_h)
    Rt = [rope_matrix(cos[t], sin[t]) for t in range(T)]
    return [[Rt[t] @ Rt[s].T for s in range(T)] for t in range(T)], rope_table_rho(cos, sin)


def rope_table_rho(cos, sin) -> float:
    """An upper bound of max ||R_t R_s^T|| <= (max_i sqrt(c_i^2 + s_i^2))^2, from the exact binary64
    values in mpmath, rounded up to a double."""
    with mpmath.workdps(50):
        m = max(mpmath.mpf(float(c)) ** 2 + mpmath.mpf(float(s)) ** 2 for c, s in zip(cos.ravel(), sin.ravel()))
        return math.nextafter(float(m), math.inf)  # (sqrt m)^2 = m, rounded up


def random_orthogonal(rng, n: int):
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


# -- attention heads --------------------------------------------------------------------------


def rope_head(X, Q, K, V, R, masks):
    """head(X)_t = sum_s sigma_{M_t}(z_t)_s x_s V with z_ts = x_t Q R_ts K^T x_s^T."""
    T = X.shape[0]
    q, k, v = X @ Q, X @ K, X @ V
    out = np.zeros((T, V.shape[1]))
    for t in range(T):
        z = np.array([q[t] @ R[t][s] @ k[s] for s in range(T)])
        out[t] = masked_softmax(z, masks[t]) @ v
    return out


def gqa_attention(X, Qs, Ks, Vs, group, R, masks):
    """sum over heads h of rope_head with key matrix Ks[group[h]]."""
    return sum(rope_head(X, Qs[h], Ks[group[h]], Vs[h], R, masks) for h in range(len(Qs)))


# -- gated feed-forward -----------------------------------------------------------------------


def gated_ff(Y, G, U, D, act: str):
    return (ACTIVATIONS[act](Y @ G) * (Y @ U)) @ D


# -- the Llama-style analysis network ---------------------------------------------------------


@dataclass
class LSLayer:
    Q: list  # H matrices N x d_h (score scale folded in)
    K: list  # n_kv matrices N x d_h
    Vt: list  # H matrices N x N (W_V^(g) W_O^(h))
    G: np.ndarray
    U: np.ndarray
    D: np.ndarray


def ls_forward(X, layers, group, w, act: str, R, residual: bool = False) -> float:
    """f(X) = <w, x_last> of the LS analysis model: Pi after attention (RoPE, GQA, causal mask) and
    after the gated block; the residual variant adds the block input before each Pi."""
    masks = causal_masks(X.shape[0])
    for lay in layers:
        att = gqa_attention(X, lay.Q, lay.K, lay.Vt, group, R, masks)
        Y = project_rows(X + att if residual else att)
        F = gated_ff(Y, lay.G, lay.U, lay.D, act)
        X = project_rows(Y + F if residual else F)
    return float(w @ X[-1])

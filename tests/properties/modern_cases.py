"""Hypothesis strategies for the modern blocks: random cases (a seed drives numpy) plus the
near-extremal scalar families the hill-climbing and the mutation searches need.

A case is a plain tuple; each ``*_sides(case, K)`` in ``test_modern_blocks.py`` turns it into
(lhs, rhs).  Perturbations are bounded below (relative size >= 1e-3) so float64 cancellation
stays far below the 1e-9 relative tolerance.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from . import modern_reference as mref

seeds = st.integers(0, 2**32 - 1)
etas = st.floats(1e-3, 0.5)
GATED_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


def unit_rows(rng, T, N):
    X = rng.standard_normal((T, N))
    return mref.project_rows(X * rng.uniform(0.2, 3.0, size=(T, 1)) / np.sqrt(N))


@st.composite
def masked_softmax_cases(draw):
    """(z, z', mask): masks random nonempty, singleton, or a causal row."""
    rng = np.random.default_rng(draw(seeds))
    T = draw(st.integers(1, 8))
    kind = draw(st.sampled_from(("random", "singleton", "causal")))
    if kind == "singleton":
        mask = np.zeros(T, bool)
        mask[rng.integers(T)] = True
    elif kind == "causal":
        mask = mref.causal_masks(T)[rng.integers(T)]
    else:
        mask = rng.random(T) < 0.6
        mask[rng.integers(T)] = True
    z = rng.standard_normal(T) * draw(st.floats(0.1, 5))
    dz = rng.standard_normal(T) * draw(etas)
    return z, z + dz, mask


@st.composite
def masked_softmax_witnesses(draw):
    """z = 0, z' = +-eta on a two-element mask inside a longer row (ratio tanh(eta)/eta)."""
    T = draw(st.integers(2, 6))
    i, j = draw(st.sampled_from([(a, b) for a in range(T) for b in range(T) if a < b]))
    eta = draw(etas)
    mask = np.zeros(T, bool)
    mask[[i, j]] = True
    zp = np.zeros(T)
    zp[i], zp[j] = eta, -eta
    z = np.where(mask, 0.0, draw(st.floats(-50, 50)))  # off the mask: anything, the same in both
    zp[~mask] = z[~mask]
    return z, zp, mask


@st.composite
def rope_cases(draw):
    """(kind, X, X', Q, Q', K, K', V, V', R, masks, rho): one perturbed argument; R exact random
    orthogonal R_{t-s}, the binary64 RoPE tables, or a scaled rotation (rho > 1)."""
    rng = np.random.default_rng(draw(seeds))
    which = draw(st.sampled_from(("input", "Q", "K", "V")))
    rot = draw(st.sampled_from(("orthogonal", "rope", "scaled")))
    T, N, d_h = draw(st.integers(1, 5)), draw(st.integers(1, 4)), 2 * draw(st.integers(1, 2))
    X = unit_rows(rng, T, N)
    Q, K = (rng.standard_normal((N, d_h)) * draw(st.floats(0.1, 3)) for _ in range(2))
    V = rng.standard_normal((N, N))
    rho = 1.0
    if rot == "rope":
        R, rho = mref.rope_pair_matrices(T, d_h)
    else:
        Rd = {k: mref.random_orthogonal(rng, d_h) for k in range(-T + 1, T)}
        if rot == "scaled":
            rho = draw(st.floats(1.0, 2.0))
        R = [[rho * Rd[t - s] for s in range(T)] for t in range(T)]
    eta = draw(etas)
    X2, Q2, K2, V2 = X, Q, K, V
    if which == "input":
        X2 = mref.project_rows(X + eta * rng.standard_normal((T, N)))
    elif which == "Q":
        Q2 = Q + eta * rng.standard_normal(Q.shape)
    elif which == "K":
        K2 = K + eta * rng.standard_normal(K.shape)
    else:
        V2 = V + eta * rng.standard_normal(V.shape)
    masks = mref.causal_masks(T) if draw(st.booleans()) else np.ones((T, T), bool)
    return which, X, X2, Q, Q2, K, K2, V, V2, R, masks, rho


@st.composite
def rope_witnesses(draw):
    """N = d_h = 1, T = 2, X = (1, -1): a score-matrix change eta moves row 1 by tanh(rho q eta)."""
    which = draw(st.sampled_from(("Q", "K")))
    eta, rho = draw(st.floats(1e-3, 0.2)), draw(st.floats(1.0, 2.0))
    X = np.array([[1.0], [-1.0]])
    one, zero = np.ones((1, 1)), np.zeros((1, 1))
    R = [[rho * one for _ in range(2)] for _ in range(2)]
    masks = np.ones((2, 2), bool)
    if which == "Q":
        return "Q", X, X, zero, eta * one, one, one, one, one, R, masks, rho
    return "K", X, X, one, one, zero, eta * one, one, one, R, masks, rho


@st.composite
def gqa_cases(draw):
    """(X, Qs, Ks, Ks', Vs, group, R, masks, g): 2-4 heads per group, key matrix K_g perturbed;
    optionally all heads of the group identical (where the sum is attained)."""
    rng = np.random.default_rng(draw(seeds))
    n_kv, per = draw(st.integers(1, 2)), draw(st.integers(2, 4))
    T, N, d_h = draw(st.integers(2, 4)), draw(st.integers(1, 3)), 2
    same = draw(st.booleans())
    H = n_kv * per
    group = [h // per for h in range(H)]
    if same:
        X = np.array([[1.0] + [0.0] * (N - 1), [-1.0] + [0.0] * (N - 1)] + [[0.0] * N] * (T - 2))
        q = np.zeros((N, d_h))
        q[0, 0] = draw(st.floats(0.5, 2))
        v = np.zeros((N, N))
        v[0, 0] = 1.0
        Qs, Vs = [q] * H, [v] * H
        Ks = [np.zeros((N, d_h)) for _ in range(n_kv)]
        R = [[np.eye(d_h) for _ in range(T)] for _ in range(T)]
        rho = 1.0
    else:
        X = unit_rows(rng, T, N)
        Qs = [rng.standard_normal((N, d_h)) for _ in range(H)]
        Vs = [rng.standard_normal((N, N)) for _ in range(H)]
        Ks = [rng.standard_normal((N, d_h)) for _ in range(n_kv)]
        R, rho = mref.rope_pair_matrices(T, d_h)
    g = draw(st.integers(0, n_kv - 1))
    Ks2 = list(Ks)
    dK = np.zeros((N, d_h))
    if same:
        dK[0, 0] = draw(st.floats(1e-3, 0.05))
    else:
        dK = rng.standard_normal((N, d_h)) * draw(etas)
    Ks2[g] = Ks[g] + dK
    masks = np.ones((T, T), bool)
    return X, Qs, Ks, Ks2, Vs, group, R, masks, g, rho


@st.composite
def gated_cases(draw, activations=GATED_ACTIVATIONS):
    """(which, act, Y, Y', G, G', U, U', D, D'): random shapes, one argument perturbed."""
    rng = np.random.default_rng(draw(seeds))
    which, act = draw(st.sampled_from(("input", "G", "U", "D"))), draw(st.sampled_from(activations))
    T, N, dff = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
    Y = unit_rows(rng, T, N)
    G = rng.standard_normal((N, dff)) * draw(st.floats(0.1, 4))
    U, D = rng.standard_normal((N, dff)), rng.standard_normal((dff, N))
    eta = draw(etas)
    Y2, G2, U2, D2 = Y, G, U, D
    if which == "input":
        Y2 = mref.project_rows(Y + eta * rng.standard_normal(Y.shape))
    elif which == "G":
        G2 = G + eta * rng.standard_normal(G.shape)
    elif which == "U":
        U2 = U + eta * rng.standard_normal(U.shape)
    else:
        D2 = D + eta * rng.standard_normal(D.shape)
    return which, act, Y, Y2, G, G2, U, U2, D, D2


@st.composite
def gated_witnesses(draw, activations=GATED_ACTIVATIONS, whiches=("input", "G", "U", "D")):
    """Scalar cases N = d_ff = 1, y = 1: the ratios tend to phi'(g)/L, phi(g)/(B g), and
    (g phi'(g) + phi(g))/((B + L) g) for the input."""
    which, act = draw(st.sampled_from(whiches)), draw(st.sampled_from(activations))
    g, eta = draw(st.floats(0.05, 8)), draw(st.floats(1e-4, 1e-2))
    one = np.ones((1, 1))
    Y, G, U, D = one, g * one, one, one
    Y2, G2, U2, D2 = Y, G, U, D
    if which == "input":
        Y2 = (1 - eta) * one
    elif which == "G":
        G2 = (g + eta) * one
    elif which == "U":
        U, U2 = 0 * one, eta * one
    else:
        D, D2 = 0 * one, eta * one
    return which, act, Y, Y2, G, G2, U, U2, D, D2


@st.composite
def ls_networks(draw, residual: bool = False):
    """(layers, group, w, act, R, rho, X, l, kind, idx, dW): a random LS network and one matrix
    perturbation (layer l, kind, head/group index)."""
    rng = np.random.default_rng(draw(seeds))
    act = draw(st.sampled_from(GATED_ACTIVATIONS))
    Lnum, N, d_h, dff = draw(st.integers(1, 2)), draw(st.integers(2, 4)), 2, draw(st.integers(1, 5))
    n_kv, per = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    H, T = n_kv * per, draw(st.integers(1, 4))
    group = [h // per for h in range(H)]
    sc = draw(st.floats(0.3, 2.0))
    layers = [mref.LSLayer(
        Q=[sc * rng.standard_normal((N, d_h)) for _ in range(H)],
        K=[sc * rng.standard_normal((N, d_h)) for _ in range(n_kv)],
        Vt=[sc * rng.standard_normal((N, N)) / np.sqrt(N) for _ in range(H)],
        G=sc * rng.standard_normal((N, dff)), U=sc * rng.standard_normal((N, dff)),
        D=sc * rng.standard_normal((dff, N))) for _ in range(Lnum)]
    R, rho = mref.rope_pair_matrices(T, d_h)
    w = rng.standard_normal(N)
    X = unit_rows(rng, T, N)
    l = draw(st.integers(0, Lnum - 1))
    kind = draw(st.sampled_from(("Q", "K", "Vt", "G", "U", "D")))
    idx = draw(st.integers(0, (n_kv if kind == "K" else H) - 1))
    return layers, group, w, act, R, rho, X, l, kind, idx, draw(etas), int(rng.integers(2**31))

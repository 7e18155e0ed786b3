"""An independent 50-digit reference of every analysis-model variant, and random weights to feed it.

Written from the model definitions (proofs_notes/theory.md sections 1, 10, 11; model.py's conventions:
rotary pairs (i, i + d/2) mapped to (a c - b s, a s + b c), consecutive heads sharing a key/value group),
never from the code under test: dense exact products of the factors, softmax over the kept keys, Pi,
the activations from mpmath's erf / tanh / exp.
"""

from __future__ import annotations

import mpmath
import numpy as np

from specbound.matrices import AnalysisWeights, NamedMatrix, ordered

DPS = 50


def mp_mat(a) -> mpmath.matrix:
    return mpmath.matrix([[mpmath.mpf(float(v)) for v in row] for row in np.atleast_2d(a)])


def mp_left(m) -> mpmath.matrix:
    """``sqrt(scale_sq) * left`` of a covered matrix, exactly to 50 digits (the scale is part of it)."""
    c = mpmath.sqrt(mpmath.mpf(m.scale_sq.numerator) / m.scale_sq.denominator)
    return mp_mat(m.left) * c


def mp_phi(name: str, t):
    if name == "gelu":
        return t * (1 + mpmath.erf(t / mpmath.sqrt(2))) / 2
    if name == "gelu_tanh":
        k = mpmath.sqrt(2 / mpmath.pi)
        return t * (1 + mpmath.tanh(k * (t + mpmath.mpf("0.044715") * t**3))) / 2
    if name == "silu":
        return t / (1 + mpmath.exp(-t))
    return max(t, mpmath.mpf(0))


def mp_project(X):
    out = X.copy()
    for i in range(X.rows):
        m = max(mpmath.mpf(1), mpmath.sqrt(sum(X[i, j] ** 2 for j in range(X.cols))))
        for j in range(X.cols):
            out[i, j] = X[i, j] / m
    return out


def _softmax_row(z: list, keep: int) -> list:
    e = [mpmath.exp(z[s]) for s in range(keep)]
    tot = sum(e)
    return [e[s] / tot for s in range(keep)] + [mpmath.mpf(0)] * (len(z) - keep)


def _rotate(row: list, t: int, cos, sin) -> list:
    half = len(row) // 2
    out = list(row)
    for i in range(half):
        c, s = mpmath.mpf(float(cos[t, i])), mpmath.mpf(float(sin[t, i]))
        a, b = row[i], row[i + half]
        out[i], out[i + half] = a * c - b * s, a * s + b * c
    return out


def _rows(M) -> list[list]:
    return [[M[i, j] for j in range(M.cols)] for i in range(M.rows)]


def _group(h: int, H: int, G: int) -> int:
    return h if G <= 0 else h // (H // G)


def mp_outputs(weights: AnalysisWeights, X0: mpmath.matrix) -> list:
    """The exact outputs ``f_c = <w_c, x_tau^(L)>`` (k of them) on the exact input rows ``X0`` (before Pi)."""
    variant = weights.variant
    ls = variant in ("ls", "ls_residual")
    causal = variant in ("causal", "ls", "ls_residual")
    residual = variant in ("residual", "ls_residual")
    cos, sin = weights.extra.get("rope.cos"), weights.extra.get("rope.sin")
    T = X0.rows
    X = mp_project(X0)
    for l in range(weights.num_layers):
        att = mpmath.zeros(T, X.cols)
        xr = _rows(X)
        for h in range(weights.num_heads):
            if ls:
                Q = mp_left(weights.get(l, "Q", h))
                K = mp_left(weights.get(l, "K", _group(h, weights.num_heads, weights.num_kv_heads)))
                q = [_rotate(_rows(mp_mat([r]) * Q)[0], t, cos, sin) for t, r in enumerate(xr)]
                k = [_rotate(_rows(mp_mat([r]) * K)[0], t, cos, sin) for t, r in enumerate(xr)]
                S = [[sum(a * b for a, b in zip(q[t], k[s])) for s in range(T)] for t in range(T)]
            else:
                qk = weights.get(l, "QK", h)
                A = mp_left(qk) * (mp_mat(qk.right) if qk.right is not None else mpmath.eye(X.cols))
                S = _rows(X * A * X.T)
            vt = weights.get(l, "V_tilde", h)
            V = mp_left(vt) * (mp_mat(vt.right) if vt.right is not None else mpmath.eye(X.cols))
            XV = X * V
            for t in range(T):
                p = _softmax_row(S[t], t + 1 if causal else T)
                for j in range(X.cols):
                    att[t, j] += sum(p[s] * XV[s, j] for s in range(T))
        Y = mp_project(X + att if residual else att)
        if ls:
            a = (Y * mp_left(weights.get(l, "G"))).apply(lambda t: mp_phi(weights.activation, t))
            b = Y * mp_left(weights.get(l, "U"))
            hid = mpmath.matrix([[a[i, j] * b[i, j] for j in range(a.cols)] for i in range(a.rows)])
            Z = hid * mp_left(weights.get(l, "D"))
        else:
            U = (Y * mp_left(weights.get(l, "M_in"))).apply(lambda t: mp_phi(weights.activation, t))
            Z = U * mp_left(weights.get(l, "M_out"))
        X = mp_project(Y + Z if residual else Z)
    tau = T - 1 if causal else 0
    W = np.atleast_2d(np.asarray(weights.readout, dtype=np.float64))
    return [sum(X[tau, j] * mpmath.mpf(float(w[j])) for j in range(X.cols)) for w in W]


def rope(T: int, d: int, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """Rotary tables: exact-rotation-like angles, or random entries (any reals: the model is defined
    with the tables it stores)."""
    angles = np.arange(T)[:, None] * 10000.0 ** (-2 * np.arange(d // 2) / d)[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    if rng is not None:
        cos, sin = cos * (1 + 1e-3 * rng.standard_normal(cos.shape)), sin
    return cos, sin


def random_weights(rng, *, variant="plain", activation="gelu", L=2, H=2, N=4, d=2, F=5, kv=0, qk=1.0,
                   k=1, T=4, readout=None, dense=False) -> AnalysisWeights:
    """Random weights of any variant (plain kinds factored, or dense with ``dense``; LS kinds with
    ``kv`` key/value groups, 0 = one per head); ``qk`` scales the score factors; ``k`` read-out rows."""
    ls = variant in ("ls", "ls_residual")
    G = H if kv <= 0 else kv
    mats = []
    for l in range(L):
        if ls:
            mats += [NamedMatrix(l, h, "Q", rng.standard_normal((N, d)) * qk) for h in range(H)]
            mats += [NamedMatrix(l, g, "K", rng.standard_normal((N, d)) * qk) for g in range(G)]
            wv = [rng.standard_normal((N, d)) for _ in range(G)]
            mats += [NamedMatrix(l, h, "V_tilde", wv[_group(h, H, kv)], rng.standard_normal((d, N)) / np.sqrt(d))
                     for h in range(H)]
            mats.append(NamedMatrix(l, -1, "G", rng.standard_normal((N, F)) / np.sqrt(N)))
            mats.append(NamedMatrix(l, -1, "U", rng.standard_normal((N, F)) / np.sqrt(N)))
            mats.append(NamedMatrix(l, -1, "D", rng.standard_normal((F, N))))
            continue
        for h in range(H):
            if dense:
                mats.append(NamedMatrix(l, h, "QK", rng.standard_normal((N, N)) * qk))
                mats.append(NamedMatrix(l, h, "V_tilde", rng.standard_normal((N, N))))
            else:
                W_Q, W_K = (rng.standard_normal((N, d)) * qk for _ in range(2))
                mats.append(NamedMatrix(l, h, "QK", W_Q, np.ascontiguousarray(W_K.T)))
                mats.append(NamedMatrix(l, h, "V_tilde", rng.standard_normal((N, d)),
                                        rng.standard_normal((d, N)) / np.sqrt(d)))
        mats.append(NamedMatrix(l, -1, "M_in", rng.standard_normal((N, F)) / np.sqrt(N)))
        mats.append(NamedMatrix(l, -1, "M_out", rng.standard_normal((F, N))))
    if readout is None:
        readout = rng.standard_normal(N) if k == 1 else rng.standard_normal((k, N))
    extra = {}
    if ls:
        extra["rope.cos"], extra["rope.sin"] = rope(T, d, rng)
    return AnalysisWeights(matrices=ordered(mats), num_layers=L, num_heads=H, width=N, head_dim=d, ff_dim=F,
                           activation=activation, readout=readout, variant=variant, extra=extra,
                           num_kv_heads=kv if ls else 0)

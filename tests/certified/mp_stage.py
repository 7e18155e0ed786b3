"""50-digit references of single stages of the analysis network and of the linear map J_hat of
proofs_notes/interval_adjoint.md (the map whose adjoint the backward program computes), written from the
model definitions and the note, importing nothing from the code under test.

A stage reads binary64 arrays taken as exact reals: the weights of one layer (head blocks as in
``tests.certified.mp_network``) and, for J_hat, the computed intermediates of the pass (``q_hat``, ``k_hat``
after rotation, ``v_hat``, ``p_hat``, ``y_hat``, ``nu_hat``, ``d_hat``, ``b_hat``, ``g_hat``).
"""

from __future__ import annotations

import mpmath
import numpy as np

from tests.certified.mp_network import _group, mp_phi


def M(a) -> mpmath.matrix:
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    return mpmath.matrix([[mpmath.mpf(float(v)) for v in row] for row in a])


def vec(a) -> list:
    return [mpmath.mpf(float(v)) for v in np.ravel(a)]


def pi(a: list) -> list:
    n = mpmath.sqrt(sum(x * x for x in a))
    return [x / max(mpmath.mpf(1), n) for x in a]


def rotate(row: list, c, s) -> list:
    half = len(row) // 2
    a, b = row[:half], row[half:]
    cc, ss = vec(c), vec(s)
    return [a[i] * cc[i] - b[i] * ss[i] for i in range(half)] + [a[i] * ss[i] + b[i] * cc[i] for i in range(half)]


def rowmul(row: list, W: mpmath.matrix) -> list:
    return [sum(row[i] * W[i, j] for i in range(W.rows)) for j in range(W.cols)]


class Layer:
    """One layer's weights as exact reals: per head W_Q, W_K, W_V (of the head's group), W_O; feed-forward."""

    def __init__(self, w, l: int):
        self.ls = w.variant in ("ls", "ls_residual")
        self.causal = w.variant in ("causal", "ls", "ls_residual")
        self.residual = w.variant in ("residual", "ls_residual")
        H, N = w.num_heads, w.width
        self.H, self.act = H, w.activation
        G = (w.num_kv_heads or H) if self.ls else H
        self.group = [_group(h, H, w.num_kv_heads) if self.ls else h for h in range(H)]
        self.WQ, self.WK, self.WV, self.WO = [], [], [], []
        for h in range(H):
            vt = w.get(l, "V_tilde", h)
            if self.ls:
                self.WQ.append(M(w.get(l, "Q", h).left))
                self.WK.append(M(w.get(l, "K", self.group[h]).left))
            else:
                qk = w.get(l, "QK", h)
                self.WQ.append(M(qk.left))
                self.WK.append(M(np.eye(N) if qk.right is None else qk.right.T))
            self.WV.append(M(vt.left))
            self.WO.append(M(np.eye(N) if vt.right is None else vt.right))
        del G
        kinds = ("G", "U", "D") if self.ls else ("M_in", "M_out")
        self.ff = [M(w.get(l, k).left) for k in kinds]
        self.cos, self.sin = w.extra.get("rope.cos"), w.extra.get("rope.sin")


def attention_stage(L: Layer, X: list, qrows: list) -> list:
    """Exact ``Pi([x_t +] sum_h sum_s p_ts v_s W_O)`` for the query rows ``qrows`` of the rows ``X``."""
    T = len(X)
    out = []
    for t in qrows:
        acc = list(X[t]) if L.residual else [mpmath.mpf(0)] * len(X[t])
        keys = range(t + 1) if L.causal else range(T)
        for h in range(L.H):
            q = rowmul(X[t], L.WQ[h])
            ks = {s: rowmul(X[s], L.WK[h]) for s in keys}
            if L.ls:
                q = rotate(q, L.cos[t], L.sin[t])
                ks = {s: rotate(k, L.cos[s], L.sin[s]) for s, k in ks.items()}
            sc = {s: sum(a * b for a, b in zip(q, ks[s])) for s in keys}
            mx = max(sc.values())
            e = {s: mpmath.exp(sc[s] - mx) for s in keys}
            tot = sum(e.values())
            hv = [sum(e[s] / tot * v for s, v in ((s, rowmul(X[s], L.WV[h])[j]) for s in keys))
                  for j in range(L.WV[h].cols)]
            acc = [a + b for a, b in zip(acc, rowmul(hv, L.WO[h]))]
        out.append(pi(acc))
    return out


def ff_stage(L: Layer, Y: list) -> list:
    """Exact ``Pi([y +] F(y))`` per row."""
    out = []
    for y in Y:
        if L.ls:
            a, b = rowmul(y, L.ff[0]), rowmul(y, L.ff[1])
            z = rowmul([mp_phi(L.act, ai) * bi for ai, bi in zip(a, b)], L.ff[2])
        else:
            z = rowmul([mp_phi(L.act, ui) for ui in rowmul(y, L.ff[0])], L.ff[1])
        out.append(pi([a + b for a, b in zip(y, z)] if L.residual else z))
    return out


def pi_jhat(y_hat, nu_hat: float, D: list) -> list:
    """``J_Pi D``: ``iota (D - (D . y) y)`` with ``iota = fl(1/nu)`` on the sphere branch, else D."""
    if not nu_hat > 1.0:
        return list(D)
    iota = mpmath.mpf(float(1.0 / nu_hat))
    y = vec(y_hat)
    c = sum(a * b for a, b in zip(D, y))
    return [iota * (a - c * b) for a, b in zip(D, y)]


def ff_jhat(L: Layer, row: dict, D: list) -> list:
    """``J_hat D`` of a feed-forward stage (step 6's map) at the computed row ``row``."""
    d = vec(row["d"])
    if L.ls:
        wa, wb = rowmul(D, L.ff[0]), rowmul(D, L.ff[1])
        b, g = vec(row["b"]), vec(row["g"])
        z = rowmul([wa[j] * d[j] * b[j] + g[j] * wb[j] for j in range(len(d))], L.ff[2])
    else:
        w_ = rowmul(D, L.ff[0])
        z = rowmul([w_[j] * d[j] for j in range(len(d))], L.ff[1])
    if L.residual:
        z = [a + b for a, b in zip(D, z)]
    return pi_jhat(row["y"], row["nu"], z)


def att_jhat(L: Layer, c: dict, Dx: list, t: int, pos: int) -> list:
    """``J_hat D`` of an attention stage for query row ``t`` (position ``pos``) at the computed values ``c``
    (``q[t][h]``, ``k[s][g]`` after rotation, ``v[s][g]``, ``p[h][t][s]``, ``y[t]``, ``nu[t]``): step 8's map."""
    T = len(Dx)
    keys = range(pos + 1) if L.causal else range(T)
    acc = list(Dx[pos]) if L.residual else [mpmath.mpf(0)] * len(Dx[pos])
    for h in range(L.H):
        g = L.group[h]
        dq = rowmul(Dx[pos], L.WQ[h])
        dk = {s: rowmul(Dx[s], L.WK[h]) for s in keys}
        if L.ls:
            dq = rotate(dq, L.cos[pos], L.sin[pos])
            dk = {s: rotate(v, L.cos[s], L.sin[s]) for s, v in dk.items()}
        q = vec(c["q"][t][h])
        p = {s: mpmath.mpf(float(c["p"][h][t][s])) for s in keys}
        sig = {s: sum(a * b for a, b in zip(dq, vec(c["k"][s][g]))) + sum(a * b for a, b in zip(q, dk[s]))
               for s in keys}
        sbar = sum(p[s] * sig[s] for s in keys)
        dv = len(c["v"][0][g])
        hd = [sum(p[s] * rowmul(Dx[s], L.WV[h])[j] + p[s] * (sig[s] - sbar) * mpmath.mpf(float(c["v"][s][g][j]))
                  for s in keys) for j in range(dv)]
        acc = [a + b for a, b in zip(acc, rowmul(hd, L.WO[h]))]
    return pi_jhat(c["y"][t], c["nu"][t], acc)

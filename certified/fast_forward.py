"""Certified forward pass at float speed: a fixed binary64 program plus one proven error bound.

:func:`fast_margins` runs the analysis model (plain, residual or causal variant, GELU or ReLU) over
a whole batch in numpy binary64, with exp and Phi from :mod:`specbound.certified.elementary` (proven, no libm).
:meth:`FastForward.epsilon` is an exact point ``eps`` computed once per (model, input kind,
sequence length) in Arb such that ``|f_hat(X) - f(X)| <= eps`` for every admissible input
(proofs_notes/fast_forward.md).  Floats never enter ``eps``; they only compute ``f_hat``.

The Arb pass (:mod:`specbound.certified.forward`) stays the independent reference and the fallback
for samples near a ramp breakpoint (:mod:`specbound.certified.ramp_loss`).

Public API: :class:`FastNetwork`, :class:`FastForward`, :class:`NotApplicable`,
:func:`check_float_environment`, :func:`fast_margins`, :func:`project_rows_float`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from flint import arb, arb_mat

from specbound.certified.arb import pow2, precision
from specbound.certified.elementary import (
    EXP_UNDERFLOW_ERROR, exp_error_bound, exp_nonpositive, phi, phi_coefficients, phi_degree,
    phi_error_bound,
)
from specbound.certified.enclosure import enclose_singular_values
from specbound.certified.factored import enclose_factored
from specbound.certified.forward import project_rows
from specbound.certified.norms import spectral_norm_upper
from specbound.errors import CertificationError, LayoutError
from specbound.matrices import AnalysisWeights

BOUND_PREC = 128
"""Arb bits of the a-priori bound (widths only)."""

TINY_EXP = -1000
"""``TINY = 2**-1000`` covers every underflow term of one matrix-product stage (note step 0)."""

MAX_DIM = 2**30
"""Step 0's underflow term assumes every dimension below this."""

MAX_INPUT = 2.0**500
"""Float input rows must be bounded by this (entrywise) so that squared norms cannot overflow (F3)."""

PHI_DOMAIN = 4
"""Largest a-priori GELU argument bound the Taylor Phi is used for (its Horner bound grows like
exp(t^2/2)); larger models use the Arb pass."""

ACTIVATIONS = ("gelu", "relu")

FAST_VARIANTS = ("plain", "residual", "causal")
"""Model variants the fast program and its error bound cover (proofs_notes/fast_forward.md)."""
"""Activations with a proven float routine (the others use the Arb pass)."""


class NotApplicable(CertificationError):
    """The fast pass does not cover this model or input (the caller falls back to the Arb pass)."""


def check_float_environment() -> None:
    """Raise NotApplicable unless numpy's binary64 has gradual underflow (no FTZ/DAZ) and rounds to
    nearest (assumption F1) -- tested on arrays, the code path the forward pass uses."""
    tiny = np.array([2.0**-1022, 2.0**-1074, 1.0, 1.0], dtype=np.float64)
    half = tiny * np.array([0.5, 1.0, 1.0, 1.0])
    if not (half[0] == 2.0**-1023 and (tiny[1:2] * 1.0)[0] == 2.0**-1074):
        raise NotApplicable("flush-to-zero / denormals-are-zero is active: the float error model fails")
    eps = np.array([1.0]) + np.array([2.0**-53 * 1.5])
    if eps[0] != 1.0 + 2.0**-52:  # round to nearest: 1 + 1.5u rounds up
        raise NotApplicable("binary64 rounding mode is not round-to-nearest")


# --------------------------------------------------------------------------- the float network


@dataclass(frozen=True, eq=False)
class FastNetwork:
    """The analysis network's binary64 factors, laid out for batched products.

    Per layer: ``wq, wk, wv`` of shape (N, H d) (heads side by side), ``wo`` (H d, N) (heads stacked),
    ``m_in`` (N, F), ``m_out`` (F, N).  A dense ``QK`` is taken as ``W_Q = A, W_K = I`` and a dense
    ``V_tilde`` as ``W_V = V, W_O = I`` (the same real maps, products with I exact).
    """

    wq: tuple[np.ndarray, ...]
    wk: tuple[np.ndarray, ...]
    wv: tuple[np.ndarray, ...]
    wo: tuple[np.ndarray, ...]
    m_in: tuple[np.ndarray, ...]
    m_out: tuple[np.ndarray, ...]
    readout: np.ndarray
    activation: str
    num_heads: int
    head_dims: tuple[int, ...]  # per layer: (query/key dim, value dim)
    width: int
    residual: bool = False  # the residual variant (R): Y = Pi(X + Att(X)), X' = Pi(Y + F(Y)) (step 9)
    causal: bool = False  # the causal variant: token t attends to s <= t, read-out at the last token (step 10)

    @property
    def num_layers(self) -> int:
        return len(self.m_in)

    @classmethod
    def from_weights(cls, weights: AnalysisWeights) -> FastNetwork:
        variant = getattr(weights, "variant", "plain")
        if variant not in FAST_VARIANTS:
            raise NotApplicable(f"model variant {variant!r} has no fast pass")
        if weights.activation not in ACTIVATIONS:
            raise NotApplicable(f"activation {weights.activation!r} has no proven float routine")
        if weights.readout is None:
            raise CertificationError(f"{weights.source or 'weights'}: no read-out vector w")
        N, H = int(weights.width), int(weights.num_heads)
        eye = np.eye(N)
        wq, wk, wv, wo, mi, mo, dims = [], [], [], [], [], [], []
        for l in range(weights.num_layers):
            q, k, v, o = [], [], [], []
            for h in range(H):
                qk, vt = weights.get(l, "QK", h), weights.get(l, "V_tilde", h)
                q.append(np.asarray(qk.left, dtype=np.float64))
                k.append(eye if qk.right is None else np.asarray(qk.right, dtype=np.float64).T)
                v.append(np.asarray(vt.left, dtype=np.float64))
                o.append(eye if vt.right is None else np.asarray(vt.right, dtype=np.float64))
            dq, dv = {a.shape[1] for a in q + k}, {a.shape[1] for a in v}
            if len(dq) != 1 or len(dv) != 1 or {a.shape[0] for a in o} != dv:
                raise NotApplicable(f"layer {l}: heads of unequal inner dimension")
            dims.append((dq.pop(), dv.pop()))
            wq.append(np.ascontiguousarray(np.concatenate(q, axis=1)))
            wk.append(np.ascontiguousarray(np.concatenate(k, axis=1)))
            wv.append(np.ascontiguousarray(np.concatenate(v, axis=1)))
            wo.append(np.ascontiguousarray(np.concatenate(o, axis=0)))
            mi.append(np.ascontiguousarray(weights.get(l, "M_in").dense(), dtype=np.float64))
            mo.append(np.ascontiguousarray(weights.get(l, "M_out").dense(), dtype=np.float64))
        w = np.asarray(weights.readout, dtype=np.float64)
        if w.shape != (N,):
            raise LayoutError(f"read-out w has shape {w.shape}, expected ({N},)")
        arrays = wq + wk + wv + wo + mi + mo + [w]
        if not all(np.isfinite(a).all() for a in arrays):
            raise LayoutError("weights contain NaN or Inf")
        return cls(tuple(wq), tuple(wk), tuple(wv), tuple(wo), tuple(mi), tuple(mo), w,
                   weights.activation, H, tuple(dims), N, variant == "residual", variant == "causal")


# --------------------------------------------------------------------------- the float program


def project_rows_float(a: np.ndarray) -> np.ndarray:
    """``Pi`` over the last axis in binary64: ``a / max(1, sqrt(sum a^2))`` (note step 3)."""
    nu = np.sqrt(np.einsum("...i,...i->...", a, a))
    np.maximum(nu, 1.0, out=nu)
    return a / nu[..., None]


@lru_cache(maxsize=64)
def _causal_mask(T: int, Tq: int) -> np.ndarray:
    """0/1 float mask (Tq, T) of the causal variant for the last ``Tq`` query positions of ``T``:
    query ``t`` keeps keys ``s <= t``."""
    t = np.arange(T - Tq, T)[:, None]
    return (np.arange(T)[None, :] <= t).astype(np.float64)


def _attention(net: FastNetwork, l: int, x: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Note step 5's program: ``sum_h softmax(Q K^T) V W_O`` for rows ``x`` (B, T, N) and query
    rows ``queries`` (B, Tq, N); returns (B, Tq, N) before ``Pi``."""
    B, T, N = x.shape
    Tq = queries.shape[1]
    H = net.num_heads
    dq, dv = net.head_dims[l]
    x2 = x.reshape(B * T, N)
    q = (queries.reshape(B * Tq, N) @ net.wq[l]).reshape(B, Tq, H, dq).transpose(0, 2, 1, 3)
    k = (x2 @ net.wk[l]).reshape(B, T, H, dq).transpose(0, 2, 3, 1)
    v = (x2 @ net.wv[l]).reshape(B, T, H, dv).transpose(0, 2, 1, 3)
    s = q @ k  # (B, H, Tq, T)
    keep = _causal_mask(T, Tq) if net.causal else None
    if keep is not None:
        # step 10: the maximum over the kept keys only (each row keeps its own key)
        s -= np.where(keep, s, -np.inf).max(axis=-1, keepdims=True)
        np.minimum(s, 0.0, out=s)  # masked entries may exceed the kept maximum; they are zeroed below
    else:
        s -= s.max(axis=-1, keepdims=True)  # exact max; the subtraction rounds (step 5.3)
    e = exp_nonpositive(s)
    if keep is not None:
        e *= keep  # exact: kept weights times 1, masked ones times 0
    e /= e.sum(axis=-1, keepdims=True)  # division, not a reciprocal (step 5.5)
    heads = (e @ v).transpose(0, 2, 1, 3).reshape(B * Tq, H * dv)
    return (heads @ net.wo[l]).reshape(B, Tq, N)  # one dot of length H dv (step 5.8)


def fast_margins(net: FastNetwork, x0: np.ndarray, phi_plan: tuple[tuple[tuple[float, ...], float], ...]) -> np.ndarray:
    """``f_hat`` for every sample of the projected inputs ``x0`` (B, T, N): the program of
    proofs_notes/fast_forward.md.  ``phi_plan[l] = (coefficients, t_max)`` per layer; the entries
    fed to ``Phi`` are checked against ``t_max`` (they satisfy it by step 6.1)."""
    x = x0
    L = net.num_layers
    for l in range(L):
        # the read-out row of the last layer suffices: row 0, or the last token of the causal variant
        queries = (x[:, -1:, :] if net.causal else x[:, :1, :]) if l == L - 1 else x
        a = _attention(net, l, x, queries)
        if net.residual:
            a += queries  # step 9: fl(m + a), entrywise
        y = project_rows_float(a)
        u = y @ net.m_in[l]
        if net.activation == "relu":
            g = np.maximum(u, 0.0)
        else:
            coeffs, t_max = phi_plan[l]
            if not np.abs(u).max(initial=0.0) <= t_max:
                raise CertificationError("a GELU argument exceeds its proven a-priori bound")
            g = phi(u, coeffs)
            g *= u
        z = g @ net.m_out[l]
        if net.residual:
            z += y  # step 9: fl(y + z), entrywise
        x = project_rows_float(z)
    return x[:, 0, :] @ net.readout


# --------------------------------------------------------------------------- the a-priori bound


def _frob(a: np.ndarray) -> arb:
    """Upper point of ``||a||_F`` (exact squares at 128 bits, Arb sum and sqrt)."""
    s = arb(0)
    for x in np.asarray(a, dtype=np.float64).ravel().tolist():
        s += arb(x) * arb(x)
    return arb(s.sqrt().upper())


def _max_col_norm(a: np.ndarray) -> arb:
    """Upper point of ``max_j ||a[:, j]||`` (compared exactly: the candidates are exact points)."""
    best = arb(0)
    for j in range(a.shape[1]):
        c = _frob(a[:, j])
        if c > best:
            best = c
    return best


def _u() -> arb:
    return pow2(-53)


def _gamma(n: int) -> arb:
    if n >= MAX_DIM:
        raise NotApplicable(f"dimension {n} exceeds the float error model's range")
    nu = arb(int(n)) * _u()
    return nu / (1 - nu)


def projection_error(N: int) -> tuple[arb, arb]:
    """(e_Pi, R_Pi) of note step 3 for rows of width N (upper points)."""
    with precision(BOUND_PREC):
        u, tiny = _u(), pow2(TINY_EXP)
        g = _gamma(N) + 4 * tiny
        hi = (1 + g).sqrt() * (1 + u) - 1
        lo = 1 - (1 - g).sqrt() * (1 - u)
        kappa = hi if hi > lo else lo
        r = (1 + u) / (1 - kappa)
        return arb((r - 1).upper()), arb(r.upper())


@dataclass(frozen=True)
class ErrorBudget:
    """The a-priori bound and the per-layer facts the program needs (all exact points)."""

    epsilon: arb
    t_max: tuple[arb, ...]
    degrees: tuple[int, ...]
    stages: dict = field(default_factory=dict)  # informational: delta after each layer


def _min(a: arb, b: arb) -> arb:
    """The smaller of two exact points (compared exactly)."""
    return a if a < b else b


def _spectral(left: np.ndarray, right: np.ndarray | None, frob: arb) -> arb:
    """Upper point of ``||left right||_2`` (or ``||left||_2``) from the certified singular-value
    enclosure (proofs_notes/svd_enclosure.md, structural_rank.md), capped by ``frob`` (any upper
    bound of the same norm, e.g. a product of Frobenius norms)."""
    enc = enclose_singular_values(left) if right is None else enclose_factored(left, right)
    return _min(arb(spectral_norm_upper(enc)), frob)


@lru_cache(maxsize=None)
def _norms(net: FastNetwork) -> dict:
    """Frobenius norms (upper points) of every factor, and spectral-norm upper points of the real maps
    ``A = W_Q W_K^T``, ``V = W_V W_O``, ``M_in``, ``M_out``, per layer and head."""
    with precision(BOUND_PREC):
        H = net.num_heads
        out = {"w": _frob(net.readout), "layers": []}
        for l in range(net.num_layers):
            dq, dv = net.head_dims[l]
            heads = []
            for h in range(H):
                wq, wk = net.wq[l][:, h * dq:(h + 1) * dq], net.wk[l][:, h * dq:(h + 1) * dq]
                wv, wo = net.wv[l][:, h * dv:(h + 1) * dv], net.wo[l][h * dv:(h + 1) * dv, :]
                hn = {"q": _frob(wq), "k": _frob(wk), "v": _frob(wv), "o": _frob(wo)}
                hn["A"] = _spectral(wq, np.ascontiguousarray(wk.T), hn["q"] * hn["k"])
                hn["V"] = _spectral(wv, wo, hn["v"] * hn["o"])
                heads.append(hn)
            n_in, n_out = _frob(net.m_in[l]), _frob(net.m_out[l])
            out["layers"].append({"heads": heads, "in": n_in, "out": n_out,
                                  "s_in": _spectral(net.m_in[l], None, n_in),
                                  "s_out": _spectral(net.m_out[l], None, n_out),
                                  "in_col": _max_col_norm(net.m_in[l])})
        return out


def error_budget(net: FastNetwork, T: int, delta0: arb, R0: arb) -> ErrorBudget:
    """``eps`` of proofs_notes/fast_forward.md steps 4-7 for sequences of length ``T`` whose projected
    input rows satisfy ``||x - m|| <= delta0``, ``||m|| <= R0`` (exact points)."""
    norms = _norms(net)
    N, H = net.width, net.num_heads
    with precision(BOUND_PREC):
        u, tiny, alpha = _u(), pow2(TINY_EXP), arb(EXP_UNDERFLOW_ERROR)
        e_pi, r_pi = projection_error(N)
        eta_exp = exp_error_bound()
        delta, R = arb(delta0), arb(R0)
        t_maxes, degrees, stages = [], [], {}
        for l in range(net.num_layers):
            dq, dv = net.head_dims[l]
            ln = norms["layers"][l]
            e_att = arb(0)
            for hn in ln["heads"]:
                nq, nk, nv, no, sA, sV = hn["q"], hn["k"], hn["v"], hn["o"], hn["A"], hn["V"]
                eq = _gamma(N) * R * nq + tiny
                ek = _gamma(N) * R * nk + tiny
                ev = _gamma(N) * R * nv + tiny
                e_s = (delta * sA * (1 + R) + eq * (R * nk + ek) + R * nq * ek
                       + _gamma(dq) * (R * nq + eq) * (R * nk + ek) + tiny)
                S = (R * nq + eq) * (R * nk + ek) * (1 + _gamma(dq)) + tiny
                eta1 = (1 + eta_exp) * (2 * u * S).exp() - 1
                gT = _gamma(T)
                beta = (1 + eta1) * (1 + gT) - 1 + T * alpha * (1 + gT)
                if not beta < 1:
                    raise NotApplicable("softmax denominator bound fails (scores too large)")
                up = (1 + eta1) * (1 + u) / (1 - beta) - 1
                down = 1 - (1 - eta1) * (1 - u) / (1 + beta)
                eta_p = (up if up > down else down) + T * alpha * (1 + u) / (1 - beta)
                # step 5.7-5.8: input and softmax errors through the exact map V = W_V W_O; the
                # rounding of the values, of P V and of the W_O product through the factors
                h_max = (1 + eta_p) * (R * nv + ev) * (1 + gT) + tiny
                e_att += ((delta + (e_s + eta_p) * R) * sV
                          + ((1 + eta_p) * ev + gT * (1 + eta_p) * (R * nv + ev) + tiny) * no
                          + _gamma(H * dv) * h_max * no)
            e_att += tiny
            if net.residual:
                # step 9: the identity path keeps delta; the sum m + a rounds by u ||m + a||, with
                # ||a_hat|| <= sum_h sigma_V + e_att (exact heads: convex combinations of unit rows)
                a_max = sum((hn["V"] for hn in ln["heads"]), arb(0)) + e_att
                delta_y = delta + e_att + u * (R + a_max) + e_pi
            else:
                delta_y = e_att + e_pi
            r_y = r_pi
            n_in, n_out, s_in, s_out = ln["in"], ln["out"], ln["s_in"], ln["s_out"]
            e_u = delta_y * s_in + _gamma(N) * r_y * n_in + tiny
            F = net.m_in[l].shape[1]
            if net.activation == "relu":
                t_max, degree = arb(0), 0
                e_g = e_u + tiny
            else:
                t_max = arb((ln["in_col"] + e_u).upper())
                if not t_max < PHI_DOMAIN:
                    raise NotApplicable(f"layer {l + 1}: GELU arguments up to {t_max.str(3)} exceed the "
                                        f"fast Phi's domain |t| <= {PHI_DOMAIN}")
                degree = phi_degree(float(t_max.upper()))
                e_phi = phi_error_bound(t_max, degree)
                l_phi = (1 + arb(1).erf()) / 2 + 1 / (arb(1).exp() * arb.pi().sqrt())
                e_g = l_phi * e_u + (s_in + e_u) * (e_phi + u * (1 + e_phi)) + tiny
            e_z = e_g * s_out + _gamma(F) * (s_in + e_g) * n_out + tiny
            if net.residual:
                # step 9: ||z|| <= sigma_out ||phi(u)|| <= sigma_out sigma_in for exact z; plus e_z
                delta_x = delta_y + e_z + u * (r_y + s_in * s_out + e_z) + e_pi
            else:
                delta_x = e_z + e_pi
            delta, R = arb(delta_x.upper()), r_pi
            t_maxes.append(t_max)
            degrees.append(degree)
            stages[f"layer{l + 1}"] = delta
        eps = delta * norms["w"] + _gamma(N) * R * norms["w"] + tiny
        return ErrorBudget(arb(eps.upper()), tuple(t_maxes), tuple(degrees), stages)


def token_table(E: np.ndarray, P: np.ndarray | None, tokens: np.ndarray) -> tuple[np.ndarray, arb, arb]:
    """Binary64 rows ``m[t, a]`` near ``Pi(E[a] + P[t])`` for every (position, token) pair present in
    ``tokens`` (B, T), with (delta0, R0): upper points of ``max ||Pi(E[a]+P[t]) - m[t, a]||`` and of
    ``max ||m[t, a]||`` over those pairs (note step 4; computed in Arb)."""
    B, T = tokens.shape
    V, N = E.shape
    if T * V * N > 5 * 10**7:
        raise NotApplicable("token table too large for the fast pass")
    table = np.zeros((T, V, N))
    delta0, R0 = arb(0), arb(0)
    with precision(BOUND_PREC):
        for t in range(T):
            for a in np.unique(tokens[:, t]).tolist():
                row = arb_mat(1, N, E[a].tolist())
                if P is not None and P.shape[0] > 0:
                    row = row + arb_mat(1, N, P[t].tolist())
                ball = project_rows(row)
                mid = np.array([float(ball[0, j].mid()) for j in range(N)])
                err, nrm = arb(0), arb(0)
                for j in range(N):
                    d = abs(ball[0, j] - arb(mid[j]))
                    d = arb(d.upper())
                    err += d * d
                    nrm += arb(mid[j]) * arb(mid[j])
                err, nrm = arb(err.sqrt().upper()), arb(nrm.sqrt().upper())
                if err > delta0:
                    delta0 = err
                if nrm > R0:
                    R0 = nrm
                table[t, a] = mid
    return table, delta0, R0


@dataclass(frozen=True, eq=False)
class FastForward:
    """A fast certified forward pass prepared for one model: ``margins`` returns ``f_hat`` and
    ``epsilon`` the exact point with ``|f_hat - f| <= epsilon`` for those inputs."""

    net: FastNetwork
    budget: ErrorBudget

    @property
    def epsilon(self) -> arb:
        return self.budget.epsilon

    def plan(self) -> tuple[tuple[tuple[float, ...], float], ...]:
        out = []
        for t_max, degree in zip(self.budget.t_max, self.budget.degrees):
            out.append((phi_coefficients(degree) if degree else (), float(t_max.upper())))
        return tuple(out)


def prepare_rows(weights: AnalysisWeights | FastNetwork, T: int) -> FastForward:
    """The fast pass for float input rows (before ``Pi``) of sequence length ``T``."""
    check_float_environment()
    net = weights if isinstance(weights, FastNetwork) else FastNetwork.from_weights(weights)
    e_pi, r_pi = projection_error(net.width)
    return FastForward(net, error_budget(net, T, e_pi, r_pi))


BATCH = 256
"""Samples per batch of the fast pass: small enough that a batch's attention arrays stay in cache
(measured on the embedded default: 35k samples/s at 128-256, 20k/s at 2048; results identical, every
sample's program is the same whatever the batch)."""


def margins_of_rows(ff: FastForward, rows: np.ndarray, batch: int = BATCH) -> np.ndarray:
    """``f_hat`` for float input rows ``rows`` (B, T, N) before ``Pi``."""
    rows = np.asarray(rows, dtype=np.float64)
    if not np.abs(rows).max(initial=0.0) <= MAX_INPUT:  # also catches NaN / Inf
        raise NotApplicable("input rows too large for the float program (their squared norms would overflow)")
    plan = ff.plan()
    out = np.empty(rows.shape[0])
    for a in range(0, rows.shape[0], batch):
        out[a:a + batch] = fast_margins(ff.net, project_rows_float(rows[a:a + batch]), plan)
    return out


def prepare_tokens(weights: AnalysisWeights | FastNetwork, E: np.ndarray, P: np.ndarray | None,
                   tokens: np.ndarray) -> tuple[FastForward, np.ndarray]:
    """The fast pass for token sequences ``tokens`` (B, T) and its input table (see :func:`token_table`)."""
    check_float_environment()
    net = weights if isinstance(weights, FastNetwork) else FastNetwork.from_weights(weights)
    table, delta0, R0 = token_table(np.asarray(E, dtype=np.float64),
                                    None if P is None else np.asarray(P, dtype=np.float64), tokens)
    return FastForward(net, error_budget(net, tokens.shape[1], delta0, R0)), table


def margins_of_tokens(ff: FastForward, table: np.ndarray, tokens: np.ndarray, batch: int = BATCH) -> np.ndarray:
    """``f_hat`` for token sequences (B, T) whose (position, token) rows are in ``table``."""
    plan = ff.plan()
    T = tokens.shape[1]
    pos = np.arange(T)
    out = np.empty(tokens.shape[0])
    for a in range(0, tokens.shape[0], batch):
        out[a:a + batch] = fast_margins(ff.net, table[pos, tokens[a:a + batch]], plan)
    return out


__all__ = (
    "ErrorBudget",
    "FastForward",
    "FastNetwork",
    "NotApplicable",
    "check_float_environment",
    "error_budget",
    "fast_margins",
    "margins_of_rows",
    "margins_of_tokens",
    "prepare_rows",
    "prepare_tokens",
    "project_rows_float",
    "token_table",
)

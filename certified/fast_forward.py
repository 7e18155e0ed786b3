"""Certified forward pass at float speed: a fixed binary64 program plus one proven error bound.

:func:`fast_margins` runs the analysis model (plain, residual or causal variant, GELU or ReLU) over
a whole batch in numpy binary64, with exp and Phi from :mod:`specbound.certified.elementary` (proven, no libm).
:meth:`FastForward.epsilon` is an exact point ``eps`` computed once per (model, input kind,
sequence length) in Arb such that ``|f_hat(X) - f(X)| <= eps`` for every admissible input
(proofs_notes/fast_forward.md).  Floats never enter ``eps``; they only compute ``f_hat``.

The weights are read through :func:`specbound.certified.factors.float_factors` (note step 11): a
left-over score scale is folded in exactly or the model is refused.  A sample whose run meets a
non-finite value where note step 12 looks gets NaN, alone.  The Arb pass
(:mod:`specbound.certified.forward`) stays the independent reference and the fallback for those samples,
for samples near a ramp breakpoint (:mod:`specbound.certified.ramp_loss`) and for models refused here.

Public API: :class:`FastNetwork`, :class:`FastForward`, :class:`NotApplicable`, :class:`ErrorBudget`,
:func:`check_float_environment`, :func:`fast_margins`, :func:`project_rows_float`, :func:`error_budget`,
:func:`network_norms`, :func:`projection_error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
from flint import arb, arb_mat

from specbound.certified.arb import pow2, precision
from specbound.certified.elementary import (
    EXP_UNDERFLOW_ERROR, exp_error_bound, exp_nonpositive, phi, phi_coefficients, phi_degree,
    phi_error_bound,
)
from specbound.certified.enclosure import enclose_singular_values
from specbound.certified.factored import enclose_factored
from specbound.certified.factors import InexactScale, float_factors
from specbound.certified.float_environment import has_gradual_underflow, rounds_to_nearest
from specbound.certified.forward import project_rows
from specbound.certified.norms import spectral_norm_upper
from specbound.errors import CertificationError, LayoutError
from specbound.matrices import AnalysisWeights
from specbound.vocabulary import PLAIN_KIND_VARIANTS

BOUND_PREC = 128
"""Arb bits of the a-priori bound (widths only)."""

TINY_EXP = -1000
"""``TINY = 2**-1000`` covers every underflow term of one matrix-product stage (note step 0) and of
one row's division by its norm (note step 3)."""

MAX_DIM = 2**30
"""Step 0's underflow term assumes every dimension below this."""

MAX_INPUT = 2.0**500
"""Float input rows must be bounded by this (entrywise) so that squared norms cannot overflow (F3)."""

MAX_EPSILON = 2.0**1000
"""An a-priori bound at or above this is useless (and beyond what a float can carry): the Arb pass."""

PHI_DOMAIN = 4
"""Largest a-priori GELU argument bound the Taylor Phi is used for (its Horner bound grows like
exp(t^2/2)); larger models use the Arb pass."""

ACTIVATIONS = ("gelu", "relu")
"""Activations with a proven float routine (the others use the Arb pass)."""

FAST_VARIANTS = PLAIN_KIND_VARIANTS
"""Model variants the fast program and its error bound cover (proofs_notes/fast_forward.md)."""


class NotApplicable(CertificationError):
    """The fast pass does not cover this model or input (the caller falls back to the Arb pass)."""


def check_float_environment() -> None:
    """Raise NotApplicable unless numpy's binary64 has gradual underflow (no FTZ/DAZ) and rounds to
    nearest, ties to even (assumption F1): every non-nearest rounding mode is detected
    (:mod:`specbound.certified.float_environment`)."""
    if not has_gradual_underflow():
        raise NotApplicable("flush-to-zero / denormals-are-zero is active: the float error model fails")
    if not rounds_to_nearest():
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

    @cached_property
    def norms(self) -> dict:
        """The norms the error bound needs (:func:`network_norms`), computed once per network and
        kept with it (so they live exactly as long as the network)."""
        return network_norms(self)

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
                # the exact factors (step 11): a left-over score scale is folded in exactly or refused
                qf, kf = _factors(weights.get(l, "QK", h))
                vf, of = _factors(weights.get(l, "V_tilde", h))
                q.append(qf)
                k.append(eye if kf is None else kf.T)
                v.append(vf)
                o.append(eye if of is None else of)
            dq, dv = {a.shape[1] for a in q + k}, {a.shape[1] for a in v}
            if len(dq) != 1 or len(dv) != 1 or {a.shape[0] for a in o} != dv:
                raise NotApplicable(f"layer {l}: heads of unequal inner dimension")
            dims.append((dq.pop(), dv.pop()))
            wq.append(np.ascontiguousarray(np.concatenate(q, axis=1)))
            wk.append(np.ascontiguousarray(np.concatenate(k, axis=1)))
            wv.append(np.ascontiguousarray(np.concatenate(v, axis=1)))
            wo.append(np.ascontiguousarray(np.concatenate(o, axis=0)))
            mi.append(np.ascontiguousarray(_dense_factor(weights.get(l, "M_in"))))
            mo.append(np.ascontiguousarray(_dense_factor(weights.get(l, "M_out"))))
        w = np.asarray(weights.readout, dtype=np.float64)
        if w.ndim == 2 and w.shape[0] > 1:  # its a-priori bound (fast_forward.md) is for one output
            raise NotApplicable(f"a read-out of {w.shape[0]} rows: the per-sample pass encloses its outputs")
        if w.shape != (N,):
            raise LayoutError(f"read-out w has shape {w.shape}, expected ({N},)")
        arrays = wq + wk + wv + wo + mi + mo + [w]
        if not all(np.isfinite(a).all() for a in arrays):
            raise LayoutError("weights contain NaN or Inf")
        return cls(tuple(wq), tuple(wk), tuple(wv), tuple(wo), tuple(mi), tuple(mo), w,
                   weights.activation, H, tuple(dims), N, variant == "residual", variant == "causal")


def _factors(matrix) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`~specbound.certified.factors.float_factors`, a scale it cannot fold exactly being a
    model the fast pass does not cover."""
    try:
        return float_factors(matrix)
    except InexactScale as exc:
        raise NotApplicable(str(exc)) from None


def _dense_factor(matrix) -> np.ndarray:
    """The one binary64 factor of a feed-forward matrix (the program multiplies by it once)."""
    left, right = _factors(matrix)
    if right is not None:
        raise NotApplicable(f"{matrix.name}: a factored feed-forward matrix has no fast pass")
    return left


# --------------------------------------------------------------------------- the float program


def project_rows_float(a: np.ndarray) -> np.ndarray:
    """``Pi`` over the last axis in binary64: ``a / max(1, sqrt(sum a^2))`` (note step 3)."""
    return _project(a)[0]


def _project(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``Pi(a)`` in binary64, per sample (first axis): every row's norm ``nu`` finite).

    A non-finite ``nu`` means a non-finite entry or an overflowing sum of squares; the division by
    an infinite ``nu`` would then return finite numbers (note step 12), so the sample is flagged."""
    nu = np.sqrt(np.einsum("...i,...i->...", a, a))
    ok = np.isfinite(nu).reshape(nu.shape[0], -1).all(axis=1)
    np.maximum(nu, 1.0, out=nu)
    return a / nu[..., None], ok


@lru_cache(maxsize=64)
def _causal_mask(T: int, Tq: int) -> np.ndarray:
    """0/1 float mask (Tq, T) of the causal variant for the last ``Tq`` query positions of ``T``:
    query ``t`` keeps keys ``s <= t``."""
    t = np.arange(T - Tq, T)[:, None]
    return (np.arange(T)[None, :] <= t).astype(np.float64)


def _attention(net: FastNetwork, l: int, x: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Note step 5's program: ``sum_h softmax(Q K^T) V W_O`` for rows ``x`` (B, T, N) and query
    rows ``queries`` (B, Tq, N); returns (B, Tq, N) before ``Pi``, and per sample whether every
    shifted score (the operand of the exp routine's clamp, note step 12) is finite."""
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
        ok = np.isfinite(s).reshape(B, -1).all(axis=1)
        np.minimum(s, 0.0, out=s)  # masked entries may exceed the kept maximum; they are zeroed below
    else:
        s -= s.max(axis=-1, keepdims=True)  # exact max; the subtraction rounds (step 5.3)
        ok = np.isfinite(s).reshape(B, -1).all(axis=1)
    e = exp_nonpositive(s)
    if keep is not None:
        e *= keep  # exact: kept weights times 1, masked ones times 0
    e /= e.sum(axis=-1, keepdims=True)  # division, not a reciprocal (step 5.5)
    heads = (e @ v).transpose(0, 2, 1, 3).reshape(B * Tq, H * dv)
    return (heads @ net.wo[l]).reshape(B, Tq, N), ok  # one dot of length H dv (step 5.8)


def fast_margins(net: FastNetwork, x0: np.ndarray, phi_plan: tuple[tuple[tuple[float, ...], float], ...]) -> np.ndarray:
    """``f_hat`` for every sample of the projected inputs ``x0`` (B, T, N): the program of
    proofs_notes/fast_forward.md.  ``phi_plan[l] = (coefficients, t_max)`` per layer.

    A sample whose program meets a non-finite value where note step 12 looks (a shifted score, a row
    norm, an activation argument, the result) gets NaN: its run may have overflowed, so the caller
    evaluates it by the Arb pass.  The samples are independent (every operation acts within one
    sample), so the others keep their values.  The entries fed to ``Phi`` of every other sample satisfy
    ``|t| <= t_max`` by step 6.1; a violation means the analysis is wrong and raises.
    """
    x = x0
    L = net.num_layers
    bad = np.zeros(x0.shape[0], dtype=bool)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for l in range(L):
            # the read-out row of the last layer suffices: row 0, or the last token of the causal variant
            queries = (x[:, -1:, :] if net.causal else x[:, :1, :]) if l == L - 1 else x
            a, ok = _attention(net, l, x, queries)
            bad |= ~ok
            if net.residual:
                a += queries  # step 9: fl(m + a), entrywise
            y, ok = _project(a)
            bad |= ~ok
            u = y @ net.m_in[l]
            bad |= ~np.isfinite(u).reshape(u.shape[0], -1).all(axis=1)
            if net.activation == "relu":
                g = np.maximum(u, 0.0)
            else:
                coeffs, t_max = phi_plan[l]
                beyond = ~(np.abs(u).reshape(u.shape[0], -1).max(axis=1, initial=0.0) <= t_max)
                if np.any(beyond & ~bad):
                    raise CertificationError("a GELU argument exceeds its proven a-priori bound")
                g = phi(u, coeffs)
                g *= u
            z = g @ net.m_out[l]
            if net.residual:
                z += y  # step 9: fl(y + z), entrywise
            x, ok = _project(z)
            bad |= ~ok
        # the read-out row: row 0, or the last token of the causal variant (with L >= 1 only that row
        # is left; with L = 0 every row is, step 10)
        out = x[:, -1 if net.causal else 0, :] @ net.readout
    bad |= ~np.isfinite(out)
    out[bad] = np.nan
    return out


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
        # + tiny: the divisions a_j / max(1, nu) may underflow (2**-1075 each, sqrt(N) 2**-1075 per row)
        return arb((r - 1 + tiny).upper()), arb((r + tiny).upper())


@dataclass(frozen=True)
class ErrorBudget:
    """The a-priori bound and the per-layer facts the program needs (all exact points).

    ``terms`` (one dict per layer, informational and for the tests that pin every formula to the
    note): the layer's input ``delta``, ``R``; per head ``e_q, e_k, e_v, e_s, S, eta_1, beta, eta_p,
    h_max`` (note step 5); ``e_att, delta_y, e_u, e_phi, e_g, e_z, delta_x`` (steps 5.8-9); the
    layer's ``t_max`` and Phi degree are ``t_max``, ``degrees``."""

    epsilon: arb
    t_max: tuple[arb, ...]
    degrees: tuple[int, ...]
    terms: tuple[dict, ...] = ()


def _min(a: arb, b: arb) -> arb:
    """The smaller of two exact points (compared exactly)."""
    return a if a < b else b


def _spectral(left: np.ndarray, right: np.ndarray | None, frob: arb) -> arb:
    """Upper point of ``||left right||_2`` (or ``||left||_2``) from the certified singular-value
    enclosure (proofs_notes/svd_enclosure.md, structural_rank.md), capped by ``frob`` (any upper
    bound of the same norm, e.g. a product of Frobenius norms)."""
    enc = enclose_singular_values(left) if right is None else enclose_factored(left, right)
    return _min(arb(spectral_norm_upper(enc)), frob)


def network_norms(net: FastNetwork) -> dict:
    """Frobenius norms (upper points) of every factor, and spectral-norm upper points of the real maps
    ``A = W_Q W_K^T``, ``V = W_V W_O``, ``M_in``, ``M_out``, per layer and head (use ``net.norms``,
    which computes them once)."""
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


def _l_phi() -> arb:
    """The GELU Lipschitz constant ``max |phi'| = phi'(sqrt 2)`` (proofs_notes/gelu_constants.md)."""
    return (1 + arb(1).erf()) / 2 + 1 / (arb(1).exp() * arb.pi().sqrt())


def _head_error(hn: dict, N: int, dq: int, dv: int, H: int, T: int, delta: arb, R: arb) -> dict:
    """Note step 5 for one head: rounding and softmax terms, and its share of ``delta_att``."""
    u, tiny, alpha = _u(), pow2(TINY_EXP), arb(EXP_UNDERFLOW_ERROR)
    nq, nk, nv, no, sA, sV = hn["q"], hn["k"], hn["v"], hn["o"], hn["A"], hn["V"]
    eq = _gamma(N) * R * nq + tiny
    ek = _gamma(N) * R * nk + tiny
    ev = _gamma(N) * R * nv + tiny
    e_s = (delta * sA * (1 + R) + eq * (R * nk + ek) + R * nq * ek
           + _gamma(dq) * (R * nq + eq) * (R * nk + ek) + tiny)
    S = (R * nq + eq) * (R * nk + ek) * (1 + _gamma(dq)) + tiny
    eta1 = (1 + exp_error_bound()) * (2 * u * S).exp() - 1
    gT = _gamma(T)
    beta = (1 + eta1) * (1 + gT) - 1 + T * alpha * (1 + gT)
    if not beta < 1:
        raise NotApplicable("softmax denominator bound fails (scores too large)")
    # step 5.5: the upper side of the relative error; the lower side is never larger (note)
    eta_p = (1 + eta1) * (1 + u) / (1 - beta) - 1 + T * alpha * (1 + u) / (1 - beta)
    # step 5.7-5.8: input and softmax errors through the exact map V = W_V W_O; the
    # rounding of the values, of P V and of the W_O product through the factors
    h_max = (1 + eta_p) * (R * nv + ev) * (1 + gT) + tiny
    head = ((delta + (e_s + eta_p) * R) * sV
            + ((1 + eta_p) * ev + gT * (1 + eta_p) * (R * nv + ev) + tiny) * no
            + _gamma(H * dv) * h_max * no)
    return {"e_q": eq, "e_k": ek, "e_v": ev, "e_s": e_s, "S": S, "eta_1": eta1, "beta": beta,
            "eta_p": eta_p, "h_max": h_max, "head": head}


def _uppers(values: dict) -> dict:
    """The upper points of a dict of balls (what the budget records)."""
    return {k: arb(v.upper()) for k, v in values.items()}


def error_budget(net: FastNetwork, T: int, delta0: arb, R0: arb) -> ErrorBudget:
    """``eps`` of proofs_notes/fast_forward.md steps 4-7 for sequences of length ``T`` whose projected
    input rows satisfy ``||x - m|| <= delta0``, ``||m|| <= R0`` (exact points)."""
    norms = net.norms
    N, H = net.width, net.num_heads
    with precision(BOUND_PREC):
        u, tiny = _u(), pow2(TINY_EXP)
        e_pi, r_pi = projection_error(N)
        delta, R = arb(delta0), arb(R0)
        t_maxes, degrees, terms = [], [], []
        for l in range(net.num_layers):
            dq, dv = net.head_dims[l]
            ln = norms["layers"][l]
            heads = [_head_error(hn, N, dq, dv, H, T, delta, R) for hn in ln["heads"]]
            e_att = sum((hd["head"] for hd in heads), arb(0)) + tiny
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
                t_max, degree, e_phi = arb(0), 0, arb(0)
                e_g = e_u + tiny
            else:
                t_max = arb((ln["in_col"] + e_u).upper())
                if not t_max < PHI_DOMAIN:
                    raise NotApplicable(f"layer {l + 1}: GELU arguments up to {t_max.str(3)} exceed the "
                                        f"fast Phi's domain |t| <= {PHI_DOMAIN}")
                degree = phi_degree(float(t_max.upper()))
                e_phi = phi_error_bound(t_max, degree)
                e_g = _l_phi() * e_u + (s_in + e_u) * (e_phi + u * (1 + e_phi)) + tiny
            e_z = e_g * s_out + _gamma(F) * (s_in + e_g) * n_out + tiny
            if net.residual:
                # step 9: ||z|| <= sigma_out ||phi(u)|| <= sigma_out sigma_in for exact z; plus e_z
                delta_x = delta_y + e_z + u * (r_y + s_in * s_out + e_z) + e_pi
            else:
                delta_x = e_z + e_pi
            terms.append({"delta": delta, "R": R, "heads": tuple(_uppers(hd) for hd in heads),
                          **_uppers({"e_att": e_att, "delta_y": delta_y, "e_u": e_u, "e_phi": e_phi, "e_g": e_g,
                                     "e_z": e_z, "delta_x": delta_x})})
            delta, R = arb(delta_x.upper()), r_pi
            t_maxes.append(t_max)
            degrees.append(degree)
        eps = arb((delta * norms["w"] + _gamma(N) * R * norms["w"] + tiny).upper())
        if not eps < MAX_EPSILON:
            raise NotApplicable(f"the fast pass's error bound {eps.str(3)} is too large to be of use")
        return ErrorBudget(eps, tuple(t_maxes), tuple(degrees), tuple(terms))


def token_table(E: np.ndarray, P: np.ndarray | None, tokens: np.ndarray) -> tuple[np.ndarray, arb, arb]:
    """Binary64 rows ``m[t, a]`` near ``Pi(E[a] + P[t])`` for every (position, token) pair present in
    ``tokens`` (B, T), with (delta0, R0): upper points of ``max ||Pi(E[a]+P[t]) - m[t, a]||`` and of
    ``max ||m[t, a]||`` over those pairs (note step 4; computed in Arb)."""
    B, T = tokens.shape
    V, N = E.shape
    if not np.issubdtype(tokens.dtype, np.integer):
        raise LayoutError(f"token ids must be integers, got dtype {tokens.dtype}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= V):
        raise LayoutError(f"token ids must lie in [0, {V}), got range [{tokens.min()}, {tokens.max()}]")
    if P is not None and P.shape[0] > 0 and T > P.shape[0]:
        raise LayoutError(f"sequence length {T} exceeds the positional embedding's {P.shape[0]} rows")
    if not (np.isfinite(E).all() and (P is None or np.isfinite(P).all())):
        raise LayoutError("embedding tables have NaN/Inf entries")
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
    e_pi, r_pi = projection_error(net.width)  # step 4: the float-row path starts after one fl(Pi)
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
    check_float_environment()  # the mode could have changed since the pass was prepared
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
    check_float_environment()  # the mode could have changed since the pass was prepared
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
    "network_norms",
    "prepare_rows",
    "prepare_tokens",
    "project_rows_float",
    "projection_error",
    "token_table",
)

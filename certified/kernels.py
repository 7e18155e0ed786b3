"""Compiled loops of binary64 programs analysed elsewhere: the same operations on each entry, in the same order.

A numpy program runs each operation over a whole array before the next, so a program of thirty operations
streams its array through memory thirty times; a compiled loop runs the thirty operations on one entry at a
time.  Each loop here performs, per entry, exactly the correctly rounded operations of its numpy reference
(no fused multiply-add, no reassociation: numba compiles without fast-math flags), so it returns the same
bits, and every error bound proven for the numpy program holds for it unchanged.  That equality is not taken
on trust: tests/certified/test_kernels.py compares each loop with its numpy reference bit for bit on
adversarial inputs.  Which of the two runs is only a choice of speed.

The loops need numba; without it (or with ``SPECBOUND_JIT=0`` in the environment) :data:`AVAILABLE` is False
and the callers run their numpy programs.  Compilation happens on the first call in a process (about a second;
the constants are frozen into the code).

* :func:`exp_nonpositive_loop`: the program of ``elementary.exp_nonpositive`` (proofs_notes/fast_forward.md
  step 1) on a flat float64 array, for entries ``<= 0``, ``-inf`` or NaN (its contract's domain; a NaN gives
  NaN, as the numpy program does).
* :func:`softmax_loop`: ``interval_stages.softmax_program``, the softmax program of fast_forward.md steps 5.3-5.5
  and 10 row by row (max over the kept keys, shift, EXP, masking, the sum in key order, division).
* :func:`divide_rows`: each row divided by its own divisor (the projection's ``a / max(1, nu)``);
  :func:`project_out_rows`, :func:`centred_times_rows`: the row-broadcast steps of the adjoint (numpy sets up an
  inner loop per row for these, which dominates at short rows).
* :func:`sigmoid_loop`: ``sigmoid.sigmoid``: ``fl(1 / fl(1 + E))`` for ``y >= 0`` and ``fl(E / fl(1 + E))``
  otherwise, ``E`` the program above at ``-|y|``.

Public API: :data:`AVAILABLE`, :data:`MIN_SIZE`, :func:`exp_nonpositive_loop`, :func:`softmax_loop`, :func:`sigmoid_loop`,
:func:`divide_rows`, :func:`project_out_rows`, :func:`centred_times_rows`, :func:`and_finite_rows`,
:func:`linear_radius`, :func:`project_radius`, :func:`residual_radius`, :func:`softmax_errors`, :func:`pi_remainder`, :func:`key_max`, :func:`outer`,
:func:`numba_module`.
"""

from __future__ import annotations

import os

import numpy as np

MIN_SIZE = 256
"""Arrays with fewer entries run the numpy program (the call costs about the same either way)."""


def _load_numba():
    if os.environ.get("SPECBOUND_JIT", "1") == "0":
        return None
    try:
        import numba
    except ImportError:  # an optional speed-up: the numpy programs compute the same values
        return None
    return numba


_numba = _load_numba()
AVAILABLE = _numba is not None


def numba_module():
    """The numba module (only when :data:`AVAILABLE`): for the compiled steps defined beside their numpy
    programs (certified/directed.py)."""
    if _numba is None:
        raise RuntimeError("numba is not available")
    return _numba


def _compile(coeffs: tuple[float, ...], clamp: float, inv_ln2: float, ln2_hi: float, ln2_lo: float):
    """The loops for one set of exp constants, compiled with the constants frozen into the code (a constant
    trip count lets the compiler unroll Horner's loop and vectorise across entries; passed as arguments they
    made the loop no faster than numpy).  Not cached on disk: a cache keyed on this file would not see a
    change of the constants in elementary.py."""
    jit = _numba.njit(nogil=True, error_model="numpy")
    C = np.array(coeffs, dtype=np.float64)
    n = len(coeffs)

    @jit
    def exp1(x):
        if x != x:
            return x
        if x < clamp:  # np.maximum(z, clamp): NaN handled above, -0.0 kept
            x = clamp
        k = np.rint(x * inv_ln2)
        r = x - k * ln2_hi  # k * LN2_HI is exact (32-bit LN2_HI, |k| <= 1021)
        r = r - k * ln2_lo
        p = r * C[n - 1]  # Horner: fl(c_n r) first, then fl(fl(p r) + c_j)
        p = p + C[n - 2]
        for j in range(n - 3, -1, -1):
            p = p * r
            p = p + C[j]
        bits = (np.int64(k) + 1023) << 52  # 2**k, normal for -1021 <= k <= 0
        return p * np.int64(bits).view(np.float64)

    @jit
    def exp_loop(z):
        out = np.empty_like(z)
        for i in range(z.shape[0]):
            out[i] = exp1(z[i])
        return out

    @jit
    def sigmoid_loop(y):
        out = np.empty_like(y)
        for i in range(y.shape[0]):
            t = y[i]
            e = exp1(-abs(t))
            d = e + 1.0
            num = 1.0 if t >= 0 else e  # np.where(y >= 0, 1.0, e): NaN takes e (NaN)
            out[i] = num / d
        return out

    @jit
    def softmax_rows(s, kept):
        # row i keeps keys 0..kept[i]-1 (all T when not causal): max over the kept keys (NaN propagates),
        # z = fl(s - c) on every key, min(z, 0) and a 0/1 factor on the masked ones (causal only), EXP,
        # the sum from the first key to the last, one division per entry
        R, T = s.shape
        out = np.empty_like(s)
        for i in range(R):
            lim = kept[i]
            c = s[i, 0]
            nan = c != c
            for j in range(1, lim):
                x = s[i, j]
                if x != x:
                    nan = True
                elif x > c:
                    c = x
            if nan:
                c = np.nan
            for j in range(T):
                z = s[i, j] - c
                if lim < T:
                    if z > 0.0:  # np.minimum(z, 0): NaN stays NaN; the sign of a zero z does not change EXP
                        z = 0.0
                    out[i, j] = exp1(z) * (1.0 if j < lim else 0.0)
                else:
                    out[i, j] = exp1(z)
            d = out[i, 0]
            for j in range(1, T):
                d = d + out[i, j]
            for j in range(T):
                out[i, j] = out[i, j] / d
        return out

    return exp_loop, sigmoid_loop, softmax_rows


def _divide_rows_py(a, d):
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        di = d[i]
        for j in range(a.shape[1]):
            out[i, j] = a[i, j] / di
    return out


def _project_out_rows_py(g, y, c, w):
    out = np.empty_like(g)
    for i in range(g.shape[0]):
        ci, wi = c[i], w[i]
        for j in range(g.shape[1]):
            out[i, j] = (g[i, j] - y[i, j] * ci) * wi
    return out


def _centred_times_rows_py(a, c, p):
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        ci = c[i]
        for j in range(a.shape[1]):
            out[i, j] = (a[i, j] - ci) * p[i, j]
    return out


def _finite_rows_py(a, ok):
    for i in range(a.shape[0]):
        if ok[i]:
            for j in range(a.shape[1]):
                x = a[i, j]
                if not (x - x == 0.0):  # false exactly for inf and NaN
                    ok[i] = False
                    break


def _linear_radius_py(delta, norms, sig, rnd, tiny, up, eta):
    out = np.empty((delta.shape[0], sig.shape[0]))
    for i in range(delta.shape[0]):
        d, n = delta[i], norms[i]
        for b in range(sig.shape[0]):
            lip = (d * sig[b]) * up + eta  # mul_up(delta, sigma)
            rounding = (n * rnd[b]) * up + eta  # mul_up(N(m), rnd)
            total = (lip + rounding) * up + eta  # add_up(lip, rounding, TINY), left to right
            out[i, b] = (total + tiny) * up + eta
    return out


def _project_radius_py(eps, nu_lo, nu_hi, e_pi, tiny, ulp, up, eta):
    out = np.empty_like(eps)
    for i in range(eps.shape[0]):
        e = eps[i]
        x = nu_lo[i] - e  # sub_down(nu_lo, eps): fl(nu_lo - eps), then the lower step
        x = (abs(x) * -ulp + x) - eta
        m = x if not (x < 1.0) else 1.0  # np.maximum(x, 1.0): NaN stays NaN
        lip = (e / m) * up + eta  # div_up
        h = nu_hi[i]
        h = h if not (h > 1.0) else 1.0  # np.minimum(nu_hi, 1.0)
        rounding = (e_pi * h) * up + eta  # mul_up
        total = (lip + rounding) * up + eta  # add_up(lip, rounding, TINY), left to right
        out[i] = (total + tiny) * up + eta
    return out


def _residual_radius_py(eps_a, delta, ns, u1, up, eta):
    out = np.empty_like(eps_a)
    for i in range(eps_a.shape[0]):
        rounding = (ns[i] * u1) * up + eta  # mul_up(N(s), u')
        total = (eps_a[i] + delta[i]) * up + eta  # add_up(eps_a, delta, rounding), left to right
        out[i] = (total + rounding) * up + eta
    return out


def _softmax_errors_py(S, two_u, exp_up, eta_exp, g_T, T_alpha, u, one_minus_u, ulp, up, eta):
    n = S.shape[0]
    eta_p, lam, bad = np.empty(n), np.empty(n), np.empty(n, dtype=np.bool_)
    for i in range(n):
        a = (S[i] * two_u) * up + eta  # mul_up(S, 2u)
        x = 1.0 - a  # sub_down(1, a)
        x = (abs(x) * -ulp + x) - eta
        q = (a / x) * up + eta  # div_up
        q = (q * exp_up) * up + eta  # mul_up(., up(1 + eta_exp))
        eta1 = (q + eta_exp) * up + eta  # add_up(., eta_exp)
        one_eta1 = (1.0 + eta1) * up + eta  # add_up(1, eta1)
        t = (one_eta1 * g_T) * up + eta  # mul_up(., gamma_T)
        beta = (eta1 + t) * up + eta  # add_up(eta1, ., T alpha'), left to right
        beta = (beta + T_alpha) * up + eta
        bad[i] = not ((a < 0.5) and (beta < 0.5))
        t = (one_eta1 * u) * up + eta  # mul_up(add_up(1, eta1), u)
        num = (eta1 + t) * up + eta  # add_up(eta1, ., beta, T alpha')
        num = (num + beta) * up + eta
        num = (num + T_alpha) * up + eta
        y = 1.0 - beta  # sub_down(1, beta)
        y = (abs(y) * -ulp + y) - eta
        eta_p[i] = (num / y) * up + eta  # div_up
        z = 1.0 - eta1  # sub_down(1, eta1)
        z = (abs(z) * -ulp + z) - eta
        z = z * one_minus_u  # fl(. (1 - u)), then down
        z = (abs(z) * -ulp + z) - eta
        one_beta = (1.0 + beta) * up + eta  # add_up(1, beta)
        lam[i] = (one_beta / z) * up + eta  # div_up
    return eta_p, lam, bad


def _pi_remainder_py(nu, nu_lo, nu_hi, D, seg, pre0, c_pi, inv_sqrt3, sqrt2, ulp, up, eta):
    out = np.empty_like(D)
    for i in range(D.shape[0]):
        x = nu_lo[i] - seg[i]  # sub_down(nu_lo, seg)
        nu0 = (abs(x) * -ulp + x) - eta
        sphere = nu[i] > 1.0 and nu0 > 1.0
        h = (nu_hi[i] + seg[i]) * up + eta  # add_up(nu_hi, seg)
        ident = nu[i] <= 1.0 and h <= 1.0
        d = D[i]
        if sphere:
            y = nu0 * nu0  # down(fl(nu0 nu0))
            nu0sq = (abs(y) * -ulp + y) - eta
            q = (d * d) * up + eta  # mul_up(mul_up(D, D), 1/sqrt3), div_up(., nu0sq)
            q = (q * inv_sqrt3) * up + eta
            quad = (q / nu0sq) * up + eta
            t = (pre0[i] * sqrt2) * up + eta  # mul_up(pre0, sqrt2), div_up(., nu0sq), add_up(., c_Pi), mul_up(., D)
            t = (t / nu0sq) * up + eta
            t = (t + c_pi) * up + eta
            lin = (t * d) * up + eta
            out[i] = (quad + lin) * up + eta  # add_up(quad, lin)
        elif ident:
            out[i] = 0.0
        else:
            out[i] = (d * 2.0) * up + eta  # mul_up(D, 2)
    return out


def _key_max_py(a, prefix):
    B, T, K = a.shape
    out = np.empty((B, T if prefix else 1, K))
    for b in range(B):
        for k in range(K):
            m = a[b, 0, k]
            if prefix:
                out[b, 0, k] = m
            for t in range(1, T):
                x = a[b, t, k]
                if m != m or x != x:  # NaN propagates, as numpy's maximum
                    m = m if m != m else x
                elif x > m:
                    m = x
                if prefix:
                    out[b, t, k] = m
            if not prefix:
                out[b, 0, k] = m
    return out


def _outer_py(a, b):
    n, T = a.shape
    S = b.shape[1]
    out = np.empty((n, T, S))
    for i in range(n):
        for t in range(T):
            x = a[i, t]
            for j in range(S):
                out[i, t, j] = x * b[i, j] + 0.0  # a matrix product's sum starts at +0: -0 products give +0
    return out


def _njit(fn):
    """``fn`` compiled (cached on disk: it reads nothing but its arguments and numpy), or None without numba."""
    return _numba.njit(cache=True, nogil=True)(fn) if AVAILABLE else None


_centred_times_rows = _njit(_centred_times_rows_py)
_divide_rows = _njit(_divide_rows_py)
_finite_rows = _njit(_finite_rows_py)
_key_max = _njit(_key_max_py)
_linear_radius = _njit(_linear_radius_py)
_outer = _njit(_outer_py)
_pi_remainder = _njit(_pi_remainder_py)
_project_out_rows = _njit(_project_out_rows_py)
_project_radius = _njit(_project_radius_py)
_residual_radius = _njit(_residual_radius_py)
_softmax_errors = _njit(_softmax_errors_py)


def _flat(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).reshape(-1)


def _rows(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).reshape(-1, a.shape[-1])


def _per_row(d, shape) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(d, shape[:-1]), dtype=np.float64).reshape(-1)


def outer(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for stacks of columns ``a`` (..., T, 1) and rows ``b`` (..., 1, S) of one stack shape: each entry is
    ``fl(0 + fl(a b))``, one correctly rounded product added to the zero a matrix product's sum starts from (so a
    -0 product gives +0; with a fused multiply-add the same value), numpy's bits without its per-matrix call.
    Needs :data:`AVAILABLE`."""
    stack, T, S = a.shape[:-2], a.shape[-2], b.shape[-1]
    out = _outer(np.ascontiguousarray(a, dtype=np.float64).reshape(-1, T),
                 np.ascontiguousarray(b, dtype=np.float64).reshape(-1, S))
    return out.reshape(*stack, T, S)


def key_max(a: np.ndarray, prefix: bool) -> np.ndarray:
    """The max over axis 1 of ``a`` (B, T, ...) as (B, 1, ...), or (``prefix``) the running max (B, T, ...), NaN
    propagating: numpy's ``max`` / ``maximum.accumulate`` over the keys.  A maximum is exact, so the value is
    numpy's for every input without ties between -0 and +0 (the radius formulas pass positive bounds, >= eta, or
    NaN).  Needs :data:`AVAILABLE`."""
    B, T = a.shape[:2]
    flat = np.ascontiguousarray(a, dtype=np.float64).reshape(B, T, -1)
    return _key_max(flat, bool(prefix)).reshape((B, T if prefix else 1) + a.shape[2:])


def pi_remainder(nu, nu_lo, nu_hi, D, seg, pre0, c_pi: float, inv_sqrt3: float, sqrt2: float, ulp: float, up: float,
                 eta: float) -> np.ndarray:
    """Step 4.3 of interval_adjoint.md per row (arrays of one shape), by the same operations in the same order as
    ``interval_adjoint._pi_remainder``'s numpy program on the branch each row takes (its constants passed in).
    Needs :data:`AVAILABLE`."""
    shape = np.shape(D)
    args = (_flat(nu), _flat(nu_lo), _flat(nu_hi), _flat(D), _flat(seg), _flat(pre0))
    return _pi_remainder(*args, *map(float, (c_pi, inv_sqrt3, sqrt2, ulp, up, eta))).reshape(shape)


def softmax_errors(S, two_u: float, exp_up: float, eta_exp: float, g_T: float, T_alpha: float, u: float,
                   one_minus_u: float, ulp: float, up: float, eta: float):
    """Step 5 of interval_forward.md per row from the score magnitude ``S``: ``(eta_p, lambda, bad)`` by the same
    operations in the same order as ``interval_stages._softmax_errors`` (its constants passed in).  Needs
    :data:`AVAILABLE`."""
    shape = np.shape(S)
    eta_p, lam, bad = _softmax_errors(np.ascontiguousarray(S, dtype=np.float64).reshape(-1), *map(float, (
        two_u, exp_up, eta_exp, g_T, T_alpha, u, one_minus_u, ulp, up, eta)))
    return eta_p.reshape(shape), lam.reshape(shape), bad.reshape(shape)


def project_radius(eps, nu_lo, nu_hi, e_pi: float, tiny: float, ulp: float, up: float, eta: float) -> np.ndarray:
    """Step 9 of interval_forward.md, ``add_up(div_up(eps, max(sub_down(nu_lo, eps), 1)), mul_up(e_Pi,
    min(nu_hi, 1)), tiny)`` with the directed steps of certified/directed.py (its constants passed in), arrays of
    one shape: the same operations in the same order as ``interval_stages._project_radius``.  Needs
    :data:`AVAILABLE`."""
    shape = np.shape(eps)
    return _project_radius(_flat(eps), _flat(nu_lo), _flat(nu_hi), float(e_pi), float(tiny), float(ulp),
                           float(up), float(eta)).reshape(shape)


def residual_radius(eps_a, delta, ns, u1: float, up: float, eta: float) -> np.ndarray:
    """Step 8, ``add_up(eps_a, delta, mul_up(N(s), u'))``, arrays of one shape: the same operations in the same
    order as ``interval_stages._residual_radius``.  Needs :data:`AVAILABLE`."""
    shape = np.shape(eps_a)
    return _residual_radius(_flat(eps_a), _flat(delta), _flat(ns), float(u1), float(up), float(eta)).reshape(shape)


def linear_radius(delta: np.ndarray, norms: np.ndarray, sig: np.ndarray, rnd: np.ndarray, tiny: float, up: float,
                  eta: float) -> np.ndarray:
    """Step 2 of interval_forward.md per block, ``add_up(mul_up(delta, sigma_b), mul_up(N(m), rnd_b), tiny)``
    with the directed steps ``fl(fl(x up) + eta)`` of certified/directed.py (its constants passed in): the same
    operations in the same order as ``interval_stages._linear``'s numpy program, so the same bits; ``delta``,
    ``norms`` (...,) of one shape -> (..., blocks).  Needs :data:`AVAILABLE`."""
    flat_d = np.ascontiguousarray(delta, dtype=np.float64).reshape(-1)
    flat_n = np.ascontiguousarray(norms, dtype=np.float64).reshape(-1)
    out = _linear_radius(flat_d, flat_n, sig, rnd, float(tiny), float(up), float(eta))
    return out.reshape(*np.shape(delta), sig.shape[0])


def and_finite_rows(ok: np.ndarray, a: np.ndarray) -> None:
    """``ok[b] &= every entry of a[b] finite`` in place (``a`` batch-first; the same booleans as numpy's
    ``isfinite(...).all(axis=1)``, without its temporaries).  Needs :data:`AVAILABLE`."""
    _finite_rows(np.ascontiguousarray(a, dtype=np.float64).reshape(a.shape[0], -1), ok)


def project_out_rows(g: np.ndarray, y: np.ndarray, c: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``fl(fl(g - fl(y c)) w)`` with ``c``, ``w`` one number per row (the adjoint of the projection:
    ``iota (g - (g . y) y)``), the same bits as numpy's ``(g - y * c[..., None]) * w[..., None]`` computed in
    that order.  Needs :data:`AVAILABLE`."""
    return _project_out_rows(_rows(g), _rows(y), _per_row(c, g.shape), _per_row(w, g.shape)).reshape(g.shape)


def centred_times_rows(a: np.ndarray, c: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``fl(fl(a - c) p)`` with ``c`` one number per row (the softmax adjoint ``(g_p - <p, g_p>) p``), the same
    bits as numpy's ``(a - c[..., None]) * p``.  Needs :data:`AVAILABLE`."""
    return _centred_times_rows(_rows(a), _per_row(c, a.shape), _rows(p)).reshape(a.shape)


def divide_rows(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``fl(a / d[..., None])``: each row of ``a`` (..., n) divided by its entry of ``d`` (...), one correctly
    rounded division per entry, the same bits as numpy's broadcast division (without its per-row inner-loop
    setup, which dominates at short rows).  Needs :data:`AVAILABLE`."""
    return _divide_rows(_rows(a), _per_row(d, a.shape)).reshape(a.shape)


_COMPILED: dict = {}


def _loops(coeffs, clamp, inv_ln2, ln2_hi, ln2_lo):
    key = (tuple(float(c) for c in coeffs), float(clamp), float(inv_ln2), float(ln2_hi), float(ln2_lo))
    loops = _COMPILED.get(key)
    if loops is None:
        loops = _COMPILED[key] = _compile(*key)
    return loops


def exp_nonpositive_loop(z: np.ndarray, coeffs: np.ndarray, clamp: float, inv_ln2: float, ln2_hi: float,
                         ln2_lo: float) -> np.ndarray:
    """``elementary.exp_nonpositive``'s program on ``z`` (any shape, float64), with that module's constants
    passed in (they are defined once, there); the same bits as the numpy program.  Needs :data:`AVAILABLE`."""
    flat = np.ascontiguousarray(z, dtype=np.float64).reshape(-1)
    return _loops(coeffs, clamp, inv_ln2, ln2_hi, ln2_lo)[0](flat).reshape(np.shape(z))


def softmax_loop(s: np.ndarray, kept: np.ndarray, coeffs: np.ndarray, clamp: float, inv_ln2: float, ln2_hi: float,
                 ln2_lo: float) -> np.ndarray:
    """``interval_stages.softmax_program`` on scores ``s`` (..., T): each row's max over its first ``kept`` keys
    (``kept`` broadcast against the rows; ``T`` everywhere when not causal), the shift, EXP, the masking, the
    sum from the first key to the last, the division; the same bits.  Needs :data:`AVAILABLE`."""
    T = s.shape[-1]
    rows = np.ascontiguousarray(s, dtype=np.float64).reshape(-1, T)
    lim = np.ascontiguousarray(np.broadcast_to(kept, s.shape[:-1]), dtype=np.int64).reshape(-1)
    return _loops(coeffs, clamp, inv_ln2, ln2_hi, ln2_lo)[2](rows, lim).reshape(s.shape)


def sigmoid_loop(y: np.ndarray, coeffs: np.ndarray, clamp: float, inv_ln2: float, ln2_hi: float,
                 ln2_lo: float) -> np.ndarray:
    """``sigmoid.sigmoid``'s program on ``y`` (any shape, float64); the same bits.  Needs :data:`AVAILABLE`."""
    flat = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
    return _loops(coeffs, clamp, inv_ln2, ln2_hi, ln2_lo)[1](flat).reshape(np.shape(y))


__all__ = (
    "AVAILABLE", "MIN_SIZE", "and_finite_rows", "centred_times_rows", "divide_rows", "exp_nonpositive_loop", "key_max",
    "linear_radius", "numba_module", "outer", "pi_remainder", "project_out_rows", "project_radius", "residual_radius",
    "sigmoid_loop", "softmax_errors", "softmax_loop",
)

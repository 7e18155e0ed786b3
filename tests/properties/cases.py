"""Composite Hypothesis strategies: one sampled *case* per lemma of proofs_notes/theory.md section 8.

A case is a plain tuple of float64 arrays that the matching ``checks.*_sides`` function
understands.  Perturbations are bounded below (review edit 4) by ``rel_min``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from . import reference as ref
from . import strategies as S
from .constants import ACTIVATIONS_DERIVED

#: activations sampled: those of the reference model that the derivation has constants for
#: (gelu_tanh joins automatically once the derivation provides its L_phi).
ACTIVATIONS = tuple(a for a in ref.ACTIVATIONS if a in ACTIVATIONS_DERIVED)

matrix_scales = (0.05, 3.0)


@st.composite
def softmax_cases(draw, t_min: int = 2, t_max: int = 40):
    """(z, z') in R^T with z' - z random, constant-sign, nearly constant or one-hot."""
    T = draw(st.integers(t_min, t_max))
    gen = S.rng(draw(S.seeds))
    z = gen.standard_normal(T) * 10.0 ** draw(st.floats(-2, 1.5))
    kind = draw(st.sampled_from(("random", "positive", "negative", "near_constant", "one_hot")))
    if kind == "random":
        d = gen.standard_normal(T)
    elif kind == "positive":
        d = gen.uniform(0, 1, T)
    elif kind == "negative":
        d = -gen.uniform(0, 1, T)
    elif kind == "near_constant":
        d = 1.0 + 1e-3 * gen.standard_normal(T)
    else:
        d = np.zeros(T)
        d[gen.integers(T)] = 1.0
    d *= 10.0 ** draw(st.floats(-6, 1)) / max(np.max(np.abs(d)), 1e-300)
    return z, z + d


@st.composite
def proj_cases(draw):
    """Pairs (x, x') in R^N, inside, on, and far outside the unit ball."""
    N = draw(st.integers(1, 6))
    gen = S.rng(draw(S.seeds))
    x = gen.standard_normal(N) * 10.0 ** draw(st.floats(-3, 6))
    if draw(st.booleans()):
        x2 = x + gen.standard_normal(N) * 10.0 ** draw(st.floats(-6, 6))
    else:
        x2 = gen.standard_normal(N) * 10.0 ** draw(st.floats(-3, 6))
    return x, x2


@st.composite
def attn_input_cases(draw):
    """(X, X', [A_h], [V_h]) with X, X' in X_T and 1..3 heads."""
    N = draw(st.integers(1, 4))
    x = draw(S.tokens(N=N))
    x2 = draw(S.token_perturbation(x))
    heads = draw(st.integers(1, 3))
    a = [draw(S.matrices(N, N, scales=(0.01, 5.0))) for _ in range(heads)]
    v = [draw(S.matrices(N, N, scales=matrix_scales)) for _ in range(heads)]
    return x, x2, a, v


@st.composite
def attn_qk_cases(draw):
    """(X, A, A', V)."""
    N = draw(st.integers(1, 4))
    x = draw(S.tokens(N=N))
    a = draw(S.matrices(N, N, scales=(0.01, 5.0)))
    a2 = a + draw(S.perturbations((N, N)))
    v = draw(S.matrices(N, N, scales=matrix_scales))
    return x, a, a2, v


@st.composite
def attn_v_cases(draw):
    """(X, A, V, V')."""
    N = draw(st.integers(1, 4))
    x = draw(S.tokens(N=N))
    a = draw(S.matrices(N, N, scales=(0.01, 5.0)))
    v = draw(S.matrices(N, N, scales=matrix_scales))
    return x, a, v, v + draw(S.perturbations((N, N)))


@st.composite
def ff_shapes(draw):
    N = draw(st.integers(1, 4))
    d_ff = draw(st.integers(1, 6))
    m_in = draw(S.matrices(N, d_ff, scales=(0.05, 5.0)))
    m_out = draw(S.matrices(d_ff, N, scales=matrix_scales))
    return N, d_ff, m_in, m_out


@st.composite
def ff_input_cases(draw):
    """(Y, Y', M_in, M_out)."""
    N, d_ff, m_in, m_out = draw(ff_shapes())
    y = draw(S.tokens(N=N))
    return y, draw(S.token_perturbation(y)), m_in, m_out


@st.composite
def ff_min_cases(draw):
    """(Y, M_in, M_in', M_out)."""
    N, d_ff, m_in, m_out = draw(ff_shapes())
    y = draw(S.tokens(N=N))
    return y, m_in, m_in + draw(S.perturbations((N, d_ff))), m_out


@st.composite
def ff_mout_cases(draw):
    """(Y, M_in, M_out, M_out')."""
    N, d_ff, m_in, m_out = draw(ff_shapes())
    y = draw(S.tokens(N=N))
    return y, m_in, m_out, m_out + draw(S.perturbations((d_ff, N)))


@st.composite
def networks(draw, residual: bool = False, activations=ACTIVATIONS, max_layers: int = 3):
    """A random analysis-model net: 1..3 layers, 1..2 heads, width 1..3, d_ff 1..4, ||w|| ~ 1."""
    L = draw(st.integers(1, max_layers))
    H = draw(st.integers(1, 2))
    N = draw(st.integers(1, 3))
    d_ff = draw(st.integers(1, 4))
    layers = []
    for _ in range(L):
        a = [draw(S.matrices(N, N, scales=(0.05, 3.0))) for _ in range(H)]
        v = [draw(S.matrices(N, N, scales=(0.3, 2.0))) for _ in range(H)]
        m_in = draw(S.matrices(N, d_ff, scales=(0.3, 3.0)))
        m_out = draw(S.matrices(d_ff, N, scales=(0.3, 2.0)))
        layers.append(ref.Layer(a, v, m_in, m_out))
    gen = S.rng(draw(S.seeds))
    w = gen.standard_normal(N)
    w *= draw(st.floats(0.1, 3.0)) / max(np.linalg.norm(w), 1e-300)
    activation = draw(st.sampled_from(activations))
    return ref.Net(layers, w, activation, residual)


@st.composite
def network_cases(draw, residual: bool = False, activations=ACTIVATIONS, kinds=("A", "V", "M_in", "M_out")):
    """(net, X, l, key, W_j'): perturb ONE matrix of a random net."""
    net = draw(networks(residual=residual, activations=activations))
    N = net.w.shape[0]
    x = draw(S.tokens(N=N, t_max=4))
    layer = draw(st.integers(0, len(net.layers) - 1))
    kind = draw(st.sampled_from(kinds))
    h = draw(st.integers(0, len(net.layers[0].a) - 1)) if kind in ("A", "V") else -1
    old = net.layers[layer].matrices()[(kind, h)]
    new = old + draw(S.perturbations(old.shape))
    return net, x, layer, (kind, h), new


# ---------------------------------------------------------------- targeted (near-extremal) cases
# Small, structured cases near the equality cases of the proofs.  The suite uses them alongside the
# generic strategies, and the mutation tests rely on them to find counterexamples quickly.


def _scalar(x: float) -> np.ndarray:
    return np.array([[x]])


@st.composite
def softmax_witnesses(draw):
    """T = 2, z ~ 0, z' - z = (delta, -delta): the tightness case of C_sm."""
    delta = 10.0 ** draw(st.floats(-5, -1))
    z0 = draw(st.floats(-1e-3, 1e-3))
    return np.array([z0, z0]), np.array([z0 + delta, z0 - delta])


@st.composite
def attn_qk_witnesses(draw):
    """N = 1, X = (1, -1)^T, A ~ 0: each score row moves by (+-delta, -+delta)."""
    a = draw(st.floats(-1e-3, 1e-3))
    delta = 10.0 ** draw(st.floats(-5, -2))
    v = draw(st.floats(0.1, 3.0))
    return np.array([[1.0], [-1.0]]), _scalar(a), _scalar(a + delta), _scalar(v)


@st.composite
def attn_input_witnesses(draw):
    """T = 1, N = 1, A ~ 0: Att(X) = X V, the sup of the input-Lipschitz ratio."""
    x = draw(st.floats(0.5, 1.0))
    delta = 10.0 ** draw(st.floats(-5, -1))
    heads = draw(st.integers(1, 2))
    a = [_scalar(draw(st.floats(-1e-4, 1e-4))) for _ in range(heads)]
    v = [_scalar(draw(st.floats(0.1, 3.0))) for _ in range(heads)]
    return _scalar(x), _scalar(x - delta), a, v


@st.composite
def ff_input_witnesses(draw):
    """N = d_ff = 1 with y M_in near sqrt 2, where |phi'| peaks."""
    m_in = draw(st.floats(1.2, 3.0))
    y = np.sqrt(2) / m_in * draw(st.floats(0.97, 1.03))
    delta = 10.0 ** draw(st.floats(-5, -2))
    return _scalar(min(y, 1.0)), _scalar(min(y, 1.0) - delta), _scalar(m_in), _scalar(draw(st.floats(0.1, 3.0)))


@st.composite
def ff_min_witnesses(draw):
    """proofs_notes/theory.md section 2 witness (b), randomised: y = 1, M_in near sqrt 2."""
    m_in = np.sqrt(2) * draw(st.floats(0.95, 1.05))
    delta = 10.0 ** draw(st.floats(-6, -2))
    return _scalar(1.0), _scalar(m_in), _scalar(m_in + delta), _scalar(draw(st.floats(0.1, 3.0)))


@st.composite
def ff_mout_witnesses(draw):
    """proofs_notes/theory.md section 2 witness (c), randomised: y = 1, M_in large (phi(t) ~ t)."""
    m_in = draw(st.floats(3.0, 8.0))
    m_out = draw(st.floats(0.1, 3.0))
    return _scalar(1.0), _scalar(m_in), _scalar(m_out), _scalar(m_out + 10.0 ** draw(st.floats(-5, -1)))


def _signed(gen, lo: float, hi: float) -> float:
    """Random sign times a log-uniform magnitude in [lo, hi] (numpy: uniform, not Hypothesis-simple)."""
    return float(gen.choice((1.0, -1.0)) * 10.0 ** gen.uniform(np.log10(lo), np.log10(hi)))


@st.composite
def scalar_network_cases(draw, residual: bool = False, kinds=("A", "V", "M_in", "M_out"), activations=ACTIVATIONS):
    """One-layer, one-head, width-1 nets with T in {1, 2}, where the gamma_j are attained.

    Parametrised by the *internal* values so that no projection is active (a clipped Pi has zero
    derivative and hides everything): the attention output y in (-1, 1), the pre-activation
    t = y M_in, and the FF output z in (-1, 1).  T = 2 uses X = (1, -1)^T, whose score rows move
    by (+-d, -+d): the softmax equality case.  Continuous values come from a drawn seed so they
    are spread uniformly rather than shrunk towards Hypothesis' simplest floats.
    """
    activation = draw(st.sampled_from(activations))
    t2 = draw(st.booleans())
    kind = draw(st.sampled_from(kinds))
    gen = S.rng(draw(S.seeds))
    y = _signed(gen, 0.05, 0.99)
    # half the time near +-sqrt 2, where the GELU slope peaks at L_phi
    t = _signed(gen, 0.2, 4.0) if gen.uniform() < 0.5 else float(gen.choice((1.0, -1.0)) * gen.uniform(1.3, 1.55))
    z = _signed(gen, 0.05, 0.99)
    if t2:
        x = np.array([[1.0], [-1.0]])
        a = _signed(gen, 1e-3, 0.2)
        v = ((y - 1.0) if residual else y) / np.tanh(a)  # row 1 of Att is tanh(a) v
    else:
        x = np.array([[gen.choice((1.0, -1.0)) * gen.uniform(0.85, 1.0)]])
        a = gen.uniform(-0.2, 0.2)
        v = (y / x[0, 0] - 1.0) if residual else y / x[0, 0]  # Att(x) = x v
    m_in = t / y
    phi_t = float(ref.ACTIVATIONS[activation](np.array(t)))
    m_out = (((z - y) if residual else z) / phi_t) if abs(phi_t) > 1e-3 else _signed(gen, 0.05, 2.0)
    w = np.array([gen.uniform(0.1, 3.0)])
    net = ref.Net([ref.Layer([_scalar(a)], [_scalar(v)], _scalar(m_in), _scalar(m_out))], w, activation, residual)
    key = (kind, 0 if kind in ("A", "V") else -1)
    old = net.layers[0].matrices()[key]
    return net, x, 0, key, old + _signed(gen, 1e-5, 1e-2)


@st.composite
def network_cover_cases(draw, residual: bool = False):
    """(net, centre, X): every matrix and the read-out moved by a bounded-below perturbation."""
    net = draw(networks(residual=residual))
    centre = net
    for l, lay in enumerate(net.layers):
        for key, mat in lay.matrices().items():
            centre = centre.with_matrix(l, key, mat + draw(S.perturbations(mat.shape, rel_max=0.3)))
    gen = S.rng(draw(S.seeds))
    dw = gen.standard_normal(net.w.shape)
    dw *= 10.0 ** draw(st.floats(-6, -0.5)) / max(np.linalg.norm(dw), 1e-300)
    centre = replace(centre, w=net.w + dw)
    return net, centre, draw(S.tokens(N=net.w.shape[0], t_max=4))

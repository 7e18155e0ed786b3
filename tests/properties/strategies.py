"""Hypothesis strategies for the property suite (proofs_notes/theory.md section 8).

Matrices are built as ``U diag(s) V^T`` with Haar-random orthogonal ``U``, ``V`` so that the
*singular-value profile* is chosen on purpose rather than left to chance: flat, power-law decay,
clustered / repeated, rank-deficient, near zero, huge.  Random orthogonal factors come from a
Hypothesis-drawn seed (numpy ``Generator``), so every example is reproducible and shrinks by seed.

Token matrices have rows in the closed unit ball (the set ``X_T`` of proofs_notes/theory.md section 1), with some
rows exactly on the sphere, some inside, and sometimes ``T = 1``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

PROFILES: tuple[str, ...] = ("flat", "power", "clustered", "deficient", "near_zero", "huge", "random")
"""Named singular-value profiles drawn by :func:`spectra`."""

seeds = st.integers(min_value=0, max_value=2**32 - 1)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def orthogonal(gen: np.random.Generator, n: int) -> np.ndarray:
    """Haar-random n x n orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    q, r = np.linalg.qr(gen.standard_normal((n, n)))
    return q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))


def profile_values(profile: str, k: int, scale: float, gen: np.random.Generator) -> np.ndarray:
    """k singular values (descending, >= 0) of the named profile, largest about ``scale``."""
    if k == 0:
        return np.zeros(0)
    i = np.arange(1, k + 1, dtype=float)
    if profile == "flat":
        s = np.ones(k)
    elif profile == "power":
        s = i ** (-gen.uniform(0.3, 3.0))
    elif profile == "clustered":
        # two clusters of exactly repeated values (the equality cases of Stechkin / Weyl)
        cut = int(gen.integers(1, k + 1))
        s = np.where(i <= cut, 1.0, gen.uniform(0.0, 1.0))
    elif profile == "deficient":
        rank = int(gen.integers(0, k))
        s = np.where(i <= rank, gen.uniform(0.1, 1.0, size=k), 0.0)
    elif profile == "near_zero":
        s = gen.uniform(0.0, 1.0, size=k) * 1e-12
    elif profile == "huge":
        s = gen.uniform(0.5, 1.0, size=k) * 1e12
    else:  # "random": iid uniform, the generic case
        s = gen.uniform(0.0, 1.0, size=k)
    return np.sort(s)[::-1] * scale


@st.composite
def spectra(draw, k_min: int = 1, k_max: int = 8, profiles=PROFILES, scales=(1e-3, 1e3)):
    """A descending vector of singular values (exact floats) with a named profile."""
    k = draw(st.integers(k_min, k_max))
    profile = draw(st.sampled_from(profiles))
    lo, hi = scales
    scale = draw(st.floats(lo, hi)) if lo < hi else lo
    return profile_values(profile, k, scale, rng(draw(seeds)))


def compose(gen: np.random.Generator, m: int, n: int, s: np.ndarray) -> np.ndarray:
    """U[:, :k] diag(s) V[:, :k]^T for random orthogonal U (m x m) and V (n x n), k = len(s)."""
    k = len(s)
    u = orthogonal(gen, m)[:, :k]
    v = orthogonal(gen, n)[:, :k]
    return (u * s) @ v.T


@st.composite
def matrices(draw, m=None, n=None, max_dim: int = 5, profiles=PROFILES, scales=(0.05, 3.0)):
    """An m x n float64 matrix U diag(s) V^T with a drawn singular-value profile.

    ``m``/``n`` fixed when given; otherwise drawn in 1..max_dim.
    """
    m = draw(st.integers(1, max_dim)) if m is None else m
    n = draw(st.integers(1, max_dim)) if n is None else n
    profile = draw(st.sampled_from(profiles))
    lo, hi = scales
    scale = draw(st.floats(lo, hi))
    gen = rng(draw(seeds))
    return compose(gen, m, n, profile_values(profile, min(m, n), scale, gen))


@st.composite
def perturbations(draw, shape: tuple[int, int], rel_min: float = 1e-6, rel_max: float = 1.0):
    """A nonzero perturbation whose spectral norm is in [rel_min, rel_max] (bounded below).

    The lower bound is review edit 4: below ~1e-6 the float64 numerator of a Lipschitz ratio is
    dominated by cancellation, and the ratio is meaningless.
    """
    gen = rng(draw(seeds))
    size = draw(st.floats(np.log10(rel_min), np.log10(rel_max)))
    profile = draw(st.sampled_from(("flat", "power", "deficient", "random")))
    s = profile_values(profile, min(shape), 1.0, gen)
    if s[0] == 0:
        s[0] = 1.0
    d = compose(gen, shape[0], shape[1], s)
    return d * (10.0**size / np.linalg.norm(d, 2))


def project_rows(x: np.ndarray) -> np.ndarray:
    """Pi row by row (written here, not imported, so strategies do not depend on the reference)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(1.0, norms)


@st.composite
def tokens(draw, T=None, N=None, t_max: int = 8, n_max: int = 5):
    """A T x N token matrix in X_T: every row has l2 norm <= 1 (some exactly 1, some inside)."""
    T = draw(st.integers(1, t_max)) if T is None else T
    N = draw(st.integers(1, n_max)) if N is None else N
    gen = rng(draw(seeds))
    x = gen.standard_normal((T, N))
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    kind = draw(st.sampled_from(("sphere", "ball", "mixed", "small")))
    if kind == "ball":
        x *= gen.uniform(0, 1, size=(T, 1))
    elif kind == "mixed":
        x *= np.where(gen.uniform(size=(T, 1)) < 0.5, 1.0, gen.uniform(0, 1, size=(T, 1)))
    elif kind == "small":
        x *= 1e-3
    return project_rows(x)  # guards the last ulp: ||row|| <= 1 exactly after Pi


@st.composite
def token_perturbation(draw, x: np.ndarray, rel_min: float = 1e-6, rel_max: float = 1.0):
    """X' = Pi(X + D) with ||D||_{2,inf} in [rel_min, rel_max] (before projection)."""
    gen = rng(draw(seeds))
    d = gen.standard_normal(x.shape)
    d /= np.max(np.linalg.norm(d, axis=1))
    d *= 10.0 ** draw(st.floats(np.log10(rel_min), np.log10(rel_max)))
    return project_rows(x + d)


def grid(m: int) -> list[Fraction]:
    """P_m = {0, 1/m, ..., 2} as exact fractions."""
    return [Fraction(k, m) for k in range(2 * m + 1)]


@st.composite
def schatten_indices(draw, positive: bool = True, p_max: float = 2.0):
    """A Schatten index p, on the grid P_m (m in 1..8) or off it (any float in (0, p_max])."""
    if draw(st.booleans()):
        m = draw(st.integers(1, 8))
        lo = 1 if positive else 0
        return float(Fraction(draw(st.integers(lo, 2 * m)), m))
    return draw(st.floats(1e-3 if positive else 0.0, p_max, allow_nan=False))

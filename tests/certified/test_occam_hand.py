"""The certified Occam route of a tiny network (L = H = 1, N = 2) against a hand computation.

Every term is typed from proofs_notes/occam_route.md (the allocation rule with the volumetric cap of
sharpenings.md S1, the scales at gamma/2, H_theta, Lambda with lambda(k_gamma), the mass C at delta/2),
binomial_inversion.md (BinInv as the root of log P(Bin(n, p) <= K) = -C, found here by a 60-digit
bisection) and margins.py's contract (C4: undecided and non-finite samples count).  Nothing is imported
from ``derivation``: this pins what the golden files can only record, and the mutation tests of
tests/properties/test_mutation_occam.py show that it fails when a constant or a direction is wrong.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
from flint import arb

from specbound.certified.bound import certify_bound
from specbound.certified.factored import enclose
from specbound.certified.margins import MarginEnclosures
from specbound.certified.radii import exact_value
from specbound.plan import BoundSettings, OccamPlan

from .test_hand_bound import EMP, MATRICES, M_GRID, N_SAMPLES, contains, index_up, lam, mpf, plan, tiny

K_GAMMA = -3  # gamma = (17/16)^-3
OCCAM_P = (Fraction(0), Fraction(1, 2), Fraction(1), Fraction(2))  # one of each kind of entropy
ROUTES = ("rademacher", "occam")


def margins(gamma: float) -> tuple[MarginEnclosures, int]:
    """1000 certified margin enclosures and the count a correct K^ must reach: 7 samples certainly <= gamma,
    3 straddling gamma (their midpoints above it), 2 not certified (infinite), the rest certainly above."""
    lo = np.full(N_SAMPLES, gamma + 1.0)
    hi = lo + 0.5
    lo[:7], hi[:7] = gamma - 0.5, gamma - 0.25
    lo[7:10], hi[7:10] = gamma - 1e-9, gamma + 1e-6
    lo[10:12], hi[10:12] = -np.inf, np.inf
    return MarginEnclosures(lo, hi, "synthetic"), 12


def hand_occam(count: int, lip: int = 1, k_rows: int = 1, readout_norm=Fraction(0.75)) -> dict:
    """The Occam route by hand at 50 digits (occam_route.md, sharpenings.md S1 and S2).  ``lip``, ``rows``,
    ``readout_norm``: the k-class route (k_class.md (d): the output cover at gamma/(2 lip) = gamma/4, the
    read-out weight and dimension k_rows * N, the radius from the largest row norm)."""
    beta_c, beta_s, beta_w, beta_g = mpf(Fraction(17, 16)), mpmath.mpf(2), mpf(Fraction(17, 16)), mpf(Fraction(17, 16))
    g = beta_g ** K_GAMMA
    L_phi = (1 + mpmath.erf(1)) / 2 + 1 / (mpmath.e * mpmath.sqrt(mpmath.pi))
    rows = []
    for (kind, _h, left, _right, _p), p in zip(MATRICES, OCCAM_P):
        sv = [mpf(Fraction(float(abs(v)))) for v in np.diag(left)]
        k_c = index_up(max(sv), beta_c)
        row = dict(kind=kind, p=p, k_c=k_c, c=beta_c**k_c, r_max=2, d=4, mn=4, rank=2)
        if p > 0:
            row["k_s"] = index_up(mpmath.fsum(v ** mpf(p) for v in sv), beta_s)
            row["s"] = beta_s ** row["k_s"]
        rows.append(row)
    c = {r["kind"]: r["c"] for r in rows}
    k_w = index_up(mpf(readout_norm), beta_w)
    B_w = beta_w**k_w
    sens = {"QK": L_phi * c["V_tilde"] * c["M_in"] * c["M_out"], "V_tilde": L_phi * c["M_in"] * c["M_out"],
            "M_in": L_phi * c["M_out"], "M_out": c["M_in"]}  # C_sm = B_phi = 1, alpha = 1
    # the rule: omega_j = min(r_j d_j, m_j n_j) (rank at p = 0, the cap at p > 0), omega_w = N
    omega = [min(r["rank"] * r["d"] if r["p"] == 0 else r["r_max"] * r["d"], r["mn"]) for r in rows]
    total = sum(omega) + 2 * k_rows
    H, Lam, ents = mpmath.mpf(0), mpmath.mpf(0), []
    for r, w in zip(rows, omega):
        eps = mpmath.mpf(w) / total * g / (2 * lip * B_w * sens[r["kind"]])  # the cover radius gamma/2, shared
        vol = r["mn"] * mpmath.log(1 + 2 * r["c"] / eps)
        if r["p"] == 0:
            ent = min(r["rank"] * r["d"] * mpmath.log(1 + 4 * r["c"] / eps), vol)
            Lam += mpmath.log(2 * M_GRID + 1) + lam(r["k_c"]) + mpmath.log(r["r_max"] + 1)
        else:
            trunc = min(r["r_max"], max(0, int(mpmath.ceil(r["s"] * (2 / eps) ** mpf(r["p"]))) - 1))
            ent = min(trunc * r["d"] * mpmath.log(1 + 8 * r["c"] / eps), vol)
            Lam += mpmath.log(2 * M_GRID + 1) + lam(r["k_c"]) + lam(r["k_s"])
        ents.append(ent)
        H += ent
    eps_w = mpmath.mpf(2 * k_rows) / total * g / (2 * lip)
    H += 2 * k_rows * mpmath.log(1 + 2 * B_w / eps_w)
    Lam += lam(k_w) + lam(K_GAMMA)
    C = H + Lam + mpmath.log(40)  # delta/2 = 1/40: both routes are reported
    return dict(gamma=g, H=H, Lambda=Lam, C=C, bound=bininv(N_SAMPLES, count, C), entropies=ents,
                shares=[mpmath.mpf(w) / total for w in omega])


def bininv(n: int, k: int, C) -> mpmath.mpf:
    """max{p : P(Bin(n, p) <= k) >= e^-C} by bisection on the 60-digit log CDF (binomial_inversion.md)."""
    with mpmath.workdps(60):
        def log_cdf(p):
            return mpmath.log(mpmath.fsum(mpmath.binomial(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1)))
        lo, hi = mpmath.mpf(0), mpmath.mpf(1)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if log_cdf(mid) >= -C else (lo, mid)
        return hi


def certified(enc: MarginEnclosures | None = None):
    w = tiny()
    st = BoundSettings(n=N_SAMPLES, delta=0.05, routes=ROUTES)
    gamma = float(Fraction(17, 16) ** K_GAMMA)
    enc = enc if enc is not None else margins(gamma)[0]
    p = OccamPlan(m=M_GRID, p_index=tuple(int(q * M_GRID) for q in OCCAM_P), k_gamma=K_GAMMA)
    from dataclasses import replace

    return certify_bound(w, st, replace(plan(), occam=p), [enclose(x) for x in w.matrices],
                         arb(EMP.numerator) / EMP.denominator, margins=enc)


def test_the_certified_occam_route_equals_the_hand_computation():
    cb = certified()
    gamma = float(Fraction(17, 16) ** K_GAMMA)
    _, count = margins(gamma)
    o = cb.occam
    assert o.count == count  # C4: the straddling and the infinite samples count
    with mpmath.workdps(50):
        ref = hand_occam(count)
    for key, ball in (("gamma", o.gamma), ("H", o.H), ("Lambda", o.Lambda), ("C", o.mass)):
        assert contains(ball, ref[key]), (key, ball, ref[key])
        assert ball.rad() < 1e-30 * (1 + abs(float(ref[key]))), key
    for rec, ent, share in zip(o.matrices, ref["entropies"], ref["shares"]):
        assert contains(rec.entropy, ent) and contains(rec.share, share)
    # the certified number is never below the true BinInv, and within 1e-9 of it
    up = mpf(exact_value(o.bound.upper()))
    assert ref["bound"] * (1 - mpmath.mpf(10) ** -40) <= up <= ref["bound"] * (1 + mpmath.mpf(10) ** -9)


def test_the_reported_bound_is_the_smaller_route_each_at_delta_over_two():
    cb = certified()
    assert cb.routes == ROUTES and cb.settings.route_level() == Fraction(1, 40)
    smaller = min((cb.rademacher, cb.occam.bound), key=lambda b: exact_value(b.upper()))
    assert cb.bound is smaller and cb.route == ("occam" if smaller is cb.occam.bound else "rademacher")


def test_a_proven_zero_matrix_has_no_weight_no_share_and_no_entropy():
    from specbound.matrices import AnalysisWeights, NamedMatrix, ordered

    w = tiny()
    mats = [NamedMatrix(m.layer, m.head, m.kind, np.zeros_like(m.left) if m.kind == "V_tilde" else m.left, m.right)
            for m in w.matrices]
    z = AnalysisWeights(matrices=ordered(mats), num_layers=1, num_heads=1, width=2, head_dim=2, ff_dim=2,
                        activation="gelu", readout=w.readout)
    st = BoundSettings(n=N_SAMPLES, routes=ROUTES)
    from dataclasses import replace

    p = OccamPlan(m=M_GRID, p_index=(0, 0, 0, 0), k_gamma=K_GAMMA)
    cb = certify_bound(z, st, replace(plan(), occam=p), [enclose(x) for x in z.matrices], arb(0),
                       margins=margins(0.8)[0])
    zero = [r for r, m in zip(cb.occam.matrices, z.matrices) if m.kind == "V_tilde"]
    assert zero[0].weight == 0 and zero[0].share == 0 and zero[0].entropy == 0
    assert cb.occam.H.is_finite() and cb.occam.bound.is_finite()

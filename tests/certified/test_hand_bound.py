"""The assembled certified bound of a tiny network (L = H = 1, N = 2) against a hand computation.

Every term below is typed from the proof notes (theory.md sections 6 and 7, posthoc_union.md,
main_theorem.md, sensitivity_gamma.md, layer_lipschitz.md, gelu_constants.md, schatten_cover.md,
rank_cover.md, balance_single_scale.md, dudley.md) and evaluated in mpmath at 50 digits.  Nothing
is imported from ``derivation``: the SymPy expressions are not consulted, so this test pins what
the golden files can only record -- Lambda's composition (log(2m+1), log(r_max+1), lambda(k_w),
lambda(k_rho), lambda(k_c), lambda(k_s)), the confidence term sqrt((log(1/delta)+Lambda)/(2n)) (one
McDiarmid step, sharpenings.md S3), the factor 2 on min(SS, DD), the sensitivities, the per-matrix terms,
the volumetric cover 4 log(1 + 2c/eps) of each 2 x 2 matrix (S1) and the bases of S2.

The matrices are diagonal with few-bit entries, so their singular values are known exactly; one
matrix of each kind of term is used: p = 0 (rank prior), p = 1/2, p = 1 and p = 2 (the Dudley
log form).
"""

from fractions import Fraction

import mpmath
import numpy as np
from flint import arb

from specbound.certified.bound import certify_bound
from specbound.certified.factored import enclose
from specbound.certified.radii import exact_value
from specbound.matrices import AnalysisWeights, NamedMatrix, ordered
from specbound.plan import BoundPlan, BoundSettings

N_SAMPLES, DELTA, EMP = 1000, 0.05, Fraction(1, 8)
I2 = np.eye(2)
# (kind, head, left, right, p): singular values are the |diagonal| entries
MATRICES = [
    ("QK", 0, np.diag([1.5, 0.25]), I2, Fraction(0)),
    ("V_tilde", 0, np.diag([1.0, 0.5]), I2, Fraction(1)),
    ("M_in", -1, np.diag([2.0, 1.0]), None, Fraction(1, 2)),
    ("M_out", -1, np.diag([0.5, 0.125]), None, Fraction(2)),
]
READOUT = np.array([0.75, 0.0])
M_GRID = 2  # ceil(L + ln N) = ceil(1 + 0.693...) = 2, so P_m = {0, 1/2, 1, 3/2, 2}
K_RHO = -1
U = (1 / 32, 1 / 16, 1 / 16, 1 / 8)
U_W = 1 / 16
VARTHETA = (1 / 8,) * 4
VARTHETA_W = 1 / 4
ALPHA_D = 1 / 64


def tiny() -> AnalysisWeights:
    mats = [NamedMatrix(0, h, kind, left, right) for kind, h, left, right, _ in MATRICES]
    return AnalysisWeights(matrices=ordered(mats), num_layers=1, num_heads=1, width=2, head_dim=2,
                           ff_dim=2, activation="gelu", readout=READOUT)


def plan() -> BoundPlan:
    p_index = tuple(int(p * M_GRID) for *_, p in MATRICES)
    return BoundPlan(m=M_GRID, p_index=p_index, k_rho=K_RHO, u=U, u_w=U_W, alpha_D=ALPHA_D,
                     vartheta=VARTHETA, vartheta_w=VARTHETA_W)


def mpf(x) -> mpmath.mpf:
    x = Fraction(x)
    return mpmath.mpf(x.numerator) / x.denominator


def index_up(x, beta) -> int:
    """The least integer k with beta**k >= x (posthoc_union.md, rounding a trained network)."""
    k = int(mpmath.floor(mpmath.log(x) / mpmath.log(beta)))
    while beta**k < x:
        k += 1
    while beta ** (k - 1) >= x:
        k -= 1
    return k


def lam(k: int):
    """lambda(k) = log(3(|k|+1)(|k|+2)/2), the cost of one integer on the prior pi_Z."""
    return mpmath.log(mpmath.mpf(3) * (abs(k) + 1) * (abs(k) + 2) / 2)


def hand(lip: int = 1, k_rows: int = 1, readout_norm=Fraction(0.75)) -> dict:
    """The bound by hand.  ``lip``, ``rows``, ``readout_norm``: the k-class theorem (proofs_notes/k_class.md
    (c)) has the margin operator's factor ``lip = 2`` in every kappa and in the read-out scale, the read-out
    covered in ``k_rows * N`` dimensions and ``readout_norm`` = the largest row norm of W."""
    n, rho = mpmath.mpf(N_SAMPLES), mpf(2) ** K_RHO
    # sharpenings.md S2: beta_c = 1 + 1/(16L), beta_w = 17/16
    beta_c, beta_s, beta_w = mpf(Fraction(17, 16)), mpmath.mpf(2), mpf(Fraction(17, 16))
    L_phi = (1 + mpmath.erf(1)) / 2 + 1 / (mpmath.e * mpmath.sqrt(mpmath.pi))  # Phi(sqrt 2) + 1/(e sqrt pi)
    C_sm, B_phi = 1, 1

    rows = []
    for kind, _h, left, right, p in MATRICES:
        sv = [mpf(Fraction(float(abs(v)))) for v in np.diag(left)]
        k_c = index_up(max(sv), beta_c)
        row = dict(kind=kind, p=p, k_c=k_c, c=beta_c**k_c, r_max=2, d=4)
        if p == 0:
            row["s"] = mpmath.mpf(2)  # the proven rank of a full-rank 2 x 2 matrix
        else:
            row["k_s"] = index_up(mpmath.fsum(v ** mpf(p) for v in sv), beta_s)
            row["s"] = beta_s ** row["k_s"]
        rows.append(row)
    c = {r["kind"]: r["c"] for r in rows}
    k_w = index_up(mpf(readout_norm), beta_w)
    B_w = beta_w**k_w

    # sensitivities (sensitivity_gamma.md) and the single layer's constant (layer_lipschitz.md)
    gamma = {"QK": C_sm * L_phi * c["V_tilde"] * c["M_in"] * c["M_out"],
             "V_tilde": L_phi * c["M_in"] * c["M_out"],
             "M_in": L_phi * c["M_out"],
             "M_out": B_phi * c["M_in"]}
    layer = L_phi * c["M_in"] * c["M_out"] * c["V_tilde"] * (1 + 2 * C_sm * c["QK"])
    alpha = 1  # the last (only) layer

    T_sum, H_total, D_sum, Lam = 0, 0, 0, 0
    for row, u, th in zip(rows, U, VARTHETA):
        kap = lip * B_w * alpha * gamma[row["kind"]] / rho
        p, cc, s, d, r_max = mpf(row["p"]), row["c"], row["s"], row["d"], row["r_max"]
        u, th, aD = mpf(Fraction(u)), mpf(Fraction(th)), mpf(Fraction(ALPHA_D))
        if p == 0:
            # rank_cover: H(eps) = min(r_max, s) d log(1 + 4c/eps); balanced at one scale
            r = min(r_max, s)
            T_sum += mpmath.sqrt(r * d * mpmath.log(1 + 4 * cc * kap * n) / (2 * n)) + 1 / n
            H_total += min(r * d * mpmath.log(1 + 4 * cc * kap / u), 4 * mpmath.log(1 + 2 * cc * kap / u))
            D_sum += mpmath.sqrt(r * d * mpmath.log(1 + 4 * cc * kap / (th * aD))) * (mpf(Fraction(1, 4)) - aD)
            Lam += mpmath.log(2 * M_GRID + 1) + lam(row["k_c"]) + mpmath.log(r_max + 1)
        else:
            # schatten_cover: H(eps) = min(r_max, max(0, ceil(s (2/eps)^p) - 1)) d log(1 + 8c/eps)
            a = s * (2 * kap) ** p * d * mpmath.log(1 + 8 * cc * kap * n)
            C_p = (p / 2) ** (2 / (p + 2)) * (1 + 2 / p)
            T_sum += C_p * (a / (2 * n)) ** (1 / (p + 2)) + 1 / n
            eps = u / kap
            r = min(r_max, max(0, int(mpmath.ceil(s * (2 / eps) ** p)) - 1))
            H_total += min(r * d * mpmath.log(1 + 8 * cc / eps), 4 * mpmath.log(1 + 2 * cc / eps))
            aD_j = s * (2 * kap / th) ** p * d * mpmath.log(1 + 8 * cc * kap / (th * aD))
            if p == 2:
                I_p = mpmath.log(1 / (4 * aD))
            else:
                I_p = (mpf(Fraction(1, 4)) ** (1 - p / 2) - aD ** (1 - p / 2)) / (1 - p / 2)
            D_sum += mpmath.sqrt(aD_j) * I_p
            Lam += mpmath.log(2 * M_GRID + 1) + lam(row["k_c"]) + lam(row["k_s"])

    Nw, u_w, th_w, aD = 2 * k_rows, mpf(Fraction(U_W)), mpf(Fraction(VARTHETA_W)), mpf(Fraction(ALPHA_D))
    rho = rho / lip  # the read-out's output scale: rho u / lip (k classes: the ramp is 2/rho-Lipschitz)
    ss_closed = T_sum + mpmath.sqrt(Nw * mpmath.log(1 + 2 * B_w * n / rho) / (2 * n)) + 1 / n
    H_total += Nw * mpmath.log(1 + 2 * B_w / (rho * u_w))
    ss_exact = mpmath.fsum(mpf(Fraction(u)) for u in U) + u_w + mpmath.sqrt(H_total / (2 * n))
    SS = min(ss_closed, ss_exact)
    DD = 4 * aD + 12 / mpmath.sqrt(n) * (
        D_sum + mpmath.sqrt(Nw * mpmath.log(1 + 2 * B_w / (th_w * rho * aD))) * (mpf(Fraction(1, 4)) - aD))
    rho = rho * lip
    Lam += lam(k_w) + lam(K_RHO)
    conf = mpmath.sqrt((mpmath.log(1 / mpf(Fraction(1, 20))) + Lam) / (2 * n))
    bound = mpf(EMP) + 2 * min(SS, DD) + conf
    return dict(layer_lipschitz_0=layer, ss_closed=ss_closed, ss_exact=ss_exact, SS=SS, DD=DD,
                Lambda=Lam, confidence=conf, complexity=2 * min(SS, DD), bound=bound,
                k_c=[r["k_c"] for r in rows], k_s=[r.get("k_s") for r in rows], k_w=k_w,
                gamma=[gamma[r["kind"]] for r in rows])


def contains(ball: arb, ref) -> bool:
    """``ref`` (50 digits) lies in the ball, up to 1e-40 relative (the reference's own error)."""
    lo, hi = exact_value(ball.lower()), exact_value(ball.upper())
    with mpmath.workdps(60):
        tol = mpmath.mpf(10) ** -40 * (1 + abs(ref))
        return mpf(lo) - tol <= ref <= mpf(hi) + tol


def _certified():
    w = tiny()
    st = BoundSettings(n=N_SAMPLES, delta=DELTA)
    return certify_bound(w, st, plan(), [enclose(x) for x in w.matrices], arb(EMP.numerator) / EMP.denominator)


def test_the_grid_points_are_the_hand_ones():
    cb = _certified()
    with mpmath.workdps(50):
        ref = hand()
    assert [r.k_c for r in cb.matrices] == ref["k_c"] == [7, 0, 12, -11]
    assert [r.k_s for r in cb.matrices] == ref["k_s"] == [None, 1, 2, -1]
    assert [r.proven_rank for r in cb.matrices][0] == 2
    assert cb.k_w == ref["k_w"] == -4 and cb.m == M_GRID
    for rec, g in zip(cb.matrices, ref["gamma"]):
        assert contains(rec.gamma, g)


def test_the_certified_bound_equals_the_hand_computation_to_many_digits():
    cb = _certified()
    with mpmath.workdps(50):
        ref = hand()
    balls = cb.balls()
    for key in ("layer_lipschitz_0", "ss_closed", "ss_exact", "SS", "DD", "Lambda", "confidence",
                "complexity", "bound"):
        assert contains(balls[key], ref[key]), (key, balls[key], ref[key])
        assert balls[key].rad() < 1e-30 * (1 + abs(float(ref[key]))), key  # "to many digits"
    # the certified number is the upper endpoint, never below the true value
    assert mpf(exact_value(cb.upper)) >= ref["bound"] * (1 - mpmath.mpf(10) ** -40)

"""The Occam bound recomputed in float64 from a certificate's parts, by code that imports nothing from
specbound (only ``math``): the shares from the allocation rule, the scales at gamma/2, the entropies
(rank or Schatten cover, or the volumetric one when smaller), the read-out's, Lambda with lambda(k_gamma),
C at delta/2 and BinInv by bisection on the float64 log CDF -- all typed from proofs_notes/occam_route.md,
sharpenings.md and binomial_inversion.md.  It must agree with the certified value within 1% and never lie
above it (the certified number is an upper bound of the exact one; the float recomputation is a
nearest-rounded one, so it may only sit below, or above by float rounding, 1e-12 relative).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest


def _mid(ball: str) -> float:
    """The midpoint of a ball written as ``[mid +/- rad]`` (or a bare number)."""
    text = ball.strip()
    if text.startswith("["):
        text = text[1:-1].split("+/-")[0]
    return float(text)


def _lam(k: int) -> float:
    return math.log(1.5 * (abs(k) + 1) * (abs(k) + 2))


def _log_cdf(n: int, k: int, p: float) -> float:
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p)
            + (n - i) * math.log1p(-p) for i in range(k + 1)]
    top = max(logs)
    return top + math.log(sum(math.exp(v - top) for v in logs))


def _bininv(n: int, k: int, C: float) -> float:
    if k >= n:
        return 1.0
    if k == 0:
        return -math.expm1(-C / n)
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if _log_cdf(n, k, mid) + C > 0 else (lo, mid)
    return lo


def recompute(cert: dict) -> dict:
    """The Occam route's H, Lambda, C and bound from the certificate's parts, in float64."""
    st, occ, plan = cert["settings"], cert["routes"]["occam"], cert["plan"]
    n, K, m = int(st["n"]), int(occ["count"]), int(plan["m"])
    level = float(Fraction(st["delta"])) / len(st["routes"])  # delta split between the routes
    beta_g = Fraction(st["bases"]["beta_gamma"])
    gamma = float(beta_g ** int(plan["occam"]["k_gamma"]))
    balls = cert["balls"]
    B_w = _mid(balls["B_w"])
    N = int(cert["architecture"]["width"])
    trained = st["readout_used"] == "trained"
    rows = []
    for rec, occ_rec in zip(cert["matrices"], occ["matrices"]):
        rows_, cols = rec["shape"]
        p = float(Fraction(occ_rec["p"]))
        rank, r_max = int(occ_rec["proven_rank"]), int(rec["r_max"])
        d, mn = rows_ + cols, rows_ * cols
        if p == 0:
            weight = 0 if rank == 0 else min(min(rank, r_max) * d, mn)
        else:
            weight = min(r_max * d, mn)
        # kappa^gamma = B_w alpha gamma_j / gamma (the sensitivities as recorded, at the same radii c~)
        kappa = B_w * _mid(balls[f"alpha_{rec['layer']}"]) * _mid(rec["gamma"]) / gamma
        rows.append(dict(p=p, rank=rank, r_max=r_max, d=d, mn=mn, weight=weight, kappa=kappa,
                         c=_mid(occ_rec["c_radius"]), s=_mid(occ_rec["s_radius"]), k_c=int(occ_rec["k_c"]),
                         k_s=occ_rec["k_s"]))
    Omega = sum(r["weight"] for r in rows) + (N if trained else 0)
    H, Lam = 0.0, 0.0
    for r in rows:
        Lam += math.log(2 * m + 1) + _lam(r["k_c"]) + (math.log(r["r_max"] + 1) if r["p"] == 0 else _lam(r["k_s"]))
        if r["weight"] == 0:
            continue
        eps = (r["weight"] / Omega) / (2 * r["kappa"])  # vartheta_j gamma / (2 B_w alpha gamma_j)
        vol = r["mn"] * math.log1p(2 * r["c"] / eps)
        if r["p"] == 0:
            H += min(min(r["rank"], r["r_max"]) * r["d"] * math.log1p(4 * r["c"] / eps), vol)
        else:
            trunc = min(r["r_max"], max(0, math.ceil(r["s"] * (2 / eps) ** r["p"]) - 1))
            H += min(trunc * r["d"] * math.log1p(8 * r["c"] / eps), vol)
    if trained:
        eps_w = (N / Omega) * gamma / 2
        H += N * math.log1p(2 * B_w / eps_w)
        Lam += _lam(int(cert["choices"]["k_w"]))
    Lam += _lam(int(plan["occam"]["k_gamma"]))
    C = H + Lam + math.log(1 / level)
    return {"H": H, "Lambda": Lam, "C": C, "bound": _bininv(n, min(K, n), C)}


@pytest.fixture(scope="module", params=[(3000, 5), (20000, 7)], ids=["n3000", "n20000"])
def cert(request):
    from specbound.certified.certificate import to_json
    from specbound.pipeline import certify

    from specbound.data import toy_checkpoint_path

    # the toy model: at these n its bound is far from 1, so a tampered count visibly moves it
    # (the embedded default's bound at n <= 20000 is near 1, where BinInv saturates)
    samples, seed = request.param
    return json.loads(json.dumps(to_json(certify(str(toy_checkpoint_path()), samples=samples, seed=seed))))


def test_occam_bound_recomputed_from_the_certificate_agrees_and_is_never_above(cert):
    occ = cert["routes"]["occam"]
    ours = float(Fraction(occ["bound_upper"]))
    again = recompute(cert)
    for key, recorded in (("H", occ["H"]), ("Lambda", occ["Lambda"]), ("C", occ["C"])):
        assert again[key] == pytest.approx(_mid(recorded), rel=1e-9), key
    assert abs(again["bound"] / ours - 1) < 0.01, (again["bound"], ours)
    assert again["bound"] <= ours * (1 + 1e-12), (again["bound"], ours)


def test_the_recomputation_fails_on_a_tampered_part(cert):
    """The check can fail: a count raised by a tenth of n moves the recomputed bound away."""
    bad = json.loads(json.dumps(cert))
    n = cert["settings"]["n"]
    bad["routes"]["occam"]["count"] = min(n, cert["routes"]["occam"]["count"] + n // 10)
    again = recompute(bad)["bound"]
    ours = float(Fraction(cert["routes"]["occam"]["bound_upper"]))
    assert abs(again / ours - 1) >= 0.01

"""``specbound verify``: re-check a certificate by a second, independent certify run.

:func:`verify` re-computes from the raw checkpoint with fresh enclosures (the all-Arb route for
dense matrices up to :data:`ARB_ROUTE_MAX_DIM`, so not the route ``certify`` used) and the recorded
choices, and checks: the sha256; the grid base beta_c; every radius (``beta**k >=`` the fresh upper
enclosure; a recorded rank >= the fresh proven rank bound); that every recorded ball overlaps the
recomputed one; and the final bound.  Any difference is reported as (field path, recorded,
recomputed).  The certificate format itself is :mod:`specbound.certified.certificate`; the
empirical source is re-created by :mod:`specbound.empirical` (the same code certify uses).
"""

from __future__ import annotations

import os
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from flint import arb

from specbound.certified.arb import WORK_PREC, precision
from specbound.certified.bound import certify_bound, decimal_fraction, readout_ball
from specbound.certified.certificate import (
    CertificateError, VerificationReport, ball, check_ball, decimal_matches, decimal_up, frac,
    parse_ball, plan_from, read, settings_from,
)
from specbound.certified.factored import enclose
from specbound.certified.norms import schatten_power, spectral_norm
from specbound.certified.radii import MatrixRounding, dominates, power_ball
from specbound.checkpoint import file_sha256, load_weights
from specbound.empirical import dataset_of, empirical_ball, from_record
from specbound.errors import SpecboundError
from specbound.vocabulary import EMPIRICAL_DATA, EMPIRICAL_NONE, EMPIRICAL_SOURCES, EMPIRICAL_USER

ARB_ROUTE_MAX_DIM = 256
"""Dense matrices up to this size are re-enclosed by the all-Arb residual route when verifying."""


def _fresh_enclosure(mat):
    """A fresh enclosure by another route than certify's: all-Arb for small dense matrices."""
    if not mat.is_factored and max(mat.shape) <= ARB_ROUTE_MAX_DIM:
        return enclose(mat, method="arb")
    return enclose(mat)


def _empirical(cert: dict, weights, settings, rep: VerificationReport, recompute: bool) -> arb | None:
    """The empirical term of the recorded source, recomputed (or taken from the certificate)."""
    try:
        source = from_record(cert["empirical_source"])
    except ValueError:
        rep.add("empirical_source.kind", cert["empirical_source"].get("kind"), "one of " + ", ".join(EMPIRICAL_SOURCES))
        return parse_ball(cert["result"].get("empirical"))
    if source.kind == EMPIRICAL_NONE:
        return None
    if source.kind == EMPIRICAL_USER:
        rep.notes.append("the empirical term was supplied by the user and is NOT certified")
        return empirical_ball(weights, source, None, arb(1))[0]
    recorded = parse_ball(cert["result"].get("empirical"))
    if not recompute:
        rep.notes.append("empirical term taken from the certificate (not recomputed)")
        return recorded
    if source.kind == EMPIRICAL_DATA:
        path = Path(source.detail["path"])
        if not path.is_file():
            rep.add("empirical_source.detail.path", str(path), "file not found")
            return recorded
        sha = file_sha256(path)
        if sha != source.detail.get("sha256"):
            rep.add("empirical_source.detail.sha256", source.detail.get("sha256"), sha)
    data = dataset_of(source)
    if data.n != settings.n:
        rep.add("settings.n", settings.n, data.n)
    rho = power_ball(Fraction(settings.beta_rho), int(cert["plan"]["k_rho"]))
    return empirical_ball(weights, source, data, rho)[0]


def verify(cert_source, checkpoint: str | os.PathLike | None = None, *,
           recompute_empirical: bool = True) -> VerificationReport:
    """Re-check a certificate independently from the raw checkpoint (module docstring).

    ``checkpoint``: the weights file (default: the recorded path, or the embedded default).
    ``recompute_empirical``: re-run the certified forward passes (else trust the recorded ball and
    say so in the report).
    """
    cert = read(cert_source)
    rep = VerificationReport()
    ck = cert["checkpoint"]
    if checkpoint is None and not ck.get("embedded_default"):
        checkpoint = ck.get("path")
    try:
        weights = load_weights(checkpoint)
    except SpecboundError:
        raise
    rep.checked += 1
    if weights.sha256 != ck.get("sha256"):
        rep.add("checkpoint.sha256", ck.get("sha256"), weights.sha256)
        return rep  # a different network: nothing below is comparable
    rep.checked += 1
    recorded_variant = cert.get("architecture", {}).get("variant", "plain")
    if recorded_variant != weights.variant:
        rep.add("architecture.variant", recorded_variant, weights.variant)
        return rep  # another theorem: nothing below is comparable
    try:
        settings = settings_from(cert)
        plan = plan_from(cert)
        recs = cert["matrices"]
        if len(recs) != len(weights.matrices) or len(plan.p_index) != len(recs):
            rep.add("matrices", f"{len(recs)} entries", f"{len(weights.matrices)} matrices")
            return rep
        bases = {k: Fraction(v) for k, v in cert["settings"]["bases"].items()}
        rep.checked += 1
        if Fraction(cert["settings"]["delta"]) != decimal_fraction(settings.delta):
            rep.add("settings.delta", cert["settings"]["delta"], frac(decimal_fraction(settings.delta)))
        # beta_c: any base > 1 fixed before the sample is valid (the union bound runs over its grid;
        # settings_from already rejected a base <= 1), and everything below is recomputed at the
        # recorded base.  A base other than the theorem's default 1 + 1/(4L), recomputed from the
        # checkpoint's L, is named in a note (a user's choice, or a tampered field: then the
        # recomputed balls disagree with the recorded ones)
        rep.checked += 1
        default_c = replace(settings, beta_c=None).base_c(weights.num_layers, weights.variant)
        if bases["beta_c"] != default_c:
            rep.notes.append(f"beta_c = {frac(bases['beta_c'])} is not the default 1 + 1/(4L) = {frac(default_c)}")
    except (KeyError, TypeError, ValueError) as exc:
        raise CertificateError(f"certificate is malformed ({exc})") from None

    with precision(WORK_PREC):
        roundings = []
        for j, (mat, rec) in enumerate(zip(weights.matrices, recs)):
            where = f"matrices[{j}]"
            enc = _fresh_enclosure(mat)
            sn = spectral_norm(enc)
            ident = (rec.get("layer"), rec.get("head"), rec.get("type"))
            rep.checked += 1
            if ident != (mat.layer, mat.head, mat.kind):
                rep.add(f"{where}.(layer,head,type)", ident, (mat.layer, mat.head, mat.kind))
            p = Fraction(rec["p"])
            rep.checked += 1
            if p != plan.p(j) and not (p == 0 and enc.rank_upper == 0):
                rep.add(f"{where}.p", rec["p"], f"{frac(plan.p(j))} (plan.p_index)")
            check_ball(rep, f"{where}.spectral_norm", rec["spectral_norm"], sn)
            rank = int(rec["proven_rank"])
            rep.checked += 1
            if rank < enc.rank_upper and (p == 0):
                rep.add(f"{where}.proven_rank", rank, f">= {enc.rank_upper} (fresh proven bound)")
            k_c = int(rec["k_c"])
            rep.checked += 1
            zero = enc.rank_upper == 0
            if not (zero or dominates(bases["beta_c"], k_c, sn)):
                rep.add(f"{where}.k_c", k_c, f"beta_c^k_c < ||W|| upper {ball(sn)}")
            k_s = rec.get("k_s")
            if p > 0:
                sp_ball = schatten_power(enc, p)
                check_ball(rep, f"{where}.schatten_power", rec["schatten_power"], sp_ball)
                rep.checked += 1
                if k_s is None or not dominates(bases["beta_s"], int(k_s), sp_ball):
                    rep.add(f"{where}.k_s", k_s, f"beta_s^k_s < S_p upper {ball(sp_ball)}")
                    k_s = None
            else:
                sp_ball = arb(rank)
            if p > 0 and k_s is None:
                roundings.append(None)
                continue
            roundings.append(MatrixRounding(p, k_c, None if p == 0 else int(k_s), rank, sn, sp_ball,
                                            zero and p == 0 and rank == 0))
        k_w = cert["choices"].get("k_w")
        if k_w is not None:
            wn = readout_ball(weights.readout)
            rep.checked += 1
            if not dominates(bases["beta_w"], int(k_w), wn):
                rep.add("choices.k_w", k_w, f"beta_w^k_w < ||w|| upper {ball(wn)}")
        if rep.mismatches or any(r is None for r in roundings):
            return rep  # invalid radii: a recomputation at them would not be a bound

        emp = _empirical(cert, weights, settings, rep, recompute_empirical)
        fresh = certify_bound(weights, settings, plan, [None] * len(roundings), emp,
                              roundings=roundings, k_w=k_w)

    for j, (rec, f) in enumerate(zip(recs, fresh.matrices)):
        for key, value in (("contribution", f.contribution), ("c_radius", f.c_radius),
                           ("s_radius", f.s_radius), ("kappa", f.kappa), ("gamma", f.gamma),
                           ("dd_piece", f.dd_piece), ("lambda", f.lam), ("ss_entropy", f.ss_entropy)):
            if key in rec:
                check_ball(rep, f"matrices[{j}].{key}", rec[key], value)
    fresh_balls = fresh.balls()
    for key, text in cert["balls"].items():
        if key not in fresh_balls:
            rep.add(f"balls.{key}", text, "absent")
            continue
        check_ball(rep, f"balls.{key}", text, fresh_balls[key])
    for key in fresh_balls:
        if key not in cert["balls"]:
            rep.add(f"balls.{key}", "absent", ball(fresh_balls[key]))
    res = cert["result"]
    rep.checked += 1
    if bool(res.get("is_bound")) != (fresh.bound is not None):
        rep.add("result.is_bound", res.get("is_bound"), fresh.bound is not None)
    for key, value in (("bound", fresh.bound), ("complexity", fresh.complexity),
                       ("confidence", fresh.confidence), ("partial", fresh.partial)):
        if value is None:
            continue
        check_ball(rep, f"result.{key}", res.get(key), value)
        up = res.get(f"{key}_upper")
        rep.checked += 1
        if not decimal_matches(up, value):
            rep.add(f"result.{key}_upper", up, decimal_up(value))
    return rep



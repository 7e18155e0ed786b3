"""``specbound verify``: re-check a certificate by a second, independent certify run.

Nothing in the certificate is believed.  :func:`verify` first refuses any field outside a sanity
range (:func:`specbound.certified.certificate.check_ranges`, before any arithmetic), then recomputes
from the raw checkpoint and the *proven* theory: the sha256; every field that changes what the number
means (architecture, layout, shapes, r_max, the grid m and the bases, the chaining forms, every
lemma-constant override against its proven value, the read-out, the empirical source and its task,
the certified flag, the 0-1 error count, the scope block); fresh enclosures (the all-Arb route for
dense matrices up to :data:`ARB_ROUTE_MAX_DIM`, so not the route ``certify`` used); every radius
(``beta**k >=`` the fresh upper enclosure; a recorded rank >= the fresh proven rank bound); every
ball (finite, intersecting the recomputed ball and not much wider); and the final bound (its printed
upper endpoint >= the recomputed one).  Both routes are recomputed: the Occam route's radii at its own
p (each dominating a fresh enclosure), its shares from the allocation rule, H, Lambda, C, the certified
count K^ from a fresh certified forward pass (its margin enclosures, :func:`specbound.pipeline.occam_margins`)
and the recorded BinInv value against its certificate (:func:`specbound.certified.binomial.certifies`).
The recorded *choices* (Schatten indices, loss scales, Dudley weights, margins rho and gamma) are the
only inputs taken from the certificate: the theorem holds for every choice on its grid, so they can make
the number looser, never invalid.  Any difference is reported
as (field path, recorded, recomputed); a bound built on an unproven constant is INVALID.
"""

from __future__ import annotations

import os
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from flint import arb

from specbound.certified.arb import WORK_PREC, precision
from specbound.certified.binomial import certifies
from specbound.certified.bound import certify_bound, decimal_fraction, grid_m, readout_ball
from specbound.certified.certificate import (
    NOT_RECOMPUTED, CertificateError, VerificationReport, ball, check_ball, check_floats, check_ranges, frac,
    is_float_field, lower_matches, parse_ball, plan_from, read, settings_from, upper_matches,
)
from specbound.certified.factored import enclose
from specbound.certified.norms import schatten_power, spectral_norm
from specbound.certified.radii import MatrixRounding, dominates, power_ball
from specbound.checkpoint import file_sha256, load_weights
from specbound.derivation.theorem import VARIANTS, unproven_overrides
from specbound.data_file import data_sha256
from specbound.data_source import as_dataset
from specbound.empirical import dataset_of, empirical_ball, from_record, task_record, training_record
from specbound.errors import SourceNotFoundError, SpecboundError, option
from specbound.certified.margins import count_upper
from specbound.pipeline import fast_pass_of, judge, occam_margins
from specbound.plan import BoundSettings
from specbound.vocabulary import (
    CERTIFIED_SOURCES, EMPIRICAL_DATA, EMPIRICAL_NONE, EMPIRICAL_SOURCES, EMPIRICAL_TASK, EMPIRICAL_TRAIN,
    EMPIRICAL_USER, FORWARD_FAST, ROUTE_OCCAM, ROUTE_RADEMACHER,
)

ARB_ROUTE_MAX_DIM = 256
"""Dense matrices up to this size are re-enclosed by the all-Arb residual route when verifying."""


def _fresh_enclosure(mat):
    """A fresh enclosure by another route than certify's: all-Arb for small dense matrices."""
    if not mat.is_factored and max(mat.shape) <= ARB_ROUTE_MAX_DIM:
        return enclose(mat, method="arb")
    return enclose(mat)


def _empirical(cert: dict, weights, settings, rep: VerificationReport, recompute: bool, given=None):
    """(the empirical term of the recorded source, recomputed or taken from the certificate; the sample
    it was recomputed on, or None).  The sample is the recorded one, or ``given`` (the sample as the
    caller holds it) when given; either way it must have the recorded ``data_sha256``."""
    try:
        source = from_record(cert["empirical_source"])
    except ValueError:
        rep.add("empirical_source.kind", cert["empirical_source"].get("kind"), "one of " + ", ".join(EMPIRICAL_SOURCES))
        return parse_ball(cert["result"].get("empirical")), None
    if source.kind == EMPIRICAL_NONE:
        return None, None
    if source.kind == EMPIRICAL_USER:
        rep.notes.append("the empirical term was supplied by the user and is NOT certified")
        rep.compare("settings.empirical", settings.empirical, float(source.detail.get("value", -1)))
        return empirical_ball(weights, source, None, arb(1))[0], None
    recorded = parse_ball(cert["result"].get("empirical"))
    if not recompute:
        # nothing below re-runs the forward passes: the report says so and is never plain VALID
        rep.unchecked.append("empirical term")
        return recorded, None
    if given is not None:
        data = as_dataset(given)
    else:
        if source.kind == EMPIRICAL_DATA:
            path = Path(source.detail["path"])
            if not path.is_file():
                in_memory = str(path).startswith("<")  # "<arrays>", "<mapping>", "<torch Dataset ...>"
                rep.add("empirical_source.detail.path", str(path),
                        f"a sample given in memory: give the same sample again as {option('data')}" if in_memory
                        else f"file not found (give the sample as {option('data')})")
                return recorded, None
            sha = file_sha256(path)
            if sha != source.detail.get("sha256"):
                rep.add("empirical_source.detail.sha256", source.detail.get("sha256"), sha)
        data = dataset_of(source)
    if source.data_sha256:
        rep.compare("empirical_source.data_sha256", source.data_sha256, data_sha256(data))
    elif given is not None:
        rep.notes.append("the certificate records no data_sha256: the sample given was not compared with it")
    if data.n != settings.n:
        rep.add("settings.n", settings.n, data.n)
    rho = power_ball(Fraction(settings.beta_rho), int(cert["plan"]["k_rho"]))
    value, ramp = empirical_ball(weights, source, data, rho)
    recorded_src = cert["empirical_source"]
    for key in ("errors01", "undecided"):
        if key in recorded_src:
            rep.compare(f"empirical_source.{key}", recorded_src[key], getattr(ramp, key))
    return value, data


def _occam_count(cert: dict, weights, settings, plan, data, rep: VerificationReport):
    """(fresh certified margin enclosures of the sample for the Occam count -- a fresh forward pass, the
    samples straddling gamma redone per sample -- or None; the recorded count when the sample was not
    recomputed, else None)."""
    if ROUTE_OCCAM not in settings.routes or plan.occam is None:
        return None, None
    recorded = (cert.get("routes") or {}).get("occam") or {}
    if data is None:
        count = recorded.get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            rep.unchecked.append("Occam count K^")  # taken on trust: never plain VALID
            return None, count
        return None, None
    fast = fast_pass_of(weights, data, FORWARD_FAST)
    if fast is None:
        rep.add("routes.occam.count", recorded.get("count"), "no certified margin enclosures of the sample")
        return None, None
    gamma = power_ball(Fraction(settings.beta_gamma), plan.occam.k_gamma)
    margins = occam_margins(fast, data, gamma)
    rep.compare("routes.occam.count", recorded.get("count"), count_upper(margins, gamma))
    return margins, None


def _rounding(rep: VerificationReport, where: str, rec: dict, mat, enc, p: Fraction, bases) -> MatrixRounding | None:
    """The recorded grid point of one matrix at index ``p``, checked against a fresh enclosure (``beta^k``
    dominates its upper endpoints; a recorded rank >= the fresh proven rank); None when it does not."""
    sn = spectral_norm(enc)
    if "spectral_norm" in rec:  # the Occam route's records share the Rademacher route's norm
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
            return None
    else:
        sp_ball = arb(rank)
    return MatrixRounding(p, k_c, None if p == 0 else int(k_s), rank, sn, sp_ball, zero and p == 0 and rank == 0)


def _check_claims(cert: dict, weights, settings: BoundSettings, checkpoint, rep: VerificationReport) -> None:
    """Every recorded field that changes what the number means, against its recomputation from the
    checkpoint and the proven theory (nothing here is a free choice)."""
    arch = cert.get("architecture") or {}
    for key, value in weights.architecture().items():
        rep.compare(f"architecture.{key}", arch.get(key), value)
    if weights.num_outputs == 1:  # k rows pick the k-class theorem: a binary model's certificate claims none
        rep.compare("architecture.num_outputs", arch.get("num_outputs", 1), 1)
    rep.compare("checkpoint.layout", cert["checkpoint"].get("layout"), weights.layout)
    for j, (mat, rec) in enumerate(zip(weights.matrices, cert["matrices"])):
        rep.compare(f"matrices[{j}].shape", [int(v) for v in rec["shape"]], list(mat.shape))
        rep.compare(f"matrices[{j}].r_max", int(rec["r_max"]), mat.rank_cap)
    # the proven range of the settings: the theorem's grid and bases (proofs_notes/theory.md section 6)
    st = cert["settings"]
    rep.compare("settings.grid_m", int(st["grid_m"]), grid_m(replace(settings, grid_m=None), weights))
    rep.compare("plan.m", int(cert["plan"]["m"]), int(st["grid_m"]))
    if cert["plan"].get("occam") is not None:
        rep.compare("plan.occam.m", int(cert["plan"]["occam"]["m"]), int(st["grid_m"]))
    defaults = BoundSettings(n=1)
    proven_bases = {"beta_c": frac(defaults.base_c(weights.num_layers, weights.variant)), "beta_s": frac(defaults.beta_s),
                    "beta_w": frac(defaults.beta_w), "beta_rho": frac(defaults.beta_rho),
                    "beta_gamma": frac(defaults.beta_gamma)}
    for key, value in proven_bases.items():
        rep.compare(f"settings.bases.{key}", frac(Fraction(st["bases"][key])), value)
    for key in ("massart", "dudley"):
        rep.checked += 1
        if st.get(key) not in VARIANTS[key]:
            rep.add(f"settings.{key}", st.get(key), "one of " + ", ".join(VARIANTS[key]))
    rep.checked += 1
    variant = getattr(weights, "variant", "plain") or "plain"
    try:
        low = unproven_overrides(settings.overrides, weights.activation, variant)
    except Exception as exc:  # noqa: BLE001 - any unusable override is a mismatch, not a crash
        rep.add("settings.overrides", st["overrides"], f"not a proven constant ({exc})")
    else:
        for name in low:
            value = dict(settings.overrides)[name]
            rep.add(f"settings.overrides.{name}", value, "at least the proven value: NOT A PROVEN BOUND")
    # the empirical source: kind, certified flag, and the task it claims (the checkpoint's own record)
    src = cert["empirical_source"]
    kind = src.get("kind")
    rep.compare("empirical_source.certified", src.get("certified"), kind in CERTIFIED_SOURCES)
    if kind != EMPIRICAL_USER and settings.empirical is not None:  # a user's value: compared in _empirical
        rep.add("settings.empirical", settings.empirical, f"none (the empirical source is {kind!r})")
    if kind == EMPIRICAL_TASK:
        detail = src.get("detail") or {}
        own = task_record(weights, checkpoint)
        rep.compare("empirical_source.detail.task", detail.get("task"), own)
        rep.compare("empirical_source.detail.n", detail.get("n"), settings.n)
    if kind == EMPIRICAL_TRAIN:
        detail = src.get("detail") or {}
        own = training_record(weights, checkpoint)  # refuses a record that does not name these weights
        if own is None:
            rep.add("empirical_source.kind", kind, "the checkpoint records no training sample")
        else:
            for key in ("task", "data_seed", "n", "tries"):
                rep.compare(f"empirical_source.detail.{key}", detail.get(key), own[key])
            rep.compare("settings.n", settings.n, own["n"])
            rep.compare("settings.tries", settings.tries, own["tries"])  # K charged as delta / K


def verify(cert_source, checkpoint: str | os.PathLike | None = None, *, data=None,
           recompute_empirical: bool = True) -> VerificationReport:
    """Re-check a certificate independently from the raw checkpoint (module docstring).

    ``checkpoint``: the weights file (default: the recorded path, or the embedded default).
    ``recompute_empirical``: re-run the certified forward passes (else trust the recorded ball and
    say so in the report).  ``data``: the sample S as ``certify`` was given it (anything
    :func:`specbound.data_source.as_dataset` takes); needed when it was given in memory, and checked
    against the recorded ``data_sha256``.
    """
    cert = read(cert_source)
    check_ranges(cert)
    try:
        return _verify(cert, checkpoint, recompute_empirical, data)
    except CertificateError:
        raise
    except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError, IndexError,
            RecursionError) as exc:
        raise CertificateError(f"certificate is malformed ({type(exc).__name__}: {exc})") from None


def _occam_records(cert: dict, plan, J: int, rep: VerificationReport) -> list:
    """The Occam route's per-matrix records (empty when the route was not evaluated)."""
    occ = (cert.get("routes") or {}).get("occam")
    if plan.occam is None:
        if occ is not None:
            rep.add("plan.occam", None, "the Occam route's plan (routes.occam is recorded)")
        return []
    if not isinstance(occ, dict) or not isinstance(occ.get("matrices"), list) or len(occ["matrices"]) != J \
            or len(plan.occam.p_index) != J:
        rep.add("routes.occam.matrices", "absent or of another length", f"{J} matrices")
        return []
    return occ["matrices"]


def _check_occam(cert: dict, fresh, rep: VerificationReport) -> None:
    """The Occam route's recorded parts against the recomputation, and the recorded BinInv value against
    its certificate at the recomputed mass C (certified/binomial.py ``certifies``)."""
    occ, o = (cert.get("routes") or {}).get("occam"), fresh.occam
    rep.checked += 1
    if (occ is None) != (o is None):
        rep.add("routes.occam", "absent" if occ is None else "recorded", "evaluated" if o is not None else "absent")
        return
    if o is None:
        return
    for j, (rec, f) in enumerate(zip(occ["matrices"], o.matrices)):
        for key, value in (("c_radius", f.c_radius), ("s_radius", f.s_radius), ("kappa", f.kappa),
                           ("weight", f.weight), ("share", f.share), ("entropy", f.entropy), ("lambda", f.lam)):
            check_ball(rep, f"routes.occam.matrices[{j}].{key}", rec.get(key), value)
    for key, value in (("gamma", o.gamma), ("Omega", o.Omega), ("H", o.H), ("Lambda", o.Lambda), ("C", o.mass)):
        check_ball(rep, f"routes.occam.{key}", occ.get(key), value)
    rep.compare("routes.occam.k_gamma", occ.get("k_gamma"), o.k_gamma)
    rep.compare("routes.occam.level", occ.get("level"), frac(o.level))
    if o.bound is None:
        return
    check_ball(rep, "routes.occam.bound", occ.get("bound"), o.bound)
    rep.checked += 1
    if not upper_matches(occ.get("bound_upper"), o.bound):
        rep.add("routes.occam.bound_upper", occ.get("bound_upper"), f">= the upper end of {ball(o.bound)}")
    inv = occ.get("bininv") or {}
    value = inv.get("value")
    rep.checked += 1
    if not isinstance(value, float) or certifies(fresh.settings.n, int(o.count), o.mass, value) is None:
        rep.add("routes.occam.bininv.value", value, f"not certified >= BinInv(n, K^, e^-C) at C = {ball(o.mass)}")


def _verify(cert: dict, checkpoint, recompute_empirical: bool, data=None) -> VerificationReport:
    rep = VerificationReport()
    ck = cert["checkpoint"]
    recorded = checkpoint is None and not ck.get("embedded_default")
    if recorded:
        checkpoint = ck.get("path")
    try:
        weights = load_weights(checkpoint)
    except SourceNotFoundError:
        if not recorded:
            raise
        raise SourceNotFoundError(
            f"{checkpoint}: the checkpoint recorded in the certificate is not there (moved, or certified "
            "elsewhere); pass the checkpoint as the second argument: specbound.verify(cert, model) in "
            "Python, specbound verify CERT.json CHECKPOINT on the command line (its sha256 is checked)") from None
    rep.checked += 1
    if weights.sha256 != ck.get("sha256"):
        rep.add("checkpoint.sha256", ck.get("sha256"), weights.sha256)
        return rep  # a different network: nothing below is comparable
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
        if "delta_charged" in cert["settings"]:
            rep.compare("settings.delta_charged", cert["settings"]["delta_charged"], frac(settings.charged_delta()))
    except SpecboundError as exc:  # BoundSettings refused a recorded value
        raise CertificateError(f"certificate is malformed ({exc})") from None
    _check_claims(cert, weights, settings, checkpoint if checkpoint is not None else None, rep)
    if rep.mismatches:
        return rep  # a claim that changes the meaning is wrong: nothing below would be comparable

    with precision(WORK_PREC):
        roundings, occam_roundings, encs = [], [], []
        for j, (mat, rec) in enumerate(zip(weights.matrices, recs)):
            where = f"matrices[{j}]"
            enc = _fresh_enclosure(mat)
            encs.append(enc)
            ident = (rec.get("layer"), rec.get("head"), rec.get("type"))
            rep.checked += 1
            if ident != (mat.layer, mat.head, mat.kind):
                rep.add(f"{where}.(layer,head,type)", ident, (mat.layer, mat.head, mat.kind))
            p = Fraction(rec["p"])
            rep.checked += 1
            if p != plan.p(j) and not (p == 0 and enc.rank_upper == 0):
                rep.add(f"{where}.p", rec["p"], f"{frac(plan.p(j))} (plan.p_index)")
            roundings.append(_rounding(rep, where, rec, mat, enc, p, bases))
        occ_recs = _occam_records(cert, plan, len(recs), rep)
        for j, (mat, rec, enc) in enumerate(zip(weights.matrices, occ_recs, encs)):
            p = Fraction(rec["p"])
            rep.checked += 1
            if p != plan.occam.p(j) and not (p == 0 and enc.rank_upper == 0):
                rep.add(f"routes.occam.matrices[{j}].p", rec["p"], f"{frac(plan.occam.p(j))} (plan.occam.p_index)")
            occam_roundings.append(_rounding(rep, f"routes.occam.matrices[{j}]", rec, mat, enc, p, bases))
        k_w = cert["choices"].get("k_w")
        if k_w is not None:
            wn = readout_ball(weights.readout)
            rep.checked += 1
            if not dominates(bases["beta_w"], int(k_w), wn):
                rep.add("choices.k_w", k_w, f"beta_w^k_w < ||w|| upper {ball(wn)}")
        if rep.mismatches or any(r is None for r in roundings + occam_roundings):
            return rep  # invalid radii: a recomputation at them would not be a bound

        emp, data = _empirical(cert, weights, settings, rep, recompute_empirical, data)
        margins, count = _occam_count(cert, weights, settings, plan, data, rep)
        fresh = certify_bound(weights, settings, plan, [None] * len(roundings), emp, margins=margins,
                              roundings=roundings, k_w=k_w, occam_roundings=occam_roundings or None, count=count)
    _check_occam(cert, fresh, rep)

    for j, (rec, f) in enumerate(zip(recs, fresh.matrices)):
        for key, value in (("contribution", f.contribution), ("c_radius", f.c_radius),
                           ("s_radius", f.s_radius), ("kappa", f.kappa), ("gamma", f.gamma),
                           ("dd_piece", f.dd_piece), ("lambda", f.lam), ("ss_entropy", f.ss_entropy)):
            if key in rec:
                check_ball(rep, f"matrices[{j}].{key}", rec[key], value)
    fresh_balls = fresh.balls()
    for key, text in cert["balls"].items():
        if is_float_field(cert["balls"], key):
            continue  # an endpoint of the ball beside it: check_floats
        if key not in fresh_balls:
            rep.add(f"balls.{key}", text, "absent")
            continue
        check_ball(rep, f"balls.{key}", text, fresh_balls[key])
    for key in fresh_balls:
        if key not in cert["balls"]:
            rep.add(f"balls.{key}", "absent", ball(fresh_balls[key]))
    res = cert["result"]
    rep.checked += 1
    if res.get("is_bound") is not (fresh.bound is not None):
        rep.add("result.is_bound", res.get("is_bound"), fresh.bound is not None)
    src = from_record(cert["empirical_source"])
    rep.scope, verdict = judge(weights, {"path": ck.get("path"), "sha256": weights.sha256}, src, fresh)
    recorded_scope = cert.get("scope")
    if not isinstance(recorded_scope, dict):
        rep.add("scope", recorded_scope, "the scope block (absent or malformed)")
    else:
        for key in sorted(set(recorded_scope) | set(rep.scope)):
            rep.compare(f"scope.{key}", recorded_scope.get(key), rep.scope.get(key))
    rep.compare("result.proven", res.get("proven"), verdict.proven)
    rep.compare("result.vacuous", res.get("vacuous"), verdict.vacuous)
    rep.compare("result.label", res.get("label"), verdict.label)
    rep.compare("result.route", res.get("route"), fresh.route)
    rep.compare("routes.reported", (cert.get("routes") or {}).get("reported"), fresh.route)
    rep.verdict = verdict
    if rep.unchecked and rep.scope.get("empirical_certified"):
        # the block verify prints must not call an empirical term certified that it did not recompute
        rep.scope = {**rep.scope, "empirical": NOT_RECOMPUTED}
    for key, value in (("bound", fresh.bound), ("complexity", fresh.complexity),
                       ("confidence", fresh.confidence), ("partial", fresh.partial)):
        if value is None:
            continue
        check_ball(rep, f"result.{key}", res.get(key), value)
        # the numbers a user reads: directed against the recomputed ball, which holds the true value
        for side, matches in (("upper", upper_matches), ("lower", lower_matches)):
            number = res.get(f"{key}_{side}")
            rep.checked += 1
            if not matches(number, value):
                rep.add(f"result.{key}_{side}", number, f"the {side} end of {ball(value)}")
    check_floats(rep, cert)  # every float endpoint says its own ball
    return rep



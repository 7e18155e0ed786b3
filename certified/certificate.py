"""The certificate: a JSON record of a certified bound, and its independent re-check.

:func:`to_json` records everything needed to reproduce the bound: the checkpoint's sha256, the
settings (bases as exact fractions, the grid m), library versions, every intermediate ball as a
string ``"[mid +/- rad]"`` (Arb prints a ball that contains the value), the per-matrix list, the
plan's choices, the empirical term's source, and the final bound (ball + upper endpoint as a decimal
rounded up).

:func:`verify` re-computes from the raw checkpoint with fresh enclosures (the all-Arb route for
dense matrices up to :data:`ARB_ROUTE_MAX_DIM`, so not the route ``certify`` used) and the recorded
choices, and checks: the sha256; every radius (``beta**k >=`` the fresh upper enclosure; a recorded
rank >= the fresh proven rank bound); that every recorded ball overlaps the recomputed one; and the
final bound.  Any difference is reported as (field path, recorded, recomputed).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Context, Decimal
from fractions import Fraction
from pathlib import Path

from flint import arb

from specbound.certified.arb import WORK_PREC, ball_from_str, ball_to_str, precision
from specbound.certified.radii import MatrixRounding, dominates, exact_value
from specbound.errors import SpecboundError

FORMAT = "specbound-certificate-v1"
ARB_ROUTE_MAX_DIM = 256
"""Dense matrices up to this size are re-enclosed by the all-Arb residual route when verifying."""

DIGITS = 20


class CertificateError(SpecboundError):
    """A certificate file cannot be read (missing, not JSON, wrong format, missing key)."""


# ------------------------------------------------------------------------------------------------
# writing


def ball(x: arb) -> str:
    return ball_to_str(x, DIGITS)


def frac(x: Fraction) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def decimal_up(x: arb, digits: int = 12) -> str:
    """A decimal string >= upper(x) (``digits`` significant digits, rounded toward +inf)."""
    hi = exact_value(x.upper())
    ctx = Context(prec=digits, rounding=ROUND_CEILING)
    return str(ctx.divide(Decimal(hi.numerator), Decimal(hi.denominator)))


def versions() -> dict[str, str]:
    import importlib.metadata as md

    import numpy
    import sympy

    import specbound

    out = {"python": platform.python_version(), "numpy": numpy.__version__, "sympy": sympy.__version__,
           "specbound": specbound.__version__}
    for dist in ("python-flint", "torch"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _settings_json(bound) -> dict:
    st = bound.settings
    return {
        "n": st.n, "delta": frac(bound.delta), "delta_float": st.delta, "margin": st.margin,
        "empirical": st.empirical, "readout": st.readout, "readout_used": bound.readout,
        "massart": st.massart, "dudley": st.dudley, "overrides": [list(o) for o in st.overrides],
        "grid_m": bound.m, "bases": {k: frac(v) for k, v in bound.bases.items()},
    }


def _plan_json(plan) -> dict:
    # floats are written by json as repr(), which round-trips exactly
    return {"m": plan.m, "p_index": list(plan.p_index), "k_rho": plan.k_rho, "u": list(plan.u),
            "u_w": plan.u_w, "alpha_D": plan.alpha_D, "vartheta": list(plan.vartheta),
            "vartheta_w": plan.vartheta_w,
            "notes": {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in plan.notes.items()}}


def _matrix_json(rec, method: str) -> dict:
    return {
        "layer": rec.layer, "head": rec.head, "type": rec.type, "shape": list(rec.shape),
        "spectral_norm": ball(rec.spectral_norm), "schatten_power": ball(rec.schatten_power),
        "proven_rank": rec.proven_rank, "r_max": rec.r_max, "p": frac(rec.p), "k_c": rec.k_c,
        "k_s": rec.k_s, "contribution": ball(rec.contribution), "c_radius": ball(rec.c_radius),
        "s_radius": ball(rec.s_radius), "gamma": ball(rec.gamma), "kappa": ball(rec.kappa),
        "ss_entropy": ball(rec.ss_entropy), "dd_piece": ball(rec.dd_piece), "lambda": ball(rec.lam),
        "u": frac(rec.u), "vartheta": frac(rec.vartheta), "enclosure": method,
    }


def to_json(result) -> dict:
    """The certificate of a :class:`specbound.pipeline.CertifyResult` as a JSON-able dict."""
    b = result.bound
    w = result.weights
    src = result.source
    emp = {"kind": src.kind, "certified": src.certified, "detail": src.detail}
    if src.ramp is not None:
        emp.update(lower=ball(src.ramp.lower), upper=ball(src.ramp.upper), undecided=src.ramp.undecided,
                   errors01=src.ramp.errors01, prec=src.ramp.prec)
    if src.kind == "user":
        emp["note"] = "user-supplied empirical loss: NOT certified"
    is_bound = b.bound is not None
    final = {
        "is_bound": is_bound,
        "bound": ball(b.bound) if is_bound else None,
        "bound_upper": decimal_up(b.bound) if is_bound else None,
        "empirical": ball(b.empirical) if b.empirical is not None else None,
        "complexity": ball(b.complexity), "complexity_upper": decimal_up(b.complexity),
        "confidence": ball(b.confidence), "confidence_upper": decimal_up(b.confidence),
        "partial": ball(b.partial), "partial_upper": decimal_up(b.partial),
    }
    return {
        "format": FORMAT,
        "checkpoint": dict(result.checkpoint),
        "architecture": {"num_layers": w.num_layers, "num_heads": w.num_heads, "width": w.width,
                         "head_dim": w.head_dim, "ff_dim": w.ff_dim, "activation": w.activation,
                         "num_matrices": len(w.matrices)},
        "settings": _settings_json(b),
        "versions": versions(),
        "plan": _plan_json(b.plan),
        "choices": {"p": [frac(r.p) for r in b.matrices], "u": [frac(r.u) for r in b.matrices],
                    "u_w": frac(b.u_w) if b.u_w is not None else None, "alpha_D": frac(b.alpha_D),
                    "vartheta": [frac(r.vartheta) for r in b.matrices],
                    "vartheta_w": frac(b.vartheta_w) if b.vartheta_w is not None else None,
                    "k_rho": b.k_rho, "k_w": b.k_w},
        "empirical_source": emp,
        "balls": {k: ball(v) for k, v in b.balls().items()},
        "matrices": [_matrix_json(r, m) for r, m in zip(b.matrices, result.enclosure_methods)],
        "notes": dict(b.notes),
        "result": final,
    }


def write(path: str | os.PathLike, result) -> None:
    """Write the certificate atomically (nothing is left behind on failure)."""
    from specbound.output import write_json_atomic

    write_json_atomic(path, to_json(result))


# ------------------------------------------------------------------------------------------------
# verification


@dataclass
class VerificationReport:
    """``valid`` iff no mismatch; each mismatch is (field path, recorded, recomputed)."""

    mismatches: list[tuple[str, str, str]] = field(default_factory=list)
    checked: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.mismatches

    def add(self, path: str, recorded, recomputed) -> None:
        self.mismatches.append((path, str(recorded), str(recomputed)))

    def lines(self) -> list[str]:
        if self.valid:
            return [f"VALID ({self.checked} checks)"] + [f"note: {n}" for n in self.notes]
        return ["INVALID"] + [f"{p}: recorded {a}, recomputed {b}" for p, a, b in self.mismatches] + \
            [f"note: {n}" for n in self.notes]


def read(source) -> dict:
    """A certificate dict from a dict, a JSON string or a file path."""
    if isinstance(source, dict):
        cert = source
    else:
        text = str(source)
        if not text.lstrip().startswith("{"):
            p = Path(text)
            if not p.is_file():
                raise CertificateError(f"{p}: certificate file not found")
            try:
                text = p.read_text(encoding="utf-8")
            except OSError as exc:
                raise CertificateError(f"{p}: cannot read ({exc.strerror})") from None
        try:
            cert = json.loads(text)
        except ValueError as exc:
            raise CertificateError(f"certificate is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise CertificateError(f"not a specbound certificate (format must be {FORMAT!r})")
    for key in ("checkpoint", "settings", "plan", "matrices", "balls", "result", "empirical_source"):
        if key not in cert:
            raise CertificateError(f"certificate lacks the key {key!r}")
    return cert


def _parse_ball(text) -> arb | None:
    try:
        return ball_from_str(str(text))
    except (ValueError, TypeError):
        return None


def _check_ball(rep: VerificationReport, path: str, recorded, fresh: arb) -> None:
    rep.checked += 1
    rec = _parse_ball(recorded)
    if rec is None or not rec.overlaps(fresh):
        rep.add(path, recorded, ball(fresh))


def _settings_from(cert: dict):
    from specbound.plan import BoundSettings

    s = cert["settings"]
    bases = s["bases"]
    return BoundSettings(
        n=int(s["n"]), delta=float(s["delta_float"]), margin=s.get("margin"), empirical=s.get("empirical"),
        beta_c=Fraction(bases["beta_c"]), beta_s=Fraction(bases["beta_s"]), beta_w=Fraction(bases["beta_w"]),
        beta_rho=Fraction(bases["beta_rho"]), grid_m=int(s["grid_m"]), massart=s["massart"],
        dudley=s["dudley"], readout=s["readout"], overrides=tuple(tuple(o) for o in s["overrides"]))


def _plan_from(cert: dict):
    from specbound.plan import BoundPlan

    p = cert["plan"]
    return BoundPlan(m=int(p["m"]), p_index=tuple(int(i) for i in p["p_index"]), k_rho=int(p["k_rho"]),
                     u=tuple(float(v) for v in p["u"]), u_w=float(p["u_w"]), alpha_D=float(p["alpha_D"]),
                     vartheta=tuple(float(v) for v in p["vartheta"]), vartheta_w=float(p["vartheta_w"]))


def _fresh_enclosure(mat):
    from specbound.certified.factored import enclose

    if not mat.is_factored and max(mat.shape) <= ARB_ROUTE_MAX_DIM:
        return enclose(mat, method="arb")
    return enclose(mat)


def _empirical(cert: dict, weights, settings, rep: VerificationReport, recompute: bool) -> arb | None:
    from specbound.certified.forward import certified_ramp_loss
    from specbound.certified.radii import power_ball

    src = cert["empirical_source"]
    kind = src.get("kind")
    if kind == "none":
        return None
    if kind == "user":
        rep.notes.append("the empirical term was supplied by the user and is NOT certified")
        return arb(float(src["detail"]["value"]))
    recorded = _parse_ball(cert["result"].get("empirical"))
    if not recompute:
        rep.notes.append("empirical term taken from the certificate (not recomputed)")
        return recorded
    if kind == "task":
        from specbound.pipeline import task_sample

        d = src["detail"]
        data = task_sample(d["task"], int(d["n"]), int(d["seed"]))
    elif kind == "data":
        from specbound.checkpoint import file_sha256
        from specbound.data_file import load_data

        path = Path(src["detail"]["path"])
        if not path.is_file():
            rep.add("empirical_source.detail.path", str(path), "file not found")
            return recorded
        sha = file_sha256(path)
        if sha != src["detail"].get("sha256"):
            rep.add("empirical_source.detail.sha256", src["detail"].get("sha256"), sha)
        data = load_data(path)
    else:
        rep.add("empirical_source.kind", kind, "one of data, task, user, none")
        return recorded
    if data.n != settings.n:
        rep.add("settings.n", settings.n, data.n)
    rho = power_ball(Fraction(settings.beta_rho), int(cert["plan"]["k_rho"]))
    workers = max(1, min(2, os.cpu_count() or 1))
    return certified_ramp_loss(weights, data, rho, workers=workers).upper


def verify(cert_source, checkpoint: str | os.PathLike | None = None, *,
           recompute_empirical: bool = True) -> VerificationReport:
    """Re-check a certificate independently from the raw checkpoint (module docstring).

    ``checkpoint``: the weights file (default: the recorded path, or the embedded default).
    ``recompute_empirical``: re-run the certified forward passes (else trust the recorded ball and
    say so in the report).
    """
    from specbound.certified.bound import certify_bound
    from specbound.certified.norms import schatten_power, spectral_norm
    from specbound.checkpoint import load_weights

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
    try:
        settings = _settings_from(cert)
        plan = _plan_from(cert)
        recs = cert["matrices"]
        if len(recs) != len(weights.matrices) or len(plan.p_index) != len(recs):
            rep.add("matrices", f"{len(recs)} entries", f"{len(weights.matrices)} matrices")
            return rep
        bases = {k: Fraction(v) for k, v in cert["settings"]["bases"].items()}
        from specbound.certified.bound import decimal_fraction

        rep.checked += 1
        if Fraction(cert["settings"]["delta"]) != decimal_fraction(settings.delta):
            rep.add("settings.delta", cert["settings"]["delta"], frac(decimal_fraction(settings.delta)))
        rep.checked += 1
        if bases["beta_c"] != settings.base_c(weights.num_layers):
            rep.add("settings.bases.beta_c", frac(bases["beta_c"]), frac(settings.base_c(weights.num_layers)))
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
            _check_ball(rep, f"{where}.spectral_norm", rec["spectral_norm"], sn)
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
                _check_ball(rep, f"{where}.schatten_power", rec["schatten_power"], sp_ball)
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
            from specbound.certified.bound import readout_ball

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
                _check_ball(rep, f"matrices[{j}].{key}", rec[key], value)
    fresh_balls = fresh.balls()
    for key, text in cert["balls"].items():
        if key not in fresh_balls:
            rep.add(f"balls.{key}", text, "absent")
            continue
        _check_ball(rep, f"balls.{key}", text, fresh_balls[key])
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
        _check_ball(rep, f"result.{key}", res.get(key), value)
        up = res.get(f"{key}_upper")
        rep.checked += 1
        if not _decimal_matches(up, value):
            rep.add(f"result.{key}_upper", up, decimal_up(value))
    return rep


def _decimal_matches(text, value: arb, rel: Fraction = Fraction(1, 10**9)) -> bool:
    """``text`` is a decimal >= upper(value) and within a relative 1e-9 of it."""
    try:
        d = Fraction(Decimal(str(text)))
    except (ArithmeticError, ValueError, TypeError):
        return False
    hi = exact_value(value.upper())
    return hi <= d <= hi + abs(hi) * rel + Fraction(1, 10**30)

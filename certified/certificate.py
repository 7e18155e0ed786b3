"""The certificate format: a JSON record of a certified bound, read back and compared field by field.

:func:`to_json` records everything needed to reproduce the bound: the checkpoint's sha256, the
settings (bases as exact fractions, the grid m), library versions, every intermediate ball as a
string ``"[mid +/- rad]"`` (Arb prints a ball that contains the value), the per-matrix list, the
plan's choices, the empirical term's source, and the final bound (ball + upper endpoint as a decimal
rounded up).

:func:`read` parses a certificate back; :func:`settings_from` / :func:`plan_from` recover the
recorded settings and choices; :class:`VerificationReport`, :func:`check_ball` and
:func:`decimal_matches` are the comparison vocabulary.  The re-check itself (a second certify run
from the raw checkpoint) is an application step: :func:`specbound.verification.verify`.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import platform
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Context, Decimal
from fractions import Fraction
from pathlib import Path

import numpy
import sympy
from flint import arb

from specbound.version import __version__

from specbound.certified.arb import WORK_PREC, ball_from_str, ball_to_str, precision
from specbound.certified.radii import MatrixRounding, dominates, exact_value
from specbound.errors import SpecboundError
from specbound.plan import BoundPlan, BoundSettings
from specbound.vocabulary import EMPIRICAL_USER

FORMAT = "specbound-certificate-v1"

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
    out = {"python": platform.python_version(), "numpy": numpy.__version__, "sympy": sympy.__version__,
           "specbound": __version__}
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
    if src.kind == EMPIRICAL_USER:
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
                         "num_matrices": len(w.matrices), "variant": w.variant,
                         "num_kv_heads": w.num_kv_heads},
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


def parse_ball(text) -> arb | None:
    """The Arb ball written as ``text`` by :func:`ball`; None if it does not parse."""
    try:
        return ball_from_str(str(text))
    except (ValueError, TypeError):
        return None


def check_ball(rep: VerificationReport, path: str, recorded, fresh: arb) -> None:
    """Count one check; a mismatch unless the recorded ball parses and overlaps ``fresh``."""
    rep.checked += 1
    rec = parse_ball(recorded)
    if rec is None or not rec.overlaps(fresh):
        rep.add(path, recorded, ball(fresh))


def settings_from(cert: dict) -> BoundSettings:
    """The BoundSettings recorded in a certificate."""
    s = cert["settings"]
    bases = s["bases"]
    return BoundSettings(
        n=int(s["n"]), delta=float(s["delta_float"]), margin=s.get("margin"), empirical=s.get("empirical"),
        beta_c=Fraction(bases["beta_c"]), beta_s=Fraction(bases["beta_s"]), beta_w=Fraction(bases["beta_w"]),
        beta_rho=Fraction(bases["beta_rho"]), grid_m=int(s["grid_m"]), massart=s["massart"],
        dudley=s["dudley"], readout=s["readout"], overrides=tuple(tuple(o) for o in s["overrides"]))


def plan_from(cert: dict) -> BoundPlan:
    """The BoundPlan (the float choices) recorded in a certificate."""
    p = cert["plan"]
    return BoundPlan(m=int(p["m"]), p_index=tuple(int(i) for i in p["p_index"]), k_rho=int(p["k_rho"]),
                     u=tuple(float(v) for v in p["u"]), u_w=float(p["u_w"]), alpha_D=float(p["alpha_D"]),
                     vartheta=tuple(float(v) for v in p["vartheta"]), vartheta_w=float(p["vartheta_w"]))


def decimal_matches(text, value: arb, rel: Fraction = Fraction(1, 10**9)) -> bool:
    """``text`` is a decimal >= upper(value) and within a relative 1e-9 of it."""
    try:
        d = Fraction(Decimal(str(text)))
    except (ArithmeticError, ValueError, TypeError):
        return False
    hi = exact_value(value.upper())
    return hi <= d <= hi + abs(hi) * rel + Fraction(1, 10**30)

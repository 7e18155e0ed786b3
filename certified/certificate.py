"""The certificate format: a JSON record of a certified bound, read back and compared field by field.

:func:`to_json` records everything needed to reproduce the bound: the checkpoint's sha256, the
settings (bases as exact fractions, the grid m), library versions, every intermediate ball as a
string ``"[mid +/- rad]"`` (Arb prints a ball that contains the value), the per-matrix list, the
plan's choices, the empirical term's source, both routes of the theorem (``routes``: each route's
level and bound; the Occam route's margin, certified count K^, entropy H, mass C, BinInv certificate and
per-matrix shares of H), and the reported bound, the smaller one.  One schema rule makes the numbers
usable as numbers (:func:`with_floats`): beside every ball field ``k`` stand the binary64 floats
``k_upper`` >= its upper end and ``k_lower`` <= its lower end; a field written with :func:`ball`
anywhere in :func:`to_json` gets them, and :func:`check_floats` holds a certificate to them.
Version 2 (``FORMAT``) added the routes and the float endpoints; another version is refused with a
line that says so.

:func:`read` parses a certificate back; :func:`settings_from` / :func:`plan_from` recover the
recorded settings and choices; :class:`VerificationReport`, :func:`check_ball`,
:func:`check_floats` and :func:`upper_matches` / :func:`lower_matches` are the comparison vocabulary.  The re-check itself (a second certify run
from the raw checkpoint) is an application step: :func:`specbound.verification.verify`.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy
from flint import arb

from specbound.version import __version__

from specbound.certified.arb import WORK_PREC, ball_from_str, ball_to_str, float_lower, float_upper, precision
from specbound.certified.radii import MatrixRounding, dominates, exact_value
from specbound.errors import SpecboundError
from specbound.plan import MAX_TRIES, BoundPlan, BoundSettings, OccamPlan
from specbound.scope import scope_lines, scope_summary
from specbound.verdict import Verdict, decimal_up as _decimal_up
from specbound.vocabulary import EMPIRICAL_USER, MAX_TASK_SAMPLES, MAX_TASK_SEQ_LEN, ROUTES

FORMAT = "specbound-certificate-v2"
"""The certificate schema version (v2: two routes, the Occam route's parts, ``beta_gamma``,
``routes``; the float endpoints of :func:`with_floats` beside every ball; v1 had decimal strings
``*_upper`` in the result block only)."""

DIGITS = 20


class CertificateError(SpecboundError):
    """A certificate file cannot be read (missing, not JSON, wrong format, missing key)."""


# ------------------------------------------------------------------------------------------------
# writing


class BallText(str):
    """The text of a ball field, as :func:`ball` writes it: the mark by which :func:`with_floats`
    finds every ball field of a certificate, whoever added the field."""

    __slots__ = ()


def ball(x: arb) -> BallText:
    return BallText(ball_to_str(x, DIGITS))


# ------------------------------------------------------------------------------------------------
# the schema rule: float endpoints beside every ball

UPPER, LOWER = "_upper", "_lower"
"""The suffixes of a ball field's float endpoints: ``k_upper`` and ``k_lower`` beside ``k``."""


def endpoints(text: str) -> tuple[float | None, float | None]:
    """(upper, lower) of the ball printed as ``text``: the nearest binary64 numbers with upper >= the
    ball's upper end and lower <= its lower end (directed; :mod:`specbound.certified.arb`), None
    where that end lies beyond the binary64 range (JSON has no infinity)."""
    b = parse_ball(text)
    if b is None:
        raise ValueError(f"not a ball: {text!r}")
    up, lo = float_upper(b), float_lower(b)
    return (up if math.isfinite(up) else None, lo if math.isfinite(lo) else None)


def float_endpoints(x: arb) -> tuple[float | None, float | None]:
    """The (upper, lower) floats a certificate writes beside ``x`` (those of its printed ball)."""
    return endpoints(ball(x))


def with_floats(obj):
    """The schema rule: a copy of ``obj`` (dicts and lists, recursively) in which every ball field
    ``k`` (a :class:`BallText`) is followed by ``k_upper`` and ``k_lower`` (:func:`endpoints`)."""
    if isinstance(obj, list):
        return [with_floats(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for key, value in obj.items():
        out[key] = with_floats(value)
        if isinstance(value, BallText):
            if key + UPPER in obj or key + LOWER in obj:
                raise ValueError(f"certificate schema: {key!r} is a ball, so {key + UPPER!r} / {key + LOWER!r} "
                                 "are its float endpoints and cannot be fields of their own")
            out[key + UPPER], out[key + LOWER] = endpoints(value)
    return out


def is_float_field(obj: dict, key: str) -> bool:
    """Whether ``obj[key]`` is a float endpoint of a ball field of ``obj`` (read back from JSON)."""
    for suffix in (UPPER, LOWER):
        if key.endswith(suffix) and isinstance(obj.get(key[: -len(suffix)]), str):
            return True
    return False


def _number(value) -> Fraction | None:
    """The exact value of a JSON number (the binary64 a JSON reader makes of it); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return Fraction(value)


def upper_matches(value, fresh: arb, rel: Fraction = Fraction(1, 10**9)) -> bool:
    """``value`` is a number >= the upper end of ``fresh`` (which contains the true value) and
    within a relative 1e-9 of it: a float upper endpoint that says the recomputed number."""
    v = _number(value)
    hi = exact_value(fresh.upper())
    return v is not None and hi <= v <= hi + abs(hi) * rel + Fraction(1, 10**30)


def lower_matches(value, fresh: arb, rel: Fraction = Fraction(1, 10**9)) -> bool:
    """``value`` is a number <= the lower end of ``fresh`` and within a relative 1e-9 of it."""
    v = _number(value)
    lo = exact_value(fresh.lower())
    return v is not None and lo - abs(lo) * rel - Fraction(1, 10**30) <= v <= lo


def check_floats(rep: VerificationReport, obj, path: str = "") -> None:
    """Count one check per float endpoint in ``obj`` (a read certificate): each must be exactly the
    :func:`endpoints` of the ball beside it (a number, or null only beyond the binary64 range).  A
    float that says another number than its ball is a mismatch."""
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            check_floats(rep, v, f"{path}[{i}]")
        return
    if not isinstance(obj, dict):
        return
    for key, value in obj.items():
        where = f"{path}.{key}" if path else key
        if isinstance(value, (dict, list)):
            check_floats(rep, value, where)
        if not is_float_field(obj, key):
            continue
        suffix = UPPER if key.endswith(UPPER) else LOWER
        base = key[: -len(suffix)]
        try:
            up, lo = endpoints(obj[base])
        except ValueError:
            continue  # a float beside a string that is not a ball: not an endpoint (no claim)
        want = up if suffix == UPPER else lo
        rep.checked += 1
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ((value is None and want is None) or (number and want is not None and float(value) == want)):
            rep.add(where, value, f"{want!r} (the {'upper' if suffix == UPPER else 'lower'} end of "
                                  f"{base} = {obj[base]})")


def frac(x: Fraction) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def decimal_up(x: arb, digits: int = 12) -> str:
    """A decimal string >= upper(x) (``digits`` significant digits, rounded toward +inf)."""
    return _decimal_up(exact_value(x.upper()), digits)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "numpy": numpy.__version__, "sympy": md.version("sympy"),
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
        "grid_m": bound.m, "bases": {k: frac(v) for k, v in bound.bases.items()}, "routes": list(st.routes),
        # K bound samples tried (a training record's statement) and the delta / K the routes share
        "tries": st.tries, "delta_charged": frac(st.charged_delta()),
    }


def _notes_json(notes: dict) -> dict:
    return {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in notes.items()}


def _plan_json(plan) -> dict:
    # floats are written by json as repr(), which round-trips exactly
    occ = plan.occam
    return {"m": plan.m, "p_index": list(plan.p_index), "k_rho": plan.k_rho, "u": list(plan.u),
            "u_w": plan.u_w, "alpha_D": plan.alpha_D, "vartheta": list(plan.vartheta),
            "vartheta_w": plan.vartheta_w, "notes": _notes_json(plan.notes),
            "occam": None if occ is None else {"m": occ.m, "p_index": list(occ.p_index), "k_gamma": occ.k_gamma,
                                               "notes": _notes_json(occ.notes)}}


def occam_matrix_json(r, H: arb) -> dict:
    """The Occam route's record of one matrix: its p and grid radii, the rule's weight and share, its
    entropy and (a float, informational) its share of H."""
    return {"p": frac(r.p), "k_c": r.k_c, "k_s": r.k_s, "proven_rank": r.proven_rank,
            "schatten_power": ball(r.schatten_power), "c_radius": ball(r.c_radius), "s_radius": ball(r.s_radius),
            "kappa": ball(r.kappa), "weight": ball(r.weight), "share": ball(r.share), "entropy": ball(r.entropy),
            "lambda": ball(r.lam), "share_of_H": float(r.entropy.mid()) / (float(H.mid()) or 1.0)}


def _occam_json(o, n: int) -> dict:
    """The Occam route's parts (proofs_notes/occam_route.md): margin, count, H, Lambda, C, the BinInv
    certificate and, per matrix, the rule's weight and share and its entropy with its share of H."""
    inv = o.inversion
    H_mid = float(o.H.mid()) or 1.0
    mats = [occam_matrix_json(r, o.H) for r in o.matrices]
    out = {"level": frac(o.level), "beta_gamma": frac(o.beta_gamma), "k_gamma": o.k_gamma, "gamma": ball(o.gamma),
           "n": n, "count": o.count, "count_method": o.count_method, "Omega": ball(o.Omega),
           "H": ball(o.H), "Lambda": ball(o.Lambda), "C": ball(o.mass),
           "readout": None if o.entropy_w is None else {"share": ball(o.share_w), "entropy": ball(o.entropy_w),
                                                        "share_of_H": float(o.entropy_w.mid()) / H_mid},
           "matrices": mats, "bound": None, "bound_upper": None, "bound_lower": None, "bininv": None}
    if o.bound is not None:
        # the float ends beside the ball are the schema rule's (with_floats), not written here
        del out["bound_upper"], out["bound_lower"]
        out["bound"] = ball(o.bound)
        out["bininv"] = {"method": inv.method, "value": float(inv.value.mid()), "kl": float(inv.kl.mid()),
                         "tail": None if inv.tail is None else float(inv.tail.mid())}
    return out


def routes_json(b) -> dict:
    """Both routes of a :class:`~specbound.certified.bound.CertifiedBound`: each one's level and bound,
    the Occam route's parts, the reported route and why delta is split."""
    out = {"evaluated": list(b.routes), "reported": b.route,
           "note": (f"each route at {b.settings.level_phrase()}: with probability >= 1 - delta all hold together, so "
                    "the smallest is reported (proofs_notes/occam_route.md step 5)") if len(b.routes) > 1 else
                   "one route at delta",
           "rademacher": {"level": frac(b.settings.route_level()),
                          **({"bound": None, "bound_upper": None, "bound_lower": None} if b.rademacher is None
                             else {"bound": ball(b.rademacher)})}}
    if b.occam is not None:
        out["occam"] = _occam_json(b.occam, b.settings.n)
    return out


def matrix_json(rec, method: str) -> dict:
    """The certificate's record of one matrix (format v1: its kind is written under the key ``type``)."""
    return {
        "layer": rec.layer, "head": rec.head, "type": rec.kind, "shape": list(rec.shape),
        "spectral_norm": ball(rec.spectral_norm), "schatten_power": ball(rec.schatten_power),
        "proven_rank": rec.proven_rank, "r_max": rec.r_max, "p": frac(rec.p), "k_c": rec.k_c,
        "k_s": rec.k_s, "contribution": ball(rec.contribution), "c_radius": ball(rec.c_radius),
        "s_radius": ball(rec.s_radius), "gamma": ball(rec.gamma), "kappa": ball(rec.kappa),
        "ss_entropy": ball(rec.ss_entropy), "dd_piece": ball(rec.dd_piece), "lambda": ball(rec.lam),
        "u": frac(rec.u), "vartheta": frac(rec.vartheta), "enclosure": method,
    }


def recorded_path(source) -> str:
    """The checkpoint path as a certificate records it: the absolute path of an existing file or
    folder (so ``verify`` finds it from any working folder; its sha256 is recorded beside it), else
    the text as given (a cached repo id, an in-memory model's label)."""
    text = os.fspath(source) if isinstance(source, (str, os.PathLike)) else str(source)
    text = os.fsdecode(text)
    return os.path.abspath(text) if os.path.exists(text) else text


def to_json(result) -> dict:
    """The certificate of a :class:`specbound.certification.Certification` as a JSON-able dict.

    Its verdict (``result.is_bound / proven / vacuous / label``) is the result's :class:`Verdict`,
    written as computed, never recomposed here."""
    b = result.bound
    w = result.weights
    src = result.source
    emp = {"kind": src.kind, "certified": src.certified, "detail": src.detail}
    if getattr(src, "data_sha256", ""):  # the sample's canonical arrays: verify checks it is given the same S
        emp["data_sha256"] = src.data_sha256
    if src.ramp is not None:
        emp.update(lower=ball(src.ramp.lower), upper=ball(src.ramp.upper), undecided=src.ramp.undecided,
                   errors01=src.ramp.errors01, prec=src.ramp.prec)
    if src.kind == EMPIRICAL_USER:
        emp["note"] = "user-supplied empirical loss: NOT certified"
    verdict: Verdict = result.verdict
    is_bound = b.bound is not None
    if verdict.is_bound is not is_bound:
        raise ValueError("the verdict does not belong to this bound (is_bound differs)")
    scope = dict(result.scope)
    final = {
        "is_bound": is_bound,
        "proven": verdict.proven,
        "vacuous": verdict.vacuous,
        "label": verdict.label,
        "bound": ball(b.bound) if is_bound else None,
        **({} if is_bound else {"bound_upper": None, "bound_lower": None}),
        "route": b.route,
        "empirical": ball(b.empirical) if b.empirical is not None else None,
        "complexity": ball(b.complexity), "confidence": ball(b.confidence), "partial": ball(b.partial),
    }
    return with_floats({
        "format": FORMAT,
        "checkpoint": dict(result.checkpoint),
        "scope": scope,
        "architecture": w.architecture(),  # k read-out rows: num_outputs (proofs_notes/k_class.md)
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
        "routes": routes_json(b),
        "matrices": [matrix_json(r, m) for r, m in zip(b.matrices, result.enclosure_methods)],
        "notes": dict(b.notes),
        "result": final,
    })


# ------------------------------------------------------------------------------------------------
# verification


VALID = "VALID"
"""Every field recomputed and matched."""

INVALID = "INVALID"
"""A field does not match its recomputation."""

VALID_EXCEPT_EMPIRICAL = "VALID EXCEPT EMPIRICAL TERM (not recomputed)"
"""Every recomputed field matched, but the certified empirical term (and the Occam route's count
K^, when in force) was taken from the certificate (``verify --trust-empirical``): a consistent
forgery of it would pass, so this is never VALID."""

EXIT_STATUS = {VALID: 0, INVALID: 1, VALID_EXCEPT_EMPIRICAL: 3}
"""The exit status of ``specbound verify`` for each verdict (2 is bad input, as for every command)."""

NOT_RECOMPUTED = ("taken from the certificate, NOT recomputed by this verification (--trust-empirical): "
                  "the certified forward passes were not re-run")
"""What the scope block ``verify`` prints says of an empirical term it did not recompute."""


@dataclass
class VerificationReport:
    """Each mismatch is (field path, recorded, recomputed); ``unchecked`` names what was taken from
    the certificate without recomputation.  :attr:`status` is VALID (no mismatch, nothing taken on
    trust), INVALID (a mismatch) or VALID EXCEPT EMPIRICAL TERM (no mismatch, but the certified
    empirical term was not recomputed); ``valid`` is True only for VALID."""

    mismatches: list[tuple[str, str, str]] = field(default_factory=list)
    checked: int = 0
    notes: list[str] = field(default_factory=list)
    scope: dict = field(default_factory=dict)  #: the scope block recomputed from the checkpoint
    verdict: Verdict | None = None  #: the verdict recomputed from the checkpoint (None until known)
    unchecked: list[str] = field(default_factory=list)  #: what was taken from the certificate on trust

    def compare(self, path: str, recorded, recomputed) -> None:
        """Count one check of a field that must equal its recomputed value."""
        self.checked += 1
        if recorded != recomputed:
            self.add(path, recorded, recomputed)

    @property
    def status(self) -> str:
        """VALID, INVALID or VALID EXCEPT EMPIRICAL TERM (not recomputed) (see the class docstring)."""
        if self.mismatches:
            return INVALID
        return VALID_EXCEPT_EMPIRICAL if self.unchecked else VALID

    @property
    def valid(self) -> bool:
        """Every field recomputed and matched (False when something was taken on trust)."""
        return self.status == VALID

    @property
    def exit_status(self) -> int:
        """The exit status of ``specbound verify`` (:data:`EXIT_STATUS`)."""
        return EXIT_STATUS[self.status]

    def add(self, path: str, recorded, recomputed) -> None:
        self.mismatches.append((path, str(recorded), str(recomputed)))

    def as_dict(self) -> dict:
        """The report as a JSON-able dict (``specbound verify --json``): status, validity, checks,
        what was not recomputed, every mismatch, notes, the recomputed scope block and verdict."""
        return {"status": self.status, "valid": self.valid, "checked": self.checked,
                "not_recomputed": list(self.unchecked),
                "mismatches": [{"field": p, "recorded": a, "recomputed": b} for p, a, b in self.mismatches],
                "notes": list(self.notes), "scope": dict(self.scope),
                "verdict": None if self.verdict is None else asdict(self.verdict)}

    def lines(self) -> list[str]:
        scope = scope_lines(self.scope) if self.scope else []
        notes = [f"note: {n}" for n in self.notes]
        status = self.status
        if status == INVALID:
            return [INVALID] + [f"{p}: recorded {a}, recomputed {b}" for p, a, b in self.mismatches] + scope + notes
        head = [f"{status} ({self.checked} checks)"]
        if self.unchecked:
            head[0] += f"; not recomputed: {', '.join(self.unchecked)} (taken from the certificate)"
        if self.verdict is not None:
            # what was verified: the recomputed verdict and number, and what the number is for
            if self.unchecked:
                verb = "is" if len(self.unchecked) == 1 else "are"
                head += [f"  verdict IF the certificate's {', '.join(self.unchecked)} {verb} right: {self.verdict.label}",
                         f"  {self.verdict.headline.removeprefix('certified ')} (if so)"]
            else:
                head[0] += f"; verdict: {self.verdict.label}"
                head.append(f"  {self.verdict.headline}")
            if self.scope:
                head.append(f"  for {scope_summary(self.scope)}")
        return head + scope + notes


MAX_CERTIFICATE_BYTES = 64 * 2**20
"""A certificate file larger than this is refused before it is parsed (a real one is a few MB)."""


def _no_constant(name: str):
    raise ValueError(f"the non-finite number {name} is not allowed")


def read(source) -> dict:
    """A certificate dict from a dict, a file path or a JSON string.

    A string that names an existing file is always read as a file (so a file called ``{x}.json`` is
    a path); otherwise a string starting with ``{`` is parsed as JSON.  Malformed input of any kind
    (not UTF-8, not JSON, NaN/Infinity, nesting too deep, an integer too long, too large) raises
    :class:`CertificateError` with one line.
    """
    if isinstance(source, dict):
        cert = source
    else:
        text = str(source)
        p = Path(text)
        try:
            is_file = p.is_file()
        except (OSError, ValueError):
            is_file = False
        if is_file:
            try:
                if p.stat().st_size > MAX_CERTIFICATE_BYTES:
                    raise CertificateError(f"{p}: larger than {MAX_CERTIFICATE_BYTES} bytes: not a certificate")
                raw = p.read_bytes()
            except OSError as exc:
                raise CertificateError(f"{p}: cannot read ({exc.strerror})") from None
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise CertificateError(f"{p}: not a UTF-8 text file: not a certificate") from None
        elif not text.lstrip().startswith("{"):
            raise CertificateError(f"{p}: certificate file not found")
        try:
            cert = json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise CertificateError(f"certificate is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except ValueError as exc:  # NaN/Infinity, an integer over Python's digit limit
            raise CertificateError(f"certificate is malformed ({exc})") from None
        except RecursionError:
            raise CertificateError("certificate is malformed (nested too deeply)") from None
    if isinstance(cert, dict) and str(cert.get("format")).startswith("specbound-certificate-") \
            and cert["format"] != FORMAT:
        raise CertificateError(f"certificate format {cert['format']!r}: this specbound reads {FORMAT!r}; "
                               "certify the checkpoint again to write one")
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise CertificateError(f"not a specbound certificate (format must be {FORMAT!r})")
    for key in ("checkpoint", "settings", "plan", "matrices", "balls", "result", "empirical_source", "routes"):
        if key not in cert:
            raise CertificateError(f"certificate lacks the key {key!r}")
    return cert


def parse_ball(text) -> arb | None:
    """The Arb ball written as ``text`` by :func:`ball`; None if it does not parse."""
    try:
        return ball_from_str(str(text))
    except (ValueError, TypeError):
        return None


MAX_RADIUS_RATIO = 4
"""A recorded ball may be at most this many times wider than the recomputed one ..."""
MAX_RELATIVE_RADIUS = Fraction(1, 10**6)
"""... or, whichever is larger, this fraction of the recomputed value (routes differ in width)."""


def check_ball(rep: VerificationReport, path: str, recorded, fresh: arb) -> None:
    """Count one check; a mismatch unless the recorded ball is finite, intersects the recomputed
    ball ``fresh`` (which contains the true value) and is not much wider than it.

    Overlap alone is not enough: NaN and ``[0 +/- inf]`` overlap everything and a wide ball overlaps
    the true one while claiming nothing.  A recorded ball that intersects ``fresh`` and is at most
    max(:data:`MAX_RADIUS_RATIO` rad(fresh), :data:`MAX_RELATIVE_RADIUS` |fresh|) wide says the same
    number to the precision both routes reach; the numbers a user reads (``*_upper``) are checked
    separately by :func:`upper_matches` against the recomputed upper endpoint.
    """
    rep.checked += 1
    rec = parse_ball(recorded)
    ok = rec is not None and rec.is_finite() and fresh.is_finite() and rec.overlaps(fresh)
    if ok:
        rad_rec = exact_value(arb(rec.rad()).upper())
        rad_fresh = exact_value(arb(fresh.rad()).upper())
        scale = exact_value(abs(arb(fresh.mid())).upper())
        ok = rad_rec <= max(MAX_RADIUS_RATIO * rad_fresh, MAX_RELATIVE_RADIUS * scale, Fraction(1, 10**40))
    if not ok:
        rep.add(path, recorded, ball(fresh))


MAX_EXPONENT = 4096
"""Largest |k| accepted for a grid exponent (k_c, k_s, k_w, k_rho): beta^4096 is far beyond any norm."""
MAX_N = 10**15
"""Largest sample size accepted."""
MAX_GRID_M = 10**4
"""Largest grid size m accepted (the theorem's m = ceil(L + ln N) is a few dozen)."""
MAX_RANK = 10**7
"""Largest rank / r_max accepted (no covered matrix has a side longer than this)."""
MAX_DIGITS = 60
"""Longest numerator or denominator (decimal digits) of a recorded fraction."""


def _where(path: str, what: str) -> CertificateError:
    return CertificateError(f"certificate field {path}: {what}")


def _int_in(value, path: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _where(path, f"expected an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _where(path, f"{value} outside [{lo}, {hi}]")
    return value


def _float_in(value, path: str, lo: float, hi: float, *, open_lo: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _where(path, f"expected a number, got {type(value).__name__}")
    v = float(value)
    if not (v == v and lo <= v <= hi) or (open_lo and v == lo):
        raise _where(path, f"{value!r} outside {'(' if open_lo else '['}{lo}, {hi}]")
    return v


def _frac_in(text, path: str, lo: Fraction, hi: Fraction, *, open_lo: bool = False) -> Fraction:
    if not isinstance(text, (str, int)) or isinstance(text, bool) or len(str(text)) > 2 * MAX_DIGITS + 1:
        raise _where(path, "expected a short fraction string like '5/4'")
    try:
        f = Fraction(str(text))
    except (ValueError, ZeroDivisionError):
        raise _where(path, f"not a fraction: {text!r}") from None
    if not (lo <= f <= hi) or (open_lo and f == lo):
        raise _where(path, f"{text} outside {'(' if open_lo else '['}{lo}, {hi}]")
    return f


def _dict(cert: dict, key: str, path: str = "") -> dict:
    value = cert.get(key)
    if not isinstance(value, dict):
        raise _where(path + key, "expected an object")
    return value


def _list(obj: dict, key: str, path: str) -> list:
    value = obj.get(key)
    if not isinstance(value, list):
        raise _where(path + key, "expected a list")
    return value


def _check_matrix_choices(rec, where: str) -> None:
    """The per-matrix choices both routes record (grid exponents, proven rank, Schatten index p) are
    integers / fractions in range, before anything is recomputed from them."""
    if not isinstance(rec, dict):
        raise _where(where, "expected an object")
    _int_in(rec.get("k_c"), f"{where}.k_c", -MAX_EXPONENT, MAX_EXPONENT)
    if rec.get("k_s") is not None:
        _int_in(rec["k_s"], f"{where}.k_s", -MAX_EXPONENT, MAX_EXPONENT)
    _int_in(rec.get("proven_rank"), f"{where}.proven_rank", 0, MAX_RANK)
    _frac_in(rec.get("p"), f"{where}.p", Fraction(0), Fraction(2))


def check_ranges(cert: dict) -> None:
    """Refuse a certificate any of whose numeric fields lies outside a sanity range, *before* any
    arithmetic: exponents (|k| <= MAX_EXPONENT), sizes (n <= MAX_N, m <= MAX_GRID_M, ranks), the
    Schatten indices p in [0, 2], confidence delta in (0, 1), loss scales and Dudley weights
    positive finite, alpha_D in (0, 1/4], a user's empirical loss in [0, 1], a recorded task's size.
    Raises :class:`CertificateError` naming the first offending field.  (A value inside the ranges
    can still be wrong: :func:`specbound.verification.verify` recomputes it.)
    """
    big = Fraction(10) ** MAX_DIGITS
    st = _dict(cert, "settings")
    _int_in(st.get("n"), "settings.n", 1, MAX_N)
    _float_in(st.get("delta_float"), "settings.delta_float", 0.0, 1.0, open_lo=True)
    _frac_in(st.get("delta"), "settings.delta", Fraction(0), Fraction(1), open_lo=True)
    if st.get("margin") is not None:
        _float_in(st["margin"], "settings.margin", 0.0, 1e300, open_lo=True)
    if st.get("empirical") is not None:
        _float_in(st["empirical"], "settings.empirical", 0.0, 1.0)
    _int_in(st.get("grid_m"), "settings.grid_m", 1, MAX_GRID_M)
    if "tries" in st:
        _int_in(st["tries"], "settings.tries", 1, MAX_TRIES)
    bases = _dict(st, "bases", "settings.")
    for key in ("beta_c", "beta_s", "beta_w", "beta_rho", "beta_gamma"):
        _frac_in(bases.get(key), f"settings.bases.{key}", Fraction(1), big, open_lo=True)
    routes = _list(st, "routes", "settings.")
    if not routes or len(routes) > len(ROUTES) or not all(isinstance(r, str) and r in ROUTES for r in routes):
        raise _where("settings.routes", f"expected a list out of {ROUTES}")
    overrides = _list(st, "overrides", "settings.")
    for i, o in enumerate(overrides):
        if not (isinstance(o, list) and len(o) == 2 and isinstance(o[0], str)):
            raise _where(f"settings.overrides[{i}]", "expected [name, value]")
        if isinstance(o[1], str):
            _frac_in(o[1], f"settings.overrides[{i}]", Fraction(0), big, open_lo=True)
        else:
            _float_in(o[1], f"settings.overrides[{i}]", 0.0, 1e300, open_lo=True)
    plan = _dict(cert, "plan")
    m = _int_in(plan.get("m"), "plan.m", 1, MAX_GRID_M)
    for i, v in enumerate(_list(plan, "p_index", "plan.")):
        _int_in(v, f"plan.p_index[{i}]", 0, 2 * m)
    _int_in(plan.get("k_rho"), "plan.k_rho", -MAX_EXPONENT, MAX_EXPONENT)
    for key in ("u", "vartheta"):
        for i, v in enumerate(_list(plan, key, "plan.")):
            _float_in(v, f"plan.{key}[{i}]", 0.0, 1e300, open_lo=True)
    for key in ("u_w", "vartheta_w"):  # 0 for a fixed read-out (then unused)
        _float_in(plan.get(key), f"plan.{key}", 0.0, 1e300)
    _float_in(plan.get("alpha_D"), "plan.alpha_D", 0.0, 0.25, open_lo=True)
    occ = plan.get("occam")
    if occ is not None:
        if not isinstance(occ, dict):
            raise _where("plan.occam", "expected an object")
        m_occ = _int_in(occ.get("m"), "plan.occam.m", 1, MAX_GRID_M)
        for i, v in enumerate(_list(occ, "p_index", "plan.occam.")):
            _int_in(v, f"plan.occam.p_index[{i}]", 0, 2 * m_occ)
        _int_in(occ.get("k_gamma"), "plan.occam.k_gamma", -MAX_EXPONENT, MAX_EXPONENT)
    rt = _dict(cert, "routes")
    occ_rec = rt.get("occam")
    if occ_rec is not None:
        if not isinstance(occ_rec, dict):
            raise _where("routes.occam", "expected an object")
        if occ_rec.get("count") is not None:
            _int_in(occ_rec["count"], "routes.occam.count", 0, MAX_N)
        _int_in(occ_rec.get("k_gamma"), "routes.occam.k_gamma", -MAX_EXPONENT, MAX_EXPONENT)
        for j, rec in enumerate(_list(occ_rec, "matrices", "routes.occam.")):
            where = f"routes.occam.matrices[{j}]"
            _check_matrix_choices(rec, where)
    choices = cert.get("choices") or {}
    if not isinstance(choices, dict):
        raise _where("choices", "expected an object")
    if choices.get("k_w") is not None:
        _int_in(choices["k_w"], "choices.k_w", -MAX_EXPONENT, MAX_EXPONENT)
    for j, rec in enumerate(_list(cert, "matrices", "")):
        where = f"matrices[{j}]"
        _check_matrix_choices(rec, where)
        _int_in(rec.get("r_max"), f"{where}.r_max", 0, MAX_RANK)
        shape = rec.get("shape")
        if not (isinstance(shape, list) and len(shape) == 2):
            raise _where(f"{where}.shape", "expected [rows, columns]")
        for i, v in enumerate(shape):
            _int_in(v, f"{where}.shape[{i}]", 0, MAX_RANK)
    if not isinstance(cert.get("balls"), dict):
        raise _where("balls", "expected an object")
    for key in ("checkpoint", "result"):
        _dict(cert, key)
    emp = _dict(cert, "empirical_source")
    detail = emp.get("detail") if emp.get("detail") is not None else {}
    if not isinstance(detail, dict):
        raise _where("empirical_source.detail", "expected an object")
    sha = emp.get("data_sha256")
    if sha is not None and not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        raise _where("empirical_source.data_sha256", "expected 64 lowercase hex digits")
    if "value" in detail:
        _float_in(detail["value"], "empirical_source.detail.value", 0.0, 1.0)
    if "n" in detail:
        _int_in(detail["n"], "empirical_source.detail.n", 1, MAX_TASK_SAMPLES)
    for key in ("seed", "data_seed"):
        if key in detail:
            _int_in(detail[key], f"empirical_source.detail.{key}", 0, 2**63)
    task = detail.get("task")
    if task is not None:
        if not isinstance(task, dict):
            raise _where("empirical_source.detail.task", "expected an object")
        _int_in(task.get("seq_len"), "empirical_source.detail.task.seq_len", 1, MAX_TASK_SEQ_LEN)
        if "vocab_size" in task:
            _int_in(task["vocab_size"], "empirical_source.detail.task.vocab_size", 2, 10**6)
        positions = task.get("positions")
        if not isinstance(positions, list) or len(positions) > MAX_TASK_SEQ_LEN:
            raise _where("empirical_source.detail.task.positions", "expected a short list")
        for i, v in enumerate(positions):
            _int_in(v, f"empirical_source.detail.task.positions[{i}]", 0, MAX_TASK_SEQ_LEN)


def settings_from(cert: dict) -> BoundSettings:
    """The BoundSettings recorded in a certificate."""
    s = cert["settings"]
    bases = s["bases"]
    return BoundSettings(
        n=int(s["n"]), delta=float(s["delta_float"]), margin=s.get("margin"), empirical=s.get("empirical"),
        beta_c=Fraction(bases["beta_c"]), beta_s=Fraction(bases["beta_s"]), beta_w=Fraction(bases["beta_w"]),
        beta_rho=Fraction(bases["beta_rho"]), beta_gamma=Fraction(bases["beta_gamma"]), grid_m=int(s["grid_m"]),
        massart=s["massart"], dudley=s["dudley"], readout=s["readout"],
        overrides=tuple(tuple(o) for o in s["overrides"]), routes=tuple(s["routes"]),
        tries=int(s.get("tries", 1)))  # a certificate from before tries existed: K = 1


def plan_from(cert: dict) -> BoundPlan:
    """The BoundPlan (the float choices) recorded in a certificate."""
    p = cert["plan"]
    occ = p.get("occam")
    occam = None if occ is None else OccamPlan(m=int(occ["m"]), p_index=tuple(int(i) for i in occ["p_index"]),
                                               k_gamma=int(occ["k_gamma"]))
    return BoundPlan(m=int(p["m"]), p_index=tuple(int(i) for i in p["p_index"]), k_rho=int(p["k_rho"]),
                     u=tuple(float(v) for v in p["u"]), u_w=float(p["u_w"]), alpha_D=float(p["alpha_D"]),
                     vartheta=tuple(float(v) for v in p["vartheta"]), vartheta_w=float(p["vartheta_w"]), occam=occam)

"""The certificate round trip (specbound/verification.py): verify accepts its own certificate and rejects tampered ones."""

import copy
import json
from fractions import Fraction
from pathlib import Path

import pytest

from specbound.certified.certificate import CertificateError, decimal_up, read, to_json
from specbound.cli import main
from specbound.errors import SpecboundError
from specbound.pipeline import certify
from specbound.verification import verify

REQUIRED = ("format", "checkpoint", "settings", "versions", "plan", "choices", "empirical_source",
            "balls", "matrices", "result")
MATRIX_KEYS = ("layer", "head", "type", "spectral_norm", "schatten_power", "proven_rank", "p", "k_c",
               "k_s", "contribution")


def mixed_plan(n=2000):
    """A hand-made plan with every kind of p (any plan is valid: proofs_notes/theory.md sections 6-7)."""
    from specbound.certified.bound import grid_m
    from specbound.checkpoint import load_weights
    from specbound.plan import BoundPlan, BoundSettings

    w = load_weights(None)
    m = grid_m(BoundSettings(n=n), w)
    J = len(w.matrices)
    return BoundPlan(m=m, p_index=tuple((5 * j) % (2 * m + 1) for j in range(J)), k_rho=1,
                     u=(0.05,) * J, u_w=0.05, alpha_D=0.02, vartheta=(1 / (J + 1),) * J,
                     vartheta_w=1 / (J + 1))


@pytest.fixture(scope="module")
def user_cert():
    """Default model with a user-supplied empirical loss (no forward passes: fast)."""
    cert = to_json(certify(None, n=2000, empirical=0.0, margin=2.0, plan=mixed_plan()))
    assert {r["p"] for r in cert["matrices"]} >= {"0", "2"}
    return cert


@pytest.fixture(scope="module")
def task_cert():
    """Default model, empirical term certified on 12 fresh task samples."""
    return to_json(certify(None, samples=12, seed=5))


def test_certificate_has_the_documented_fields(user_cert):
    for key in REQUIRED:
        assert key in user_cert
    for rec in user_cert["matrices"]:
        for key in MATRIX_KEYS:
            assert key in rec
    assert user_cert["empirical_source"]["kind"] == "user"
    assert user_cert["empirical_source"]["certified"] is False
    assert set(user_cert["versions"]) >= {"python", "numpy", "torch", "python-flint", "sympy", "specbound"}
    assert Fraction(user_cert["settings"]["bases"]["beta_c"]) == Fraction(33, 32)  # 1 + 1/(16L), L = 2
    json.dumps(user_cert)  # JSON-able


def test_verify_accepts_its_own_certificate(user_cert, task_cert):
    assert verify(user_cert).valid
    rep = verify(json.loads(json.dumps(task_cert)))  # recomputes the forward passes
    assert rep.valid, rep.lines()


def _first_p_positive(cert):
    return next(j for j, r in enumerate(cert["matrices"]) if r["p"] != "0")


TAMPERS = {
    "bound_upper lowered": lambda c: c["result"].__setitem__("bound_upper", c["result"]["bound_upper"] * 0.99),
    "bound_upper as a string": lambda c: c["result"].__setitem__("bound_upper", str(c["result"]["bound_upper"])),
    "bound_lower raised": lambda c: c["result"].__setitem__("bound_lower", c["result"]["bound_upper"]),
    "partial_upper dropped": lambda c: c["result"].pop("partial_upper"),
    "a matrix float forged": lambda c: c["matrices"][2].__setitem__(
        "spectral_norm_upper", c["matrices"][2]["spectral_norm_upper"] / 2),
    "a ball's float forged": lambda c: c["balls"].__setitem__("SS_lower", 0.0),
    "a float made null": lambda c: c["matrices"][0].__setitem__("contribution_upper", None),
    "bound ball shifted": lambda c: c["balls"].__setitem__("bound", "[0.001 +/- 1e-10]"),
    "k_c lowered": lambda c: c["matrices"][0].__setitem__("k_c", c["matrices"][0]["k_c"] - 1),
    "k_c raised": lambda c: c["matrices"][0].__setitem__("k_c", c["matrices"][0]["k_c"] + 1),
    "k_s lowered": lambda c: c["matrices"][_first_p_positive(c)].__setitem__(
        "k_s", c["matrices"][_first_p_positive(c)]["k_s"] - 1),
    "p changed": lambda c: c["matrices"][_first_p_positive(c)].__setitem__("p", "2"),
    "p changed in plan too": lambda c: (
        c["plan"]["p_index"].__setitem__(_first_p_positive(c), 2 * c["plan"]["m"]),
        c["matrices"][_first_p_positive(c)].__setitem__("p", "2")),
    "sha256 changed": lambda c: c["checkpoint"].__setitem__("sha256", "0" * 64),
    "delta changed": lambda c: c["settings"].__setitem__("delta", "1/10"),
    "k_w lowered": lambda c: c["choices"].__setitem__("k_w", c["choices"]["k_w"] - 1),
    "u changed": lambda c: c["plan"]["u"].__setitem__(1, c["plan"]["u"][1] * 2),
    "n changed": lambda c: c["settings"].__setitem__("n", c["settings"]["n"] * 10),
    "spectral norm changed": lambda c: c["matrices"][2].__setitem__("spectral_norm", "[0.5 +/- 1e-3]"),
    "contribution changed": lambda c: c["matrices"][3].__setitem__("contribution", "[0.01 +/- 1e-6]"),
    "beta_c changed": lambda c: c["settings"]["bases"].__setitem__("beta_c", "2"),
}


def test_beta_c_is_compared_with_the_theorem_default(user_cert):
    """The recorded base is checked against 1 + 1/(16L) recomputed from the checkpoint (it used to be
    compared with itself): any other base is outside the proven settings and INVALID."""
    cert = copy.deepcopy(user_cert)
    assert verify(cert).valid
    cert["settings"]["bases"]["beta_c"] = "2"
    rep = verify(cert)
    assert not rep.valid
    assert ("settings.bases.beta_c", "2", "33/32") in rep.mismatches
    cert["settings"]["bases"]["beta_c"] = "1"
    with pytest.raises(SpecboundError, match="beta_c"):
        verify(cert)


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_tampered_certificate_is_rejected(user_cert, name):
    cert = copy.deepcopy(user_cert)
    TAMPERS[name](cert)
    rep = verify(cert)
    assert not rep.valid, name
    assert rep.lines()[0] == "INVALID" and len(rep.lines()) >= 2


def _lower(text: str) -> str:
    return str(Fraction(text) * Fraction(99, 100))


#: the Occam route's parts (task_cert: both routes, each at delta/2)
OCCAM_TAMPERS = {
    "count lowered": lambda c: c["routes"]["occam"].__setitem__("count", max(0, c["routes"]["occam"]["count"] - 1))
    if c["routes"]["occam"]["count"] else c["routes"]["occam"].__setitem__("count", 1),
    "occam bound_upper lowered": lambda c: c["routes"]["occam"].__setitem__(
        "bound_upper", _lower(c["routes"]["occam"]["bound_upper"])),
    "bininv value lowered": lambda c: c["routes"]["occam"]["bininv"].__setitem__(
        "value", c["routes"]["occam"]["bininv"]["value"] * 0.99),
    "share changed": lambda c: c["routes"]["occam"]["matrices"][0].__setitem__("share", "[0.5 +/- 1e-9]"),
    "entropy changed": lambda c: c["routes"]["occam"]["matrices"][1].__setitem__("entropy", "[1.0 +/- 1e-9]"),
    "H changed": lambda c: c["routes"]["occam"].__setitem__("H", "[1.0 +/- 1e-9]"),
    "k_gamma changed": lambda c: c["plan"]["occam"].__setitem__("k_gamma", c["plan"]["occam"]["k_gamma"] + 1),
    "occam k_c lowered": lambda c: c["routes"]["occam"]["matrices"][0].__setitem__(
        "k_c", c["routes"]["occam"]["matrices"][0]["k_c"] - 1),
    "beta_gamma changed": lambda c: c["settings"]["bases"].__setitem__("beta_gamma", "2"),
    "one route claimed": lambda c: c["settings"].__setitem__("routes", ["rademacher"]),
    "reported route swapped": lambda c: c["result"].__setitem__(
        "route", "rademacher" if c["result"]["route"] == "occam" else "occam"),
}


def test_task_certificate_carries_both_routes(task_cert):
    rt = task_cert["routes"]
    assert rt["evaluated"] == ["rademacher", "occam"] and task_cert["settings"]["routes"] == ["rademacher", "occam"]
    assert rt["rademacher"]["level"] == rt["occam"]["level"] == "1/40"  # delta/2 each
    occ = rt["occam"]
    for key in ("gamma", "k_gamma", "count", "H", "Lambda", "C", "bound", "bininv", "matrices"):
        assert occ[key] is not None, key
    assert abs(sum(r["share_of_H"] for r in occ["matrices"]) + occ["readout"]["share_of_H"] - 1) < 1e-9
    reported = min(Fraction(rt["rademacher"]["bound_upper"]), Fraction(occ["bound_upper"]))
    assert Fraction(task_cert["result"]["bound_upper"]) == reported


@pytest.mark.parametrize("name", sorted(OCCAM_TAMPERS))
def test_tampered_occam_route_is_rejected(task_cert, name):
    cert = copy.deepcopy(task_cert)
    OCCAM_TAMPERS[name](cert)
    rep = verify(cert, recompute_empirical=name in ("count lowered", "k_gamma changed", "one route claimed"))
    assert not rep.valid, name


def test_verify_without_recomputing_the_sample_takes_the_recorded_count_and_says_so(task_cert):
    rep = verify(copy.deepcopy(task_cert), recompute_empirical=False)
    # no mismatch, but what was taken on trust is said, and the verdict is not plain VALID (issue 30)
    assert not rep.mismatches and rep.status == "VALID EXCEPT EMPIRICAL TERM (not recomputed)", rep.lines()
    assert "Occam count K^" in rep.unchecked and "Occam count K^" in rep.lines()[0]


def test_tampered_empirical_term_is_rejected(task_cert):
    cert = copy.deepcopy(task_cert)
    cert["result"]["empirical"] = "[0.001 +/- 1e-6]"
    cert["balls"]["empirical"] = "[0.001 +/- 1e-6]"
    assert not verify(cert).valid
    other = copy.deepcopy(task_cert)
    other["empirical_source"]["detail"]["n"] += 1  # a different sample than the one of the bound
    assert not verify(other).valid


def test_a_forged_float_is_named_as_the_mismatch(user_cert):
    cert = copy.deepcopy(user_cert)
    cert["matrices"][2]["spectral_norm_upper"] *= 2  # a bigger number: still above, but not the ball's
    rep = verify(cert)
    assert not rep.valid and [m[0] for m in rep.mismatches] == ["matrices[2].spectral_norm_upper"]


def test_every_result_number_is_a_float_beside_its_ball(user_cert):
    res = user_cert["result"]
    for key in ("bound", "empirical", "complexity", "confidence", "partial"):
        assert type(res[f"{key}_upper"]) is float and type(res[f"{key}_lower"]) is float, key
        assert res[f"{key}_lower"] <= res[f"{key}_upper"]
    assert list(res).index("bound_upper") == list(res).index("bound") + 1


def test_a_certificate_of_the_older_format_is_refused_in_one_line(user_cert):
    with pytest.raises(CertificateError, match="specbound-certificate-v1.*certify the checkpoint again"):
        read({**user_cert, "format": "specbound-certificate-v1"})


def test_unreadable_certificates_raise_one_line_errors(tmp_path):
    with pytest.raises(CertificateError):
        read(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CertificateError):
        read(str(bad))
    with pytest.raises(CertificateError):
        read({"format": "other"})


def test_decimal_up_rounds_toward_plus_infinity():
    from flint import arb

    x = arb(1) / 3
    text = decimal_up(x, 5)
    assert text == "0.33334"
    assert Fraction(text) >= Fraction(1, 3)
    assert decimal_up(arb(2), 5) == "2"


# ---------------------------------------------------------------- issue 30: what was not recomputed is said


def _forged_empirical_certificate(tmp_path, monkeypatch) -> Path:
    """A consistent forgery: the certificate certify would write if the empirical ramp loss on its
    fresh samples were 0 with no 0-1 error (every other ball recomputed from that).  At margin 50
    the true term is about 0.73, so the forged 0 is a lie that only recomputation can see."""
    from dataclasses import replace as dc_replace

    from flint import arb

    import specbound.pipeline as pipeline

    real = pipeline.empirical_ball

    def zero(*a, **k):
        _, ramp = real(*a, **k)
        forged = dc_replace(ramp, lower=arb(0), upper=arb(0), errors01=0, undecided=0)
        return arb(0), forged

    monkeypatch.setattr(pipeline, "empirical_ball", zero)
    cert = tmp_path / "forged.json"
    assert main(["certify", "--samples", "60", "--margin", "50", "--out", str(cert), "--json"]) == 0
    monkeypatch.setattr(pipeline, "empirical_ball", real)
    doc = json.loads(cert.read_text())
    assert doc["result"]["empirical"] == "0" and doc["empirical_source"]["errors01"] == 0
    return cert


def test_a_consistent_forgery_of_the_empirical_term_is_never_plain_valid(capsys, tmp_path, monkeypatch):
    cert = _forged_empirical_certificate(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main(["verify", str(cert)]) == 1  # recomputed: caught
    assert capsys.readouterr().out.startswith("INVALID")
    code = main(["verify", str(cert), "--trust-empirical"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert code == 3, out  # not 0: what was not checked has its own status
    assert lines[0].startswith("VALID EXCEPT EMPIRICAL TERM (not recomputed)") and "not recomputed: empirical term" in lines[0]
    assert not any(line.startswith("VALID (") for line in lines)
    assert "empirical term: certified" not in out  # the scope line says what verify did not do
    assert "empirical term: taken from the certificate, NOT recomputed" in out
    assert "certified bound" not in lines[2]  # the headline is conditional, not "certified"
    assert main(["verify", str(cert), "--trust-empirical", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "VALID EXCEPT EMPIRICAL TERM (not recomputed)" and doc["valid"] is False
    assert doc["not_recomputed"][0] == "empirical term"  # (and the Occam route's count, when in force)
    assert set(doc["not_recomputed"]) <= {"empirical term", "Occam count K^"}
    rep = verify(str(cert), recompute_empirical=False)
    assert not rep.valid and rep.status.startswith("VALID EXCEPT") and rep.exit_status == 3


def test_trusting_a_user_supplied_empirical_term_skips_nothing(tmp_path):
    # the user's number is never recomputed anyway (it is flagged NOT certified): plain VALID stays
    cert = tmp_path / "user.json"
    assert main(["certify", "--n", "5000", "--empirical-loss", "0.01", "--margin", "2", "--out", str(cert),
                 "--json"]) == 0
    rep = verify(str(cert), recompute_empirical=False)
    assert rep.valid and rep.status == "VALID" and rep.exit_status == 0

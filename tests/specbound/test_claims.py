"""What a certificate claims, and ``verify`` refusing every claim that is not proven.

Each test forges one field of a genuine certificate of the embedded default (the forgeries an
adversarial run found accepted by the first version) and asserts that ``verify`` rejects it: as
INVALID naming the field, or -- for values outside any sane range -- as one CertificateError line
before any arithmetic.  The genuine certificate verifies VALID, so every rejection is caused by the
forgery alone.
"""

from __future__ import annotations

import copy
import json
import time
from fractions import Fraction

import pytest

from specbound.certified.certificate import CertificateError, to_json
from specbound.cli import main
from specbound.derivation.theorem import proven_constants, unproven_overrides
from specbound.pipeline import certify
from specbound.plan import BoundSettings
from specbound.scope import NOT_PROVEN, scope_lines
from specbound.verification import verify

SAMPLES = 60


@pytest.fixture(scope="module")
def genuine():
    """A certificate of the embedded default with its empirical term certified on fresh samples."""
    return to_json(certify(samples=SAMPLES))


@pytest.fixture(scope="module")
def user_cert():
    """A certificate whose empirical term is a user-supplied number (NOT certified)."""
    return to_json(certify(n=1000, empirical=0.01))


def _forged(cert: dict, edit) -> dict:
    c = copy.deepcopy(cert)
    edit(c)
    return c


def _invalid(cert: dict, field: str, **kw) -> None:
    rep = verify(cert, recompute_empirical=kw.get("recompute", False))
    assert not rep.valid, "forgery accepted"
    paths = [p for p, _, _ in rep.mismatches]
    assert any(p.startswith(field) for p in paths), paths


# ------------------------------------------------------------------------------------------------
# the genuine certificate


def test_genuine_certificate_is_valid_and_carries_its_scope(genuine):
    rep = verify(genuine, recompute_empirical=True)
    assert rep.valid, rep.lines()
    assert rep.scope == genuine["scope"]
    text = "\n".join(rep.lines())
    assert "analysis model of <embedded default>" in text
    assert f"n = {SAMPLES} fresh i.i.d. samples" in text


def test_scope_block_says_what_the_number_is_for(genuine):
    s = genuine["scope"]
    assert s["n"] == SAMPLES and s["empirical_certified"] is True
    assert s["variant"] == "plain" and s["activation"].startswith("gelu")
    assert "which is the checkpoint's own network" in s["bound_for"]  # an analysis model: no stand-in
    assert s["proven"] is True and s["assumptions"] == []


def test_vacuous_is_said_in_json_and_certificate(genuine):
    upper = Fraction(genuine["result"]["bound_upper"])
    assert genuine["result"]["vacuous"] is (upper >= 1)
    if upper >= 1:
        assert "vacuous" in genuine["result"]["label"]


# ------------------------------------------------------------------------------------------------
# item 1: unproven constants


def test_unproven_overrides_are_those_below_the_proven_value():
    proven = proven_constants()
    assert proven["C_sm"] == 1
    assert unproven_overrides({"C_sm": 0.01, "L_phi": 0.5, "B_phi": 3}) == ("C_sm", "L_phi")
    assert unproven_overrides({"C_sm": 1}) == ()
    # exact comparison: the float just below the proven L_phi is below it
    below = float(proven["L_phi"]) * (1 - 2**-50)
    assert unproven_overrides({"L_phi": below}) == ("L_phi",)


@pytest.mark.parametrize("name,value", [("C_sm", 0.01), ("L_phi", 0.5), ("B_phi", 0.25)])
def test_verify_fails_on_an_override_below_its_proven_value(genuine, name, value):
    _invalid(_forged(genuine, lambda c: c["settings"]["overrides"].append([name, value])),
             f"settings.overrides.{name}")


def test_certify_marks_an_unproven_override_everywhere():
    result = certify(settings=BoundSettings(n=1000, empirical=0.01, overrides=(("C_sm", 0.01),)))
    cert = to_json(result)
    assert result.proven is False and cert["scope"]["proven"] is False
    assert NOT_PROVEN in cert["result"]["label"]
    assert any("C_sm" in a and NOT_PROVEN in a for a in cert["scope"]["assumptions"])
    assert any(NOT_PROVEN in line for line in scope_lines(cert["scope"]))
    rep = verify(cert)
    assert not rep.valid and any(p == "settings.overrides.C_sm" for p, _, _ in rep.mismatches)


def test_an_override_above_the_proven_value_is_proven_and_verifies():
    result = certify(settings=BoundSettings(n=1000, empirical=0.01, overrides=(("C_sm", 2.0),)))
    cert = to_json(result)
    assert result.proven is True
    assert any("C_sm = 2.0" in a for a in cert["scope"]["assumptions"])
    assert verify(cert).valid
    base = certify(n=1000, empirical=0.01)
    assert result.bound.bound.upper() >= base.bound.bound.upper()  # a larger constant: a larger bound


# ------------------------------------------------------------------------------------------------
# item 2: assumptions stated and carried


def test_fixed_readout_is_an_assumption_repeated_by_verify():
    cert = to_json(certify(n=1000, empirical=0.01, readout="fixed"))
    assert any("chosen independently of S" in a for a in cert["scope"]["assumptions"])
    rep = verify(cert)
    assert rep.valid, rep.lines()
    assert any("ASSUMPTION" in line and "independently of S" in line for line in rep.lines())


def test_user_empirical_loss_is_flagged_and_explained(user_cert):
    s = user_cert["scope"]
    assert s["empirical_certified"] is False
    assert any("ramp loss of the analysis model" in a and "rho~" in a for a in s["assumptions"])
    rep = verify(user_cert)
    assert rep.valid, rep.lines()
    assert any("NOT certified" in line for line in rep.lines())


def test_certify_help_says_what_the_empirical_loss_must_be(capsys):
    with pytest.raises(SystemExit):
        main(["certify", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "ANALYSIS MODEL" in out and "rho~" in out and "independently of S" in out


def test_certify_prints_the_scope_block_and_the_vacuous_word(capsys):
    assert main(["certify", "--n", "1000", "--empirical-loss", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "scope: a bound for the analysis model of <embedded default>" in out
    assert "S: the user's sample of n = 1000" in out
    assert "ASSUMPTION: the empirical term is a number supplied by the user" in out
    assert "vacuous (>= 1)" in out  # the default model's bound at n = 1000 is far above 1


# ------------------------------------------------------------------------------------------------
# forged fields that change the meaning


FORGERIES = {
    "architecture.num_heads": lambda c: c["architecture"].__setitem__("num_heads", 3),
    "architecture.activation": lambda c: c["architecture"].__setitem__("activation", "relu"),
    "checkpoint.layout": lambda c: c["checkpoint"].__setitem__("layout", "bert"),
    "matrices[0].shape": lambda c: c["matrices"][0].__setitem__("shape", [32, 31]),
    "matrices[0].r_max": lambda c: c["matrices"][0].__setitem__("r_max", c["matrices"][0]["r_max"] + 1),
    "settings.grid_m": lambda c: (c["settings"].__setitem__("grid_m", 1), c["plan"].__setitem__("m", 1),
                                  c["plan"].__setitem__("p_index", [0] * len(c["plan"]["p_index"]))),
    "settings.bases.beta_s": lambda c: c["settings"]["bases"].__setitem__("beta_s", "1000"),
    "settings.bases.beta_c": lambda c: c["settings"]["bases"].__setitem__("beta_c", "1000"),
    "settings.massart": lambda c: c["settings"].__setitem__("massart", "optimistic"),
    "empirical_source.certified": lambda c: c["empirical_source"].__setitem__("certified", False),
    "empirical_source.detail.task": lambda c: c["empirical_source"]["detail"]["task"].__setitem__(
        "positions", [1]),
    "scope.dropped": lambda c: c["scope"].__setitem__("dropped", ["nothing"]),
    "scope.variant": lambda c: c["scope"].__setitem__("variant", "residual"),
    "result.vacuous": lambda c: c["result"].__setitem__("vacuous", not c["result"]["vacuous"]),
    "result.label": lambda c: c["result"].__setitem__("label", "certified bound"),
    "result.bound_upper": lambda c: c["result"].__setitem__("bound_upper", "0.5"),
    "result.bound": lambda c: c["result"].__setitem__("bound", "[0.5 +/- 0.01]"),
}


@pytest.mark.parametrize("field", sorted(FORGERIES))
def test_verify_rejects_a_forged_field(genuine, field):
    _invalid(_forged(genuine, FORGERIES[field]), field)


def test_verify_rejects_a_missing_scope(genuine):
    _invalid(_forged(genuine, lambda c: c.pop("scope")), "scope")


def test_verify_rejects_a_forged_error_count(genuine):
    _invalid(_forged(genuine, lambda c: c["empirical_source"].__setitem__("errors01", 7)),
             "empirical_source.errors01", recompute=True)


def test_verify_rejects_certified_true_on_a_user_number(user_cert):
    _invalid(_forged(user_cert, lambda c: c["empirical_source"].__setitem__("certified", True)),
             "empirical_source.certified")


@pytest.mark.parametrize("text", ["nan", "[nan +/- 0]", "[0 +/- inf]", "[3 +/- 2]", "[3.43 +/- 0.01]"])
def test_balls_are_compared_by_containment_not_overlap(genuine, text):
    _invalid(_forged(genuine, lambda c: c["balls"].__setitem__("SS", text)), "balls.SS")


# ------------------------------------------------------------------------------------------------
# values outside any sane range: one line, before any arithmetic


RANGE_FORGERIES = {
    "k_c = 10**12": lambda c: c["matrices"][0].__setitem__("k_c", 10**12),
    "k_rho = 10**9": lambda c: c["plan"].__setitem__("k_rho", 10**9),
    "k_w = -10**9": lambda c: c["choices"].__setitem__("k_w", -10**9),
    "user loss -100": lambda c: c["settings"].__setitem__("empirical", -100.0),
    "user loss -1e300": lambda c: c["empirical_source"]["detail"].__setitem__("value", -1e300),
    "n = 10**30": lambda c: c["settings"].__setitem__("n", 10**30),
    "grid m = 10**9": lambda c: c["settings"].__setitem__("grid_m", 10**9),
    "p = 5": lambda c: c["matrices"][0].__setitem__("p", "5"),
    "alpha_D = 2": lambda c: c["plan"].__setitem__("alpha_D", 2.0),
    "base 1": lambda c: c["settings"]["bases"].__setitem__("beta_w", "1"),
    "list for object": lambda c: c.__setitem__("plan", [1, 2]),
    "string for int": lambda c: c["matrices"][0].__setitem__("k_c", "3"),
}


@pytest.mark.parametrize("name", sorted(RANGE_FORGERIES))
def test_out_of_range_fields_are_refused_at_once(user_cert, name):
    start = time.perf_counter()
    with pytest.raises(CertificateError):
        verify(_forged(user_cert, RANGE_FORGERIES[name]))
    assert time.perf_counter() - start < 60  # never the runaway arithmetic of the first version


def test_task_records_of_absurd_size_are_refused(genuine):
    forged = _forged(genuine, lambda c: c["empirical_source"]["detail"]["task"].__setitem__("seq_len", 10**9))
    with pytest.raises(CertificateError):
        verify(forged)


BAD_FILES = {
    "deep nesting": "[" * 100000 + "]" * 100000,
    "NaN": '{"format": "specbound-certificate-v1", "x": NaN}',
    "1/0": '{"format": "specbound-certificate-v1", "x": 1/0}',
    "5000-digit integer": '{"format": "specbound-certificate-v1", "x": ' + "7" * 5000 + "}",
    "missing keys": '{"format": "specbound-certificate-v1"}',
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_malformed_files_end_in_one_line_and_exit_2(tmp_path, capsys, name):
    path = tmp_path / "cert.json"
    path.write_text(BAD_FILES[name])
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specbound: error:"), err


def test_binary_file_ends_in_one_line(tmp_path, capsys):
    path = tmp_path / "cert.json"
    path.write_bytes(bytes(range(256)) * 10)
    assert main(["verify", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_file_named_like_json_is_read_as_a_file(tmp_path, monkeypatch, user_cert):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "{brace}.json").write_text(json.dumps(user_cert))
    assert verify("{brace}.json").valid

"""One typed result per job and one verdict per result, read by every output (specbound/certification.py).

The embedded default model keeps these fast: a user-supplied empirical term (no forward passes) and
a copy of its weights without a task record (no empirical term at all: a partial result).
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from fractions import Fraction

import pytest

import specbound
from specbound.certification import Certification
from specbound.cli import main
from specbound.errors import SpecboundError
from specbound.plan import BoundSettings

IDENTITY = ["name", "layer", "head", "kind", "rows", "cols"]

USER = dict(n=10**12, empirical=0.0, margin=2.0)
"""A user-supplied empirical term at a sample size that makes the bound non-vacuous."""


@pytest.fixture(scope="module")
def user() -> Certification:
    return specbound.certify(**USER)


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """(result, checkpoint): the default weights without their task record, so no empirical term."""
    from specbound.data import default_checkpoint_path

    ck = tmp_path_factory.mktemp("partial") / "model.safetensors"
    shutil.copy(default_checkpoint_path(), ck)
    return specbound.certify(str(ck), n=1000, margin=1.0), ck


def test_the_api_and_the_pipeline_return_one_type(user):
    from specbound.pipeline import certify

    assert type(user) is Certification is specbound.Certification
    assert type(certify(**USER)) is Certification


@pytest.mark.parametrize("cls", ["Certification", "SpectraResult", "ProxiesResult"])
def test_result_fields_are_typed(cls):
    annotations = getattr(specbound, cls).__annotations__
    loose = {k: v for k, v in annotations.items() if v in ("object", "Any", "typing.Any") or v is object}
    assert annotations and not loose, f"{cls} fields typed loosely: {loose}"


def test_the_certificate_writes_the_verdict_as_computed(user):
    cert, v = user.to_dict(), user.verdict
    r, s = cert["result"], cert["scope"]
    assert (r["is_bound"], r["proven"], r["vacuous"], r["label"]) == (v.is_bound, v.proven, v.vacuous, v.label)
    assert (s["is_bound"], s["proven"], s["vacuous"]) == (v.is_bound, v.proven, v.vacuous)
    assert (user.proven, user.vacuous) == (v.proven, v.vacuous)


def test_a_user_supplied_empirical_term_is_never_called_certified(user, capsys):
    v = user.verdict
    assert v.is_bound and v.vacuous is False and v.empirical_certified is False
    assert v.label == "bound (empirical term user-supplied, NOT certified)"
    assert main(["certify", "--n", str(USER["n"]), "--empirical-loss", "0", "--margin", "2"]) == 0
    out = capsys.readouterr().out
    headline = [line for line in out.splitlines() if "bound on the 0-1 risk" in line]
    assert headline == [v.headline] * 2  # the first line and, again, the last
    assert headline[0].startswith("bound on the 0-1 risk (empirical term user-supplied, NOT certified): ")


def test_verify_prints_what_was_verified(user):
    rep = specbound.verify(user.to_dict())
    lines = rep.lines()
    assert rep.valid and rep.verdict == user.verdict
    assert lines[0] == f"VALID ({rep.checked} checks); verdict: {user.verdict.label}"
    assert lines[1] == f"  {user.verdict.headline}"
    assert lines[2].startswith("  for the analysis model of <embedded default> (sha256 ")
    assert "S: the user's sample of n = 1000000000000" in lines[2] and "ASSUMPTION" in lines[2]


def test_a_partial_result_at_or_above_one_is_vacuous_and_verifies(partial, tmp_path, capsys):
    result, ck = partial
    v = result.verdict
    assert not v.is_bound and v.vacuous is True and Decimal(result.to_dict()["result"]["partial_upper"]) >= 1
    assert v.label == "NOT A BOUND (no empirical term); vacuous (>= 1)"
    cert = tmp_path / "cert.json"
    cert.write_text(json.dumps(result.to_dict()))
    assert main(["verify", str(cert), str(ck)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"; verdict: {v.label}")
    assert lines[1] == f"  {v.headline}"
    assert lines[1].startswith("  certified complexity + confidence (NOT a bound: no empirical term): ")


def test_settings_or_loose_keywords_never_both():
    from specbound.pipeline import certify

    for run in (specbound.certify, certify):
        with pytest.raises(SpecboundError) as ei:
            run(settings=BoundSettings(n=1000, empirical=0.01), n=1000, delta=0.1)
        msg = str(ei.value)
        assert "\n" not in msg and "settings" in msg and "n, delta" in msg


def test_settings_and_loose_keywords_give_one_certificate():
    by_keywords = specbound.certify(n=10**6, empirical=0.01, margin=2.0, delta=0.1).to_dict()
    by_settings = specbound.certify(settings=BoundSettings(n=10**6, empirical=0.01, margin=2.0, delta=0.1)).to_dict()
    assert json.dumps(by_keywords) == json.dumps(by_settings)


def test_the_certify_frame_starts_with_the_identity_and_keeps_the_exact_balls(user):
    cert = user.to_dict()
    rows = user.rows()
    assert len(rows) == len(cert["matrices"])
    for row, rec in zip(rows, cert["matrices"]):
        assert list(row)[:6] == IDENTITY
        assert (row["layer"], row["head"], row["kind"], [row["rows"], row["cols"]]) == (
            rec["layer"], rec["head"], rec["type"], rec["shape"])
        assert row["spectral_norm"] == rec["spectral_norm"] and row["contribution"] == rec["contribution"]
        assert "type" not in row and "shape" not in row


def test_every_frame_starts_with_the_same_identity_columns(user):
    spectra = specbound.spectra(None)
    frames = {"certify": user.rows(), "spectra": spectra.rows()}
    names = [r["name"] for r in frames["certify"]]
    for job, rows in frames.items():
        assert all(list(r)[:6] == IDENTITY for r in rows), job
        assert [r["name"] for r in rows] == names, job
    assert spectra.to_dict()["matrices"] == spectra.rows()


def test_the_cross_check_rides_on_the_result():
    result = specbound.certify(n=5000, empirical=0.01, margin=2.0, cross_check=True)
    assert result.cross_check["ok"] is True and result.to_dict()["cross_check"] == result.cross_check


# --------------------------------------------------------------------------- results as numbers


def _printed_upper(text: str) -> Fraction:
    body = text.strip("[]")
    mid, _, rad = body.partition("+/-")
    return Fraction(Decimal(mid.strip())) + Fraction(Decimal(rad.strip() or "0"))


def test_the_headline_numbers_are_plain_attributes(user, partial):
    cert = user.to_dict()["result"]
    assert type(user.bound_upper) is float and user.bound_upper == cert["bound_upper"]
    assert Fraction(user.bound_upper) >= _printed_upper(cert["bound"])
    assert (user.label, user.is_bound, user.vacuous) == (user.verdict.label, True, False)
    result, _ = partial
    assert result.bound_upper is None and result.partial_upper >= 1 and result.vacuous is True
    assert result.label == "NOT A BOUND (no empirical term); vacuous (>= 1)"


def test_the_repr_shows_the_bound_and_its_label(user, partial):
    text = repr(user)
    assert text.startswith(f"Certification(bound_upper={user.bound_upper!r} [{user.label}]")
    assert len(text) < 300
    assert f"partial_upper={partial[0].partial_upper!r} [NOT A BOUND" in repr(partial[0])


def test_the_summary_is_one_plain_row_of_the_headline_numbers(user, partial):
    row = user.summary()
    assert all(v is None or type(v) in (str, int, float, bool) for v in row.values()), row
    cert = user.to_dict()["result"]
    for key in ("bound", "complexity", "confidence", "partial"):
        assert row[f"{key}_upper"] == cert[f"{key}_upper"], key
    assert (row["label"], row["n"], row["num_matrices"]) == (user.label, USER["n"], len(user.bound.matrices))
    assert partial[0].summary()["bound_upper"] is None
    pytest.importorskip("pandas")
    frame = user.summary_frame()
    assert frame.shape == (1, len(row)) and frame.loc[0, "bound_upper"] == user.bound_upper


def test_every_ball_column_of_the_frame_has_float_endpoints(user):
    pytest.importorskip("pandas")
    frame = user.to_dataframe()
    balls = [c for c in frame.columns if isinstance(frame.loc[0, c], str) and frame.loc[0, c][:1] in "[0123456789"
             and f"{c}_upper" in frame.columns]
    assert {"spectral_norm", "contribution", "lambda"} <= set(balls)
    for c in balls:
        assert frame[f"{c}_upper"].dtype == "float64" and frame[f"{c}_lower"].dtype == "float64", c
        for text, up, lo in zip(frame[c], frame[f"{c}_upper"], frame[f"{c}_lower"]):
            assert Fraction(up) >= _printed_upper(text) and lo <= up

"""The Python API: same numbers as the commands, on files and on weights in memory."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import specbound
from specbound.errors import SpecboundError
from .test_adapters import H, bert_tensors
from .test_formats_state_dict import file_version


def test_import_is_light():
    code = ("import sys, specbound; assert specbound.__version__; "
            "print(sorted(m for m in ('torch', 'numpy', 'specbound.api') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_exports_and_py_typed():
    for name in ("certify", "verify", "spectra", "proxies", "inspect", "theorem", "load_weights", "SpecboundError"):
        assert name in specbound.__all__ and callable(getattr(specbound, name))
    from importlib.resources import files

    assert files("specbound").joinpath("py.typed").is_file()
    with pytest.raises(AttributeError):
        specbound.no_such_thing  # noqa: B018


def test_spectra_and_proxies_match_the_commands(tmp_path):
    folder = file_version(tmp_path, bert_tensors(21))
    for job in ("spectra", "proxies"):
        out = subprocess.run([sys.executable, "-m", "specbound", job, str(folder), "--json"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert getattr(specbound, job)(folder).to_dict() == json.loads(out.stdout)


def test_in_memory_equals_file(tmp_path):
    tensors = bert_tensors(22)
    folder = file_version(tmp_path, tensors)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    a, b = specbound.spectra(state, num_heads=H), specbound.spectra(folder)
    assert a.checkpoint == "<in-memory state dict>"
    assert a.to_dict()["matrices"] == b.to_dict()["matrices"]
    pa, pb = specbound.proxies(state, num_heads=H), specbound.proxies(folder)
    assert (pa.ours, pa.edelman) == (pb.ours, pb.edelman)
    assert pa.to_dict()["matrices"] == pb.to_dict()["matrices"]
    ca, cb = specbound.certify(state, n=1000, num_heads=H), specbound.certify(folder, n=1000)
    da, db = ca.to_dict(), cb.to_dict()
    assert da["checkpoint"]["path"] == "<in-memory state dict>"
    assert da["matrices"] == db["matrices"] and da["result"] == db["result"]
    w = specbound.load_weights(state, num_heads=H)
    np.testing.assert_array_equal(w.matrices[0].left, specbound.load_weights(folder).matrices[0].left)


def test_dataframes(tmp_path):
    pytest.importorskip("pandas")
    folder = file_version(tmp_path, bert_tensors(23))
    s = specbound.spectra(folder)
    df = s.to_dataframe()
    assert len(df) == len(s.summaries) and "spectral" in df.columns
    assert list(df["spectral"]) == [r["spectral"] for r in s.to_dict()["matrices"]]
    p = specbound.proxies(folder).to_dataframe()
    assert "contribution" in p.columns
    c = specbound.certify(folder, n=1000).to_dataframe()
    assert "spectral_norm" in c.columns and len(c) == len(s.summaries)
    # one schema: the same identity columns first, the same matrices in the same order
    identity = ["name", "layer", "head", "kind", "rows", "cols"]
    for frame in (df, p, c):
        assert list(frame.columns[:6]) == identity and "type" not in frame.columns
        assert frame[identity].equals(df[identity])


def test_dataframe_without_pandas_is_one_line(tmp_path, monkeypatch):
    folder = file_version(tmp_path, bert_tensors(24))
    result = specbound.spectra(folder)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(SpecboundError) as ei:
        result.to_dataframe()
    assert "specbound[pandas]" in str(ei.value) and "\n" not in str(ei.value)


def test_bad_input_is_one_line():
    with pytest.raises(SpecboundError) as ei:
        specbound.spectra({"w": torch.empty(2, device="meta")})
    assert "meta device" in str(ei.value)
    with pytest.raises(SpecboundError):
        specbound.spectra(None, dtype="float16")


def test_the_spectra_document_names_the_view_asked_for():
    # the adapters do not all record the view; the result carries the one asked for
    for view in ("analysis", "scores", "proxy"):
        assert specbound.spectra(None, view=view).to_dict()["view"] == view


# --------------------------------------------------------------------------- the API speaks Python


def test_a_missing_sample_size_is_asked_for_by_its_keyword(tmp_path):
    folder = file_version(tmp_path, bert_tensors(25))
    with pytest.raises(SpecboundError) as ei:
        specbound.certify(folder)
    msg = str(ei.value)
    assert "n= (--n on the command line)" in msg and "\n" not in msg and not msg.startswith("--")


def test_data_may_be_a_mapping_of_arrays_and_gives_the_same_certificate(tmp_path):
    from specbound.empirical import task_record, task_sample

    sample = task_sample(task_record(specbound.load_weights(None), None), 12, 4)
    path = tmp_path / "s.npz"
    np.savez(path, labels=sample.labels, tokens=sample.tokens)
    by_file = specbound.certify(None, data=str(path))
    by_mapping = specbound.certify(None, data={"labels": sample.labels.tolist(), "tokens": torch.from_numpy(sample.tokens)})
    by_dataset = specbound.certify(None, data=specbound.DataSet(labels=sample.labels, tokens=sample.tokens))
    assert by_mapping.bound_upper == by_file.bound_upper == by_dataset.bound_upper
    assert by_mapping.source.detail["path"] == "<mapping>"


@pytest.mark.parametrize("data,words", [
    ({"inputs": np.zeros((2, 3, 4))}, "needs 'labels'"),
    ({"labels": [1, -1], "tokens": [[1, 2], [3, 4]], "extra": 1}, "'extra'"),
    ({"labels": [1, -1], "tokens": [[1, 2], [3]]}, "'tokens'"),
    ({"labels": [1, 0], "tokens": [[1, 2], [3, 4]]}, "'labels'"),
    ({"labels": [1, -1]}, "neither 'tokens' nor 'inputs'"),
    (5, "data must be a .npz path, a DataSet or a mapping"),
])
def test_bad_data_is_one_clear_error(data, words):
    with pytest.raises(SpecboundError) as ei:
        specbound.certify(None, data=data)
    assert words in str(ei.value) and "\n" not in str(ei.value)


def test_dataset_is_exported():
    assert "DataSet" in specbound.__all__ and specbound.DataSet.__module__ == "specbound.dataset"


# Functions that parse the command line itself: their messages may name flags alone.
CLI_ONLY = {"engine_options", "add_engine_arguments"}


def _raised_texts(path):
    """(function, text) of every string a ``raise`` in ``path`` builds (f-string parts joined)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name in CLI_ONLY:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Raise) and node.exc is not None:
                parts = [c.value for c in ast.walk(node.exc) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                out.append((fn.name, "".join(parts)))
    return out


def test_no_message_reachable_from_the_api_names_a_flag_alone():
    # every module but the command layer is the API's code too: a flag needs its Python spelling
    import re
    from pathlib import Path

    from specbound import certified, derivation, numeric

    roots = [Path(m.__file__).resolve().parent for m in (specbound, certified, derivation, numeric)]
    files = {p for root in roots for p in root.rglob("*.py") if "commands" not in p.parts and p.name != "cli.py"}
    assert len(files) > 60
    offenders = []
    for path in sorted(files):
        for fn, text in _raised_texts(path):
            if re.search(r"(^|[\s(])--[a-z]", text) and "on the command line" not in text and "in Python" not in text:
                offenders.append(f"{path.name}:{fn}: {text[:90]}")
    assert not offenders, offenders

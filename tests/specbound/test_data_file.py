"""Data files for the empirical margin loss (specbound/data_file.py).

Specification: a valid .npz gives exactly its arrays back (ids int64, labels int8, rows float64,
values unchanged); every malformed file raises DataFileError with one line naming the file.
"""

from __future__ import annotations

import numpy as np
import pytest

from specbound.data_file import DataFileError, dataset_from_arrays, load_data
from specbound.errors import SpecboundError


def save(tmp_path, name="data.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_token_file_round_trips_exactly(tmp_path):
    tokens = np.array([[0, 1, 2], [0, 2, 2]], dtype=np.int32)
    path = save(tmp_path, tokens=tokens, labels=np.array([1.0, -1.0]))
    data = load_data(path)
    assert data.tokens.dtype == np.int64 and np.array_equal(data.tokens, tokens)
    assert data.labels.tolist() == [1, -1] and data.inputs is None
    assert (data.n, data.seq_len, data.source) == (2, 3, str(path))


def test_input_file_keeps_every_value(tmp_path):
    rows = np.array([[[0.1, 1e-310], [3.0, -2.5]]], dtype=np.float64)
    data = load_data(save(tmp_path, inputs=rows, labels=np.array([-1])))
    assert data.inputs.dtype == np.float64 and np.array_equal(data.inputs, rows)
    half = load_data(save(tmp_path, "h.npz", inputs=rows.astype(np.float32), labels=np.array([1])))
    assert np.array_equal(half.inputs, rows.astype(np.float32).astype(np.float64))


BAD = {
    "missing labels": (dict(tokens=np.zeros((2, 3), dtype=np.int64)), "missing array 'labels'"),
    "neither rows": (dict(labels=np.array([1, -1])), "neither 'tokens' nor 'inputs'"),
    "both rows": (
        dict(labels=np.array([1]), tokens=np.zeros((1, 2), dtype=np.int64), inputs=np.zeros((1, 2, 3))),
        "both 'tokens' and 'inputs'",
    ),
    "empty": (dict(labels=np.zeros(0), tokens=np.zeros((0, 3), dtype=np.int64)), r"n = 0"),
    "labels mixed": (dict(labels=np.array([1, -1, 2]), tokens=np.zeros((3, 3), dtype=np.int64)), "-1 or \\+1"),
    "labels 1/2": (dict(labels=np.array([1.0, 0.5]), tokens=np.zeros((2, 3), dtype=np.int64)), "integers"),
    "labels nan": (dict(labels=np.array([1.0, np.nan]), tokens=np.zeros((2, 3), dtype=np.int64)), "NaN/Inf"),
    "labels 2-D": (dict(labels=np.ones((2, 1)), tokens=np.zeros((2, 3), dtype=np.int64)), r"shape \(n,\)"),
    "labels bool": (dict(labels=np.array([True]), tokens=np.zeros((1, 3), dtype=np.int64)), "numeric"),
    "float tokens": (dict(labels=np.array([1]), tokens=np.zeros((1, 3))), "integer ids"),
    "tokens 1-D": (dict(labels=np.array([1]), tokens=np.zeros(3, dtype=np.int64)), r"shape \(n, T\)"),
    "tokens rows": (dict(labels=np.array([1, 1]), tokens=np.zeros((3, 2), dtype=np.int64)), "3 rows"),
    "tokens T=0": (dict(labels=np.array([1]), tokens=np.zeros((1, 0), dtype=np.int64)), "length 0"),
    "negative id": (dict(labels=np.array([1]), tokens=np.array([[0, -1]])), "negative ids"),
    "inputs 2-D": (dict(labels=np.array([1]), inputs=np.zeros((1, 3))), r"shape \(n, T, N\)"),
    "inputs int": (dict(labels=np.array([1]), inputs=np.zeros((1, 2, 3), dtype=np.int64)), "float16/float32/float64"),
    "inputs inf": (dict(labels=np.array([1]), inputs=np.array([[[0.0, np.inf]]])), "1 NaN/Inf entry"),
    "inputs nan": (dict(labels=np.array([1]), inputs=np.full((1, 2, 2), np.nan)), "4 NaN/Inf entries"),
    "inputs rows": (dict(labels=np.array([1, -1]), inputs=np.zeros((1, 2, 3))), "1 rows"),
    "inputs N=0": (dict(labels=np.array([1]), inputs=np.zeros((1, 2, 0))), "empty axis"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_files_are_one_line_errors(tmp_path, case):
    arrays, message = BAD[case]
    path = save(tmp_path, **arrays)
    with pytest.raises(DataFileError, match=message) as info:
        load_data(path)
    text = str(info.value)
    assert "\n" not in text and str(path) in text
    assert isinstance(info.value, SpecboundError)


def test_unreadable_files_are_one_line_errors(tmp_path):
    cases = {
        "absent.npz": None,
        "garbage.npz": b"not a zip archive at all",
        "truncated.npz": None,
    }
    good = save(tmp_path, "good.npz", labels=np.array([1]), tokens=np.zeros((1, 2), dtype=np.int64))
    (tmp_path / "garbage.npz").write_bytes(cases["garbage.npz"])
    (tmp_path / "truncated.npz").write_bytes(good.read_bytes()[:40])
    np.save(tmp_path / "single.npy", np.zeros(3))
    objects = tmp_path / "objects.npz"
    np.savez(objects, labels=np.array([1, -1], dtype=object), tokens=np.zeros((2, 2), dtype=np.int64))
    for name in ("absent.npz", "garbage.npz", "truncated.npz", "single.npy", "objects.npz"):
        with pytest.raises(DataFileError) as info:
            load_data(tmp_path / name)
        assert "\n" not in str(info.value) and name in str(info.value)


def test_arrays_are_validated_like_files():
    with pytest.raises(DataFileError, match="'labels' must be -1 or \\+1 .binary. or all classes 0..k-1, found 3"):
        dataset_from_arrays(np.array([-1, 3]), tokens=np.zeros((2, 2), dtype=np.int64))


def test_class_labels_are_kept_as_int64_and_signs_as_int8():
    classes = dataset_from_arrays(np.array([0, 2, 1]), tokens=np.zeros((3, 2), dtype=np.int64))
    assert classes.labels.dtype == np.int64 and classes.labels.tolist() == [0, 2, 1]
    signs = dataset_from_arrays(np.array([1.0, -1.0]), tokens=np.zeros((2, 2), dtype=np.int64))
    assert signs.labels.dtype == np.int8 and signs.labels.tolist() == [1, -1]

"""Every form of the sample S (docs/formats.md) gives the same canonical sample and the same SHA-256,
and a malformed one -- above all a loader yielding the wrong shapes or dtypes -- is one line.

The expected digest is computed here from its definition (hashlib over names, dtypes, shapes and
little-endian bytes), not by the code under test.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from specbound.data_file import DataFileError, check_labels, data_sha256
from specbound.data_source import as_dataset
from specbound.sample_stream import SampleStream

RNG = np.random.default_rng(7)
IDS = RNG.integers(0, 9, (10, 4))
Y = RNG.choice([-1, 1], 10)


def digest_by_hand(arrays: dict[str, np.ndarray]) -> str:
    """The in-memory digest format of docs/formats.md, written from its description."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode() + b"\0" + str(a.dtype).encode() + b"\0")
        h.update(",".join(map(str, a.shape)).encode() + b"\0")
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


class Items(Dataset):
    def __len__(self):
        return len(Y)

    def __getitem__(self, i):
        return {"input_ids": torch.from_numpy(IDS[i]), "label": int(Y[i])}


class Stream(IterableDataset):
    def __iter__(self):
        for x, y in zip(IDS, Y):
            yield torch.from_numpy(x), torch.tensor(float(y))


FORMS = {
    "arrays": lambda p: (IDS, Y),
    "lists": lambda p: (IDS.tolist(), Y.tolist()),
    "tensors": lambda p: (torch.from_numpy(IDS).to(torch.int32), torch.from_numpy(Y).double()),
    "mapping": lambda p: {"tokens": IDS, "labels": Y},
    "npz": lambda p: str(p),
    "map-style Dataset of mappings": lambda p: Items(),
    "iterable Dataset": lambda p: Stream(),
    "DataLoader of uneven batches": lambda p: DataLoader(TensorDataset(torch.from_numpy(IDS), torch.from_numpy(Y)),
                                                         batch_size=3),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_form_gives_the_same_sample_and_the_digest_of_its_canonical_arrays(form, tmp_path):
    np.savez(tmp_path / "S.npz", tokens=IDS, labels=Y)
    data = as_dataset(FORMS[form](tmp_path / "S.npz"), block=4)
    if isinstance(data, SampleStream):  # a torch Dataset / DataLoader: read in blocks, never whole
        assert data.tokens is None and max(data.sizes) <= 4
        np.testing.assert_array_equal(data.materialize().tokens, IDS)
        data = data.materialize()
    np.testing.assert_array_equal(data.tokens, IDS)
    np.testing.assert_array_equal(data.labels, Y)
    assert data_sha256(data) == digest_by_hand({"labels": Y.astype(np.int64), "tokens": IDS.astype(np.int64)})


def test_embedded_rows_are_kept_exactly_and_bfloat16_widens_without_rounding():
    rows = torch.randn(6, 3, 5).to(torch.bfloat16)
    data = as_dataset((rows, torch.tensor([0, 1, 2, 0, 1, 2])))
    assert data.inputs.dtype == np.float64 and data.tokens is None
    np.testing.assert_array_equal(data.inputs, rows.to(torch.float64).numpy())
    assert data_sha256(data) == digest_by_hand({"labels": np.array([0, 1, 2, 0, 1, 2]),
                                                "inputs": rows.to(torch.float64).numpy()})


def test_the_order_of_the_sample_enters_its_digest():
    assert data_sha256(as_dataset((IDS, Y))) != data_sha256(as_dataset((IDS[::-1], Y[::-1])))


class Varying(Dataset):
    """Items whose shape or dtype changes at index 5 (a second batch of a loader of batch size 5)."""

    def __init__(self, change):
        self.change = change

    def __len__(self):
        return 10

    def __getitem__(self, i):
        x = torch.zeros(4, dtype=torch.long)
        return (self.change(x) if i >= 5 else x), 1


@pytest.mark.parametrize("data,words", [
    (DataLoader(Varying(lambda x: torch.zeros(5, dtype=torch.long)), batch_size=5),
     "batch 1: tokens of shape (5,) per example, the batches before it (4,)"),
    (DataLoader(Varying(lambda x: x.double()), batch_size=5), "batch 1: holds inputs (dtype float64) but the batches before it hold tokens"),
    (DataLoader(Varying(lambda x: x.bool()), batch_size=5), "x must hold integer token ids or float rows, got dtype bool"),
    (DataLoader(Varying(lambda x: x[None]), batch_size=5), "batch 1: 'tokens' must have shape (n, T)"),
    (DataLoader(Varying(lambda x: x - 1), batch_size=5), "batch 1: 'tokens' has negative ids"),
    (DataLoader(TensorDataset(torch.from_numpy(IDS), torch.from_numpy(Y)), shuffle=True), "shuffles"),
    (DataLoader(TensorDataset(torch.from_numpy(IDS)), batch_size=4), "expected a pair (x, labels)"),
    ([], "data must be a .npz path, a DataSet or a mapping"),
    ((IDS, Y[:-1]), "'tokens' has 10 rows but 'labels' has 9"),
    ({"input_ids": IDS, "attention_mask": IDS, "labels": Y}, "no key 'attention_mask'"),
    ({"tokens": IDS, "inputs": IDS * 1.0, "labels": Y}, "give exactly one"),
    ({"tokens": [[1, 2], [3]], "labels": [1, -1]}, "'tokens' is not an array"),
    ((IDS, np.where(Y > 0, 1, -2)), "must be -1 or +1"),
])
def test_a_malformed_sample_is_one_line_naming_what_is_wrong(data, words):
    with pytest.raises(DataFileError) as ei:
        as_dataset(data)
    assert words in str(ei.value) and "\n" not in str(ei.value)


class Counting(Dataset):
    """Fails the test if an item after the first bad batch is ever read."""

    def __len__(self):
        return 100

    def __getitem__(self, i):
        assert i < 10, "read past the bad batch"
        return torch.zeros(4 if i < 5 else 3, dtype=torch.long), 1


def test_a_loader_is_refused_at_its_bad_batch_before_the_rest_is_read():
    with pytest.raises(DataFileError, match="batch 1"):
        as_dataset(DataLoader(Counting(), batch_size=5))


@pytest.mark.parametrize("labels,k,ok", [
    ([1, -1, 1], 1, True), ([0, 1, 1], 1, False), ([0, 2, 1], 3, True), ([0, 3, 1], 3, False), ([1, -1, 1], 3, False),
])
def test_labels_are_checked_against_the_models_read_out_rows(labels, k, ok):
    data = as_dataset((IDS[:3], np.array(labels)))
    if ok:
        check_labels(data, k)
    else:
        with pytest.raises(DataFileError, match="'labels' must be"):
            check_labels(data, k)

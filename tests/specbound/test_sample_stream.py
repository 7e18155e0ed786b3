"""A torch Dataset or DataLoader is read as a SampleStream: in blocks, never held whole, and certified to
exactly the numbers of the same sample given as arrays (proofs_notes/sample_stream.md)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import specbound
from specbound.certified.ramp_loss import fast_pass
from specbound.checkpoint import load_weights
from specbound.data import default_checkpoint_path, toy_checkpoint_path
from specbound.data_file import data_sha256
from specbound.data_source import as_dataset
from specbound.dataset import DataSet
from specbound.empirical import task_record, task_sample
from specbound.errors import SpecboundError
from specbound.sample_stream import SampleStream

from .test_k_class_certify import task as k_task
from .test_k_class_certify import trained


def loader_of(tokens: np.ndarray, labels: np.ndarray, batch: int = 700) -> DataLoader:
    return DataLoader(TensorDataset(torch.from_numpy(tokens), torch.from_numpy(labels)), batch_size=batch)


def sample_of(path, n: int, seed: int) -> DataSet:
    return task_sample(task_record(load_weights(path), path), n, seed)


def same_certificate(a, b) -> None:
    """Every field equal but the sample's label (which names its form)."""
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        d["scope"].pop("sample")
        d["empirical_source"]["detail"].pop("path")
    assert da == db


@pytest.mark.parametrize("which", ["toy", "default"])
def test_a_loader_certifies_to_exactly_the_numbers_of_the_same_arrays(which):
    path = toy_checkpoint_path() if which == "toy" else default_checkpoint_path()
    s = sample_of(path, 9000, 5)
    stream = as_dataset(loader_of(s.tokens, s.labels.astype(np.int64)), block=4096)
    assert isinstance(stream, SampleStream) and stream.tokens is None and stream.sizes == (4096, 4096, 808)
    same_certificate(specbound.certify(path, data=(s.tokens, s.labels)), specbound.certify(path, data=stream))


@pytest.mark.parametrize("forward", ["interval", "arb"])
def test_a_three_class_loader_matches_its_arrays_through_every_pass(forward):
    tokens, labels = k_task(300, 3)
    model = trained(3, tokens, labels, steps=60)  # not fully trained: some margins straddle and are redone
    arrays = specbound.certify(model, data=(tokens, labels), forward=forward)
    streamed = specbound.certify(model, data=as_dataset(loader_of(tokens, labels, 7), block=64), forward=forward)
    same_certificate(arrays, streamed)
    assert specbound.verify(streamed.to_dict(), model, data=loader_of(tokens, labels, 50)).valid


def test_the_fast_pass_over_a_stream_is_the_pass_over_the_whole_sample_bit_for_bit():
    path = default_checkpoint_path()
    w = load_weights(path)
    s = sample_of(path, 3000, 11)
    whole = fast_pass(w, s)
    part = fast_pass(w, as_dataset(loader_of(s.tokens, s.labels.astype(np.int64)), block=500))
    assert part.method == whole.method
    for name in ("f", "lower", "upper"):
        a, b = getattr(whole, name), getattr(part, name)
        assert (a is None) == (b is None)
        if a is not None:
            assert np.array_equal(a, b, equal_nan=True)
    idx = np.array([2999, 4, 1500, 5])  # unsorted: refine answers in the order asked
    for x, y in zip(whole.refine(idx), part.refine(idx)):
        assert np.array_equal(x, y)


class Generated(IterableDataset):
    """n examples generated batch by batch from a seed: the sample exists nowhere whole."""

    def __init__(self, n: int, batch: int = 2000, seed: int = 0, fixed: bool = True):
        self.n, self.batch, self.seed, self.fixed = n, batch, seed, fixed

    def __iter__(self):
        rng = np.random.default_rng(self.seed if self.fixed else None)
        for a in range(0, self.n, self.batch):
            m = min(self.batch, self.n - a)
            tokens = rng.integers(0, 16, (m, 17))
            tokens[:, 0] = 0
            yield torch.from_numpy(tokens), torch.from_numpy(rng.choice([-1, 1], m))


def traced_peak(n: int) -> int:
    """Peak bytes numpy and Python allocate while a loader of n examples is read and passed."""
    weights = load_weights(toy_checkpoint_path())
    tracemalloc.start()
    try:
        stream = as_dataset(DataLoader(Generated(n), batch_size=None))
        fast = fast_pass(weights, stream)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert fast.f.shape == (n,) and stream.n == n
    return peak


def test_certifying_a_loader_holds_a_few_numbers_per_example_not_the_sample():
    small, large = 20_000, 120_000
    grown = traced_peak(large) - traced_peak(small)
    ids = (large - small) * 17 * 8  # what the extra examples' ids take as int64
    # per example: its label (8 bytes) and float output (8), once more while concatenated; not its 17 ids
    assert grown < ids / 3, (grown, ids)


def test_a_loader_that_yields_other_data_on_a_second_reading_is_refused_in_one_line():
    stream = as_dataset(DataLoader(Generated(5000, fixed=False), batch_size=None))
    with pytest.raises(SpecboundError) as ei:
        specbound.certify(toy_checkpoint_path(), data=stream)
    assert "changed between readings" in str(ei.value) and "\n" not in str(ei.value)


def test_take_reads_back_exactly_the_rows_asked_for():
    s = sample_of(toy_checkpoint_path(), 1000, 3)
    stream = as_dataset(loader_of(s.tokens, s.labels.astype(np.int64), 33), block=100)
    idx = np.array([0, 99, 100, 101, 517, 999])
    got = stream.take(idx)
    assert np.array_equal(got.tokens, s.tokens[idx]) and np.array_equal(got.labels, s.labels[idx])
    assert np.array_equal(stream.materialize().tokens, s.tokens)
    assert data_sha256(stream) == data_sha256(s)
    with pytest.raises(ValueError):
        stream.take(np.array([5, 5]))


def test_the_token_ids_per_position_are_exactly_those_of_the_sample():
    tokens = np.array([[0, 3, 1], [0, 2, 1], [0, 3, 5]])
    stream = as_dataset(loader_of(tokens, np.array([1, -1, 1]), 2), block=2)
    cols = stream.position_tokens()
    for t in range(3):
        assert set(cols[:, t].tolist()) == set(tokens[:, t].tolist())


def test_an_embedded_rows_loader_streams_too():
    rows = np.random.default_rng(0).normal(size=(40, 3, 8))
    labels = np.random.default_rng(1).choice([-1, 1], 40)
    stream = as_dataset(DataLoader(TensorDataset(torch.from_numpy(rows), torch.from_numpy(labels)), batch_size=9),
                        block=16)
    assert stream.kind == "inputs" and stream.shape == (3, 8)
    assert np.array_equal(stream.materialize().inputs, rows)
    assert data_sha256(stream) == data_sha256(as_dataset((rows, labels)))

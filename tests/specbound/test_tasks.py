"""Synthetic tasks: i.i.d. samples reproducible from a seed, labels from the stated boolean rule."""

from __future__ import annotations

import numpy as np
import pytest

from specbound.errors import SpecboundError
from specbound.tasks import (
    CLS, ENUMERABLE_LIMIT, TASKS, Task, get_task, sparse_majority, sparse_parity, symbol_majority,
    training_blocks, training_sample_of,
)


def brute_label(rule: str, positions, tokens_row, symbol_bits=(0, 1)) -> float:
    """The rule read off one token row by hand: bit = symbol_bits[token - 1] at each hidden index."""
    bits = [symbol_bits[int(tokens_row[p]) - 1] for p in positions]
    if rule == "majority":
        return 1.0 if sum(bits) > len(bits) / 2 else -1.0
    return 1.0 if sum(bits) % 2 == 0 else -1.0


@pytest.mark.parametrize("name", sorted(TASKS))
def test_sample_shapes_dtypes_and_token_ranges(name):
    task = get_task(name)
    tokens, labels = task.sample(500, np.random.default_rng(0))
    assert tokens.shape == (500, task.seq_len) and tokens.dtype == np.int64
    assert labels.shape == (500,) and labels.dtype == np.float64
    assert np.all(tokens[:, 0] == CLS)
    assert set(np.unique(tokens[:, 1:])) == set(range(1, task.vocab_size))
    assert set(np.unique(labels)) <= {-1.0, 1.0}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_labels_follow_the_rule_on_the_hidden_positions(name):
    task = get_task(name, seq_len=9, k=3, seed=4)
    tokens, labels = task.sample(300, np.random.default_rng(1))
    expected = [brute_label(task.rule, task.positions, row, task.symbol_bits) for row in tokens]
    np.testing.assert_array_equal(labels, expected)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_sampling_is_deterministic_per_seed(name):
    task = get_task(name)
    a = task.sample(200, np.random.default_rng(7))
    b = task.sample(200, np.random.default_rng(7))
    c = task.sample(200, np.random.default_rng(8))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("name", sorted(TASKS))
def test_labels_are_balanced_and_bits_uniform(name):
    # Both rules are balanced exactly (bit flip symmetry), so 20000 draws land within ~4 sd of 1/2.
    task = get_task(name)
    tokens, labels = task.sample(20_000, np.random.default_rng(3))
    assert abs(np.mean(labels > 0) - 0.5) < 0.015
    bits = np.array(task.symbol_bits)[tokens[:, 1:] - 1]
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.015)
    assert np.all(np.abs((tokens[:, 1:] == 1).mean(axis=0) - 1 / (task.vocab_size - 1)) < 0.015)


def test_parity_hides_every_single_bit():
    # The "harder" task: no hidden bit alone is correlated with the label (unlike majority).
    tokens, labels = sparse_parity(seq_len=9, k=3).sample(20_000, np.random.default_rng(5))
    bits = 2.0 * (tokens[:, 1:] - 1) - 1
    assert np.all(np.abs(bits.T @ labels / len(labels)) < 0.03)
    tokens, labels = sparse_majority(seq_len=9, k=3).sample(20_000, np.random.default_rng(5))
    corr = (2.0 * (tokens[:, 1:] - 1) - 1).T @ labels / len(labels)
    hidden = [p - 1 for p in sparse_majority(seq_len=9, k=3).positions]
    assert np.all(corr[hidden] > 0.4)  # each majority input has correlation 1/2


def test_hidden_positions_are_a_function_of_the_task_seed():
    a, b = sparse_majority(seed=0), sparse_majority(seed=0)
    assert a.positions == b.positions and len(set(a.positions)) == 3
    assert all(1 <= p < a.seq_len for p in a.positions)
    assert {sparse_majority(seed=s).positions for s in range(10)} != {a.positions}


def test_empty_sample_is_allowed():
    tokens, labels = sparse_majority().sample(0, np.random.default_rng(0))
    assert tokens.shape == (0, 17) and labels.shape == (0,)


@pytest.mark.parametrize("make", [
    lambda: sparse_majority(k=2),
    lambda: sparse_majority(seq_len=4, k=4),
    lambda: sparse_parity(k=0),
    lambda: get_task("copying"),
    lambda: Task("t", "xor", 5, (1, 2)),
    lambda: Task("t", "parity", 5, (0, 2)),
    lambda: sparse_parity().sample(-1, np.random.default_rng(0)),
])
def test_bad_task_arguments_raise(make):
    with pytest.raises(SpecboundError):
        make()


# ------------------------------------------------------------------ larger vocabulary, enumeration
def test_binary_sampling_is_unchanged_by_the_symbol_generalisation():
    # The stream of the shipped default: bits = integers(0, 2) then + 1 (hand formula, not the code).
    task = sparse_majority()
    tokens, _ = task.sample(50, np.random.default_rng(4))
    bits = np.random.default_rng(4).integers(0, 2, size=(50, 16), dtype=np.int64)
    np.testing.assert_array_equal(tokens[:, 1:], bits + 1)
    assert task.symbol_bits == (0, 1) and task.vocab_size == 3


def test_symbol_majority_has_half_of_its_symbols_carrying_bit_one():
    task = symbol_majority(symbols=16, seed=3)
    assert task.vocab_size == 17 and len(task.symbol_bits) == 16 and sum(task.symbol_bits) == 8
    assert task.positions == sparse_majority(seed=3).positions
    assert symbol_majority(symbols=16, seed=3) == task
    assert len({symbol_majority(seed=s).symbol_bits for s in range(6)}) > 1
    with pytest.raises(SpecboundError):
        symbol_majority(symbols=7)


def test_input_counts_and_which_tasks_are_enumerable():
    assert sparse_majority().input_count == 2 ** 16 and sparse_majority().enumerable
    assert sparse_parity().enumerable
    assert symbol_majority().input_count == 16 ** 16 == 2 ** 64
    assert not symbol_majority().enumerable
    assert ENUMERABLE_LIMIT == 2 ** 20
    assert not sparse_majority(seq_len=22).enumerable and sparse_majority(seq_len=21).enumerable
    with pytest.raises(SpecboundError, match="cannot be enumerated"):
        symbol_majority().all_inputs()


@pytest.mark.parametrize("task", [sparse_majority(seq_len=9, k=3, seed=1), sparse_parity(seq_len=7, k=3),
                                  symbol_majority(seq_len=5, k=3, symbols=4, seed=2)])
def test_all_inputs_lists_every_input_once_with_its_label(task):
    tokens, labels = task.all_inputs()
    m = task.vocab_size - 1
    assert len(tokens) == m ** (task.seq_len - 1) == task.input_count
    assert len({tuple(r) for r in tokens}) == len(tokens) and np.all(tokens[:, 0] == CLS)
    assert set(np.unique(tokens[:, 1:])) == set(range(1, m + 1))
    expected = [brute_label(task.rule, task.positions, row, task.symbol_bits) for row in tokens]
    np.testing.assert_array_equal(labels, expected)


def test_task_record_round_trip_and_old_records():
    task = symbol_majority(seed=5)
    assert Task.from_record(task.record()) == task
    old = {"name": "sparse_majority", "rule": "majority", "seq_len": 17, "positions": [1, 4, 11], "vocab_size": 3}
    assert Task.from_record(old) == Task("sparse_majority", "majority", 17, (1, 4, 11))
    with pytest.raises(SpecboundError):
        Task("x", "majority", 17, (1, 2, 3), vocab_size=4)  # 2 symbols need a vocabulary of 3


def test_training_sample_is_a_function_of_the_data_seed():
    task = symbol_majority()
    a, b = training_sample_of(task, 100, 7), training_sample_of(task, 100, 7)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], training_sample_of(task, 100, 8)[0])
    # the training stream is not the plain default_rng(seed) stream of fresh task samples
    assert not np.array_equal(a[0], task.sample(100, np.random.default_rng(7))[0])


@pytest.mark.parametrize("task", [symbol_majority(), sparse_majority(), sparse_parity(),
                                  symbol_majority(seq_len=8), sparse_parity(seq_len=6, k=3)],
                         ids=lambda t: f"{t.name}-T{t.seq_len}")
@pytest.mark.parametrize("n,block", [(10_000, 4096), (9_999, 4096), (777, 2), (5, 4096)])
def test_the_training_sample_generated_in_blocks_is_the_one_drawn_whole(task, n, block):
    whole = training_sample_of(task, n, 31)
    parts = list(training_blocks(task, n, 31, block))
    assert [len(p[1]) for p in parts] == [min(block, n - a) for a in range(0, n, block)]
    for i in range(2):
        assert np.array_equal(np.concatenate([p[i] for p in parts]), whole[i])


def test_training_blocks_must_be_even():
    with pytest.raises(ValueError):
        next(training_blocks(symbol_majority(), 10, 1, 3))

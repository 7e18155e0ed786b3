"""Synthetic sequence-classification tasks with unlimited i.i.d. samples.

Each task is a distribution over (token sequence, label) pairs in the spirit of Edelman, Goel,
Kakade & Zhang (2022), "sparse variable creation": a sequence of ``seq_len`` tokens whose first
token is CLS (id 0), followed by uniformly random bits (ids 1 and 2 for the bits 0 and 1); the
label in {-1, +1} is a sparse boolean function of the bits at a *hidden* set of positions that is
fixed by the task (not by the sample).

Contract of :meth:`Task.sample`: the rows are i.i.d. draws from the task distribution, and the
output is a deterministic function of the generator's state, so a seed reproduces the sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbound.errors import SpecboundError

CLS = 0
"""Token id of the classification token; token 1 (index 0) of every sequence."""

BIT_OFFSET = 1
"""A bit b in {0, 1} is the token id ``b + BIT_OFFSET``."""


@dataclass(frozen=True)
class Task:
    """A sparse boolean function of hidden bit positions, as a sequence-classification task.

    ``rule`` is ``"majority"`` (label +1 iff most hidden bits are 1; ``len(positions)`` odd) or
    ``"parity"`` (label +1 iff an even number of hidden bits are 1).  ``positions`` are token
    indices in ``1..seq_len-1`` (index 0 is CLS).
    """

    name: str
    rule: str
    seq_len: int
    positions: tuple[int, ...]
    vocab_size: int = 3

    def __post_init__(self) -> None:
        if self.rule not in ("majority", "parity"):
            raise SpecboundError(f"task {self.name}: unknown rule {self.rule!r}")
        if not self.positions or any(not 1 <= p < self.seq_len for p in self.positions):
            raise SpecboundError(f"task {self.name}: hidden positions must lie in 1..{self.seq_len - 1}")
        if self.rule == "majority" and len(self.positions) % 2 == 0:
            raise SpecboundError(f"task {self.name}: majority needs an odd number of hidden positions")

    def label(self, bits: np.ndarray) -> np.ndarray:
        """Labels in {-1., +1.} of bit rows (shape (n, seq_len - 1), bit j at token index j+1)."""
        hidden = bits[:, [p - 1 for p in self.positions]]
        ones = hidden.sum(axis=1)
        if self.rule == "majority":
            positive = 2 * ones > len(self.positions)
        else:
            positive = ones % 2 == 0
        return np.where(positive, 1.0, -1.0)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` i.i.d. examples: tokens int64 (n, seq_len) with CLS first, labels float64 (n,)."""
        if n < 0:
            raise SpecboundError(f"task {self.name}: sample size must be >= 0, got {n}")
        bits = rng.integers(0, 2, size=(n, self.seq_len - 1), dtype=np.int64)
        tokens = np.empty((n, self.seq_len), dtype=np.int64)
        tokens[:, 0] = CLS
        tokens[:, 1:] = bits + BIT_OFFSET
        return tokens, self.label(bits)


def sparse_majority(seq_len: int = 17, k: int = 3, seed: int = 0) -> Task:
    """Majority of ``k`` (odd) hidden bits among ``seq_len - 1``; positions drawn from ``seed``."""
    return Task("sparse_majority", "majority", seq_len, _hidden_positions(seq_len, k, seed))


def sparse_parity(seq_len: int = 17, k: int = 3, seed: int = 0) -> Task:
    """Parity of ``k`` hidden bits among ``seq_len - 1`` (the harder task: no single bit, nor any
    k-1 of them, is correlated with the label)."""
    return Task("sparse_parity", "parity", seq_len, _hidden_positions(seq_len, k, seed))


def _hidden_positions(seq_len: int, k: int, seed: int) -> tuple[int, ...]:
    if not 1 <= k <= seq_len - 1:
        raise SpecboundError(f"need 1 <= k <= seq_len - 1, got k={k}, seq_len={seq_len}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x7A5C]))
    return tuple(sorted(int(p) + 1 for p in rng.choice(seq_len - 1, size=k, replace=False)))


TASKS = {"sparse_majority": sparse_majority, "sparse_parity": sparse_parity}


def get_task(name: str, **kwargs) -> Task:
    """The task called ``name`` (a key of :data:`TASKS`), built with ``kwargs``."""
    if name not in TASKS:
        raise SpecboundError(f"unknown task {name!r} (known: {', '.join(sorted(TASKS))})")
    return TASKS[name](**kwargs)

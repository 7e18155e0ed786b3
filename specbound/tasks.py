"""Synthetic sequence-classification tasks with unlimited i.i.d. samples.

Each task is a distribution over (token sequence, label) pairs in the spirit of Edelman, Goel,
Kakade & Zhang (2022), "sparse variable creation": a sequence of ``seq_len`` tokens whose first
token is CLS (id 0), followed by ``seq_len - 1`` i.i.d. uniformly random *symbols* (symbol ``s`` is
the token id ``s + 1``); every symbol carries a hidden bit (``Task.symbol_bits``) and the label in
{-1, +1} is a sparse boolean function of the bits at a *hidden* set of positions that is fixed by the
task (not by the sample).

Two families:

* ``sparse_majority`` / ``sparse_parity``: two symbols, the symbol *is* the bit (vocabulary 3).  With
  the default 16 random positions the input space has only 2^16 = 65 536 points, so the exact
  risk of a model is computable by enumeration (:meth:`Task.all_inputs`) and a generalization
  bound adds nothing there.
* ``symbol_majority``: ``symbols`` symbols (default 16, vocabulary 17), half of them carrying bit 1
  (which half is hidden, drawn from the task seed); 16 random positions give 16^16 = 2^64 inputs,
  which cannot be enumerated: the risk is known only through samples, which is what a bound is for.

Contract of :meth:`Task.sample`: the rows are i.i.d. draws from the task distribution, and the
output is a deterministic function of the generator's state, so a seed reproduces the sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbound.errors import SpecboundError
from specbound.vocabulary import MAX_TASK_SAMPLES, MAX_TASK_TOKENS

CLS = 0
"""Token id of the classification token; token 1 (index 0) of every sequence."""

BIT_OFFSET = 1
"""Symbol s (a bit b for the binary tasks) is the token id ``s + BIT_OFFSET``."""

ENUMERABLE_LIMIT = 2 ** 20
"""Largest input space (number of distinct token sequences) :meth:`Task.all_inputs` enumerates."""


@dataclass(frozen=True)
class Task:
    """A sparse boolean function of hidden symbol positions, as a sequence-classification task.

    ``rule`` is ``"majority"`` (label +1 iff most hidden bits are 1; ``len(positions)`` odd) or
    ``"parity"`` (label +1 iff an even number of hidden bits are 1).  ``positions`` are token
    indices in ``1..seq_len-1`` (index 0 is CLS).  ``symbol_bits[s]`` in {0, 1} is the hidden bit
    of symbol ``s`` (token id ``s + 1``); ``vocab_size = 1 + len(symbol_bits)``.  Every symbol
    sequence is equally likely (uniform i.i.d. symbols), so the input distribution is uniform on
    ``len(symbol_bits) ** (seq_len - 1)`` sequences.
    """

    name: str
    rule: str
    seq_len: int
    positions: tuple[int, ...]
    vocab_size: int = 3
    symbol_bits: tuple[int, ...] = (0, 1)

    def __post_init__(self) -> None:
        if self.rule not in ("majority", "parity"):
            raise SpecboundError(f"task {self.name}: unknown rule {self.rule!r}")
        if not self.positions or any(not 1 <= p < self.seq_len for p in self.positions):
            raise SpecboundError(f"task {self.name}: hidden positions must lie in 1..{self.seq_len - 1}")
        if self.rule == "majority" and len(self.positions) % 2 == 0:
            raise SpecboundError(f"task {self.name}: majority needs an odd number of hidden positions")
        if len(self.symbol_bits) < 2 or any(b not in (0, 1) for b in self.symbol_bits):
            raise SpecboundError(f"task {self.name}: symbol_bits must be >= 2 bits in {{0, 1}}")
        if self.vocab_size != 1 + len(self.symbol_bits):
            raise SpecboundError(f"task {self.name}: vocab_size must be 1 + {len(self.symbol_bits)} symbols")

    @property
    def symbols(self) -> int:
        """Number of distinct symbols (token ids ``1..symbols``)."""
        return len(self.symbol_bits)

    @property
    def input_count(self) -> int:
        """Number of distinct inputs: ``symbols ** (seq_len - 1)`` (exact integer)."""
        return self.symbols ** (self.seq_len - 1)

    @property
    def enumerable(self) -> bool:
        """Whether the exact risk is computable by enumeration (``input_count <= ENUMERABLE_LIMIT``)."""
        return self.input_count <= ENUMERABLE_LIMIT

    def label(self, symbols: np.ndarray) -> np.ndarray:
        """Labels in {-1., +1.} of symbol rows (shape (n, seq_len - 1), symbol j at token index j+1)."""
        bits = np.asarray(self.symbol_bits, dtype=np.int64)
        hidden = bits[symbols[:, [p - 1 for p in self.positions]]]
        ones = hidden.sum(axis=1)
        if self.rule == "majority":
            positive = 2 * ones > len(self.positions)
        else:
            positive = ones % 2 == 0
        return np.where(positive, 1.0, -1.0)

    def _tokens(self, symbols: np.ndarray) -> np.ndarray:
        tokens = np.empty((symbols.shape[0], self.seq_len), dtype=np.int64)
        tokens[:, 0] = CLS
        tokens[:, 1:] = symbols + BIT_OFFSET
        return tokens

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` i.i.d. examples: tokens int64 (n, seq_len) with CLS first, labels float64 (n,).
        ``n`` within :func:`check_sample_size` (0 allowed), else a SpecboundError before allocating."""
        if n < 0:
            raise SpecboundError(f"task {self.name}: sample size must be >= 0, got {n}")
        if n:
            check_sample_size(n, self.seq_len, f"task {self.name}: sample size")
        symbols = rng.integers(0, self.symbols, size=(n, self.seq_len - 1), dtype=np.int64)
        return self._tokens(symbols), self.label(symbols)

    def all_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every input once (tokens, labels), in lexicographic order of the symbols; each has
        probability ``1 / input_count``, so the mean 0-1 loss over them is the exact risk.

        Raises SpecboundError when the task is not :attr:`enumerable`.
        """
        if not self.enumerable:
            raise SpecboundError(f"task {self.name}: {self.symbols}^{self.seq_len - 1} inputs cannot be "
                                 f"enumerated (limit {ENUMERABLE_LIMIT})")
        digits = np.indices((self.symbols,) * (self.seq_len - 1), dtype=np.int64)
        symbols = digits.reshape(self.seq_len - 1, -1).T
        return self._tokens(symbols), self.label(symbols)

    def record(self) -> dict:
        """JSON-able description from which :meth:`from_record` rebuilds the task."""
        return {"name": self.name, "rule": self.rule, "seq_len": self.seq_len,
                "positions": list(self.positions), "vocab_size": self.vocab_size,
                "symbol_bits": list(self.symbol_bits)}

    @classmethod
    def from_record(cls, record: dict) -> "Task":
        """The task of a :meth:`record` (records without ``symbol_bits`` are the binary tasks)."""
        bits = tuple(int(b) for b in record.get("symbol_bits", (0, 1)))
        return cls(name=str(record["name"]), rule=str(record["rule"]), seq_len=int(record["seq_len"]),
                   positions=tuple(int(p) for p in record["positions"]),
                   vocab_size=int(record.get("vocab_size", 1 + len(bits))), symbol_bits=bits)


TRAINING_STREAM = 0x5A3
"""Spawn key of the training-sample stream: S = ``task.sample(n, default_rng(SeedSequence([data_seed,
TRAINING_STREAM])))`` (fresh evaluation samples use other keys, so they are independent of S)."""


def check_sample_size(n, seq_len: int, what: str) -> int:
    """``n`` as an int after the limits every drawn sample obeys, fresh, training or test alike:
    1 <= n <= MAX_TASK_SAMPLES and n * seq_len <= MAX_TASK_TOKENS (a sample is n * seq_len int64
    tokens: 10^11 examples would ask for terabytes).  Checked before anything is allocated; a
    SpecboundError naming ``what`` otherwise (one line)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= int(n) <= MAX_TASK_SAMPLES:
        raise SpecboundError(f"{what} must be an integer in [1, {MAX_TASK_SAMPLES}], got {n!r}")
    n = int(n)
    if n * int(seq_len) > MAX_TASK_TOKENS:
        raise SpecboundError(f"{what}: {n} samples of length {seq_len} exceed {MAX_TASK_TOKENS} tokens")
    return n


def training_sample_of(task: Task, n: int, data_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The training sample S of ``n`` examples drawn from ``data_seed`` (a pure function of its
    arguments: a recorded seed regenerates exactly the examples a model was trained on)."""
    return task.sample(int(n), np.random.default_rng(np.random.SeedSequence([int(data_seed), TRAINING_STREAM])))


def training_blocks(task: Task, n: int, data_seed: int, block: int):
    """The training sample S of :func:`training_sample_of`, generated again as consecutive blocks of
    ``block`` examples (an even number): ``(tokens, labels)`` per block, never the whole sample at once.
    The same examples, bit for bit: a task draws its symbols with one ``rng.integers`` call per sample,
    and numpy's bounded integers of a range below 2^32 consume the generator in 32-bit halves of 64-bit
    words, so consecutive draws of ``block * (seq_len - 1)`` values (an even count) continue exactly where
    one draw of the whole would (tests/specbound/test_tasks.py compares them)."""
    if block <= 0 or block % 2:
        raise ValueError("block must be a positive even number")
    n = int(n)
    rng = np.random.default_rng(np.random.SeedSequence([int(data_seed), TRAINING_STREAM]))
    for a in range(0, n, block):
        yield task.sample(min(block, n - a), rng)


def sparse_majority(seq_len: int = 17, k: int = 3, seed: int = 0) -> Task:
    """Majority of ``k`` (odd) hidden bits among ``seq_len - 1``; positions drawn from ``seed``."""
    return Task("sparse_majority", "majority", seq_len, _hidden_positions(seq_len, k, seed))


def sparse_parity(seq_len: int = 17, k: int = 3, seed: int = 0) -> Task:
    """Parity of ``k`` hidden bits among ``seq_len - 1`` (the harder task: no single bit, nor any
    k-1 of them, is correlated with the label)."""
    return Task("sparse_parity", "parity", seq_len, _hidden_positions(seq_len, k, seed))


def symbol_majority(seq_len: int = 17, k: int = 3, seed: int = 0, symbols: int = 16) -> Task:
    """Majority of the hidden bits of the symbols at ``k`` (odd) hidden positions, with ``symbols``
    (even) symbols of which exactly half carry bit 1; positions and the bit assignment drawn from
    ``seed``.  Each hidden bit is a fair coin, so labels are balanced as for ``sparse_majority``."""
    if symbols < 2 or symbols % 2:
        raise SpecboundError(f"symbol_majority: symbols must be even and >= 2, got {symbols}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5B17]))
    bits = np.zeros(symbols, dtype=np.int64)
    bits[rng.permutation(symbols)[: symbols // 2]] = 1
    return Task("symbol_majority", "majority", seq_len, _hidden_positions(seq_len, k, seed),
                vocab_size=1 + symbols, symbol_bits=tuple(int(b) for b in bits))


def _hidden_positions(seq_len: int, k: int, seed: int) -> tuple[int, ...]:
    if not 1 <= k <= seq_len - 1:
        raise SpecboundError(f"need 1 <= k <= seq_len - 1, got k={k}, seq_len={seq_len}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x7A5C]))
    return tuple(sorted(int(p) + 1 for p in rng.choice(seq_len - 1, size=k, replace=False)))


TASKS = {"sparse_majority": sparse_majority, "sparse_parity": sparse_parity, "symbol_majority": symbol_majority}
BINARY_TASKS = ("sparse_majority", "sparse_parity")
"""The tasks whose symbols are the bits themselves (vocabulary 3)."""


def get_task(name: str, **kwargs) -> Task:
    """The task called ``name`` (a key of :data:`TASKS`), built with ``kwargs``."""
    if name not in TASKS:
        raise SpecboundError(f"unknown task {name!r} (known: {', '.join(sorted(TASKS))})")
    return TASKS[name](**kwargs)

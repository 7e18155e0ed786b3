"""The fast certified forward pass over a :class:`~specbound.sample_stream.SampleStream`, block by block.

Why this is the same pass as over the whole sample (proofs_notes/sample_stream.md): every enclosure the
fast passes produce for example i is a function of the network, the token table and example i alone
(batches only group independent rows of the same matrix products, each row's error terms are its own),
and the token table -- the one input that depends on the sample as a whole -- is built once from the
stream's (position, token) set, which is the set of the whole sample.  So the enclosures, and every
count and sum made from them, are those of the sample held at once; a test compares the two bit for bit.
"""

from __future__ import annotations

import numpy as np

from specbound.certified.fast_forward import NotApplicable, token_table
from specbound.certified.fast_pass import (
    STRADDLER_REFINE,
    FastPass,
    _embedding_of,
    _inputs_of,
    _interval_runner,
    held_fast_pass,
)
from specbound.dataset import DataSet
from specbound.matrices import AnalysisWeights
from specbound.sample_stream import SampleStream
from specbound.vocabulary import FORWARD_FAST


def _probe(stream: SampleStream) -> DataSet:
    """A small DataSet with the stream's row shape and, for token ids, every (position, token) pair that
    occurs in it (so the input checks on it are the checks on the whole sample)."""
    if stream.kind == "tokens":
        tokens = stream.position_tokens()
        return DataSet(labels=np.ones(tokens.shape[0], dtype=np.int8), tokens=tokens, source=stream.source)
    return DataSet(labels=np.ones(1, dtype=np.int8), inputs=np.zeros((1, *stream.shape)), source=stream.source)


def check_stream(stream: SampleStream, weights: AnalysisWeights, embedding=None) -> None:
    """The input checks of the Arb pass (ids in the vocabulary, T within the positional table, the width),
    on the stream's recorded ids and shape: LayoutError with one line."""
    _inputs_of(_probe(stream), weights, embedding)


def _table(weights: AnalysisWeights, stream: SampleStream, embedding) -> tuple | None:
    """The token table of the whole stream (None for embedded rows)."""
    if stream.kind != "tokens":
        return None
    E, P = _embedding_of(weights, embedding)
    E = np.asarray(E, dtype=np.float64)
    P = None if P is None else np.asarray(P, dtype=np.float64)
    return token_table(E, P, stream.position_tokens())


def stream_fast_pass(weights: AnalysisWeights, stream: SampleStream, embedding=None,
                     method: str = FORWARD_FAST) -> FastPass:
    """:func:`specbound.certified.fast_pass.held_fast_pass` over a stream: the same outputs and enclosures as
    over the whole sample (module docstring), with at most one block's rows in memory; ``refine(indices)``
    reads back only the rows it redoes.  NotApplicable as for the whole sample."""
    check_stream(stream, weights, embedding)
    table = _table(weights, stream, embedding)
    f, lower, upper = [], [], []
    epsilon = None
    kinds = set()
    cache: dict = {}  # the prepared passes, made on the first block and reused (same weights, table, T)
    for _, block in stream.blocks():
        part = held_fast_pass(weights, block, embedding, method, tokens_table=table, cache=cache)
        kinds.add(part.method)
        if part.epsilon is not None:
            if epsilon is not None and (part.epsilon.mid() != epsilon.mid() or part.epsilon.rad() != epsilon.rad()):
                raise AssertionError("the a-priori error differs between blocks of one table")  # cannot happen
            epsilon = part.epsilon
        f.append(part.f)
        if part.lower is not None:
            lower.append(part.lower)
            upper.append(part.upper)
        del part  # its refine closure holds the block's rows
    if len(kinds) != 1:
        raise AssertionError("blocks of one stream took different passes")  # the choice depends on the table only
    pair = None if table is None else (table[0], table[1])

    def refine(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indices, dtype=np.int64)
        order = np.argsort(idx, kind="stable")
        rows = stream.take(idx[order])
        lo, hi = _interval_runner(weights, rows, embedding, pair, lazy=True, refine=STRADDLER_REFINE, cache=cache)(
            np.arange(idx.size))
        out_lo, out_hi = np.empty_like(lo), np.empty_like(hi)
        out_lo[order], out_hi[order] = lo, hi
        return out_lo, out_hi

    if kinds == {"interval"}:
        return FastPass(np.concatenate(f), None, np.concatenate(lower), np.concatenate(upper), refine=refine)
    return FastPass(np.concatenate(f), epsilon, refine=refine)


__all__ = ["NotApplicable", "check_stream", "stream_fast_pass"]

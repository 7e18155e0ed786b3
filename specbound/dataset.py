"""A labelled sample (:class:`DataSet`): the value type shared by the data-file reader, the
recorded-task sampler and the certified forward pass.

Not an application module: it imports only numpy, so ``specbound.certified`` may name it.  Reading
and validating files is :mod:`specbound.data_file`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class DataSet:
    """A validated labelled sample: ``labels`` (n,) -- int8 in {-1, +1} (binary) or int64 class
    indices 0..k-1 -- and exactly one of ``tokens`` (n, T) int64 ids or ``inputs`` (n, T, N)
    float64 rows (before ``Pi``)."""

    labels: np.ndarray
    tokens: np.ndarray | None = None
    inputs: np.ndarray | None = None
    source: str = "<arrays>"

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    @property
    def seq_len(self) -> int:
        rows = self.tokens if self.tokens is not None else self.inputs
        return int(rows.shape[1])

"""What an experiment is asked for: the sample kinds, the seeds and :class:`ExperimentConfig`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
import math

import numpy as np

from specbound.errors import SpecboundError, option
from specbound.tasks import check_sample_size
from specbound.train import TrainConfig, fresh_sample, train, training_sample


SAMPLES = ("fresh", "train")
BOUND_SAMPLE_SEED = 3
"""Seed of the fresh bound sample ``S`` (its stream differs from the test sample's, seed 2)."""
TEST_SEED = 2


class ExperimentError(SpecboundError):
    """A bad experiment request (sizes, confidence levels, an unknown sample kind)."""
# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that determines one experiment (training, the bound sample, the test sample).

    ``n`` is the theorem's sample size: the size of the bound sample ``S`` (``sample="fresh"``:
    ``n`` new samples drawn from ``bound_seed``; ``sample="train"``: the training sample, and ``n``
    must be ``None`` or ``n_train``).  ``margin=None`` lets the pipeline choose ``rho``; ``delta``
    is the bound's failure probability, ``confidence`` the Clopper-Pearson level.
    """

    train: TrainConfig = field(default_factory=TrainConfig)
    n: int | None = None
    sample: str = "fresh"
    n_test: int = 10_000
    margin: float | None = None
    delta: float = 0.05
    confidence: float = 0.95
    bound_seed: int = BOUND_SAMPLE_SEED
    test_seed: int = TEST_SEED
    workers: int = 1
    """Processes that certify (:func:`specbound.engine.open_engine`): 1 is this one, N >= 2 a local pool."""

    def __post_init__(self) -> None:
        if self.sample not in SAMPLES:
            raise ExperimentError(f"experiment: unknown sample {self.sample!r} (use one of {SAMPLES})")
        if self.sample == "train" and self.n not in (None, self.train.n_train):
            raise ExperimentError(
                f"experiment: sample='train' fixes n = n_train = {self.train.n_train}, got n = {self.n}")
        if self.n is not None and self.n < 1:
            raise ExperimentError(f"experiment: n must be >= 1, got {self.n}")
        if self.n_test < 1:
            raise ExperimentError(f"experiment: n_test must be >= 1, got {self.n_test}")
        # samples are drawn whole: the limits of every drawn sample, before any training starts
        for what, size in (("n", self.n), ("n_test", self.n_test)):
            if size is not None:
                check_sample_size(size, self.train.seq_len, f"experiment: {option(what)}")
        if self.margin is not None and not (self.margin > 0 and math.isfinite(self.margin)):
            raise ExperimentError(f"experiment: the margin must be a positive finite number, got {self.margin}")
        if not 0 < self.delta < 1:
            raise ExperimentError(f"experiment: delta must lie in (0, 1), got {self.delta}")
        if not 0 < self.confidence < 1:
            raise ExperimentError(f"experiment: confidence must lie in (0, 1), got {self.confidence}")
        if self.workers < 1:
            raise ExperimentError(f"experiment: workers must be >= 1, got {self.workers}")
        # the task and the architecture are checked now, before any training starts
        self.train.architecture(self.train.make_task())

    @property
    def bound_n(self) -> int:
        """The theorem's ``n`` (the size of the bound sample ``S``)."""
        if self.sample == "train":
            return self.train.n_train
        return self.n if self.n is not None else self.train.n_train

    def bound_sample(self) -> tuple[np.ndarray, np.ndarray]:
        """The bound sample ``S`` (tokens, labels): the training sample or fresh i.i.d. draws."""
        if self.sample == "train":
            return training_sample(self.train)
        return fresh_sample(self.train.make_task(), self.bound_n, self.bound_seed)

    def test_sample(self) -> tuple[np.ndarray, np.ndarray]:
        return fresh_sample(self.train.make_task(), self.n_test, self.test_seed)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["n"] = self.bound_n
        return out

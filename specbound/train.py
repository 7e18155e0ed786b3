"""Deterministic CPU training of the analysis model on a synthetic task.

Contract: :func:`train` is a pure function of its :class:`TrainConfig` on a given machine/torch
build: the same config gives bit-identical weights (fixed seeds for the embedding, the
initialisation, the training sample and the minibatch order; deterministic torch kernels; one
thread, so reductions are never split differently between runs).

The training sample ``S`` is a fixed set of ``n_train`` examples (drawn from ``data_seed``), which
is what a post hoc bound's ``n`` refers to; :func:`training_sample` regenerates it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from specbound.errors import SpecboundError, option
from specbound.model import AnalysisTransformer, Architecture
from specbound.tasks import BINARY_TASKS, Task, check_sample_size, get_task, training_sample_of

LOSSES = ("logistic", "hinge")
REGULARISERS = ("none", "schatten", "spectral")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run.

    ``symbols``: number of distinct symbols of the task (2 for the binary tasks, whose symbols are
    the bits; any even number for ``symbol_majority``).
    ``reg_kind``: ``"schatten"`` adds ``reg * sum_j S_p(W_j)^(1/p)`` over the covered matrices
    (p = ``reg_p`` >= 1; p = 1 is the nuclear norm), ``"spectral"`` adds ``reg * sum_j ||W_j||``.
    """

    task: str = "sparse_majority"
    seq_len: int = 17
    k: int = 3
    task_seed: int = 0
    symbols: int = 2
    num_layers: int = 2
    num_heads: int = 2
    width: int = 32
    head_dim: int = 8
    ff_dim: int = 64
    activation: str = "gelu"
    variant: str = "plain"
    num_kv_heads: int = 0
    steps: int = 1000
    lr: float = 3e-3
    batch: int = 128
    n_train: int = 4096
    seed: int = 0
    embed_seed: int = 0
    data_seed: int = 1
    loss: str = "logistic"
    reg: float = 0.0
    reg_kind: str = "none"
    reg_p: float = 1.0

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise SpecboundError(f"train: unknown loss {self.loss!r} (use one of {LOSSES})")
        if self.reg_kind not in REGULARISERS:
            raise SpecboundError(f"train: unknown regulariser {self.reg_kind!r} (use one of {REGULARISERS})")
        if self.reg_kind == "schatten" and self.reg_p < 1:
            raise SpecboundError("train: reg_p must be >= 1 (the penalty must be differentiable at 0)")
        if self.steps < 0 or self.batch < 1 or self.n_train < 1 or self.lr <= 0:
            raise SpecboundError("train: need steps >= 0, batch >= 1, n_train >= 1 and lr > 0")
        # the training sample is drawn whole: its size obeys the limits of every drawn sample
        check_sample_size(self.n_train, self.seq_len, f"train: {option('n_train')}")

    def make_task(self) -> Task:
        if self.task in BINARY_TASKS:
            if self.symbols != 2:
                raise SpecboundError(f"train: task {self.task} has 2 symbols (the bits), got symbols={self.symbols}")
            return get_task(self.task, seq_len=self.seq_len, k=self.k, seed=self.task_seed)
        return get_task(self.task, seq_len=self.seq_len, k=self.k, seed=self.task_seed, symbols=self.symbols)

    def architecture(self, task: Task) -> Architecture:
        return Architecture(self.num_layers, self.num_heads, self.width, self.head_dim, self.ff_dim,
                            task.vocab_size, task.seq_len, self.activation, self.variant,
                            self.num_kv_heads)


@contextlib.contextmanager
def deterministic_torch(threads: int = 1):
    """Deterministic kernels and a fixed thread count inside the block; restored afterwards."""
    old_det = torch.are_deterministic_algorithms_enabled()
    old_threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.set_num_threads(old_threads)


def training_sample(config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """The fixed training sample S (tokens, labels) of a config."""
    return training_sample_of(config.make_task(), config.n_train, config.data_seed)


def fresh_sample(task: Task, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fresh sample for evaluation, independent of every training stream (different spawn key)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7E57]))
    return task.sample(n, rng)


def margin_loss(margins: torch.Tensor, kind: str) -> torch.Tensor:
    """Mean surrogate loss of the margins ``y f(X)``: logistic ``log(1 + e^-u)`` or hinge ``max(0, 1-u)``."""
    if kind == "logistic":
        return torch.nn.functional.softplus(-margins).mean()
    return torch.clamp(1.0 - margins, min=0.0).mean()


def spectral_penalty(model: AnalysisTransformer, kind: str, p: float = 1.0) -> torch.Tensor:
    """``sum_j S_p(W_j)^(1/p)`` (``kind="schatten"``) or ``sum_j ||W_j||`` (``"spectral"``) over the
    covered matrices A_lh, V_lh, M_in, M_out (proofs_notes/theory.md section 1)."""
    total = torch.zeros((), dtype=model.w.dtype)
    for W in model.covered_matrices():
        s = torch.linalg.svdvals(W)
        total = total + (s.max() if kind == "spectral" else (s ** p).sum() ** (1.0 / p))
    return total


@torch.no_grad()
def evaluate(model: AnalysisTransformer, tokens: np.ndarray, labels: np.ndarray, chunk: int = 4096) -> dict:
    """Accuracy (a zero output counts as an error), and min/median of the margins ``y f(X)``."""
    outs = [model(torch.from_numpy(tokens[i:i + chunk])) for i in range(0, len(tokens), chunk)]
    margins = (torch.cat(outs) * torch.from_numpy(labels).to(model.w.dtype)).numpy()
    return {
        "n": int(len(labels)),
        "accuracy": float(np.mean(margins > 0)),
        "margin_min": float(margins.min()),
        "margin_median": float(np.median(margins)),
    }


def train(config: TrainConfig, progress: Callable[[int, float], None] | None = None,
          ) -> tuple[AnalysisTransformer, dict]:
    """Train with Adam on minibatches of the fixed sample; return the model and a JSON-able record.

    The record holds the config, the task's hidden positions, the final training loss, the
    training-sample evaluation (:func:`evaluate`) and, when training ended near chance, a warning
    (:func:`chance_warning`).  ``progress(step, batch_loss)`` is called after every step (it only
    reads the loss, so the weights do not depend on it).
    """
    task = config.make_task()
    tokens, labels = training_sample(config)
    order_rng = np.random.default_rng(np.random.SeedSequence([config.seed, 0xBA7C]))
    with deterministic_torch():
        model = AnalysisTransformer(config.architecture(task), embed_seed=config.embed_seed,
                                    init_seed=config.seed, task=task.name)
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        tok_t, lab_t = torch.from_numpy(tokens), torch.from_numpy(labels)
        perm, pos = order_rng.permutation(config.n_train), 0
        loss = torch.zeros(())
        for step in range(config.steps):
            if pos + config.batch > config.n_train:  # new epoch: fresh shuffle
                perm, pos = order_rng.permutation(config.n_train), 0
            idx = torch.from_numpy(perm[pos:pos + config.batch])
            pos += config.batch
            margins = model(tok_t[idx]) * lab_t[idx]
            loss = margin_loss(margins, config.loss)
            if config.reg > 0 and config.reg_kind != "none":
                loss = loss + config.reg * spectral_penalty(model, config.reg_kind, config.reg_p)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if progress is not None:
                progress(step + 1, float(loss.detach()))
        model.eval()
        record = {
            "config": asdict(config),
            "task": task.record(),
            "final_batch_loss": float(loss.detach()),
            "train": evaluate(model, tokens, labels),
        }
    warning = chance_warning(record["train"], majority_rate(labels), config)
    if warning is not None:  # only then: a trained run's record is unchanged
        record["warning"] = warning
    return model, record


CHANCE_SLACK = 0.05
"""A run whose training accuracy is within this of the majority-class rate learnt (next to)
nothing: :func:`chance_warning` flags it."""


def majority_rate(labels: np.ndarray) -> float:
    """The accuracy of always answering the more frequent label (chance level on this sample)."""
    positive = float(np.mean(np.asarray(labels) > 0))
    return max(positive, 1.0 - positive)


def chance_warning(evaluation: dict, chance: float, config: TrainConfig) -> str | None:
    """A one-paragraph warning when training ended near chance, saying what to change; else None.

    Near chance: training accuracy below ``chance + CHANCE_SLACK`` (a zero output counts as an
    error, so a network that collapsed to f = 0 is caught too).  Such a model is no reference for
    a trained one: its bound and its test error say nothing about what training achieves.
    """
    accuracy = float(evaluation["accuracy"])
    if accuracy >= chance + CHANCE_SLACK:
        return None
    return (f"training ended near chance (train accuracy {accuracy:.4f}, chance {chance:.4f}, median margin "
            f"{evaluation['margin_median']:.2g}): this model learnt nothing, and its bound and test error "
            f"say nothing about a trained one. {RETRAIN_ADVICE}")


RETRAIN_ADVICE = ("What to change: a lower learning rate, e.g. --lr 1e-3 (lr=1e-3 in Python; Adam at the default "
                  "3e-3 has loss spikes that can end at f = 0, where the spectral penalty keeps the net; add "
                  "--steps / steps= if the loss is still falling), or a weaker penalty, e.g. --reg 1e-4 "
                  "(reg=1e-4), or another --seed (seed=).")
"""What to change.  Measured on ``experiment run --layers 2 --width 32 --steps 2000``
(docs/experiments.md, "When training ends near chance"): ``--lr 1e-3`` and ``--reg 1e-4`` train to
accuracy 1.0 with a smooth loss, ``--lr 1e-2`` collapses to the loss log 2 of f = 0."""

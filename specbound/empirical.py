"""The empirical term of the bound and where it comes from, resolved in one place for both
``specbound certify`` (:func:`resolve`) and ``specbound verify`` (:func:`from_record`,
:func:`dataset_of`); both evaluate it with :func:`empirical_ball`.

Sources (``specbound.vocabulary.EMPIRICAL_SOURCES``): a data file, fresh i.i.d. samples of the
model's recorded task, the model's own training sample regenerated from its recorded seed (all
three certified: the ramp loss by certified forward passes), a number the user supplied (NOT
certified), or none (only complexity + confidence are certified).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from flint import arb

from specbound.adapters import capabilities
from specbound.certified.ramp_loss import certified_ramp_loss
from specbound.checkpoint import file_sha256
from specbound.data import default_checkpoint_path
from specbound.data_file import check_labels, data_sha256, dataset_from_arrays, load_data
from specbound.data_source import as_dataset
from specbound.dataset import DataSet
from specbound.errors import SpecboundError, option
from specbound.formats.json_file import read_json
from specbound.plan import MAX_TRIES
from specbound.sample_stream import SampleStream
from specbound.tasks import Task, training_blocks
from specbound.vocabulary import (
    CAPABILITY_RECORDED_TASK, CERTIFIED_SOURCES, EMPIRICAL_DATA, EMPIRICAL_NONE, EMPIRICAL_SOURCES,
    EMPIRICAL_TASK, EMPIRICAL_TRAIN, EMPIRICAL_USER, FORWARD_FAST, MAX_TASK_SAMPLES, MAX_TASK_SEQ_LEN,
    MAX_TASK_TOKENS,
)

DEFAULT_SAMPLES = 2000
"""Fresh samples drawn for the embedded default (and own models with a recorded task)."""

DEFAULT_SEED = 3
"""Seed of those samples: numpy ``default_rng(seed)`` (training used 1, the test set 2)."""


@dataclass(frozen=True)
class EmpiricalSource:
    """Where the empirical term comes from.

    ``kind``: "data" (a data file; ``detail`` has its path and sha256), "task" (fresh i.i.d. samples of
    the model's task; ``detail`` has the task, seed, n), "user" (a number the user supplied: NOT
    certified) or "none" (no empirical term: only complexity + confidence are certified).
    """

    kind: str
    certified: bool
    detail: dict = field(default_factory=dict)
    ramp: object | None = None  #: the RampLossCertificate when certified
    data_sha256: str = ""
    """SHA-256 of the sample's canonical arrays (:func:`specbound.data_file.data_sha256`; certified sources)."""


def record_path(checkpoint: str | os.PathLike | None) -> Path | None:
    """Where the training record of ``checkpoint`` is: ``<checkpoint>.json`` (the embedded default's
    ``default.json``); None for a source without a file name."""
    try:
        return (default_checkpoint_path() if checkpoint is None else Path(checkpoint)).with_suffix(".json")
    except ValueError:  # '.', '/': no record beside it
        return None


MAX_RECORD_BYTES = 16 << 20
"""A training record is a small JSON file; a larger one is refused unread."""


def _record(checkpoint: str | os.PathLike | None) -> dict | None:
    """The training record of an own-format model: the embedded default's ``default.json``, or a
    ``<checkpoint>.json`` written next to a trained checkpoint (None if absent or not a JSON object;
    a file that is not readable JSON is a one-line error, :func:`specbound.formats.json_file.read_json`)."""
    path = record_path(checkpoint)
    if path is None or not path.is_file():
        return None
    record = read_json(path, "training record", max_bytes=MAX_RECORD_BYTES, error=SpecboundError)
    return record if isinstance(record, dict) else None


def task_record(weights, checkpoint: str | os.PathLike | None) -> dict | None:
    """The recorded task of an own-format model (key ``task`` of its training record)."""
    record = _record(checkpoint)
    task = None if record is None else record.get("task")
    if not isinstance(task, dict) or "positions" not in task:
        return None
    return task


def training_record(weights, checkpoint: str | os.PathLike | None) -> dict | None:
    """``{"task", "data_seed", "n", "tries"}`` when the training record asks for its training sample
    as the bound sample (key ``"bound_sample": "train"``, with ``config.data_seed`` and
    ``config.n_train``; ``tries``: the record's K, default 1, :func:`record_tries`).

    S = the training sample is the record's statement about ``weights``, so the record must name
    them: its ``sha256`` and ``architecture`` (:func:`record_binding`) must be those of ``weights``,
    else this is a one-line SpecboundError (a record copied from another run, or one whose
    architecture contradicts the checkpoint), as is such a record without task, seed or n: never a
    silent change of S."""
    record = _record(checkpoint)
    if record is None or record.get("bound_sample") != "train":
        return None
    where = record_path(checkpoint)
    _check_binding(record, weights, where)
    try:
        task, config = record["task"], record["config"]
        own = {"task": task, "data_seed": int(config["data_seed"]), "n": int(config["n_train"])}
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise SpecboundError(f"{where}: the training record asks for its training sample but "
                             f"its task, config.data_seed or config.n_train is missing or malformed "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())})") from None
    return {**own, "tries": record_tries(record, where)}


def record_binding(weights) -> dict:
    """What a training record must carry to name its checkpoint: ``{"sha256", "architecture"}`` of
    ``weights`` (:meth:`~specbound.matrices.AnalysisWeights.architecture`), the same facts a
    certificate records.  ``specbound experiment run --save`` writes them."""
    return {"sha256": weights.sha256, "architecture": weights.architecture()}


def bound_training_record(record: dict, weights, *, bound_on_training_sample: bool) -> dict:
    """The training record of a saved checkpoint: ``record`` (a training run's config, task and
    results) with the checkpoint's :func:`record_binding`; with ``bound_on_training_sample`` it also
    asks for S = the training sample (``"bound_sample": "train"``) and states K (``"tries"``, 1
    unless ``record`` says more): what :func:`training_record` needs to accept it."""
    out = {**record, **record_binding(weights)}
    if bound_on_training_sample:
        out["bound_sample"] = "train"
        out["tries"] = record_tries(record, "the training record")
    return out


def _check_binding(record: dict, weights, where) -> None:
    """Refuse (one line) a training record that does not name ``weights`` (:func:`record_binding`)."""
    fix = ("S = the training sample is taken from the record of this very checkpoint; write the record "
           "with the checkpoint (specbound experiment run --sample train --save)")
    sha = record.get("sha256")
    if not isinstance(sha, str):
        raise SpecboundError(f"{where}: the training record names no checkpoint (no sha256): {fix}")
    if sha != weights.sha256:
        raise SpecboundError(f"{where}: the training record belongs to another checkpoint: it names sha256 "
                             f"{sha[:16]}..., this checkpoint has {weights.sha256[:16]}... (a record copied "
                             f"from another run?); {fix}")
    arch, own = record.get("architecture"), weights.architecture()
    if not isinstance(arch, dict):
        raise SpecboundError(f"{where}: the training record states no architecture: {fix}")
    wrong = [f"{k} {arch.get(k)!r} (checkpoint: {v!r})" for k, v in own.items() if arch.get(k) != v]
    if wrong:
        raise SpecboundError(f"{where}: the training record's architecture contradicts the checkpoint: "
                             f"{', '.join(wrong)}; {fix}")


def record_tries(record: dict, where) -> int:
    """K: how many bound samples (data seed, n) the record says were tried for this network in all,
    this one included (key ``"tries"``, default 1); the theorem is applied at delta / K.  It is the
    user's statement: nothing can check it, so it is only read, and refused when not an integer in
    [1, MAX_TRIES]."""
    tries = record.get("tries", 1)
    if isinstance(tries, bool) or not isinstance(tries, int) or not 1 <= tries <= MAX_TRIES:
        raise SpecboundError(f"{where}: the training record's tries (K, bound samples tried) must be an "
                             f"integer in [1, {MAX_TRIES}], got {tries!r}")
    return tries


def checked_task(task, n) -> tuple[Task, int]:
    """(the :class:`Task` of a recorded task description, the sample size ``n`` as an int), after
    the limits every drawn sample obeys, fresh or the training sample alike: 1 <= n <=
    MAX_TASK_SAMPLES, 1 <= seq_len <= MAX_TASK_SEQ_LEN, n * seq_len <= MAX_TASK_TOKENS, at most
    seq_len positions, 2 <= vocab_size <= 2^31.  Checked before anything is allocated (a record is a
    small JSON file anyone can edit); every failure is one line."""
    try:
        if not isinstance(task, dict):
            raise SpecboundError(f"recorded task is not a JSON object ({type(task).__name__})")
        if isinstance(n, bool) or not isinstance(n, (int, str)) or not 1 <= int(n) <= MAX_TASK_SAMPLES:
            raise SpecboundError(f"recorded task: sample size {n!r} is outside [1, {MAX_TASK_SAMPLES}]")
        n = int(n)
        seq_len = int(task["seq_len"])
        if not 1 <= seq_len <= MAX_TASK_SEQ_LEN:
            raise SpecboundError(f"recorded task: seq_len {seq_len} is outside [1, {MAX_TASK_SEQ_LEN}]")
        if n * seq_len > MAX_TASK_TOKENS:
            raise SpecboundError(f"recorded task: {n} samples of length {seq_len} exceed "
                                 f"{MAX_TASK_TOKENS} tokens")
        positions = task["positions"]
        if not isinstance(positions, list) or len(positions) > seq_len:
            raise SpecboundError("recorded task: 'positions' must be a list of at most seq_len indices")
        vocab = int(task.get("vocab_size", 3))
        if not 2 <= vocab <= 2**31:
            raise SpecboundError(f"recorded task: vocab_size {vocab} is outside [2, 2^31]")
        bits = task.get("symbol_bits", [0, 1])
        if not isinstance(bits, list) or len(bits) > vocab:
            raise SpecboundError("recorded task: 'symbol_bits' must be a list of at most vocab_size bits")
        return Task.from_record(task), n
    except SpecboundError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError, IndexError) as exc:
        raise SpecboundError(f"recorded task is malformed ({type(exc).__name__}: {' '.join(str(exc).split())})") from None


def _seed(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecboundError(f"{what} {value!r} is not an integer")
    try:
        seed = int(value)
    except ValueError:
        raise SpecboundError(f"{what} {value!r} is not an integer") from None
    if not 0 <= seed < 2**128:
        raise SpecboundError(f"{what} {seed} is outside [0, 2^128)")
    return seed


TRAINING_BLOCK = 4096
"""Examples per block when the training sample S is generated again for a certify or verify run."""


def train_sample(detail: dict) -> SampleStream:
    """The training sample S of a recorded training run, generated again block by block from its seed
    (:func:`specbound.tasks.training_blocks`; the examples of :func:`specbound.tasks.training_sample_of`): a
    :class:`SampleStream`, so S is never held whole, whatever n."""
    task, n = checked_task(detail.get("task"), detail.get("n"))
    seed = _seed(detail.get("data_seed"), "data seed")
    source = f"training sample S of task {task.name} (data seed {seed}, n {n})"

    def reader():
        for tokens, labels in training_blocks(task, n, seed, TRAINING_BLOCK):
            yield dataset_from_arrays(labels, tokens=tokens, source=source)

    return SampleStream(reader, source)


def task_sample(task: dict, n: int, seed: int) -> DataSet:
    """``n`` fresh i.i.d. samples of a recorded task, drawn with ``numpy.random.default_rng(seed)``."""
    t, n = checked_task(task, n)
    seed = _seed(seed, "seed")
    tokens, labels = t.sample(n, np.random.default_rng(seed))
    return dataset_from_arrays(labels, tokens=tokens, source=f"task {t.name} (seed {seed}, n {n})")


def resolve(weights, checkpoint, data, *, n: int | None, empirical: float | None,
            samples: int | None, seed: int | None) -> tuple[EmpiricalSource, DataSet | None, int]:
    """The empirical source of a certify run, its sample and the sample size n.

    First that applies: ``data`` (anything :func:`specbound.data_source.as_dataset` takes: a .npz path,
    a DataSet, arrays, tensors, a torch Dataset or DataLoader; its labels checked against the model's
    read-out rows; certified, n = its size); ``empirical``
    (user-supplied, NOT certified; needs n); the training sample S when the model's training record
    asks for it (``"bound_sample": "train"``) and ``samples`` is not given (n = the number of training
    examples); fresh ``samples`` (default 2000) of the model's recorded
    task drawn with ``seed`` (default 3) when its adapter records tasks; else none (needs n).
    Inconsistent inputs raise SpecboundError with one line.
    """
    dataset = as_dataset(data)
    if dataset is not None:
        check_labels(dataset, weights.num_outputs)
        if empirical is not None:
            raise SpecboundError(f"give either data or an empirical loss, not both: {option('data')} or "
                                 f"{option('empirical', 'empirical-loss')}")
        if n is not None and n != dataset.n:
            raise SpecboundError(f"n = {n} but the data hold {dataset.n} samples")
        detail = {"path": str(getattr(dataset, "source", data))}
        if isinstance(data, (str, os.PathLike)):
            detail["sha256"] = file_sha256(Path(data))
        return EmpiricalSource(EMPIRICAL_DATA, True, detail, data_sha256=data_sha256(dataset)), dataset, dataset.n
    if empirical is not None:
        if n is None:
            raise SpecboundError(f"an empirical loss needs the sample size: give {option('n')}")
        return EmpiricalSource(EMPIRICAL_USER, False, {"value": float(empirical)}), None, n
    records = CAPABILITY_RECORDED_TASK in capabilities(weights.layout)
    trained_on = training_record(weights, checkpoint) if records else None
    if trained_on is not None and samples is None:
        if n is not None and n != trained_on["n"]:
            raise SpecboundError(f"n = {n} but the training sample S has {trained_on['n']} examples")
        detail = {**trained_on, "S": "training sample",
                  "generator": "numpy.random.default_rng(SeedSequence([data_seed, 0x5A3]))"}
        sample = train_sample(detail)
        return EmpiricalSource(EMPIRICAL_TRAIN, True, detail, data_sha256=data_sha256(sample)), sample, trained_on["n"]
    task = task_record(weights, checkpoint) if records else None
    if task is not None and not (samples is not None and samples == 0):
        ns = DEFAULT_SAMPLES if samples is None else int(samples)
        if not 1 <= ns <= MAX_TASK_SAMPLES:
            raise SpecboundError(f"{option('samples')} must be an integer in [1, {MAX_TASK_SAMPLES}], got {samples}")
        sd = DEFAULT_SEED if seed is None else int(seed)
        if n is not None and n != ns:
            raise SpecboundError(f"n = {n} but {ns} samples are drawn; give one of them")
        sample = task_sample(task, ns, sd)
        source = EmpiricalSource(EMPIRICAL_TASK, True, {"task": task, "seed": sd, "n": ns,
                                                        "generator": "numpy.random.default_rng(seed)"},
                                 data_sha256=data_sha256(sample))
        return source, sample, ns
    if samples is not None:
        raise SpecboundError(f"this checkpoint records no task to draw samples from; give {option('data')}")
    if n is None:
        raise SpecboundError(f"no data and no empirical loss: give the sample size {option('n')} to certify the "
                             "complexity and confidence terms (not a bound without an empirical term)")
    return EmpiricalSource(EMPIRICAL_NONE, False, {}), None, n


def from_record(record: dict) -> EmpiricalSource:
    """The EmpiricalSource written in a certificate's ``empirical_source`` (ValueError if its kind is
    not one of ``EMPIRICAL_SOURCES``)."""
    kind = record.get("kind")
    if kind not in EMPIRICAL_SOURCES:
        raise ValueError(f"empirical source kind {kind!r}")
    return EmpiricalSource(kind, kind in CERTIFIED_SOURCES, dict(record.get("detail") or {}),
                           data_sha256=str(record.get("data_sha256") or ""))


def dataset_of(source: EmpiricalSource) -> DataSet | None:
    """The sample of a certified source, re-created: the data file read again, or the recorded task's
    samples drawn again with the recorded seed (None for "user" and "none")."""
    if source.kind == EMPIRICAL_TASK:
        d = source.detail
        return task_sample(d["task"], int(d["n"]), int(d["seed"]))
    if source.kind == EMPIRICAL_TRAIN:
        return train_sample(source.detail)
    if source.kind == EMPIRICAL_DATA:
        return load_data(Path(source.detail["path"]))
    return None


def empirical_ball(weights, source: EmpiricalSource, dataset: DataSet | None, rho: arb, *,
                   progress=None, forward: str = FORWARD_FAST, fast=None,
                   map_blocks=None) -> tuple[arb | None, object | None]:
    """(the empirical term as an Arb ball, the RampLossCertificate or None).

    Certified sources: the certified ramp loss of ``dataset`` at margin ``rho`` (its upper ball), by the
    certified forward pass ``forward`` ("fast", "interval" or "arb", vocabulary.FORWARD_METHODS; ``fast``: its
    :class:`~specbound.certified.ramp_loss.FastPass` over ``dataset`` when already computed);
    "user": the user's number as a ball (NOT certified); "none": (None, None).  ``map_blocks``: an
    execution engine's runner of the Arb forward pass (:func:`specbound.engine.ramp_blocks`).
    """
    if source.kind in CERTIFIED_SOURCES:
        ramp = certified_ramp_loss(weights, dataset, rho, progress=progress, forward=forward, fast=fast,
                                   map_blocks=map_blocks)
        return ramp.upper, ramp
    if source.kind == EMPIRICAL_USER:
        return arb(float(source.detail["value"])), None
    return None, None

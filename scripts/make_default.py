"""Train the embedded default checkpoint, deterministically.

    .venv/bin/python scripts/make_default.py [--out-dir specbound/data]

Writes ``default.safetensors`` (specbound-analysis-v1, float64) and ``default.json`` (the training
record: config, seeds, the task's hidden positions, training-sample and fresh-sample accuracy, the
checkpoint's sha256).  Re-running on the same machine and torch build reproduces both files bit
for bit (no timestamps; see specbound.train for why training is deterministic).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import torch

from specbound.output import write_json_atomic
from specbound.train import TrainConfig, evaluate, fresh_sample, train

DEFAULT_CONFIG = TrainConfig(
    task="sparse_majority", seq_len=17, k=3, task_seed=0,
    num_layers=2, num_heads=2, width=32, head_dim=8, ff_dim=64, activation="gelu",
    steps=400, lr=3e-3, batch=128, n_train=4096,
    seed=0, embed_seed=0, data_seed=1,
    loss="logistic", reg=1e-3, reg_kind="schatten", reg_p=1.0,
)
TEST_SEED = 2
TEST_N = 10_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=str(Path(__file__).resolve().parents[1] / "specbound" / "data"))
    args = parser.parse_args(argv)
    out = Path(args.out_dir)

    start = time.perf_counter()
    model, record = train(DEFAULT_CONFIG)
    seconds = time.perf_counter() - start
    record["test"] = evaluate(model, *fresh_sample(DEFAULT_CONFIG.make_task(), TEST_N, TEST_SEED))
    record["test"]["seed"] = TEST_SEED

    weights = out / "default.safetensors"
    model.save(weights)
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    record.update({
        "checkpoint": weights.name,
        "sha256": digest,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "torch_version": torch.__version__,
        "made_by": "scripts/make_default.py",
    })
    write_json_atomic(out / "default.json", record)
    (out / "default.json").chmod(weights.stat().st_mode & 0o777)  # mkstemp made it 0600
    print(f"trained in {seconds:.1f} s; train acc {record['train']['accuracy']:.4f}, "
          f"test acc {record['test']['accuracy']:.4f} (n={TEST_N}); {weights} sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

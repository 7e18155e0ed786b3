"""A 3-class model brought by the user, certified from its training sample given as a torch DataLoader.

    python examples/k3_loader.py --out k3_out            # the full run (n = 400,000; a few minutes on one core)
    python examples/k3_loader.py --out k3_out --quick    # a reduced run for CI (n = 4,000; its bound ~1)

The task.  Sequences of ``SEQ_LEN`` symbols 1..3 after a CLS token 0; the class is the symbol that
occurs most often (0, 1 or 2 for symbols 1, 2, 3).  A draw with a tie is redrawn, so S is i.i.d. from
the task restricted to sequences with one most frequent symbol.  The model is
:class:`specbound.nn.AnalysisTransformer` (residual, 3 read-out rows: the k-class bound on the margin
f_y - max_{c != y} f_c), trained in a plain PyTorch loop on S held as numpy arrays.

Selection (proofs_notes/selection.md): the task, the architecture, the training recipe, n, delta and
the seeds are constants of this file, fixed before S is drawn; nothing is chosen after looking at S.
S is then handed to ``specbound.certify`` three ways -- as arrays, as a ``DataLoader`` (read in blocks,
never held whole) and through files (the saved checkpoint and an .npz) -- and the three certificates
must agree; ``verify`` re-checks the loader's one from the loader.  Outputs: ``certificate.json`` and
``figures.json`` (n, accuracies, both routes, times) in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import specbound
from specbound.nn import AnalysisTransformer

K, SEQ_LEN = 3, 12
ARCH = dict(num_layers=1, num_heads=1, width=8, head_dim=4, ff_dim=8, variant="residual", vocab_size=K + 1,
            seq_len=SEQ_LEN + 1, num_outputs=K, embed_seed=0)
N_FULL, N_QUICK = 400_000, 4_000
STEPS, BATCH, LR = 600, 512, 1e-2
SEEDS = {"sample": 11, "test": 12, "init": 13, "batches": 14}
N_TEST = 20_000


def draw(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n sequences of the task (module docstring): token ids (n, SEQ_LEN + 1) and classes 0..K-1."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros((0, SEQ_LEN + 1), dtype=np.int64)
    while tokens.shape[0] < n:
        body = rng.integers(1, K + 1, size=(2 * n, SEQ_LEN))
        counts = np.stack([(body == s).sum(axis=1) for s in range(1, K + 1)], axis=1)
        top = np.sort(counts, axis=1)
        keep = top[:, -1] > top[:, -2]  # one most frequent symbol; a tie is redrawn
        block = np.concatenate([np.zeros((int(keep.sum()), 1), dtype=np.int64), body[keep]], axis=1)
        tokens = np.concatenate([tokens, block])
    tokens = tokens[:n]
    counts = np.stack([(tokens[:, 1:] == s).sum(axis=1) for s in range(1, K + 1)], axis=1)
    return tokens, counts.argmax(axis=1).astype(np.int64)


def train(tokens: np.ndarray, labels: np.ndarray, steps: int) -> AnalysisTransformer:
    """The recipe: Adam, cross-entropy, minibatches drawn with replacement from S (seeded)."""
    torch.manual_seed(SEEDS["init"])
    model = AnalysisTransformer(**ARCH, init_seed=SEEDS["init"])
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    rng = np.random.default_rng(SEEDS["batches"])
    X, Y = torch.from_numpy(tokens), torch.from_numpy(labels)
    for _ in range(steps):
        idx = torch.from_numpy(rng.integers(0, len(labels), size=BATCH))
        loss = torch.nn.functional.cross_entropy(model(X[idx]), Y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def accuracy(model: AnalysisTransformer, tokens: np.ndarray, labels: np.ndarray) -> float:
    with torch.no_grad():
        right = sum(int((model(torch.from_numpy(tokens[a:a + 8192])).argmax(1).numpy() == labels[a:a + 8192]).sum())
                    for a in range(0, len(labels), 8192))
    return right / len(labels)


def comparable(cert: dict) -> dict:
    """What a certificate proves, without the fields that name the sample's form or the checkpoint's
    location (the numbers, the plan, the settings, the architecture and the sample's SHA-256)."""
    keep = {k: cert[k] for k in ("result", "routes", "plan", "settings", "architecture") if k in cert}
    keep["data_sha256"] = cert["empirical_source"]["data_sha256"]
    return json.loads(json.dumps(keep))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the outputs (created)")
    ap.add_argument("--quick", action="store_true", help="a reduced run (n = 4,000, 100 steps)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    n, steps = (N_QUICK, 100) if args.quick else (N_FULL, STEPS)
    clock = {}

    t = time.perf_counter()
    tokens, labels = draw(n, SEEDS["sample"])  # S: drawn once, after every choice above
    model = train(tokens, labels, steps)
    clock["train_s"] = time.perf_counter() - t
    test_tokens, test_labels = draw(N_TEST, SEEDS["test"])
    acc = {"train": accuracy(model, tokens, labels), "test": accuracy(model, test_tokens, test_labels)}

    t = time.perf_counter()
    in_memory = specbound.certify(model, data=(tokens, labels))
    clock["certify_arrays_s"] = time.perf_counter() - t
    weights, sample = os.path.join(args.out, "k3.safetensors"), os.path.join(args.out, "S.npz")
    model.save(weights)
    np.savez(sample, tokens=tokens, labels=labels)
    by_file = specbound.certify(weights, data=sample)
    loader = DataLoader(TensorDataset(torch.from_numpy(tokens), torch.from_numpy(labels)), batch_size=1000)
    t = time.perf_counter()
    streamed = specbound.certify(weights, data=loader)  # the saved checkpoint, S read in blocks
    clock["certify_loader_s"] = time.perf_counter() - t
    cert = streamed.to_dict()
    if not comparable(cert) == comparable(in_memory.to_dict()) == comparable(by_file.to_dict()):
        print("the three forms of S gave different certificates", file=sys.stderr)
        return 1
    t = time.perf_counter()
    report = specbound.verify(cert, weights, data=loader)
    clock["verify_loader_s"] = time.perf_counter() - t
    with open(os.path.join(args.out, "certificate.json"), "w") as fh:
        json.dump(cert, fh, indent=1)
    routes = cert["routes"]
    figures = {"n": n, "k": K, "parameters": sum(p.numel() for p in model.parameters()),
               "accuracy": acc, "n_test": N_TEST,
               "occam": routes["occam"]["bound_upper"], "rademacher": routes["rademacher"]["bound_upper"],
               "bound": cert["result"]["bound_upper"], "verify": report.status,
               **{k: round(v, 1) for k, v in clock.items()}}
    print(f"n = {n:,}; train accuracy {acc['train']:.5f}, test {acc['test']:.5f} ({N_TEST:,} fresh)")
    figures["label"] = cert["result"]["label"]

    def shown(value: float) -> str:
        return f"{value:.6g}" + (" (vacuous: >= 1)" if value >= 1 else "")

    print(f"{figures['label']} on the 0-1 risk: {shown(figures['bound'])} (routes, each at delta/2: Occam "
          f"{shown(figures['occam'])}, Rademacher {shown(figures['rademacher'])}); arrays, DataLoader and files "
          f"agree; verify from the loader: {report.status}")
    print("times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in clock.items()))
    with open(os.path.join(args.out, "figures.json"), "w") as fh:
        json.dump(figures, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

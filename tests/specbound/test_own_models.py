"""Bring your own model and data (docs/own_models.md): the documented examples run verbatim, as a new
user would run them, and every choice outside the theorem is refused in one line.

The examples are read from the docs themselves (the first ```python block of a section), so a doc
that drifts from the tool fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import specbound
from specbound.cli import main
from specbound.errors import SpecboundError
from specbound.nn import AnalysisTransformer, OutsideTheoremError

from .test_bad_input_cli import refused

DOCS = Path(__file__).resolve().parents[2] / "docs"


def python_block(doc: str, heading: str) -> str:
    """The first ```python block after ``heading`` in ``docs/<doc>``."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    start = text.index(heading)
    match = re.search(r"```python\n(.*?)```", text[start:], flags=re.S)
    assert match, f"no python block after {heading!r} in {doc}"
    return match.group(1)


def run_block(code: str, folder: Path, monkeypatch) -> dict:
    monkeypatch.chdir(folder)
    namespace: dict = {"__name__": "__docs__"}
    exec(compile(code, "<docs example>", "exec"), namespace)  # noqa: S102  (our own docs)
    return namespace


def test_the_own_models_example_trains_certifies_in_memory_and_through_a_file_and_verifies(tmp_path, monkeypatch, capsys):
    ns = run_block(python_block("own_models.md", "## Build, train, save, certify"), tmp_path, monkeypatch)
    result, report, model = ns["result"], ns["report"], ns["model"]
    tokens, labels = ns["tokens"], ns["labels"]
    assert report.valid, report.lines()
    assert result.verdict.is_bound and result.source.certified
    # the plain PyTorch loop learned the task: every training example on the right side
    with torch.no_grad():
        accuracy = float((torch.sign(model(torch.from_numpy(tokens))).numpy() == labels).mean())
    assert accuracy == 1.0
    # the certificate names the sample by the sha256 of its canonical arrays: the same from a data file
    np.savez(tmp_path / "S.npz", tokens=tokens, labels=labels)
    by_file = specbound.certify("model.safetensors", data=str(tmp_path / "S.npz"))
    assert by_file.to_dict()["empirical_source"]["data_sha256"] == result.to_dict()["empirical_source"]["data_sha256"]
    assert by_file.bound_upper == result.bound_upper
    assert "which is the checkpoint's own network" in result.to_dict()["scope"]["bound_for"]
    # the command lines of the docs
    capsys.readouterr()
    assert main(["certify", "model.safetensors", "--data", "S.npz", "--out", "cert.json"]) == 0
    assert main(["verify", "cert.json", "--data", "S.npz"]) == 0
    assert "VALID" in capsys.readouterr().out


def test_the_formats_example_reads_a_torch_dataset_in_blocks_and_gives_the_arrays_digest(tmp_path, monkeypatch):
    ns = run_block(python_block("formats.md", "**Worked example**"), tmp_path, monkeypatch)
    items = [ns["Parity"]()[i] for i in range(1000)]
    ids = np.stack([x.numpy() for x, _ in items])
    ys = np.array([y for _, y in items])
    by_arrays = specbound.certify(ns["model"], data=(ids, ys))
    assert by_arrays.to_dict()["empirical_source"]["data_sha256"] == ns["result"].to_dict()["empirical_source"]["data_sha256"]
    assert by_arrays.bound_upper == ns["result"].bound_upper


def test_verify_needs_the_in_memory_sample_again_and_refuses_another_one():
    rng = np.random.default_rng(1)
    model = AnalysisTransformer(num_layers=1, num_heads=1, width=4, head_dim=2, ff_dim=4, vocab_size=3, seq_len=3)
    tokens, labels = rng.integers(0, 3, (6, 3)), rng.choice([-1, 1], 6)
    cert = specbound.certify(model, data=(tokens, labels)).to_dict()
    report = specbound.verify(cert, model)
    assert not report.valid
    assert any("give the same sample again as data=" in line for line in report.lines())
    assert specbound.verify(cert, model, data=(torch.from_numpy(tokens), list(labels))).valid
    other = labels.copy()
    other[0] = -other[0]
    report = specbound.verify(cert, model, data=(tokens, other))
    assert not report.valid and "empirical_source.data_sha256" in [path for path, _, _ in report.mismatches]


# ------------------------------------------------------------------------------- k classes


def test_a_three_class_model_trains_with_cross_entropy_saves_exactly_and_inspect_says_certify_is_available(tmp_path):
    rng = np.random.default_rng(2)
    tokens = rng.integers(1, 5, (48, 5))
    tokens[:, 0] = 0
    labels = (tokens[:, 1:] == 1).sum(1) % 3
    model = AnalysisTransformer(num_layers=1, num_heads=1, width=8, head_dim=4, ff_dim=8, vocab_size=5, seq_len=5,
                                num_outputs=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    X, Y = torch.from_numpy(tokens), torch.from_numpy(labels)
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(X), Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert model(X).shape == (48, 3) and model.w.shape == (3, 8)
    model.save(tmp_path / "k3.safetensors")
    back = AnalysisTransformer.load(tmp_path / "k3.safetensors")
    assert back.arch.num_outputs == 3
    torch.testing.assert_close(back(X), model(X), rtol=0, atol=0)
    assert specbound.spectra(tmp_path / "k3.safetensors").to_dict()["matrices"]
    assert specbound.inspect(tmp_path / "k3.safetensors").certify == "available"
    # certify, verify and the bad labels of a k-class model: tests/specbound/test_k_class_certify.py


# -------------------------------------------------------------------------- outside the theorem

KW = dict(num_layers=1, num_heads=1, width=8, head_dim=4, ff_dim=8, vocab_size=4, seq_len=6)


class Doubled(AnalysisTransformer):
    def forward(self, inputs):
        return 2 * super().forward(inputs)


def _with_layer_norm():
    model = AnalysisTransformer(**KW)
    model.ln = nn.LayerNorm(8)
    return model


def _with_hook():
    model = AnalysisTransformer(**KW)
    model.register_forward_hook(lambda *args: None)
    return model


def _trainable_table():
    model = AnalysisTransformer(**KW)
    model.E = nn.Parameter(model.E.clone())
    return model


def _changed_table():
    model = AnalysisTransformer(**KW)
    with torch.no_grad():
        model.E.mul_(1.5)
    return model


@pytest.mark.parametrize("build,words", [
    (lambda: AnalysisTransformer(**KW, bias=True), "biases are outside the theorem"),
    (lambda: AnalysisTransformer(**KW, layer_norm=True), "LayerNorm is outside the theorem"),
    (lambda: AnalysisTransformer(**KW, trainable_embedding=True), "fixed before S"),
    (lambda: AnalysisTransformer(**KW, variant="swin"), "outside the analysis family"),
    (lambda: AnalysisTransformer(**KW, activation="tanh"), "unknown activation"),
    (lambda: AnalysisTransformer(**dict(KW, head_dim=3), variant="ls"), "even head_dim"),
    (lambda: AnalysisTransformer(**dict(KW, num_heads=3), variant="ls", num_kv_heads=2), "key/value groups"),
])
def test_a_choice_outside_the_theorem_is_refused_at_construction_in_one_line(build, words):
    with pytest.raises(SpecboundError) as ei:
        build()
    assert words in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("build,words", [
    (lambda: Doubled(**KW), "overrides forward()"),
    (_with_layer_norm, "extra parameter 'ln."),
    (_with_hook, "forward hook"),
    (_trainable_table, "trainable parameter"),
    (_changed_table, "changed after the model was built"),
])
def test_a_network_changed_after_construction_is_refused_by_save_and_certify(build, words, tmp_path):
    model = build()
    tokens, labels = np.zeros((4, 6), dtype=np.int64), np.array([1, -1, 1, -1])
    for attempt in (lambda: model.save(tmp_path / "m.safetensors"), lambda: specbound.certify(model, data=(tokens, labels))):
        with pytest.raises(OutsideTheoremError) as ei:
            attempt()
        assert words in str(ei.value) and "\n" not in str(ei.value)
    assert not (tmp_path / "m.safetensors").exists()


def test_a_file_whose_embedding_table_is_not_its_seeds_is_refused_at_the_command_line(tmp_path, capsys):
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open

    path = tmp_path / "m.safetensors"
    AnalysisTransformer(**KW).save(path)
    with safe_open(str(path), "np") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    tensors["embedding.E"] = tensors["embedding.E"] * 1.5
    save_file(tensors, str(path), metadata=meta)
    refused(capsys, ["certify", path, "--n", "100"], tmp_path, "not those of embedding_seed 0")
    with pytest.raises(SpecboundError, match="not those of embedding_seed 0"):
        AnalysisTransformer.load(path)


def test_labels_outside_the_models_classes_are_refused_at_the_command_line(tmp_path, capsys):
    path = tmp_path / "m.safetensors"
    AnalysisTransformer(**KW).save(path)
    np.savez(tmp_path / "S.npz", tokens=np.zeros((4, 6), dtype=np.int64), labels=np.array([0, 1, 1, 0]))
    refused(capsys, ["certify", path, "--data", tmp_path / "S.npz"], tmp_path,
            "'labels' must be -1 or +1 for a model with one read-out vector w", "num_outputs=k")

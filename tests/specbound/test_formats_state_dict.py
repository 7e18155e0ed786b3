"""Weights in memory (state dicts, torch modules, transformers models) read exactly like files."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from specbound.checkpoint import load_weights, open_checkpoint
from specbound.errors import CheckpointError, NonFiniteError, SpecboundError
from specbound.formats.state_dict import InMemorySource, state_sha256
from .test_adapters import H, bert_config, bert_tensors
from .test_formats_sharded import same_weights


def one_line(excinfo, *needles: str) -> None:
    message = str(excinfo.value)
    assert isinstance(excinfo.value, SpecboundError)
    assert message and "\n" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)


def file_version(tmp_path, tensors):
    folder = tmp_path / "f"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(bert_config()))
    return folder


@pytest.mark.parametrize("as_torch", [False, True])
def test_state_dict_equals_file(tmp_path, as_torch):
    tensors = bert_tensors(11)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()} if as_torch else tensors
    same_weights(load_weights(state, num_heads=H), load_weights(file_version(tmp_path, tensors)))
    ckpt = open_checkpoint(state)
    assert ckpt.container == "state-dict" and str(ckpt.path) == "<in-memory state dict>"


def test_transformers_model_uses_its_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(hidden_size=12, num_attention_heads=3, num_hidden_layers=2,
                                  intermediate_size=20, vocab_size=30)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    model.save_pretrained(tmp_path / "saved", safe_serialization=True)
    ckpt = open_checkpoint(model)
    assert ckpt.config["num_attention_heads"] == 3
    assert str(ckpt.path) == "<in-memory BertModel>"
    same_weights(load_weights(model), load_weights(tmp_path / "saved"))


def test_plain_module(tmp_path):
    module = torch.nn.Linear(3, 2)
    ckpt = open_checkpoint(module)
    assert set(ckpt.names()) == {"weight", "bias"} and ckpt.config is None
    np.testing.assert_array_equal(ckpt.tensor("weight"), module.weight.detach().double().numpy())


def test_refusals_are_one_line():
    good = {"w": torch.ones(2, 2)}
    cases = [
        ({"w": torch.empty(2, 2, device="meta")}, ("'w'", "meta device")),
        ({"w": 3.0}, ("'w'", "float", "not a tensor")),
        ({"w": np.array([object()], dtype=object)}, ("'w'", "Python objects")),
        ({"w": torch.eye(2).to_sparse()}, ("'w'", "layout")),
        ({}, ("no tensors",)),
    ]
    for state, needles in cases:
        with pytest.raises(CheckpointError) as ei:
            open_checkpoint(state)
        one_line(ei, "<in-memory state dict>", *needles)
    bad = dict(good, n=torch.tensor([1.0, float("nan")]))
    with pytest.raises(NonFiniteError) as ei:
        open_checkpoint(bad).tensor("n")
    one_line(ei, "'n'", "NaN")
    with pytest.raises(SpecboundError) as ei:
        open_checkpoint(good).tensor("w", (3, 2))
    one_line(ei, "'w'", "expected")


def test_sha256_definition_by_hand():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    state = {"b": b, "a": a}
    digest = hashlib.sha256()
    digest.update(b"a\0float32\x002,3\0" + (24).to_bytes(8, "little") + a.tobytes())
    bits = np.array([0x3FC0, 0xC000], dtype="<u2").tobytes()  # bfloat16 patterns of 1.5, -2
    digest.update(b"b\0bfloat16\x002\0" + (4).to_bytes(8, "little") + bits)
    assert state_sha256(state) == digest.hexdigest()
    assert open_checkpoint(state).sha256() == digest.hexdigest()
    # Any change of a value, a name, a dtype or a shape changes it.
    assert state_sha256({"b": b, "a": a + 1}) != digest.hexdigest()
    assert state_sha256({"b": b, "c": a}) != digest.hexdigest()
    assert state_sha256({"b": b, "a": a.astype(np.float64)}) != digest.hexdigest()
    assert state_sha256({"b": b, "a": a.reshape(3, 2)}) != digest.hexdigest()


def test_labelled_source_prints_as_its_label():
    src = InMemorySource({"w": torch.ones(1)})
    assert str(src) == "<in-memory state dict>"
    assert open_checkpoint(src).names() == ("w",)


# ---------------------------------------------------------------- issue 30: odd state dicts


def test_a_state_dict_that_contains_itself_or_nests_5000_deep_is_one_line():
    state = {k: torch.from_numpy(v) for k, v in bert_tensors(0).items()}
    state["loop"] = state
    with pytest.raises(CheckpointError) as ei:
        load_weights(state, num_heads=H)
    one_line(ei, "contains itself", "'loop'")
    deep: dict = {"w": torch.ones(2)}
    for _ in range(5000):
        deep = {"x": deep}
    with pytest.raises(CheckpointError) as ei:
        load_weights({**bert_tensors(0), "deep": deep}, num_heads=H)
    one_line(ei, "nested deeper than 32")


@pytest.mark.parametrize("as_file", [False, True])
def test_two_entries_that_flatten_to_one_name_are_refused(tmp_path, as_file):
    # {"a": {"b": x}} and {"a.b": y} both name the tensor a.b: which one is the weight cannot be known
    tensors = bert_tensors(0)
    name = "encoder.layer.0.attention.self.query.weight"
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    state["encoder"] = {"layer.0.attention.self.query.weight": torch.zeros_like(state[name])}
    source = state
    if as_file:
        source = tmp_path / "collide.pt"
        torch.save(state, source)
    with pytest.raises(CheckpointError) as ei:
        load_weights(source, num_heads=H)
    one_line(ei, f"'{name}'", "refusing to choose")


def test_tensors_numpy_cannot_hold_enter_the_digest_without_being_read():
    import warnings

    base = {k: torch.from_numpy(v) for k, v in bert_tensors(0).items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex32 and quantized tensors warn that they are experimental
        odd = {
            "extra.float8": torch.tensor([0.5, -2.0]).to(torch.float8_e4m3fn),
            "extra.complex32": torch.zeros(3, dtype=torch.complex32),
            "extra.quantized": torch.quantize_per_tensor(torch.tensor([0.1, 0.2]), 0.1, 0, torch.qint8),
            "extra.conj": torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj(),
        }
    digests = set()
    for key, value in odd.items():
        w = load_weights({**base, key: value}, num_heads=H)  # not read (no layout uses it), yet hashed
        digests.add(w.sha256)
    assert len(digests) == len(odd)
    # the digest is of the values: a conjugate view hashes as the conjugated values it stands for
    plain = torch.tensor([1 - 2j, 3 + 1j], dtype=torch.complex64)
    assert state_sha256({"c": odd["extra.conj"]}) == state_sha256({"c": plain})
    # and of the quantization parameters: the same integers at another scale are another tensor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = torch.quantize_per_tensor(torch.tensor([0.2, 0.4]), 0.2, 0, torch.qint8)
    assert state_sha256({"q": other}) != state_sha256({"q": odd["extra.quantized"]})

"""Engine tasks read only their own tensors (issue 31 item 2), and what they compute is unchanged.

A task of ``certify`` / ``spectra`` covers one layer's matrices of one kind; it must read the
checkpoint tensors those matrices are built from and nothing else of the layer.  The reads are
recorded below the adapters (every value read goes through ``Checkpoint.tensor``; GGUF bytes through
``gguf_file.dequantize``) and compared with a table written here by hand from the Llama layout, and
the GGUF byte ranges with those the ``gguf`` package's own reader finds.  The certificates, spectra
and proxies of tensor-wise tasks are compared byte for byte with those of whole-layer tasks (the
engine's previous reads, still its fall-back) on a small model of each family with layers.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import specbound
import specbound.engine as engine
from specbound.certified.certificate import to_json
from specbound.checkpoint import load_layers, matrix_tensors
from specbound.checkpoint_value import Checkpoint
from specbound.pipeline import certify

from .test_adapters import bert_config, bert_tensors
from .test_checkpoint import write_checkpoint
from .test_engine import gpt2_folder

gguf = pytest.importorskip("gguf")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
llama7b = importlib.import_module("llama7b")  # the 7B benchmark's writer, at small shapes

SMALL = llama7b.Shapes(layers=2, width=256, heads=4, kv_heads=2, ff=512, vocab=64)
"""Two layers, grouped-query attention (4 query heads, 2 key/value groups), Q4_K-sized rows."""

OWN = {"Q": ("q",), "K": ("k",), "V_tilde": ("v", "o"), "G": ("gate",), "U": ("up",), "D": ("down",)}
"""Per matrix kind of the Llama-style analysis model, the projections it is made of."""
HF = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
      "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
GGUF = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output", "gate": "ffn_gate", "up": "ffn_up",
        "down": "ffn_down"}


def own_tensors(fmt: str, layer: int, kind: str) -> set[str]:
    if fmt == "gguf":
        return {f"blk.{layer}.{GGUF[p]}.weight" for p in OWN[kind]}
    return {f"model.layers.{layer}.{HF[p]}.weight" for p in OWN[kind]}


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> dict[str, Path]:
    """The small Llama as float16 safetensors shards, bfloat16 safetensors and GGUF Q4_K."""
    import torch
    from safetensors.torch import save_file

    base = tmp_path_factory.mktemp("llama")
    paths = llama7b.write(base, SMALL, ("safetensors", "gguf"), shard_bytes=600_000, verbose=False)
    folder = base / "bf16"
    folder.mkdir()
    save_file({name: torch.from_numpy(llama7b._value(SMALL, name)).to(torch.bfloat16)
               for name, _ in llama7b.hf_tensors(SMALL)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**llama7b.config_json(SMALL), "torch_dtype": "bfloat16"}))
    return {"float16": paths["safetensors"], "bfloat16": folder, "gguf": paths["gguf"]}


class TaskReads:
    """Every tensor value read, and every GGUF byte range dequantized, per engine task."""

    def __init__(self, monkeypatch) -> None:
        import specbound.formats.gguf_file as gguf_file

        self.tasks: list[dict] = []
        self.current: dict | None = None
        real_tensor, real_dequantize = Checkpoint.tensor, gguf_file.dequantize

        def tensor(ckpt, name, shape=None, **kw):
            out = real_tensor(ckpt, name, shape, **kw)
            if self.current is not None:
                self.current["tensors"].append(name)
                self.current["bytes"] += out.nbytes
            return out

        def dequantize(buf, offset, nbytes, *a):
            if self.current is not None:
                self.current["ranges"].append((offset, nbytes))
            return real_dequantize(buf, offset, nbytes, *a)

        monkeypatch.setattr(Checkpoint, "tensor", tensor)
        monkeypatch.setattr(gguf_file, "dequantize", dequantize)
        for name in ("enclose_task", "spectra_task"):
            monkeypatch.setattr(engine, name, self._wrap(getattr(engine, name)))
        monkeypatch.setattr(engine, "_CACHE", {})
        monkeypatch.setattr(engine, "WHOLE_LAYER_BYTES", 0)  # every layer counts as large here

    def _wrap(self, task):
        def run(source, layer, indices, *rest):
            self.current = {"layer": layer, "indices": indices, "tensors": [], "ranges": [], "bytes": 0}
            try:
                return task(source, layer, indices, *rest)
            finally:
                self.tasks.append(self.current)
                self.current = None
        run.__name__ = task.__name__
        return run


def _gguf_ranges(path: Path) -> dict[str, tuple[int, int]]:
    """(absolute offset, byte count) of every tensor, as the gguf package's reader finds them."""
    reader = gguf.GGUFReader(str(path))
    return {t.name: (int(t.data_offset), int(t.n_bytes)) for t in reader.tensors}


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "gguf"])
@pytest.mark.parametrize("command", ["certify", "spectra"])
def test_each_task_reads_its_own_tensors_and_nothing_else_of_its_layer(llama, monkeypatch, fmt, command):
    path = llama[fmt]
    structure = load_layers(path, ())
    reads = TaskReads(monkeypatch)
    if command == "certify":
        certify(path, n=10**6)
    else:
        specbound.spectra(path)
    assert len(reads.tasks) == 6 * SMALL.layers  # Q, K, V_tilde, G, U, D per layer
    ranges = _gguf_ranges(path) if fmt == "gguf" else {}
    for task in reads.tasks:
        (kind,) = {structure.matrices[j].kind for j in task["indices"]}
        want = own_tensors(fmt, task["layer"], kind)
        assert sorted(task["tensors"]) == sorted(want), (kind, task["layer"])  # each read once, no other
        assert task["bytes"] == sum(8 * int(np.prod(structure_shape(path, n))) for n in want)
        if fmt == "gguf":  # exactly the stored blocks of those tensors, nothing else of the file
            assert sorted(task["ranges"]) == sorted(ranges[n] for n in want)


def structure_shape(path, name: str) -> tuple[int, ...]:
    from specbound.checkpoint import open_checkpoint

    return open_checkpoint(path).shape(name)


def test_the_tensors_behind_each_matrix_are_found_from_the_header(llama):
    weights = load_layers(llama["float16"], ())
    found = matrix_tensors(llama["float16"])
    assert len(found) == len(weights.matrices)
    for m, names in zip(weights.matrices, found):
        assert names == own_tensors("float16", m.layer, m.kind), m.name
    # the proxy view puts [gate | up] side by side: its tensors cannot be told apart, and the task
    # falls back to reading the whole layer (never to a placeholder)
    proxy = dict(zip((m.name for m in load_layers(llama["float16"], (), view="proxy").matrices),
                     matrix_tensors(llama["float16"], view="proxy")))
    assert proxy["L1.M_in"] is None and proxy["L1.M_out"] == own_tensors("float16", 1, "D")


def test_a_small_layer_is_read_whole_once_and_a_large_one_tensor_by_tensor(llama, monkeypatch):
    path = llama["float16"]
    weights = load_layers(path, ())
    source = engine.source_of(path, num_heads=None, view="analysis", sha256=weights.sha256)
    tasks = engine.tasks_of(weights)
    layer_bytes = 8 * sum(m.left.size + m.right.size if m.right is not None else m.left.size
                          for m in weights.matrices if m.layer == 0)
    monkeypatch.setattr(engine, "WHOLE_LAYER_BYTES", layer_bytes)  # at the limit: read whole
    assert engine.task_tensors(source, weights, tasks) == [None] * len(tasks)
    monkeypatch.setattr(engine, "WHOLE_LAYER_BYTES", layer_bytes - 1)
    assert all(r == own_tensors("float16", layer, weights.matrices[idx[0]].kind)
               for (layer, idx), r in zip(tasks, engine.task_tensors(source, weights, tasks)))


def test_a_task_never_computes_on_a_tensor_it_did_not_read(llama):
    from specbound.errors import SpecboundError

    weights = load_layers(llama["float16"], ())
    source = engine.source_of(llama["float16"], num_heads=None, view="analysis", sha256=weights.sha256)
    layer, idx = engine.tasks_of(weights)[0]  # the query heads of layer 0
    with pytest.raises(SpecboundError, match="without the tensors it is built from"):
        engine.enclose_task(source, layer, idx, frozenset(own_tensors("float16", 0, "K")))


# ------------------------------------------------------------------------------------------------ unchanged values


def _families(tmp_path: Path, llama: dict[str, Path]) -> dict[str, Path]:
    bert = write_checkpoint(tmp_path / "bert", bert_tensors(5, gaussian=True), "hf-safetensors", config=bert_config())
    return {"bert": bert, "gpt2": gpt2_folder(tmp_path / "gpt2"), **llama}


def _whole_layers(monkeypatch) -> None:
    """The engine's previous reads: every task reads its whole layer."""
    monkeypatch.setattr(engine, "task_tensors", lambda source, weights, tasks: [None] * len(tasks))
    monkeypatch.setattr(engine, "_CACHE", {})


def _outputs(path: Path) -> tuple[str, ...]:
    engine._CACHE.clear()
    cert = json.dumps(to_json(certify(path, n=10**6)), indent=2, sort_keys=True)
    spectra = json.dumps(specbound.spectra(path).to_dict(values=True), sort_keys=True)
    proxies = json.dumps(specbound.proxies(path).to_dict(), sort_keys=True)
    return cert, spectra, proxies


def test_tensor_wise_tasks_give_the_whole_layer_tasks_bytes_for_every_family(llama, tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "WHOLE_LAYER_BYTES", 0)  # every layer counts as large here
    for family, path in _families(tmp_path, llama).items():
        tensor_wise = _outputs(path)
        with monkeypatch.context() as m:
            _whole_layers(m)
            whole = _outputs(path)
        for what, a, b in zip(("certificate", "spectra", "proxies"), tensor_wise, whole):
            assert a == b, (family, what)

"""A deterministic checkpoint with Llama-2-7B shapes, written layer by layer (issue 31).

Usage:
    .venv/bin/python benchmarks/llama7b.py DIR [--layers K] [--format safetensors|gguf|both]
                                               [--shape N,H,FF] [--shard-gb 5]

Shapes (``LLAMA2_7B``): 32 layers, width 4096, 32 heads of dimension 128 (no grouped keys), gated
feed-forward 11008, vocabulary 32000.  ``--layers K`` writes the first K layers of the same shapes
(the CI-sized and extrapolated runs); ``--shape`` other widths for quick checks of the script.

Two files:

- ``DIR/llama2-7b-shaped/``: a Hugging Face folder as ``Llama-2-7b-hf`` stores it -- ``config.json``,
  float16 safetensors shards of at most ``--shard-gb`` GB (``model-0000i-of-0000n.safetensors``,
  Hugging Face names, embedding first and ``lm_head`` last) and ``model.safetensors.index.json``.
  The shards are streamed: each header is written first from the known shapes, then the tensors
  one at a time, so at most one matrix is in memory (32 layers: 13.5 GB on disk).
- ``DIR/llama2-7b-shaped-q4_k.gguf``: the same weights as a GGUF file with llama.cpp's names, every
  matrix stored as Q4_K (norms F32).  ``gguf`` (0.19) dequantizes Q4_K but cannot quantize it, so
  :func:`q4_k_blocks` encodes it here (llama.cpp's block layout; scales by the simple min/max rule,
  not llama.cpp's search: a valid Q4_K file, quantization error up to one step per entry).  32
  layers: 3.8 GB.

Weights.  A trained matrix's singular values decay; i.i.d. Gaussian entries would give a flat
Marchenko-Pastur spectrum that no enclosure or SVD sees in practice.  Each matrix here is
``W = Q_out diag(s) Q_in^T`` with ``s_i = c (1 + i / 16)^(-alpha)`` (alpha 1.0 for the attention
projections, 0.6 for the feed-forward ones; c sets the entries' root mean square to 0.02) and
orthogonal ``Q`` applied as two rounds of (random signs, orthonormal discrete Hartley transform,
random permutation): exactly orthogonal, O(m n log n) per matrix instead of the O(m n^2) of a
dense random orthogonal factor, deterministic from (seed, layer, tensor).  Rounding to float16
(or Q4_K) adds the storage noise real checkpoints carry.  Embeddings and the output head are
Gaussian (they are not covered matrices); RMSNorm weights are ones.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEED = 20260731


@dataclass(frozen=True)
class Shapes:
    """The shapes of a Llama-style decoder."""

    layers: int = 32
    width: int = 4096
    heads: int = 32
    kv_heads: int = 32
    ff: int = 11008
    vocab: int = 32000

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def with_layers(self, layers: int) -> "Shapes":
        return Shapes(layers, self.width, self.heads, self.kv_heads, self.ff, self.vocab)


LLAMA2_7B = Shapes()
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")
HF_NAMES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
            "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
GGUF_NAMES = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output", "gate": "ffn_gate",
              "up": "ffn_up", "down": "ffn_down"}
ALPHA = {"q": 1.0, "k": 1.0, "v": 1.0, "o": 1.0, "gate": 0.6, "up": 0.6, "down": 0.6}
ENTRY_RMS = 0.02


def projection_shape(shapes: Shapes, name: str) -> tuple[int, int]:
    """(out, in) of a projection, ``torch.nn.Linear`` orientation."""
    n, d, f = shapes.width, shapes.head_dim, shapes.ff
    return {"q": (shapes.heads * d, n), "k": (shapes.kv_heads * d, n), "v": (shapes.kv_heads * d, n),
            "o": (n, shapes.heads * d), "gate": (f, n), "up": (f, n), "down": (n, f)}[name]


# --------------------------------------------------------------------------------------------------
# weights


def _hartley(y: np.ndarray) -> np.ndarray:
    """Orthonormal discrete Hartley transform of every row (last axis): H[k] = (Re F[k] - Im F[k]) / sqrt(n),
    F the DFT; symmetric and its own inverse.  From the real FFT: F[n-k] = conj(F[k])."""
    n = y.shape[-1]
    r = np.fft.rfft(y, axis=-1)
    out = np.empty_like(y)
    half = r.shape[-1]  # n // 2 + 1
    np.subtract(r.real, r.imag, out=out[..., :half])
    # H[n-k] = Re F[k] + Im F[k] for k = 1 .. ceil(n/2) - 1, i.e. out[half:] from k = ceil(n/2)-1 down to 1
    np.add(r.real[..., (n + 1) // 2 - 1:0:-1], r.imag[..., (n + 1) // 2 - 1:0:-1], out=out[..., half:])
    out *= np.asarray(1.0 / np.sqrt(n), dtype=y.dtype)
    return out


def _mix_rows(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``y Q^T`` for a random orthogonal Q (two rounds of signs, Hartley, permutation)."""
    n = y.shape[-1]
    for _ in range(2):
        y *= rng.choice(np.array([-1.0, 1.0], dtype=y.dtype), size=n)
        y = np.take(_hartley(y), rng.permutation(n), axis=-1)
    return y


def spectrum(k: int, alpha: float, rows: int, cols: int) -> np.ndarray:
    """``s_i = c (1 + i/16)^-alpha``, c such that ``sum s_i^2 = rows cols ENTRY_RMS^2``."""
    s = (1.0 + np.arange(k) / 16.0) ** -alpha
    return s * (ENTRY_RMS * np.sqrt(rows * cols) / np.sqrt(np.sum(s * s)))


def projection(shapes: Shapes, layer: int, name: str) -> np.ndarray:
    """float32 (out, in) weight ``Q_out diag(s) Q_in^T`` of one projection, deterministic."""
    rows, cols = projection_shape(shapes, name)
    rng = np.random.default_rng(np.random.SeedSequence([SEED, layer, PROJECTIONS.index(name)]))
    k = min(rows, cols)
    y = np.zeros((rows, cols), dtype=np.float32)
    y[np.arange(k), np.arange(k)] = spectrum(k, ALPHA[name], rows, cols)
    y = _mix_rows(y, rng)  # diag(s) Q_in^T
    return np.ascontiguousarray(_mix_rows(np.ascontiguousarray(y.T), rng).T)  # Q_out (...)


def gaussian(rows: int, cols: int, key: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([SEED, 10**6 + key]))
    return rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(ENTRY_RMS)


# --------------------------------------------------------------------------------------------------
# Q4_K (llama.cpp block_q4_K: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of
# 4-bit quants, for 256 values in 8 sub-blocks of 32; value = d * sc_j * q - dmin * m_j)

QK_K = 256
Q4_K_BYTES = 144


def q4_k_blocks(x: np.ndarray) -> np.ndarray:
    """Q4_K encoding of a float32 (rows, cols) array, cols a multiple of 256: uint8 (rows, cols/256*144)."""
    rows, cols = x.shape
    if cols % QK_K:
        raise ValueError(f"Q4_K needs rows of a multiple of {QK_K} values, got {cols}")
    b = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(b.min(axis=-1), 0.0)  # (B, 8): value = scale * q + lo, q in 0..15
    step = (b.max(axis=-1) - lo) / 15.0
    d = (step.max(axis=-1) / 63.0).astype(np.float16)
    dmin = ((-lo).max(axis=-1) / 63.0).astype(np.float16)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.clip(np.rint(step / d32), 0, 63), 0).astype(np.uint8)
        mn = np.where(dmin32 > 0, np.clip(np.rint(-lo / dmin32), 0, 63), 0).astype(np.uint8)
        unit = (d32 * sc)[:, :, None]
        q = np.where(unit > 0, np.clip(np.rint((b + (dmin32 * mn)[:, :, None]) / unit), 0, 15), 0).astype(np.uint8)
    scales = np.empty((b.shape[0], 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4)
    pairs = q.reshape(-1, 4, 2, 32)  # sub-blocks 2j (low nibble) and 2j+1 (high nibble)
    qs = (pairs[:, :, 0, :] | (pairs[:, :, 1, :] << 4)).reshape(-1, 128)
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), scales, qs], axis=1)
    return out.reshape(rows, cols // QK_K * Q4_K_BYTES)


# --------------------------------------------------------------------------------------------------
# Hugging Face folder (streamed safetensors shards)


def hf_tensors(shapes: Shapes) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor in Hugging Face order."""
    out = [("model.embed_tokens.weight", (shapes.vocab, shapes.width))]
    for layer in range(shapes.layers):
        p = f"model.layers.{layer}."
        out.append((p + "input_layernorm.weight", (shapes.width,)))
        out += [(p + HF_NAMES[n] + ".weight", projection_shape(shapes, n)) for n in PROJECTIONS]
        out.append((p + "post_attention_layernorm.weight", (shapes.width,)))
    out += [("model.norm.weight", (shapes.width,)), ("lm_head.weight", (shapes.vocab, shapes.width))]
    return out


def _value(shapes: Shapes, name: str) -> np.ndarray:
    """The float32 value of the tensor with Hugging Face name ``name`` (the GGUF file holds the
    same values under llama.cpp's names)."""
    if name.endswith("norm.weight"):
        return np.ones(shapes.width, dtype=np.float32)
    if name == "model.embed_tokens.weight":
        return gaussian(shapes.vocab, shapes.width, 0)
    if name == "lm_head.weight":
        return gaussian(shapes.vocab, shapes.width, 1)
    parts = name.split(".")  # model.layers.{l}.{self_attn|mlp}.{x}_proj.weight
    (proj,) = [p for p, n in HF_NAMES.items() if n == ".".join(parts[3:5])]
    return projection(shapes, int(parts[2]), proj)


def config_json(shapes: Shapes) -> dict:
    """config.json of meta-llama/Llama-2-7b-hf (``num_hidden_layers`` = the layers written)."""
    return {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1, "eos_token_id": 2,
            "hidden_act": "silu", "hidden_size": shapes.width, "initializer_range": 0.02,
            "intermediate_size": shapes.ff, "max_position_embeddings": 4096, "model_type": "llama",
            "num_attention_heads": shapes.heads, "num_hidden_layers": shapes.layers,
            "num_key_value_heads": shapes.kv_heads, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
            "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float16",
            "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": shapes.vocab}


def _shard_plan(tensors: list[tuple[str, tuple[int, ...]]], limit: int) -> list[list[tuple[str, tuple[int, ...]]]]:
    shards: list[list] = [[]]
    size = 0
    for name, shape in tensors:
        nbytes = 2 * int(np.prod(shape))
        if shards[-1] and size + nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    return shards


class HFWriter:
    """Streams the Hugging Face folder: each shard's header is written from the known shapes when
    the shard is opened, then its float16 tensors one at a time, in :func:`hf_tensors` order."""

    def __init__(self, folder: Path, shapes: Shapes, shard_bytes: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.shapes = folder, shapes
        self.plan = _shard_plan(hf_tensors(shapes), shard_bytes)
        self.weight_map: dict[str, str] = {}
        self.total = 0
        self.fh = None
        self.pending: list = []
        self.shard = -1

    def _open_next(self) -> None:
        if self.fh is not None:
            self.fh.close()
        self.shard += 1
        tensors = self.plan[self.shard]
        name = f"model-{self.shard + 1:05d}-of-{len(self.plan):05d}.safetensors"
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        for tensor, shape in tensors:
            nbytes = 2 * int(np.prod(shape))
            header[tensor] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            self.weight_map[tensor] = name
        self.total += offset
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self.fh = open(self.folder / name, "wb")
        self.fh.write(struct.pack("<Q", len(raw)))
        self.fh.write(raw)
        self.pending = list(tensors)

    def write(self, name: str, value: np.ndarray) -> None:
        if not self.pending:
            self._open_next()
        expected, shape = self.pending.pop(0)
        assert expected == name and tuple(shape) == value.shape, (expected, name)
        self.fh.write(value.astype(np.float16).tobytes())

    def close(self) -> Path:
        assert not self.pending and self.shard == len(self.plan) - 1
        self.fh.close()
        (self.folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": self.total}, "weight_map": self.weight_map}, indent=2))
        (self.folder / "config.json").write_text(json.dumps(config_json(self.shapes), indent=2))
        return self.folder


def gguf_tensors(shapes: Shapes) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape (out, in)) of every tensor in llama.cpp's order (one to one with
    :func:`hf_tensors`)."""
    out = [("token_embd.weight", (shapes.vocab, shapes.width))]
    for layer in range(shapes.layers):
        p = f"blk.{layer}."
        out.append((p + "attn_norm.weight", (shapes.width,)))
        out += [(p + GGUF_NAMES[n] + ".weight", projection_shape(shapes, n)) for n in PROJECTIONS]
        out.append((p + "ffn_norm.weight", (shapes.width,)))
    out += [("output_norm.weight", (shapes.width,)), ("output.weight", (shapes.vocab, shapes.width))]
    return out


class GGUFQ4KWriter:
    """Streams the GGUF file: metadata and every tensor's info first, then each tensor as it is
    encoded (matrices Q4_K, norms F32), in :func:`gguf_tensors` order."""

    def __init__(self, path: Path, shapes: Shapes) -> None:
        import gguf

        self.path = path
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_name("llama2-7b-shaped (synthetic, specbound benchmarks/llama7b.py)")
        w.add_context_length(4096)
        w.add_embedding_length(shapes.width)
        w.add_block_count(shapes.layers)
        w.add_feed_forward_length(shapes.ff)
        w.add_rope_dimension_count(shapes.head_dim)
        w.add_head_count(shapes.heads)
        w.add_head_count_kv(shapes.kv_heads)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_S)
        w.add_tokenizer_model("llama")
        w.add_token_list([f"<t{i}>" for i in range(shapes.vocab)])  # a vocabulary the reader has to skip
        w.add_token_scores([0.0] * shapes.vocab)
        w.add_token_types([1] * shapes.vocab)
        for name, shape in gguf_tensors(shapes):
            if len(shape) == 1:
                w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])
            else:
                row = shape[1] // QK_K * Q4_K_BYTES
                w.add_tensor_info(name, (shape[0], row), np.dtype(np.uint8), shape[0] * row,
                                  raw_dtype=gguf.GGMLQuantizationType.Q4_K)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        self.writer = w

    def write(self, name: str, value: np.ndarray) -> None:
        self.writer.write_tensor_data(value if value.ndim == 1 else q4_k_blocks(value))

    def close(self) -> Path:
        self.writer.close()
        return self.path


def write(folder: Path, shapes: Shapes, formats: tuple[str, ...], shard_bytes: int = 5 * 10**9,
          verbose: bool = True) -> dict[str, Path]:
    """Write the requested formats into ``folder`` in one pass (each tensor generated once and
    written to every format); returns {format: path}."""
    writers = {}
    if "safetensors" in formats:
        writers["safetensors"] = HFWriter(folder / "llama2-7b-shaped", shapes, shard_bytes)
    if "gguf" in formats:
        writers["gguf"] = GGUFQ4KWriter(folder / "llama2-7b-shaped-q4_k.gguf", shapes)
    t = time.perf_counter()
    for (hf, _), (gg, _) in zip(hf_tensors(shapes), gguf_tensors(shapes)):
        value = _value(shapes, hf)
        for fmt, writer in writers.items():
            writer.write(hf if fmt == "safetensors" else gg, value)
        if verbose and hf.endswith("down_proj.weight"):
            print(f"  {hf} written ({time.perf_counter() - t:.0f} s)", flush=True)
    return {fmt: writer.close() for fmt, writer in writers.items()}


def parse_shape(text: str | None, layers: int) -> Shapes:
    """``--shape N,H,FF`` (head dim N/H, one key/value group per head, vocabulary 32000) or Llama-2-7B."""
    if not text:
        return LLAMA2_7B.with_layers(layers)
    n, h, f = (int(v) for v in text.split(","))
    return Shapes(layers, n, h, h, f, LLAMA2_7B.vocab)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--layers", type=int, default=LLAMA2_7B.layers)
    ap.add_argument("--format", choices=("safetensors", "gguf", "both"), default="both")
    ap.add_argument("--shape", default=None, metavar="N,H,FF", help="other shapes than Llama-2-7B's")
    ap.add_argument("--shard-gb", type=float, default=5.0, help="largest safetensors shard (GB, default 5)")
    args = ap.parse_args(argv)
    formats = ("safetensors", "gguf") if args.format == "both" else (args.format,)
    paths = write(args.dir, parse_shape(args.shape, args.layers), formats, int(args.shard_gb * 10**9))
    for fmt, path in paths.items():
        size = sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size
        print(f"{fmt}: {path} ({size / 2**30:.2f} GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

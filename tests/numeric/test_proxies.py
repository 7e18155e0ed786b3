"""The paper's proxies equal an independent plain float64 computation of docs/design.md section 6.

The reference (``bert_reference.reference_proxies``) reads the tensors straight from the
safetensors file, forms every matrix with numpy, takes one ``np.linalg.svd`` per matrix and loops
over p in Python; it shares no code with ``specbound``.  Agreement is required to relative 1e-9.
"""

import math
import os

import numpy as np
import pytest
import torch
from .bert_reference import reference_proxies, weights_from_bert_tensors, write_random_bert
from safetensors.numpy import load_file

from specbound.matrices import AnalysisWeights, NamedMatrix
from specbound.numeric.proxies import (
    LPHI_PAPER,
    alphas_after,
    contributions,
    layer_lipschitz,
    paper_proxies,
)

REL = 1e-9
FIELDS = ("spectral", "frobenius", "nuclear", "norm_21", "norm_11", "stable_rank", "contribution",
          "gamma", "alpha", "scale")


def assert_matches_reference(result, ref):
    assert result.ours == pytest.approx(ref["ours"], rel=REL, abs=0)
    assert result.edelman == pytest.approx(ref["edelman"], rel=REL, abs=0)
    assert result.m == ref["m"]
    assert len(result.matrices) == len(ref["matrices"])
    for rec in result.matrices:
        want = ref["matrices"][(rec.layer, rec.head, rec.kind)]
        assert rec.numerical_rank == want["numerical_rank"], rec
        assert rec.p_opt == want["p_opt"], rec
        for name in FIELDS:
            assert getattr(rec, name) == pytest.approx(want[name], rel=REL, abs=0), (rec, name)


@pytest.fixture(scope="module", params=[1.0, 0.5], ids=["all-p0", "mixed-p"])
def random_bert(request, tmp_path_factory):
    folder = write_random_bert(str(tmp_path_factory.mktemp("bert")), seed=0, weight_scale=request.param)
    return folder


def test_random_bert_matches_independent_reference(random_bert):
    weights_file = os.path.join(random_bert, "model.safetensors")
    ref = reference_proxies(weights_file, num_layers=2, num_heads=4)
    result = paper_proxies(weights_from_bert_tensors(load_file(weights_file), 2, 4))
    assert_matches_reference(result, ref)


def test_mixed_checkpoint_exercises_interior_p():
    # Guards the fixture: the 0.5 checkpoint must really choose p strictly inside (0, 2).
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        write_random_bert(d, seed=0, weight_scale=0.5)
        ref = reference_proxies(os.path.join(d, "model.safetensors"), 2, 4)
    chosen = {r["p_opt"] for r in ref["matrices"].values()}
    assert 0.0 in chosen and any(0 < p < 2 for p in chosen)


def test_loader_path_matches_reference(random_bert):
    from specbound.checkpoint import load_weights

    ref = reference_proxies(os.path.join(random_bert, "model.safetensors"), 2, 4)
    assert_matches_reference(paper_proxies(load_weights(random_bert, view="proxy")), ref)


@pytest.mark.minilm
def test_minilm_matches_independent_reference(minilm_path):
    from specbound.checkpoint import load_weights

    ref = reference_proxies(os.path.join(minilm_path, "model.safetensors"), num_layers=6, num_heads=12)
    assert_matches_reference(paper_proxies(load_weights(minilm_path, view="proxy")), ref)


# --------------------------------------------------------------------------- the formula's parts


def tiny_network(m_out_value=1.0):
    """L = 1, H = 1, N = d = d_ff = 1: every matrix is 1x1, so every quantity is known by hand."""
    one = lambda x: np.array([[x]])
    mats = (
        NamedMatrix(0, 0, "QK", one(2.0), one(0.25)),  # 0.5
        NamedMatrix(0, 0, "V_tilde", one(3.0), one(1.0)),  # 3
        NamedMatrix(0, -1, "M_in", one(-2.0)),
        NamedMatrix(0, -1, "M_out", one(m_out_value)),
    )
    return AnalysisWeights(mats, num_layers=1, num_heads=1, width=1, head_dim=1, ff_dim=1)


def test_tiny_network_by_hand():
    r = paper_proxies(tiny_network())
    qk, v, m_in, m_out = r.matrices
    # Lip = 1.13 * 2 * 1 * 3 * (1 + 4 * 0.5); alpha of the only layer is the empty product.
    assert r.lipschitz.tolist() == pytest.approx([LPHI_PAPER * 2 * 1 * 3 * 3], rel=1e-15)
    assert [x.alpha for x in r.matrices] == [1.0] * 4
    assert [x.gamma for x in r.matrices] == pytest.approx([2 * 3 * 1 * 2, 1 * 2, 1, 1], rel=1e-15)
    # M_out = [[1]] with scale 1 and N = 1: c(p) = 1 for every p, so the first minimiser p = 0 wins.
    assert m_out.contribution == 1.0 and m_out.p_opt == 0.0
    # Edelman: xi = (1*2*3*0.5)^(2/3) + (1*2*3)^(2/3) + (1*2)^(2/3) + 1^(2/3).
    xi = 3 ** (2 / 3) + 6 ** (2 / 3) + 2 ** (2 / 3) + 1
    assert r.edelman == pytest.approx((1 + xi) ** 1.5, rel=1e-14)
    assert r.ours == pytest.approx(sum(x.contribution for x in r.matrices) + 1.0, rel=1e-15)


def test_contribution_endpoints():
    # c(0) = sqrt(S_0 * N); c(2) = S_2^(1/4) scale^(1/2) N^(3/4).
    s = torch.tensor([[5.0, 7.0]], dtype=torch.float64)
    scale = torch.tensor([3.0], dtype=torch.float64)
    c = contributions(s, scale, torch.tensor([0.0, 2.0], dtype=torch.float64), width=16)
    assert c[0, 0].item() == pytest.approx(math.sqrt(5 * 16), rel=1e-15)
    assert c[0, 1].item() == pytest.approx(7 ** 0.25 * 3 ** 0.5 * 16 ** 0.75, rel=1e-15)


def test_alpha_is_product_over_later_layers():
    lip = torch.tensor([2.0, 3.0, 5.0, 7.0], dtype=torch.float64)
    assert alphas_after(lip).tolist() == [105.0, 35.0, 7.0, 1.0]


def test_layer_lipschitz_sums_heads():
    qk = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    v = torch.tensor([[2.0, 4.0]], dtype=torch.float64)
    got = layer_lipschitz(qk, v, torch.tensor([3.0]).double(), torch.tensor([0.5]).double())
    assert got.item() == pytest.approx(1.13 * 1.5 * (2 * 5 + 4 * 3), rel=1e-15)


def test_missing_matrix_is_reported():
    w = tiny_network()
    broken = AnalysisWeights(w.matrices[:3], 1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="M_out"):
        paper_proxies(broken)


def test_result_dict_has_the_documented_keys():
    d = paper_proxies(tiny_network()).as_dict()
    assert {"ours", "edelman", "matrices"} <= set(d)
    assert set(d["matrices"][0]) == {"layer", "head", "kind", "spectral", "frobenius", "nuclear",
                                     "norm_21", "norm_11", "numerical_rank", "stable_rank", "p_opt",
                                     "contribution", "gamma", "alpha", "scale"}

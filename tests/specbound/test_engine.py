"""The execution engine (specbound.engine): tasks, partial builds, and one local Dask cluster.

The cluster tests compare a run on a 2-worker ``LocalCluster`` with the in-process run of the same
command: the certificate (and the spectra and proxies documents) must be identical byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specbound.adapters.helpers import is_placeholder
from specbound.checkpoint import load_layers, load_weights
from specbound.cli import main
from specbound.engine import InProcess, Source, open_engine, tasks_of
from specbound.errors import NonFiniteError, SpecboundError

from .test_checkpoint import write_checkpoint

W, H, FF, L = 24, 3, 48, 3


def gpt2_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """A small GPT-2 decoder's covered weights (Conv1D layout), deterministic."""
    rng = np.random.default_rng(seed)
    out = {}
    for l in range(L):
        p = f"transformer.h.{l}."
        out[p + "attn.c_attn.weight"] = 0.2 * rng.standard_normal((W, 3 * W)).astype(np.float32)
        out[p + "attn.c_proj.weight"] = 0.2 * rng.standard_normal((W, W)).astype(np.float32)
        out[p + "mlp.c_fc.weight"] = 0.2 * rng.standard_normal((W, FF)).astype(np.float32)
        out[p + "mlp.c_proj.weight"] = 0.2 * rng.standard_normal((FF, W)).astype(np.float32)
    return out


def gpt2_folder(base: Path, tensors=None) -> Path:
    config = {"model_type": "gpt2", "n_layer": L, "n_head": H, "n_embd": W, "activation_function": "gelu_new"}
    return write_checkpoint(base, gpt2_tensors() if tensors is None else tensors, "hf-safetensors", config=config)


# ------------------------------------------------------------------------------------------------ no cluster


def test_partial_build_holds_one_layer_with_the_full_builds_values(tmp_path):
    path = gpt2_folder(tmp_path / "g")
    full = load_weights(path)
    part = load_layers(path, (1,))
    assert part.sha256 == full.sha256 and part.extra == full.extra and part.num_layers == full.num_layers
    assert [m.name for m in part.matrices] == [m.name for m in full.matrices]
    for a, b in zip(full.matrices, part.matrices):
        assert a.scale_sq == b.scale_sq and a.shape == b.shape
        if b.layer == 1:
            assert np.array_equal(a.left, b.left) and (a.right is None or np.array_equal(a.right, b.right))
        else:
            assert is_placeholder(b.left) and (b.right is None or is_placeholder(b.right))
            assert b.left.base is not None and b.left.base.nbytes == 8  # one float64, whatever the shape
    none = load_layers(path, ())
    assert all(is_placeholder(m.left) for m in none.matrices)


def test_a_bad_tensor_is_found_by_the_task_that_reads_its_layer(tmp_path):
    tensors = gpt2_tensors()
    tensors["transformer.h.2.mlp.c_fc.weight"][0, 0] = np.nan
    path = gpt2_folder(tmp_path / "g", tensors)
    load_layers(path, (0, 1))  # the bad layer is not read
    with pytest.raises(NonFiniteError, match="h.2.mlp.c_fc.weight"):
        load_layers(path, (2,))


def test_tasks_cover_every_matrix_once_in_canonical_order(tmp_path):
    weights = load_layers(gpt2_folder(tmp_path / "g"), ())
    tasks = tasks_of(weights)
    assert len(tasks) == 4 * L  # QK group, V_tilde group, M_in, M_out per layer
    flat = [j for _, idx in tasks for j in idx]
    assert flat == list(range(len(weights.matrices)))
    for layer, idx in tasks:
        assert {weights.matrices[j].layer for j in idx} == {layer}
        assert len({weights.matrices[j].kind for j in idx}) == 1


def test_in_process_engine_runs_in_order_with_progress():
    seen = []

    class Bar:
        def advance(self, k):
            seen.append(k)

    engine = InProcess()
    assert engine.map(pow, [(2, 3), (3, 2)], weights=[5, 7], progress=Bar()) == [8, 9]
    assert seen == [5, 7]


@pytest.mark.parametrize("command", ["spectra", "proxies"])
def test_cpu_spectra_in_process_read_one_layer_at_a_time(capsys, tmp_path, monkeypatch, command):
    # without a cluster, spectra and proxies on CPU run the same layer-wise tasks in process: the
    # whole model is never built (peak memory one layer), and the document is the one the
    # whole-model computation gives
    import specbound.checkpoint as checkpoint
    import specbound.engine as engine
    from specbound.numeric.spectra import compute_spectra_numpy

    folder = gpt2_folder(tmp_path)
    whole = compute_spectra_numpy(load_weights(folder))
    built: list = []
    real = checkpoint.load_layers

    def spy(path, layers, **kw):
        built.append(tuple(layers))
        return real(path, layers, **kw)

    def refuse(*a, **k):
        raise AssertionError("the whole model was built")

    monkeypatch.setattr(checkpoint, "load_weights", refuse)
    monkeypatch.setattr(checkpoint, "load_layers", spy)
    monkeypatch.setattr(engine, "_CACHE", {})
    assert main([command, str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(set(built)) == [()] + [(l,) for l in range(L)]
    if command == "spectra":
        assert [row["spectral"] for row in doc["matrices"]] == whole.values[:, 0].tolist()
        assert [row["norm_11"] for row in doc["matrices"]] == whole.norm_11.tolist()


def test_no_cluster_means_no_dask_import():
    import subprocess
    import sys

    code = ("import sys; from specbound.cli import main; main(['certify', '--samples', '50', '--json']); "
            "print('DASK' if any(m.split('.')[0] in ('dask', 'distributed') for m in sys.modules) else 'CLEAN')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("CLEAN")


@pytest.mark.parametrize("argv, needle", [
    (["--workers", "0"], "--workers must be >= 1"),
    (["--workers", "two"], "--workers must be an integer"),
    (["--workers", "2", "--cross-check"], "--cross-check runs in process"),
])
def test_engine_options_are_checked_in_one_line(capsys, argv, needle):
    assert main(["certify", "--samples", "10", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_unreachable_scheduler_is_one_line(capsys):
    assert main(["certify", "--samples", "10", "--scheduler", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot start the scheduler at tcp://127.0.0.1:9" in err[0]


# ------------------------------------------------------------------------------------------------ one cluster


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("distributed")
    with open_engine(workers=2) as engine:
        yield engine


def _broken(x):
    raise ValueError(f"no value for {x}")


def _refused(x):
    raise NonFiniteError(f"tensor {x} has 1 NaN/Inf entry")


def test_a_failing_task_ends_in_one_error_line(cluster):
    with pytest.raises(SpecboundError) as info:
        cluster.map(_broken, [(1,), (2,)])
    text = str(info.value)
    assert "\n" not in text and "_broken failed on a worker: ValueError: no value for" in text
    with pytest.raises(NonFiniteError, match="tensor 3 has 1 NaN/Inf entry"):  # the task's own error, as raised
        cluster.map(_refused, [(3,)])


def test_cluster_results_come_back_in_order(cluster):
    assert cluster.map(pow, [(2, k) for k in range(10)]) == [2**k for k in range(10)]


def _certificate(**kw) -> str:
    from specbound.certified.certificate import to_json
    from specbound.pipeline import certify

    return json.dumps(to_json(certify(**kw)), indent=2)


@pytest.mark.parametrize("forward, samples", [("fast", 400), ("arb", 24)])
def test_cluster_certificate_is_identical_to_the_in_process_one(cluster, forward, samples):
    here = _certificate(samples=samples, forward=forward)
    there = _certificate(samples=samples, forward=forward, engine=cluster)
    assert there == here
    assert json.loads(here)["result"]["is_bound"]


def test_cluster_certificate_of_a_sharded_style_folder(cluster, tmp_path):
    path = gpt2_folder(tmp_path / "g")
    assert _certificate(checkpoint=path, n=10**6, engine=cluster) == _certificate(checkpoint=path, n=10**6)


def test_cluster_bad_tensor_is_the_same_one_line_error(cluster, tmp_path):
    tensors = gpt2_tensors()
    tensors["transformer.h.2.mlp.c_fc.weight"][0, 0] = np.inf
    path = gpt2_folder(tmp_path / "g", tensors)
    from specbound.pipeline import certify

    with pytest.raises(NonFiniteError) as here:
        certify(path, n=1000)
    with pytest.raises(NonFiniteError) as there:
        certify(path, n=1000, engine=cluster)
    assert str(there.value) == str(here.value)


@pytest.mark.parametrize("command", ["spectra", "proxies"])
def test_cluster_spectra_and_proxies_are_identical(capsys, cluster, tmp_path, command, monkeypatch):
    import specbound.engine as engine_module

    path = str(gpt2_folder(tmp_path / "g"))
    assert main([command, path, "--json"]) == 0
    here = capsys.readouterr().out
    # the command opens its own engine: hand it the module's cluster instead of starting another
    from contextlib import contextmanager

    @contextmanager
    def reuse(args):
        yield cluster

    monkeypatch.setattr(engine_module, "engine_of_args", reuse)
    assert main([command, path, "--json", "--workers", "2"]) == 0
    assert capsys.readouterr().out == here


def test_api_spectra_and_proxies_on_the_cluster(cluster, tmp_path):
    import specbound

    path = str(gpt2_folder(tmp_path / "g"))
    assert specbound.spectra(path, engine=cluster).to_dict(values=True) == specbound.spectra(path).to_dict(values=True)
    assert specbound.proxies(path, engine=cluster).to_dict() == specbound.proxies(path).to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("sig, rc, line", [(15, 143, "specbound: terminated"), (2, 130, "specbound: interrupted")])
def test_signals_leave_no_cluster_worker_behind(sig, rc, line):
    import subprocess
    import sys
    import time

    from .test_bad_input_cli import _alive, _children

    proc = subprocess.Popen([sys.executable, "-m", "specbound", "certify", "--samples", "400", "--forward", "arb",
                             "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        kids: set[int] = set()
        while time.monotonic() < deadline and len(kids) < 3 and proc.poll() is None:
            kids = set(_children(proc.pid))
            time.sleep(0.2)
        if len(kids) < 3:
            pytest.skip("the local cluster did not start here")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    assert not any(_alive(k) for k in kids), "a cluster process outlived the command"
    assert proc.returncode == rc
    assert err.decode().strip().splitlines() == [line]

"""The execution engine (specbound.engine): tasks, partial builds, and the three engines.

The engine tests compare a run on the local pool (``workers=2``) and on a 2-worker Dask
``LocalCluster`` (``scheduler=``) with the in-process run of the same command: the certificate (and
the spectra and proxies documents) must be identical byte for byte.
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


def test_task_enclosures_pickle_in_their_exact_wire_form(tmp_path):
    import pickle

    from specbound.engine import _Enclosures, enclose_task, source_of

    path = gpt2_folder(tmp_path / "g")
    weights = load_layers(path, ())
    layer, idx = tasks_of(weights)[0]
    encs, _ = enclose_task(source_of(path, num_heads=None, view="analysis", sha256=weights.sha256), layer, idx)
    back = pickle.loads(pickle.dumps(encs))
    assert isinstance(back, _Enclosures) and len(back) == len(encs) == len(idx)
    for a, b in zip(encs, back):
        for x, y in zip(a.lower + a.upper, b.lower + b.upper):
            assert x.mid() == y.mid() and x.rad() == y.rad()  # bit for bit, not just overlapping


def test_in_process_engine_runs_in_order_with_progress_task_by_task():
    seen = []

    class Bar:
        def advance(self, k):
            seen.append(("done", k))

    def task(x, y):
        seen.append(("run", x))
        return x**y

    engine = InProcess()
    assert engine.map(task, [(2, 3), (3, 2)], weights=[5, 7], progress=Bar()) == [8, 9]
    # progress advances after each task, before the next one runs (one task in flight)
    assert seen == [("run", 2), ("done", 5), ("run", 3), ("done", 7)]


def test_in_process_errors_propagate_as_raised():
    with pytest.raises(ValueError, match="no value for 1"):  # a bug keeps its own type and traceback
        InProcess().map(_broken, [(1,), (2,)])


@pytest.mark.parametrize("how", ["cli spectra", "cli proxies", "api spectra", "api proxies"])
def test_cpu_spectra_in_process_read_one_layer_at_a_time(capsys, tmp_path, monkeypatch, how):
    # spectra and proxies on CPU run the layer-wise tasks in process, from the command and from the
    # API alike: the whole model is never built (peak memory one layer), and the values are those of
    # the whole-model computation
    import specbound
    from specbound.numeric.spectra import compute_spectra_numpy

    folder = gpt2_folder(tmp_path)
    command = how.split()[1]
    whole = compute_spectra_numpy(load_weights(folder), products="factored")  # as spectra takes them
    built = _spy_on_builds(monkeypatch)
    if how.startswith("cli"):
        assert main([command, str(folder), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
    else:
        doc = getattr(specbound, command)(str(folder)).to_dict()
    assert sorted(set(built)) == [()] + [(l,) for l in range(L)]
    if command == "spectra":
        assert [row["spectral"] for row in doc["matrices"]] == whole.values[:, 0].tolist()
        assert [row["norm_11"] for row in doc["matrices"]] == whole.norm_11.tolist()


def _spy_on_builds(monkeypatch) -> list:
    """Record the layers of every partial build; a whole-model build fails the test."""
    import specbound.api  # noqa: F401 - imported before the patch: it binds load_weights by name
    from specbound.partial import layer_of_name
    import specbound.checkpoint as checkpoint
    import specbound.engine as engine
    import specbound.pipeline as pipeline

    built: list = []
    real = checkpoint.load_layers

    def spy(path, layers, **kw):
        # the layers a build reads: those it keeps whole, and those of the tensors it names
        named = {layer_of_name(t) for t in kw.get("tensors", ())}
        built.append(tuple(sorted(set(layers) | named)))
        return real(path, layers, **kw)

    def refuse(*a, **k):
        raise AssertionError("the whole model was built")

    for module in (checkpoint, pipeline):
        monkeypatch.setattr(module, "load_weights", refuse)
        monkeypatch.setattr(module, "load_layers", spy)
    monkeypatch.setattr(engine, "_CACHE", {})
    return built


def test_certify_without_data_reads_one_layer_at_a_time_in_process_too(tmp_path, monkeypatch):
    from specbound.pipeline import certify

    folder = gpt2_folder(tmp_path)
    expected = _certificate(checkpoint=folder, n=10**6)
    built = _spy_on_builds(monkeypatch)
    assert json.dumps(_to_json(certify(folder, n=10**6)), indent=2) == expected
    assert sorted(set(built)) == [()] + [(l,) for l in range(L)]


def test_no_engine_means_no_dask_import():
    import subprocess
    import sys

    code = ("import sys; from specbound.cli import main; main(['certify', '--samples', '50', '--json']); "
            "main(['certify', '--samples', '50', '--json', '--workers', '2']); "
            "print('DASK' if any(m.split('.')[0] in ('dask', 'distributed') for m in sys.modules) else 'CLEAN')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("CLEAN")


@pytest.mark.parametrize("argv, needle", [
    (["--workers", "0"], "--workers must be >= 1"),
    (["--workers", "two"], "--workers must be an integer"),
    (["--workers", "100000"], "--workers must be at most"),  # issue 30: no pool of 100000 processes
])
def test_engine_options_are_checked_in_one_line(capsys, monkeypatch, argv, needle):
    _no_pool(monkeypatch)
    assert main(["certify", "--samples", "10", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


@pytest.mark.parametrize("options, needle", [
    (dict(workers=0), "workers must be an integer >= 1, got 0"),
    (dict(workers=2.5), "workers must be an integer >= 1, got 2.5"),
    (dict(workers=100000), "workers must be at most"),
    (dict(workers=2, scheduler="tcp://127.0.0.1:9"), "give one of workers / scheduler, not several"),
    (dict(workers=2, engine=InProcess()), "give one of engine / workers, not several"),
])
def test_api_engine_options_are_checked_in_one_line(monkeypatch, options, needle):
    from specbound.pipeline import certify

    _no_pool(monkeypatch)
    with pytest.raises(SpecboundError) as info:
        certify(samples=10, **options)
    assert str(info.value).startswith(needle) and "\n" not in str(info.value)


def _no_pool(monkeypatch) -> None:
    """Refused options must not start a pool (were one of 100000 processes started, the test fails
    at once instead of forking them)."""
    import specbound.pool

    def refuse(workers):
        raise AssertionError(f"a pool of {workers} processes was started")

    monkeypatch.setattr(specbound.pool, "start", refuse)


def test_unreachable_scheduler_is_one_line(capsys):
    assert main(["certify", "--samples", "10", "--scheduler", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the scheduler at tcp://127.0.0.1:9" in err[0]


def test_in_memory_weights_on_workers_are_refused_in_one_line(tmp_path):
    import specbound

    state = {k: v for k, v in gpt2_tensors().items()}
    with pytest.raises(SpecboundError) as info:
        specbound.spectra(state, num_heads=H, workers=2)
    assert str(info.value) == ("workers open the checkpoint by its path: in-memory weights run in process "
                               "(without workers or a scheduler)")


# ------------------------------------------------------------------------------------------------ engines


@pytest.fixture(scope="module")
def pool():
    with open_engine(workers=2) as engine:
        yield engine


@pytest.fixture(scope="module")
def dask_cluster():
    """A 2-worker Dask LocalCluster of single-threaded processes (the test's, not the engine's)."""
    distributed = pytest.importorskip("distributed")
    import logging

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def dask(dask_cluster):
    with open_engine(scheduler=dask_cluster.scheduler_address) as engine:
        yield engine


@pytest.fixture(params=["pool", "dask"])
def engine(request):
    return request.getfixturevalue(request.param)


def _broken(x):
    raise ValueError(f"no value for {x}")


def _refused(x):
    raise NonFiniteError(f"tensor {x} has 1 NaN/Inf entry")


def test_a_failing_task_ends_in_one_error_line(engine):
    with pytest.raises(SpecboundError) as info:
        engine.map(_broken, [(1,), (2,)])
    text = str(info.value)
    assert "\n" not in text and "_broken failed on a worker: ValueError: no value for" in text
    with pytest.raises(NonFiniteError, match="tensor 3 has 1 NaN/Inf entry"):  # the task's own error, as raised
        engine.map(_refused, [(3,)])
    assert engine.map(pow, [(2, 5)]) == [32]  # and the engine still runs tasks afterwards


def _die(x):
    import os

    os._exit(3)  # as a worker killed by the kernel would: no exception, no cleanup


def test_a_pool_worker_that_dies_ends_in_one_line_and_the_pool_starts_again(pool):
    with pytest.raises(SpecboundError) as info:
        pool.map(_die, [(1,)])
    assert str(info.value).startswith("_die: a worker died on this task (out of memory?)")
    assert "\n" not in str(info.value)
    assert pool.map(pow, [(3, 2)]) == [9]


def test_results_come_back_in_order(engine):
    assert engine.map(pow, [(2, k) for k in range(10)]) == [2**k for k in range(10)]


def _to_json(result) -> dict:
    from specbound.certified.certificate import to_json

    return to_json(result)


def _certificate(**kw) -> str:
    from specbound.pipeline import certify

    return json.dumps(_to_json(certify(**kw)), indent=2)


@pytest.mark.parametrize("forward, samples", [("fast", 400), ("arb", 24)])
def test_certificate_is_byte_identical_in_process_on_the_pool_and_on_dask(engine, forward, samples):
    here = _certificate(samples=samples, forward=forward)
    there = _certificate(samples=samples, forward=forward, engine=engine)
    assert there == here
    assert json.loads(here)["result"]["is_bound"]


def test_certificate_of_a_sharded_style_folder_is_byte_identical(engine, tmp_path):
    path = gpt2_folder(tmp_path / "g")
    assert _certificate(checkpoint=path, n=10**6, engine=engine) == _certificate(checkpoint=path, n=10**6)


def test_a_bad_tensor_is_the_same_one_line_error(engine, tmp_path):
    tensors = gpt2_tensors()
    tensors["transformer.h.2.mlp.c_fc.weight"][0, 0] = np.inf
    path = gpt2_folder(tmp_path / "g", tensors)
    from specbound.pipeline import certify

    with pytest.raises(NonFiniteError) as here:
        certify(path, n=1000)
    with pytest.raises(NonFiniteError) as there:
        certify(path, n=1000, engine=engine)
    assert str(there.value) == str(here.value)


@pytest.mark.parametrize("command", ["spectra", "proxies", "certify"])
def test_commands_print_the_same_bytes_on_every_engine(capsys, dask_cluster, tmp_path, command):
    path = str(gpt2_folder(tmp_path / "g"))
    more = ["--n", "1000000"] if command == "certify" else []
    outputs = []
    for options in ([], ["--workers", "2"], ["--scheduler", dask_cluster.scheduler_address]):
        assert main([command, path, "--json", *more, *options]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[1] == outputs[0] and outputs[2] == outputs[0]


def test_api_spectra_and_proxies_on_every_engine(engine, tmp_path):
    import specbound

    path = str(gpt2_folder(tmp_path / "g"))
    assert specbound.spectra(path, engine=engine).to_dict(values=True) == specbound.spectra(path).to_dict(values=True)
    assert specbound.proxies(path, engine=engine).to_dict() == specbound.proxies(path).to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("sig, rc, line", [(15, 143, "specbound: terminated"), (2, 130, "specbound: interrupted")])
def test_signals_end_a_run_on_a_scheduler_in_one_line(dask_cluster, sig, rc, line):
    # the command is a client of the cluster: a signal ends it in one line, its tasks are cancelled,
    # and the cluster (the user's) keeps its workers
    import subprocess
    import sys
    import time

    from distributed import Client

    with Client(dask_cluster.scheduler_address, timeout=30) as watcher:
        proc = subprocess.Popen([sys.executable, "-m", "specbound", "certify", "--samples", "400", "--forward", "arb",
                                 "--scheduler", dask_cluster.scheduler_address],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and not any(watcher.processing().values()):
                time.sleep(0.2)
            if proc.poll() is not None or not any(watcher.processing().values()):
                pytest.skip("no task reached the cluster here")
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == rc
        assert err.decode().strip().splitlines() == [line]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(watcher.processing().values()):
            time.sleep(0.2)
        assert not any(watcher.processing().values()), "the command's tasks outlived it"
        assert len(watcher.scheduler_info()["workers"]) == 2


# ------------------------------------------------------------------------------------------------ issue 30: inputs


def _swap_after_the_structure(monkeypatch, path: Path, replacement: Path) -> None:
    """Replace ``path``'s file by ``replacement`` once the client has read the structure (and hashed
    it), before any task opens it: every worker then sees another file at the same path."""
    import os
    import shutil

    import specbound.pipeline as pipeline

    real = pipeline.load_layers

    def then_swap(*a, **k):
        out = real(*a, **k)
        tmp = path.with_name(path.name + ".swap")
        shutil.copy(replacement, tmp)
        os.replace(tmp, path)
        return out

    monkeypatch.setattr(pipeline, "load_layers", then_swap)


def test_a_task_that_reads_other_bytes_than_the_client_fails(tmp_path):
    from specbound.engine import enclose_task, source_of

    path = gpt2_folder(tmp_path / "g")
    weights = load_layers(path, ())
    layer, idx = tasks_of(weights)[0]
    enclose_task(source_of(path, num_heads=None, view="analysis", sha256=weights.sha256), layer, idx)
    with pytest.raises(SpecboundError, match="other bytes than the client") as info:
        enclose_task(source_of(path, num_heads=None, view="analysis", sha256="0" * 64), layer, idx)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("options", [[], ["--workers", "2"]])
def test_a_worker_that_sees_another_file_at_the_same_path_fails_the_run(capsys, tmp_path, monkeypatch, options):
    # the tasks (in process, or on pool workers forked after the swap) open the path and find other
    # bytes: one line, exit 2, no certificate (before, the certificate named the client's sha256 over
    # the enclosures of the other weights)
    path = gpt2_folder(tmp_path / "g")
    other = gpt2_folder(tmp_path / "h", gpt2_tensors(seed=1))  # same shapes, other weights
    _swap_after_the_structure(monkeypatch, path / "model.safetensors", other / "model.safetensors")
    out = tmp_path / "cert.json"
    assert main(["certify", str(path), "--n", "1000000", "--out", str(out), *options]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other bytes than the client" in err[0], err
    assert not out.exists()


def test_a_dask_worker_that_sees_another_file_fails_the_run(dask, tmp_path, monkeypatch):
    from specbound.pipeline import certify

    path = gpt2_folder(tmp_path / "g")
    other = gpt2_folder(tmp_path / "h", gpt2_tensors(seed=1))
    _swap_after_the_structure(monkeypatch, path / "model.safetensors", other / "model.safetensors")
    with pytest.raises(SpecboundError, match="other bytes than the client") as info:
        certify(path, n=10**6, engine=dask)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------------ issue 30: no hang


def _bounded(code: str, timeout: float = 120):
    """Run ``code`` in a fresh interpreter with ``NO_WORKER_SECONDS = 2``; a hang fails the test
    after ``timeout`` seconds instead of blocking the suite."""
    import subprocess
    import sys

    prelude = "import specbound.engine as e; e.NO_WORKER_SECONDS = 2.0\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def scheduler_alone():
    """A Dask scheduler with no worker (the test's own)."""
    distributed = pytest.importorskip("distributed")
    import logging

    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster:
        yield cluster.scheduler_address


def test_a_scheduler_with_no_worker_ends_in_one_line(scheduler_alone, tmp_path):
    path = gpt2_folder(tmp_path / "g")
    out = _bounded(f"from specbound.cli import main; raise SystemExit(main(['spectra', {str(path)!r}, "
                   f"'--scheduler', {scheduler_alone!r}]))")
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1 and "no worker for 2 s" in err[0], out.stderr


def test_a_run_whose_only_worker_dies_ends_in_one_line(scheduler_alone):
    # a worker without a nanny, killed mid-task: nothing restarts it, and the client must not wait forever
    import signal
    import subprocess
    import sys
    import threading

    from distributed import Client

    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", scheduler_alone, "--no-nanny",
                               "--nthreads", "1", "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Client(scheduler_alone, timeout=30) as watcher:
            watcher.wait_for_workers(1, timeout=60)
        killer = threading.Timer(8.0, worker.send_signal, (signal.SIGKILL,))
        killer.start()
        out = _bounded("import time\nfrom specbound.errors import SpecboundError\n"
                       f"with e.open_engine(scheduler={scheduler_alone!r}) as engine:\n"
                       "    try:\n        engine.map(time.sleep, [(300,)])\n"
                       "    except SpecboundError as exc:\n        print('ERROR', exc)\n")
        killer.cancel()
        assert out.returncode == 0 and out.stdout.startswith("ERROR") and "no worker for 2 s" in out.stdout, out
    finally:
        worker.kill()
        worker.wait()


# ------------------------------------------------------------------------------------------------ issue 30: Ctrl-C


def test_ctrl_c_while_pool_workers_start_prints_no_worker_traceback():
    # the terminal sends Ctrl-C to the whole process group; a worker that received it before its
    # initializer ignored SIGINT printed a KeyboardInterrupt traceback.  The window is widened here
    # (a slow step of the child's bootstrap, before the initializer), so the signal surely lands in
    # it, and the parent waits before stopping the pool, so a traceback would have time to print.
    import signal
    import subprocess
    import sys

    code = """
import os, signal, time
import multiprocessing.util as util
import specbound.pool as pool
real = util._close_stdin
def slow():
    time.sleep(1.5)
    real()
util._close_stdin = slow
executor = pool.start(2)
try:
    executor.submit(pow, 2, 3)
    time.sleep(0.5)
    os.killpg(0, signal.SIGINT)
    time.sleep(5)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    time.sleep(3)
finally:
    pool.terminate(executor)
"""
    # a run started in the background of a script inherits SIGINT ignored (POSIX) and Python keeps it
    # so: give the child the default disposition a terminal gives it
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert out.stdout.strip() == "interrupted", out
    assert "Traceback" not in out.stderr and "KeyboardInterrupt" not in out.stderr, out.stderr

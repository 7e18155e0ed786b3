"""benchmarks/gpu_check.sh, the CUDA check of the numeric path, on a machine without a GPU: the shell
wrapper parses, and its CPU fall-back (``--cpu``) runs the same checks and reports a disagreement."""

from __future__ import annotations

import dataclasses
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SMALL = ["--layers", "1", "--width", "64", "--heads", "2"]


def test_the_shell_wrapper_is_valid_bash():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    assert subprocess.run([bash, "-n", str(BENCH / "gpu_check.sh")]).returncode == 0


def test_the_cpu_fall_back_runs_every_check_and_passes_through_the_wrapper():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([bash, str(BENCH / "gpu_check.sh"), "--cpu", *SMALL], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "CPU fall-back" in run.stdout
    assert "gpu_check: OK" in run.stdout
    assert "plain float64 svdvals" in run.stdout


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("gpu_check")


def test_without_cuda_and_without_the_fall_back_it_says_so_and_succeeds(gpu_check, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 0
    assert "no CUDA device available" in capsys.readouterr().out


def test_a_device_bound_off_by_more_than_the_tolerance_fails_the_check(gpu_check, monkeypatch, capsys):
    real = gpu_check.evaluate

    def skewed(w, st, plan=None, **kw):
        out = real(w, st, plan, **kw)
        if "device" in kw:  # the device's float64 path, not the CPU reference
            return dataclasses.replace(out, bound=out.bound * (1 + 1e-8))
        return out

    monkeypatch.setattr(gpu_check, "evaluate", skewed)
    assert gpu_check.main(["--cpu", *SMALL]) == 1
    out = capsys.readouterr().out
    assert "gpu_check: FAILED" in out and "bound" in out

"""examples/k3_loader.py runs as a user runs it: a 3-class specbound.nn model trained in a plain PyTorch
loop, certified from its training sample as arrays, as a DataLoader (streamed) and through files, the
three certificates equal and verify VALID from the loader.  The reduced run is in the default suite; the
full run, whose certified bound must be non-vacuous, is marked slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
K3 = ROOT / "examples" / "k3_loader.py"


def _run(out: Path, *flags: str, timeout: int) -> tuple[str, dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(K3), "--out", str(out), *flags], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout, json.loads((out / "figures.json").read_text())


def test_the_k3_example_certifies_arrays_loader_and_files_alike_and_verifies(tmp_path):
    log, figures = _run(tmp_path / "k3", "--quick", timeout=300)
    cert = json.loads((tmp_path / "k3" / "certificate.json").read_text())
    assert "arrays, DataLoader and files agree" in log and "verify from the loader: VALID" in log
    assert figures["n"] == 4000 and figures["k"] == 3 and cert["architecture"]["num_outputs"] == 3
    assert figures["bound"] == cert["result"]["bound_upper"]
    assert "(vacuous: >= 1)" in log  # the quick run's Rademacher route is >= 1 and is called so


@pytest.mark.slow
def test_the_k3_example_certifies_a_non_vacuous_bound(tmp_path):
    log, figures = _run(tmp_path / "k3", timeout=3600)
    assert figures["label"] == "certified bound" and figures["bound"] < 1.0
    assert figures["verify"] == "VALID"

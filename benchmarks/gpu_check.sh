#!/usr/bin/env bash
# CUDA check of the numeric path: BERT-base shapes on CUDA, cross-checked against CPU float64,
# with timings.  No network, no installs; a few minutes.  Exit 0 with a message when no CUDA.
# Usage: benchmarks/gpu_check.sh   (GPU_CHECK_LAYERS=2 for a quicker run)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then PY="$(command -v python3)"; fi
exec timeout 900 "$PY" benchmarks/gpu_check.py "$@"

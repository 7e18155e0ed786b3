#!/usr/bin/env bash
# CUDA check of the numeric path: BERT-base shapes on CUDA, cross-checked against CPU float64,
# with timings.  No network, no installs; a few minutes.  Exit 0 with a message when no CUDA.
# Usage: benchmarks/gpu_check.sh [--layers 2]   (--cpu: the same checks with torch on the CPU, as CI runs them)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then PY="$(command -v python3)"; fi
exec timeout 900 "$PY" benchmarks/gpu_check.py "$@"

#!/usr/bin/env bash
# Sets up loopscribe in ./.venv on a fresh machine: CPU torch first (so nothing pulls a CUDA build),
# then the package with its test and Triton extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# torch first: a bare torch requirement on a machine without torch resolves to a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet "torch==${TORCH_VERSION}"
.venv/bin/python -m pip install --quiet -e ".[dev,triton]"
echo "loopscribe is set up in .venv (torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"

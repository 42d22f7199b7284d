#!/usr/bin/env bash
# Sets up loopscribe in ./.venv on a fresh machine: CPU torch first (so nothing pulls a CUDA build), then the
# package with every extra the test suite uses, then KenLM's Python module built for n-grams up to order 10.
# Safe to run again. SETUP_SKIP_APT=1 skips the Debian packages (espeak-ng and sox, for synthetic speech).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

if [ "${SETUP_SKIP_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if ! command -v espeak-ng >/dev/null || ! command -v sox >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check "$@"; }
# torch first: a bare torch requirement on a machine without torch resolves to a multi-GB CUDA build.
pip install --quiet "torch==${TORCH_VERSION}"
pip install --quiet -c constraints.txt -e ".[dev,triton,lm,nemo,ray]"
# KenLM's query module (the peer the n-gram LM is checked against) compiles for order <= 6 unless told.
if ! .venv/bin/python -c "import kenlm" 2>/dev/null; then
  MAX_ORDER=10 pip install --quiet --no-cache-dir "kenlm==0.3.0"
fi
echo "loopscribe is set up in .venv (torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"

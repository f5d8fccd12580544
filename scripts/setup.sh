#!/usr/bin/env bash
# Idempotent set-up: a local virtual environment (.venv) with the pinned torch
# (2.14.1 with torchvision 0.29.1, from this machine's disk), the build tools, and
# torch_tpu itself built by CMake against that torch (no build isolation).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Debian's packages: clang 14 with its sanitizer and libFuzzer runtimes for
# the test command's fuzzing step. (The matrix unit's oneDNN comes from PyPI,
# requirements.txt.)
if ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  PKGS="clang-14 libclang-rt-14-dev"
  $SUDO apt-get install -y -q $PKGS >/dev/null ||
    { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q $PKGS >/dev/null; }
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --disable-pip-version-check -r requirements.txt
# vLLM and what its paths import, without its own pins (requirements-vllm.txt says why).
python -m pip install -q --disable-pip-version-check --no-deps -r requirements-vllm.txt
# Rebuilds incrementally (build/py keeps CMake's state).
python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
python -c "import torch, torch_tpu; assert torch.tpu.is_available()"

#!/usr/bin/env bash
# Every test: the runtime's C tests (plain, then under AddressSanitizer +
# UndefinedBehaviorSanitizer), then the Python test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
JOBS=$(nproc)

echo "== C runtime tests"
cmake -S . -B build/c -DTPU_BUILD_BRIDGE=OFF -DPython3_EXECUTABLE="$(which python)" >/dev/null
cmake --build build/c -j "$JOBS"
build/c/tpu_runtime_tests

echo "== C runtime tests under ASan+UBSan"
cmake -S . -B build/asan -DTPU_BUILD_BRIDGE=OFF -DTPU_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug -DPython3_EXECUTABLE="$(which python)" >/dev/null
cmake --build build/asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  build/asan/tpu_runtime_tests

echo "== Python tests"
python -m pytest -q tests "$@"

echo "== Python tests again in DEFER_AND_FUSE mode (the model sweep runs once, above)"
TORCH_TPU_DEFER_AND_FUSE=1 python -m pytest -q -p no:cacheprovider tests \
  --deselect tests/test_model_sweep.py "$@"

#!/usr/bin/env bash
# Every test: the runtime's C tests (plain, then under AddressSanitizer +
# UndefinedBehaviorSanitizer, then under ThreadSanitizer), a bounded libFuzzer
# run on the public C API, then the Python test suite.
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

# A race fails the step (halt_on_error). unique_table is left out: its
# reference (tpu_unique_reference, up to cubic in the input's length, on one
# thread) takes 530 of the whole suite's 740 s under TSan; it ran clean when
# this step was added.
echo "== C runtime tests under TSan"
cmake -S . -B build/tsan -DTPU_BUILD_BRIDGE=OFF -DTPU_TSAN=ON \
  -DCMAKE_BUILD_TYPE=Debug -DPython3_EXECUTABLE="$(which python)" >/dev/null
cmake --build build/tsan -j "$JOBS"
# Without address-space randomisation (setarch -R): TSan needs its fixed
# layout, which a kernel with high vm.mmap_rnd_bits can break.
# oneDNN's accesses on its OpenMP team are suppressed (runtime/tests/tsan.supp:
# libgomp's happens-before is invisible to TSan).
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions="$PWD/runtime/tests/tsan.supp" \
  setarch "$(uname -m)" -R build/tsan/tpu_runtime_tests -unique_table

echo "== Fuzzing the public C API (libFuzzer, 60 s, from the saved corpus)"
CC=clang-14 CXX=clang++-14 cmake -S . -B build/fuzz -DTPU_BUILD_BRIDGE=OFF -DTPU_BUILD_TESTS=OFF \
  -DTPU_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DPython3_EXECUTABLE="$(which python)" >/dev/null
cmake --build build/fuzz -j "$JOBS"
fuzz_dir=$(mktemp -d)
cp runtime/fuzz/corpus/* "$fuzz_dir"/
build/fuzz/tpu_fuzz_node -max_total_time="${TPU_FUZZ_SECONDS:-60}" -timeout=20 -rss_limit_mb=4096 \
  -artifact_prefix="$fuzz_dir/" -print_final_stats=1 "$fuzz_dir" 2>&1 | grep -v "^#\|NEW_FUNC" || true
if find "$fuzz_dir" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | grep -q .; then
  echo "fuzzing found a failing input (kept in $fuzz_dir; add it to runtime/fuzz/corpus once fixed)"
  exit 1
fi
rm -rf "$fuzz_dir"

echo "== Python tests"
python -m pytest -q tests "$@"

# PyTorch's CPU reference computes half types differently on CPUs with
# AVX-512 (oneDNN: float32 sums, one rounding) and without (float16 column
# sums rounded on the way): on an AVX-512 machine the parity tests also run
# against the AVX2 reference, where the float64 arbitration decides
# (tools/coverage.py, as_close_as_cpu). On an AVX2 machine it is the same run.
cap=$(python -c "import torch; print(torch.backends.cpu.get_cpu_capability())" 2>/dev/null)
if [ "$cap" != "AVX2" ] && [ "$cap" != "DEFAULT" ]; then
  echo "== Parity tests again against PyTorch's AVX2 CPU reference (this CPU: $cap)"
  ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python -m pytest -q -p no:cacheprovider \
    tests -k "opinfo or parity or round_once" "$@"
fi

# Every flush that repeats an earlier recording (the flush memo) is also
# compiled in full and compared (TORCH_TPU_DEFER_MEMO_CHECK).
echo "== Python tests again in DEFER_AND_FUSE mode (the model sweep runs once, above)"
TORCH_TPU_DEFER_AND_FUSE=1 TORCH_TPU_DEFER_MEMO_CHECK=1 python -m pytest -q -p no:cacheprovider tests \
  --deselect tests/test_model_sweep.py "$@"

#!/usr/bin/env bash
# Developer loop: rebuild the bridge incrementally and refresh torch_tpu/_C*.so
# (after scripts/setup.sh has configured build/py once).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build/py -j "$(nproc)" --target tpu_bridge
# Replace the module atomically: a running process that has it mapped keeps
# the old file instead of seeing it rewritten under it.
for so in build/py/lib/_C*.so; do
  cp "$so" "torch_tpu/.$(basename "$so").tmp"
  mv -f "torch_tpu/.$(basename "$so").tmp" "torch_tpu/$(basename "$so")"
done

#!/usr/bin/env bash
# Developer loop: rebuild the bridge incrementally and refresh torch_tpu/_C*.so
# (after scripts/setup.sh has configured build/py once).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build/py -j "$(nproc)" --target tpu_bridge
cp build/py/lib/_C*.so torch_tpu/

#!/usr/bin/env bash
# The main job: set up, then train a small GPT on tpu and generate tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
python examples/train_gpt.py "$@"

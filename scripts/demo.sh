#!/usr/bin/env bash
# Sets qvl up (dependencies + build) and runs a demo question about a bundled
# image with the tiny test model. With QVL_MODEL pointing at the real
# Qwen3-VL-2B-Instruct folder it asks the real model instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
MODEL="${QVL_MODEL:-tests/data/tiny-qwen3-vl}"
if [ "$MODEL" = tests/data/tiny-qwen3-vl ]; then
  echo "demo: using the tiny random-weight test model (its answers are gibberish by design);" >&2
  echo "demo: set QVL_MODEL to a Qwen3-VL-2B-Instruct folder for real answers" >&2
fi
export QVL_CACHE_DIR="${QVL_CACHE_DIR:-build/cache}"
build/apps/qvl ask --model "$MODEL" --image tests/data/images/photo.jpg --greedy --max-new-tokens 24 \
  --verbose "What is in this picture?"

#!/usr/bin/env bash
# The test command: fetch the real model pair and the prompt sets if they are not cached yet,
# then run every test in release mode (one build profile; the real-model tests need optimised
# code), then the GPU path's tests on Vulkan (see below).
set -euo pipefail
cd "$(dirname "$0")/.."
# No module imports another that imports it back (scripts/import-cycles.py --graph draws it).
python3 scripts/import-cycles.py
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/specx/target}"
scripts/fetch-models.sh
scripts/fetch-datasets.sh
cargo test --release --workspace -j2 "$@"
scripts/test-wgpu.sh

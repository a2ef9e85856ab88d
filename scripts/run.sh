#!/usr/bin/env bash
# The main job: fetch the real model pair and the prompt sets if needed, build specx, run the runtime benchmark
# (decode/prefill/verification speed of draft and target on the native and f32 weight paths,
# against this machine's memory-bandwidth bound; add --llamacpp PATH for llama.cpp ratios,
# PATH from scripts/bench-llamacpp.sh)
# and a short streamed generation with the target, then build the SpecDec++ acceptance
# datasets on the Alpaca train and dev splits (about 18 + 9 minutes here; resumable: a second
# run only checks the finished shards), train the default acceptance head on them (~20 s) and
# run the smoke evaluation with it (configs/eval/smoke.toml: AR, SpecDec, SpecDec++ and the
# confidence baseline on 3 prompts of each set, greedy and sampled; about 15 minutes, resumable).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/specx/target}"
scripts/fetch-models.sh
scripts/fetch-datasets.sh
cargo build --release -j2 -p specx-cli
specx="$CARGO_TARGET_DIR/release/specx"
models="${SPECX_MODELS:-$HOME/.cache/specx/models}"
"$specx" bench
"$specx" generate --model "$models/qwen2.5-coder-1.5b-instruct/model.gguf" --chat \
  --prompt "Write a Python function that returns the n-th Fibonacci number." --max-new-tokens 64
"$specx" datagen --config configs/datagen-qwen-alpaca.toml --no-progress
"$specx" datagen --config configs/datagen-qwen-alpaca-dev.toml --no-progress
"$specx" train --config configs/train-qwen-alpaca.toml --no-progress
"$specx" eval --config configs/eval/smoke.toml --no-progress

#!/usr/bin/env bash
# The main job: fetch the real model pair and the prompt sets if needed, build specx, run the runtime benchmark
# (decode/prefill/verification speed of draft and target on the native and f32 weight paths,
# against this machine's memory-bandwidth bound; add --llamacpp PATH for llama.cpp ratios,
# PATH from scripts/bench-llamacpp.sh)
# and a short streamed generation with the target, one SpecDec++ decode with the acceptance head
# that ships in checkpoints/specdecpp-default, and the smoke evaluation (configs/eval/smoke.toml:
# AR, SpecDec, SpecDec++ with that head and the confidence baseline on 3 prompts of each set,
# greedy and sampled; about 15 minutes, resumable). The head's data are committed under
# datasets/; configs/train-specdecpp-default.toml retrains it (docs/reproductions/adaptive-drafting.md).
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
"$specx" decode --method specdecpp --draft "$models/qwen2.5-coder-0.5b-instruct/model.gguf" \
  --target "$models/qwen2.5-coder-1.5b-instruct/model.gguf" --chat \
  --prompt "Write a Python function that checks whether a string is a palindrome." --max-new-tokens 64
"$specx" eval --config configs/eval/smoke.toml --no-progress

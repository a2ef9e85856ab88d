#!/usr/bin/env bash
# Packs the GPU check (scripts/gpu-check.sh) into gpu-bundle/ (ignored by git): a stripped
# specx binary built with `--features wgpu,cuda` for any x86-64-v3 CPU (the GPU machine's CPU
# is unknown; this build's default, -C target-cpu=native, could use instructions it lacks),
# xz-compressed; the real pair's shapes (so random-weight models of them are written there,
# no 1.6 GB transfer); the Qwen tokenizer; the Vulkan loader and glvnd's dispatch library as
# Debian packages (the GPU machine has NVIDIA's Vulkan driver but neither). Checks that the working tree and the
# bundle together stay under what travels with one command (about 64 MiB).
#
# Then, on the GPU machine, from the repository root: OUT=DIR scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${SPECX_GPU_TARGET_DIR:-$HOME/.cache/specx/target-gpu}"
limit_mib="${SPECX_GPU_BUNDLE_LIMIT_MIB:-60}"

echo "gpu-pack: building specx --features wgpu,cuda for x86-64-v3 in $target_dir"
# cudarc binds the CUDA 13.0 driver API (the GPU machine's driver 580 is CUDA 13.0); libcuda
# and NVRTC are loaded at run time, so nothing CUDA is needed here.
RUSTFLAGS="-C target-cpu=x86-64-v3" CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13000}" CARGO_TARGET_DIR="$target_dir" \
    cargo build --release -j2 -p specx-cli --features wgpu,cuda
bin="$target_dir/release/specx"

scripts/fetch-models.sh
models="${SPECX_MODELS:-$HOME/.cache/specx/models}"
rm -rf gpu-bundle.tmp && mkdir gpu-bundle.tmp
strip -o gpu-bundle.tmp/specx "$bin"
"$bin" gpu-check shapes --out gpu-bundle.tmp/shapes.json
xz -T2 -6 gpu-bundle.tmp/specx
xz -6 -c "$models/qwen2.5-coder-1.5b-instruct/tokenizer.json" > gpu-bundle.tmp/tokenizer.json.xz
(cd gpu-bundle.tmp && apt-get download libvulkan1 libglvnd0 >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 && apt-get download libvulkan1 libglvnd0; })
ls gpu-bundle.tmp/libvulkan1_*.deb >/dev/null
git rev-parse HEAD > gpu-bundle.tmp/commit
rm -rf gpu-bundle && mv gpu-bundle.tmp gpu-bundle

tree_bytes=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
bundle_bytes=$(du -cb gpu-bundle | tail -1 | cut -f1)
total_mib=$(( (tree_bytes + bundle_bytes) >> 20 ))
ls -l gpu-bundle
echo "gpu-pack: working tree $((tree_bytes >> 20)) MiB + bundle $((bundle_bytes >> 20)) MiB = $total_mib MiB (limit $limit_mib MiB)"
[ "$total_mib" -le "$limit_mib" ] || { echo "gpu-pack: too large to travel with one command" >&2; exit 1; }
echo "gpu-pack: ready. On the GPU machine: OUT=DIR scripts/gpu-check.sh (carry gpu-bundle)"

#!/usr/bin/env bash
# The one-command GPU check, run on the GPU machine from the repository root after
# scripts/gpu-pack.sh has filled gpu-bundle/ here (the bundle travels with the command):
#
#   OUT=DIR scripts/gpu-check.sh
#
# It needs no Rust, no network and no model files: it unpacks the specx binary and the Vulkan
# loader, writes random-weight models of the real pair's shapes, then runs, each step under a
# time limit inside one overall deadline (GPU_CHECK_SECONDS, default 360, so the check fits a
# 10-minute loan with time to rerun it; the default steps' limits add up to it) so the report
# is always written:
#   (a) specx devices                       (b) tiny-model correctness on cuda (and Vulkan)
#   (d) HF transformers anchor (eager bf16) (c) specx bench and specx profile on cuda (and Vulkan)
#   of the GGUF copies (GGUF blocks on the device),
#   the GPU's peak memory bandwidth and a timed device copy (the memory bound; PyTorch),
#   and with GPU_CHECK_FULL=1 (default deadline then 600 s) the slow steps: specx on the bf16
#   files, the 1024-token profile context, the Vulkan bench and profile, and HF's decode
#   with a static cache and torch.compile
#   (e) specx gpu-check report -> DIR/report.md, DIR/report.json, and every output in one
#   tarball, DIR/gpu-check-outputs.tar.gz
# Every step's log is DIR/<step>.log; DIR/steps.tsv has exit statuses and durations. The exit
# status is 1 when a correctness step (unpack, devices, synth, correctness, report) failed or
# was skipped, after the report is written; the timing steps only feed the report.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the directory for the report}"
bundle="${GPU_CHECK_BUNDLE:-gpu-bundle}"
work="${GPU_CHECK_WORK:-/tmp/specx-gpu-check}"
full="${GPU_CHECK_FULL:-0}"
deadline=$(( $(date +%s) + ${GPU_CHECK_SECONDS:-$([ "$full" = 1 ] && echo 600 || echo 360)} ))
mkdir -p "$OUT" "$work"
# Where Vulkan drivers' manifests live: the loader's search path, and NVIDIA's container
# location, which the loader only reads through VK_DRIVER_FILES.
icd_dirs="/usr/share/vulkan/icd.d /etc/vulkan/icd.d"
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
: > "$OUT/steps.tsv"

# step NAME LIMIT_S CMD...: runs CMD with its output in $OUT/NAME.log, under LIMIT_S seconds
# and whatever is left before the deadline (30 s kept for the report).
step() {
    local name=$1 limit=$2
    shift 2
    local left=$(( deadline - $(date +%s) - 30 ))
    (( left < limit )) && limit=$left
    if (( limit < 10 )); then
        printf '%s\tskipped\t0\n' "$name" >> "$OUT/steps.tsv"
        echo "gpu-check: $name skipped (deadline)"
        return 0
    fi
    local t0=$(date +%s%N)
    echo "gpu-check: $name (limit ${limit} s)"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    printf '%s\t%s\t%d.%03d\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) >> "$OUT/steps.tsv"
    tail -n 4 "$OUT/$name.log" | sed "s/^/  $name: /"
    return 0
}

unpack() {
    [ -f "$bundle/specx.xz" ] || { echo "no $bundle/specx.xz: run scripts/gpu-pack.sh first and carry gpu-bundle" >&2; return 1; }
    python3 - "$bundle" "$work" <<'PY'
import lzma, shutil, sys, os
b, w = sys.argv[1], sys.argv[2]
for src, dst in [("specx.xz", "specx"), ("tokenizer.json.xz", "tokenizer.json")]:
    with lzma.open(os.path.join(b, src)) as f, open(os.path.join(w, dst), "wb") as g:
        shutil.copyfileobj(f, g)
os.chmod(os.path.join(w, "specx"), 0o755)
PY
    mkdir -p "$work/vk"
    for deb in "$bundle"/*.deb; do
        dpkg-deb -x "$deb" "$work/vk" || (cd "$work/vk" && ar x "$OLDPWD/$deb" && tar xf data.tar.*)
    done
    cat "$bundle/commit" 2>/dev/null
    # Each Vulkan driver manifest, the library it names and any library that one misses
    # (glvnd's libGLdispatch is carried as libglvnd0 for machines without it).
    local icds
    icds=$(ls $(printf '%s/*.json ' $icd_dirs) "$nvidia_icd" 2>/dev/null)
    [ -n "$icds" ] || { echo "no Vulkan ICD files found (wgpu will have no adapter)"; return 0; }
    for icd in $icds; do
        local lib
        lib=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ICD"]["library_path"])' "$icd" 2>/dev/null)
        echo "$icd: $lib"
        local path="" d
        # Mesa's manifests name an absolute path, NVIDIA's a library name.
        case "$lib" in /*) [ -f "$lib" ] && path="$lib" ;; esac
        [ -n "$path" ] || for d in ${LD_LIBRARY_PATH//:/ }; do [ -f "$d/$lib" ] && { path="$d/$lib"; break; }; done
        [ -n "$path" ] || path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
        if [ -z "$path" ]; then
            echo "  $lib: not found on LD_LIBRARY_PATH or by ldconfig"
        else
            echo "  $lib: $path"
            LD_LIBRARY_PATH="$work/vk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$path" | grep "not found" | sed 's/^/  missing: /' || true
        fi
    done
}

export bundle work icd_dirs nvidia_icd
export -f unpack
step unpack 30 bash -c unpack
export LD_LIBRARY_PATH="$work/vk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# cubecl compiles kernels with NVRTC, which it loads by name (LD_LIBRARY_PATH) and points at the
# toolkit's headers (CUDA_PATH, else /usr/local/cuda): find both where a toolkit or PyTorch's
# wheels put them, and record what was used.
if [ -z "${CUDA_PATH:-}" ]; then
    for d in /usr/local/cuda /opt/cuda "$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /none/bin/nvcc)")")"; do
        [ -f "$d/include/cuda_runtime.h" ] && { export CUDA_PATH="$d"; break; }
    done
fi
nvrtc_dirs=("${CUDA_PATH:-/usr/local/cuda}/lib64" "${CUDA_PATH:-/usr/local/cuda}/targets/x86_64-linux/lib")
nvrtc_dirs+=($(python3 -c 'import glob, site; print(" ".join(d for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null))
for d in "${nvrtc_dirs[@]}"; do
    if compgen -G "$d/libnvrtc.so*" >/dev/null; then
        export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
        break
    fi
done
{ echo "CUDA_PATH=${CUDA_PATH:-unset}"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; ls "${CUDA_PATH:-/usr/local/cuda}/include/cuda_fp16.h" 2>&1; } > "$OUT/cuda-env.log"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$work}"
# Some machines keep NVIDIA's Vulkan manifest outside the loader's search path.
if [ -z "${VK_DRIVER_FILES:-}" ] && ! ls $(printf '%s/*.json ' $icd_dirs) >/dev/null 2>&1 && [ -f "$nvidia_icd" ]; then
    export VK_DRIVER_FILES="$nvidia_icd"
fi
specx="$work/specx"
models="$work/models"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.csv" 2>&1
else
    echo "nvidia-smi not found" > "$OUT/gpu.csv"
fi
step devices 20 "$specx" devices
# Every CUDA device against the CPU; with two, the first two also as one (the two_devices check).
devices="cuda:0"
grep -q '^| cuda:1 ' "$OUT/devices.log" && devices="cuda:0,cuda:1"
grep -q '^| wgpu:0 ' "$OUT/devices.log" && devices="$devices,wgpu:0"
step synth 45 "$specx" gpu-check synth --shapes "$bundle/shapes.json" --tokenizer "$work/tokenizer.json" --out "$models"
step correctness 75 "$specx" gpu-check correctness --devices "$devices" --tolerance 1e-3 --out "$OUT/correctness.json"
step bandwidth 20 python3 scripts/gpu/bandwidth.py --out "$OUT/bandwidth.json"
step hf-anchor 45 python3 scripts/gpu/hf_anchor.py --models "$models" --out "$OUT/hf.json"
# specx runs the GGUF copies (the reference pair's own block types on the device, its default
# path); the anchor the bf16 files.
pair=(--draft "$models/draft-gguf/model.gguf" --target "$models/target-gguf/model.gguf")
contexts=128
[ "$full" = 1 ] && contexts=128,1024
step bench-cuda 45 "$specx" bench "${pair[@]}" --devices cuda --weights q8 --prompt-tokens 128 --decode-tokens 64 --call-rows 1,2,5,9,21 --bandwidth-mib 256 --json "$OUT/bench-cuda.json"
step profile-cuda 50 "$specx" profile "${pair[@]}" --device cuda --weights q8 --contexts "$contexts" --max-rows 21 --reps 5 --tpot-tokens 16 --out "$OUT/profile-cuda.json"
if [ "$full" = 1 ]; then
    # specx on the anchor's own bf16 files (their matrices stay 16-bit on the device): like for like.
    step bench-cuda-bf16 60 "$specx" bench --draft "$models/draft" --target "$models/target" --devices cuda --prompt-tokens 128 --decode-tokens 64 --call-rows 1,5 --bandwidth-mib 256 --json "$OUT/bench-cuda-bf16.json"
    if [[ "$devices" == *wgpu* ]]; then
        step bench-wgpu 60 "$specx" bench "${pair[@]}" --devices wgpu:0 --weights q8 --prompt-tokens 128 --decode-tokens 32 --call-rows 1,2,5,9,21 --bandwidth-mib 256 --json "$OUT/bench-wgpu.json"
        step profile-wgpu 45 "$specx" profile "${pair[@]}" --device wgpu:0 --weights q8 --contexts 128 --max-rows 21 --reps 3 --tpot-tokens 8 --out "$OUT/profile-wgpu.json"
    fi
    # HF's fastest decode (static cache, torch.compile) last: compiling takes a minute or more.
    step hf-compiled 150 python3 scripts/gpu/hf_anchor.py --models "$models" --compiled --roles target --decode-tokens 64 --out "$OUT/hf-compiled.json"
fi
deadline=$(( deadline + 30 ))
step report 30 "$specx" gpu-check report --dir "$OUT"
cat "$OUT/report.md" 2>/dev/null || { echo "no report: see $OUT/*.log"; cat "$OUT/steps.tsv"; }
# A refused recording turns every recorded-call figure into a plain forward's: say so loudly.
grep -h 'refused to record' "$OUT"/*.log 2>/dev/null | sort -u | sed 's/^/gpu-check: RECORDING REFUSED: /' >&2
tar -czf "$work/gpu-check-outputs.tar.gz" -C "$OUT" . && mv "$work/gpu-check-outputs.tar.gz" "$OUT/"
echo "gpu-check: every output in $OUT/gpu-check-outputs.tar.gz ($(du -h "$OUT/gpu-check-outputs.tar.gz" | cut -f1))"
failed=""
for s in unpack devices synth correctness report; do
    rc=$(awk -F'\t' -v s="$s" '$1 == s {print $2}' "$OUT/steps.tsv")
    [ "$rc" = 0 ] || failed="$failed$s (${rc:-not run}) "
done
if [ -n "$failed" ]; then
    echo "gpu-check: FAILED correctness steps: $failed(logs in $OUT)" >&2
    exit 1
fi

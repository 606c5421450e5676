#!/usr/bin/env bash
# llama.cpp's own tools (llama-bench, llama-batched-bench, llama-imatrix), built from the llama.cpp tree inside
# the llama-cpp-python source distribution that scripts/setup-interop.sh pins, with the same flags, so that
# scripts/bench_vs_llamacpp.py can run llama.cpp beside lowbit on the same file and llama-imatrix's statistics
# can be set beside `lowbit imatrix`'s. Built once into
# build/llama-tools (never committed); several minutes on two cores.
# --avx2: built for CPUs without AVX-512 instead (into build/llama-tools-avx2), the peer of lowbit under
# LOWBIT_CPU=avx2 on the same machine (scripts/bench_vs_llamacpp.py --avx2).
# Usage: scripts/build-llama-tools.sh [--avx2]   (JOBS=N to limit parallel compiles)
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^llama_version=//p' scripts/setup-interop.sh)
flags=$(sed -n 's/^llama_cflags="\(.*\)"$/\1/p' scripts/setup-interop.sh)  # no AMX (see there)
out=build/llama-tools
isa=(-DGGML_NATIVE=ON)
if [ "${1:-}" = "--avx2" ]; then
  out=build/llama-tools-avx2
  isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF)
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/build-llama-tools.sh [--avx2]" >&2
  exit 2
fi
tools=(llama-bench llama-batched-bench llama-imatrix)
built=1
for t in "${tools[@]}"; do [ -x "$out/bin/$t" ] || built=0; done
if [ "$built" = 1 ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
rm -rf "$out"
mkdir -p "$out/sdist" "$out/bin"
python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$out/sdist"
tar -xzf "$out/sdist/llama_cpp_python-$version.tar.gz" -C "$out/sdist"
cmake -S "$out/sdist/llama_cpp_python-$version/vendor/llama.cpp" -B "$out/cmake" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF "${isa[@]}" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" > "$out/configure.log" 2>&1
cmake --build "$out/cmake" -j "${JOBS:-$(nproc)}" --target "${tools[@]}" > "$out/build.log" 2>&1
for t in "${tools[@]}"; do cp "$out/cmake/bin/$t" "$out/bin/"; done
echo "$version" > "$out/version"
echo "build-llama-tools: llama.cpp from llama-cpp-python $version -> $out/bin: ${tools[*]}"

#!/usr/bin/env bash
# The Python tiers' venv (make test-interop, make test-python), inside the build folder (never committed): the real consumers of lowbit's files.
#   llama-cpp-python  llama.cpp itself (its bundled llama.cpp built from source, CPU backend)
#   gguf              llama.cpp's own Python GGUF reader/writer and reference quantizers
#   tokenizers        Hugging Face's tokenizer.json implementation (what AutoTokenizer runs)
#   sentencepiece, protobuf
#                     transformers' tokenizer.model -> tokenizer.json converter
#   transformers, compressed-tensors, torch
#                     load and decompress the compressed-tensors folders of `lowbit export --to`
#                     (torch is PyPI's CUDA build, some GB: the CPU is all these checks use)
#   accelerate        transformers' FP8 (quant_method fp8) loader requires it
#   nanobind, scikit-build-core, pytest
#                     the Python package's build (`pip install --no-build-isolation .`) and its tests (make test-python)
# Usage: scripts/setup-interop.sh [VENV]   (default build/interop-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-build/interop-venv}"
llama_version=0.3.36
pins=(numpy==2.2.6 gguf==0.19.0 torch==2.15.0 transformers==5.19.0 tokenizers==0.23.3 compressed-tensors==0.20.1
      safetensors==0.8.0 sentencepiece==0.2.1 protobuf==7.36.2 nanobind==3.1.0 scikit-build-core==1.1.2
      pytest==9.2.0 accelerate==1.15.0)
# -march=native, but no AMX: these VMs list amx_tile in /proc/cpuinfo yet fault on tile instructions,
# and llama.cpp's AMX matmul dies with SIGILL. pip's own wheel cache ignores CMAKE_ARGS, so the wheel
# is built once into a cache folder named after the flags and installed from there.
llama_flags="-DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF"
llama_cflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/lowbit/wheels/llama-cpp-python-$llama_version-native-noamx"
stamp="$venv/.lowbit-pins"
want="${pins[*]} llama-cpp-python==$llama_version $llama_flags $llama_cflags"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$venv"  # a changed pin or flag: start clean (pip keeps an installed version as it is)
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip==25.1.1
if ! ls "$wheels"/llama_cpp_python-*.whl > /dev/null 2>&1; then
  echo "setup-interop: building llama-cpp-python $llama_version (llama.cpp from source, several minutes, once)"
  mkdir -p "$wheels"
  CMAKE_ARGS="$llama_flags -DCMAKE_C_FLAGS='$llama_cflags' -DCMAKE_CXX_FLAGS='$llama_cflags'" \
    "$venv/bin/pip" wheel -q --no-deps --no-cache-dir "llama-cpp-python==$llama_version" -w "$wheels"
fi
"$venv/bin/pip" install -q "${pins[@]}" "$wheels"/llama_cpp_python-*.whl
echo "$want" > "$stamp"

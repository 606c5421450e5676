#!/usr/bin/env bash
# Installs the Debian packages lowbit builds against, only those that are missing.
set -euo pipefail
# chromium: the report test renders report.html headless (it skips when chromium is absent).
# clang + libclang-rt-14-dev (libFuzzer and the sanitizer runtimes of Debian 12's clang 14): `make fuzz`.
# ccache: the Python package's build (make test-python) reuses the objects of `make test`'s.
# python3-dev: the Python module's headers.
packages=(build-essential cmake pkg-config libhwy-dev libsentencepiece-dev libpcre2-dev libicu-dev nlohmann-json3-dev
          libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev chromium clang libclang-rt-14-dev
          ccache python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi

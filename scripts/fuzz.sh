#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets of fuzz/ (clang, ASan+UBSan) in BUILD_DIR and runs each
# for FUZZ_SECONDS, JOBS at a time. Each target starts from a scratch copy of its seed corpus
# (fuzz/corpus/<target>/) plus its stored regression inputs (fuzz/regressions/<target>/) in
# BUILD_DIR/fuzz-run/<target>/corpus, so the repository's corpus is never modified. Prints executions, coverage edges and crashes per target
# and fails when any target crashed; the crashing inputs are kept in BUILD_DIR/fuzz-run/<target>/.
#
#   scripts/fuzz.sh [TARGET...]        (default: every target)
#   FUZZ_SECONDS=60 JOBS=2 BUILD_DIR=build-fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-2}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
# Any single allocation or resident set above this is a finding: readers must not allocate more
# than the (small) fuzz input can supply.
LIMIT_MB=${FUZZ_LIMIT_MB:-2048}

all_targets=(safetensors_header gguf llama2c hf_config recipe quantized_config kv_scales sentencepiece gguf_vocab hf_tokenizer chat_template topk_base engine_checkpoint)
targets=("${@:-${all_targets[@]}}")

start=$(date +%s)
# Configured every time (cheap), so targets added since the folder was made are known to the build.
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DLOWBIT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" > /dev/null
# (MAKEFLAGS from an outer `make fuzz` would make the inner build print every directory change.)
env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS cmake --build "$BUILD_DIR" -j "$JOBS" --target $(printf '%s_fuzz ' "${targets[@]}")
built=$(date +%s)
echo "fuzz: build took $((built - start)) s; running ${#targets[@]} targets for ${FUZZ_SECONDS} s each, $JOBS at a time"

run_root="$BUILD_DIR/fuzz-run"
# The targets' scratch files (inputs written for readers that take a path), removed at the end.
LOWBIT_FUZZ_TMP=$( [ -d /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/lowbit-fuzz-run-$$
mkdir -p "$LOWBIT_FUZZ_TMP"
trap 'rm -rf "$LOWBIT_FUZZ_TMP"' EXIT
export LOWBIT_FUZZ_TMP
# The scratch corpus of a target persists between runs (what one run found, the next starts from);
# `make clean` or removing BUILD_DIR/fuzz-run starts over from the seeds.
run_one() {
  local t=$1 dir="$run_root/$1"
  rm -rf "$dir/artifacts" "$dir/log.txt"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp fuzz/corpus/"$t"/* "$dir/corpus/" 2>/dev/null || true
  cp fuzz/regressions/"$t"/* "$dir/corpus/" 2>/dev/null || true
  # -fork keeps going after a crash (each one saved under artifacts/); -ignore_crashes lets the
  # run use its whole time. UBSan findings abort (built with -fno-sanitize-recover).
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1 \
    "$BUILD_DIR/fuzz/${t}_fuzz" "$dir/corpus" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$FUZZ_SECONDS" -rss_limit_mb="$LIMIT_MB" -malloc_limit_mb="$LIMIT_MB" -timeout=25 \
    -artifact_prefix="$dir/artifacts/" -print_final_stats=1 > "$dir/log.txt" 2>&1 || true
}
export -f run_one
export run_root BUILD_DIR FUZZ_SECONDS LIMIT_MB
printf '%s\n' "${targets[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}'

failed=0
printf '%-20s %12s %8s %8s\n' target executions cov crashes
for t in "${targets[@]}"; do
  dir="$run_root/$t"
  # -fork prints "#N: cov: C ft: F corp: ... exec/s: ..." lines; the last one is the total.
  line=$(grep -E '^#[0-9]+: cov: ' "$dir/log.txt" | tail -1 || true)
  execs=$(sed -nE 's/^#([0-9]+): cov:.*/\1/p' <<< "$line")
  cov=$(sed -nE 's/.* cov: ([0-9]+) .*/\1/p' <<< "$line")
  crashes=$(find "$dir/artifacts" -type f | wc -l)
  printf '%-20s %12s %8s %8s\n' "$t" "${execs:-?}" "${cov:-?}" "$crashes"
  if [ "$crashes" -gt 0 ] || [ -z "$line" ]; then
    failed=1
    find "$dir/artifacts" -type f | sed 's/^/  /'
    [ -n "$line" ] || tail -20 "$dir/log.txt" | sed 's/^/  /'
  fi
done
echo "fuzz: total $(( $(date +%s) - start )) s (build $((built - start)) s)"
exit $failed

// libFuzzer target 'safetensors_header'; the body is lowbit::fuzz's entry of that name (fuzz_entries.h).
#include "fuzz/fuzz_entries.h"

LOWBIT_FUZZ_TARGET("safetensors_header")

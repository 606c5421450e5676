// libFuzzer target 'engine_checkpoint'; the body is lowbit::fuzz's entry of that name (fuzz_entries.h).
#include "fuzz/fuzz_entries.h"

LOWBIT_FUZZ_TARGET("engine_checkpoint")

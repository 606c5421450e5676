// libFuzzer target 'chat_template'; the body is lowbit::fuzz's entry of that name (fuzz_entries.h).
#include "fuzz/fuzz_entries.h"

LOWBIT_FUZZ_TARGET("chat_template")

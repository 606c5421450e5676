// Shared test helpers.
#pragma once

#include <hwy/targets.h>

#include <string>

namespace lowbit::testing_util {

// Runs `fn(target_name)` once for every SIMD target this CPU supports and this binary contains,
// forcing dynamic dispatch to that target; restores the default choice afterwards.
template <class Fn>
void ForEachTarget(Fn&& fn) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    fn(std::string(hwy::TargetName(target)));
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace lowbit::testing_util

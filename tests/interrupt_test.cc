// `lowbit quantize` killed with SIGKILL (issue 18): during calibration, between blocks (once
// OUT.partial holds a state) and while the final folder is written (OUT.tmp-<pid> exists). After
// each kill OUT is absent or complete, the next run (--resume when a state was saved) writes
// exactly the bytes of an uninterrupted run, and no `*.tmp-*` is left anywhere.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/file_util.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using testing_util::RunLowbit;
using Clock = std::chrono::steady_clock;

// GPTQ with a little calibration, a checkpoint after every block: about a second a run.
const std::string kArgs = "quantize models/kjv-llama-7m --method gptq --format int4:g64 --calib data/kjv-train.txt "
                          "--calib-samples 4 --calib-len 64 --threads 2 --checkpoint-every 0";

// Starts `lowbit ARGS` in the source folder; its pid is lowbit's own (exec'd by the shell).
pid_t Start(const std::string& args, const fs::path& log) {
  const std::string cmd = std::string("cd " LOWBIT_SOURCE_DIR " && exec " LOWBIT_BINARY " ") + args + " > " +
                          log.string() + " 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Polls `ready` (every ~0.2 ms) until it holds, then SIGKILLs `pid`. False when the process
// ended first (it was too fast to be caught there).
bool KillWhen(pid_t pid, const std::function<bool()>& ready) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    if (ready()) {
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
      return WIFSIGNALED(status);
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ADD_FAILURE() << "the kill point never came";
  return false;
}

// The files of a quantized folder that must be bit-identical (recipe.json holds timings).
std::vector<std::string> Compared(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != "recipe.json") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void ExpectSameFolder(const fs::path& want, const fs::path& got, const std::string& where) {
  ASSERT_EQ(Compared(want), Compared(got)) << where;
  for (const std::string& name : Compared(want))
    EXPECT_TRUE(ReadTextFile(want / name) == ReadTextFile(got / name)) << where << ": " << name << " differs";
  EXPECT_TRUE(fs::exists(got / "recipe.json")) << where;
}

std::vector<std::string> Temporaries(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) found.push_back(e.path().string());
  return found;
}

// Kills a run at `ready` (retrying a few times when the run ends before it: the final write is
// brief), then checks what it left and finishes the job with a second run.
void KillAndFinish(const fs::path& dir, const std::string& name, const fs::path& reference,
                   const std::function<bool(const fs::path& out, pid_t pid, Clock::duration running)>& ready) {
  const fs::path out = dir / name, partial = out.string() + ".partial", log = dir / (name + ".log");
  bool killed = false;
  for (int attempt = 0; attempt < 5 && !killed; ++attempt) {
    fs::remove_all(out);
    fs::remove_all(partial);
    const auto start = Clock::now();
    const pid_t pid = Start(kArgs + " -o " + out.string(), log);
    killed = KillWhen(pid, [&] { return ready(out, pid, Clock::now() - start); });
  }
  ASSERT_TRUE(killed) << name << ": every run ended before its kill point";
  if (fs::exists(out)) ExpectSameFolder(reference, out, name + " (complete when killed)");

  const bool resume = fs::exists(partial / "progress.json");
  const auto r = RunLowbit(kArgs + " -o " + out.string() + (resume ? " --resume" : ""));
  if (!fs::exists(out) || r.status != 0) {
    ASSERT_EQ(r.status, 0) << name << ": " << r.out;
  }
  ExpectSameFolder(reference, out, name + (resume ? " (resumed)" : " (run again)"));
  EXPECT_FALSE(fs::exists(partial)) << name;
  EXPECT_EQ(Temporaries(dir), std::vector<std::string>{}) << name;
}

TEST(Interrupt, QuantizeKilledAnywhereFinishesBitIdentical) {
  const fs::path dir = fs::temp_directory_path() / ("lowbit_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path reference = dir / "reference";
  const auto r = RunLowbit(kArgs + " -o " + reference.string());
  ASSERT_EQ(r.status, 0) << r.out;

  // During calibration: before the first block is done (no state saved yet).
  KillAndFinish(dir, "calibrating", reference, [](const fs::path&, pid_t, Clock::duration running) {
    return running > std::chrono::milliseconds(150);
  });
  // Between blocks: once a state is saved (the run goes on with the next block).
  KillAndFinish(dir, "between", reference, [](const fs::path& out, pid_t, Clock::duration) {
    return fs::exists(out.string() + ".partial/progress.json");
  });
  // While the final folder is written.
  KillAndFinish(dir, "writing", reference, [](const fs::path& out, pid_t pid, Clock::duration) {
    return fs::exists(out.string() + ".tmp-" + std::to_string(pid));
  });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lowbit

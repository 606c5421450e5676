// Hostile and careless input through the real binary (issue: hostile files): structurally valid
// JSON whose values would convert lossily, duplicated keys, deep nesting, absurd scales, bad
// recipe fields and bad flags all end in one error naming the file and field, exit code 1 (CLI11's
// own code for a refused flag), and no output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/file_util.h"
#include "test_util.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using testing_util::RunLowbit;

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lowbit_hostile_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    const fs::path bundled = fs::path(LOWBIT_SOURCE_DIR) / "models/kjv-llama-7m";
    for (const char* f : {"model.safetensors", "tokenizer.model", "tokenizer_config.json"})
      fs::create_symlink(bundled / f, dir_ / "model" / f);
    config_ = nlohmann::json::parse(ReadTextFile(bundled / "config.json"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The bundled model with config.json's text `config_text`; returns the folder.
  std::string ModelWithConfig(const std::string& config_text) {
    WriteFileAtomic(dir_ / "model/config.json", config_text);
    return (dir_ / "model").string();
  }
  std::string ModelWith(const std::string& key, const nlohmann::json& value) {
    nlohmann::json c = config_;
    c[key] = value;
    return ModelWithConfig(c.dump());
  }
  std::string Write(const std::string& name, const std::string& text) {
    WriteFileAtomic(dir_ / name, text);
    return (dir_ / name).string();
  }
  std::string Out() const { return (dir_ / "out").string(); }
  std::string Config() const { return (dir_ / "model/config.json").string(); }

  fs::path dir_;
  nlohmann::json config_;
};

constexpr const char* kText = " --text /dev/null";

TEST_F(HostileInputTest, CountsMustBeIntegersInRange) {
  const struct {
    nlohmann::json value;
    std::string error;
  } cases[] = {{-6, "num_hidden_layers: is -6, outside [0, 4294967295]"},
               {5.9, "num_hidden_layers: must be an integer, not number 5.9"},
               {true, "num_hidden_layers: must be an integer, not boolean true"},
               {4, ""}};  // a valid count that disagrees with the file is the loader's business
  for (const auto& c : cases) {
    if (c.error.empty()) continue;
    const std::string model = ModelWith("num_hidden_layers", c.value);
    const auto r = RunLowbit("quantize " + model + " -o " + Out() + " --format int4");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("lowbit: error: " + Config() + ": " + c.error), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(Out()));
  }
}

TEST_F(HostileInputTest, FloatsMustBeFiniteAsStored) {
  auto r = RunLowbit("ppl --model " + ModelWith("rms_norm_eps", 1e-310) + kText);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(Config() + ": rms_norm_eps: is 1e-310, which rounds to 0 as a 32-bit float"), std::string::npos)
      << r.out;
  r = RunLowbit("ppl --model " + ModelWith("rope_theta", 1e308) + kText);
  EXPECT_NE(r.out.find(Config() + ": rope_theta: is 1e+308, not finite as a 32-bit float"), std::string::npos) << r.out;
}

TEST_F(HostileInputTest, DuplicateKeysAndDeepNestingAreErrors) {
  std::string text = config_.dump();
  text.insert(1, "\"num_hidden_layers\": 4, ");
  auto r = RunLowbit("ppl --model " + ModelWithConfig(text) + kText);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(Config() + ": duplicate key 'num_hidden_layers'"), std::string::npos) << r.out;
  nlohmann::json c = config_;
  text = c.dump();
  text.insert(1, "\"x\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  r = RunLowbit("inspect " + ModelWithConfig(text));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(Config() + ": 'x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nests deeper than 64 levels"), std::string::npos) << r.out;
}

TEST_F(HostileInputTest, KvScalesMustBePositiveAndFiniteAsFloats) {
  const std::string model = ModelWithConfig(config_.dump());
  const std::vector<double> ones(6, 1.0);
  const std::string text = Write("text.txt", "In the beginning God created the heaven and the earth. And the earth was "
                                             "without form, and void; and darkness was upon the face of the deep.");
  for (const double bad : {1e308, 1e-310, -1.0}) {
    std::vector<double> k = ones;
    k[2] = bad;
    const std::string scales =
        Write("kv.json", nlohmann::json({{"dtype", "fp8_e4m3"}, {"k_scales", k}, {"v_scales", ones}}).dump());
    const auto r = RunLowbit("ppl --model " + model + " --text " + text + " --ctx 8 --kv-cache-dtype fp8_e4m3 --kv-scales " +
                             scales);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(scales + ": k_scales[2]: "), std::string::npos) << r.out;
  }
}

TEST_F(HostileInputTest, RecipeErrorsNameTheFileAndKeyPath) {
  const std::string model = ModelWithConfig(config_.dump());
  const struct {
    std::string recipe, error;
  } cases[] = {
      {R"({"format": "int4:g0"})", "format: format 'int4:g0'"},
      {R"({"format": "int4", "overrides": [{"match": "x", "format": "nf5"}]})", "overrides[0].format: "},
      {R"({"format": "int4", "method": "gptq", "config": {"block_size": -3}})",
       "config.block_size: is -3, outside [0, 18446744073709551615]"},
      {R"({"format": "int4", "method": "gptq", "config": {"damp": "0.1"}})",
       "config.damp: must be a number, not string \"0.1\""},
      {R"({"format": "int4", "calibration": {"samples": 0}})", "calibration.samples: must be positive"},
      {R"({"format": "int4", "format": "int8"})", "duplicate key 'format'"},
      {R"({"format": "int4", "rotate": 1})", "rotate: must be true or false, not number 1"},
  };
  for (const auto& c : cases) {
    const std::string recipe = Write("recipe.json", c.recipe);
    const auto r = RunLowbit("quantize " + model + " -o " + Out() + " --recipe " + recipe);
    EXPECT_EQ(r.status, 1) << c.recipe << "\n" << r.out;
    EXPECT_NE(r.out.find("lowbit: error: " + recipe + ": " + c.error), std::string::npos) << c.recipe << "\n" << r.out;
    EXPECT_FALSE(fs::exists(Out()));
  }
}

TEST_F(HostileInputTest, FlagsRefuseNegativeAndZeroCounts) {
  const std::string quantize = "quantize models/kjv-llama-7m -o " + Out() + " --format int4";
  auto r = RunLowbit("ppl --model models/kjv-llama-7m --text /dev/null --ctx -5");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--ctx: must be a positive number, not '-5'"), std::string::npos) << r.out;
  r = RunLowbit("ppl --model models/kjv-llama-7m --text /dev/null --threads -1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--threads: must be 0 or more, not '-1'"), std::string::npos) << r.out;
  for (const char* group : {"0", "-2"}) {
    r = RunLowbit(quantize + " --group " + group);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find(std::string("--group: must be a positive group size, or -1 for one group per row, not '") +
                         group + "'"),
              std::string::npos)
        << r.out;
  }
  EXPECT_FALSE(fs::exists(Out()));
}

// Values a flag cannot mean are refused at the door, naming the flag: counts and times that must be positive,
// sampling settings outside their range, sentinel-looking values (--threshold -1 used to mean "the default"),
// and names the library does not know (formats, methods, KV dtypes, GGUF types, presets).
TEST_F(HostileInputTest, FlagsRefuseValuesTheyCannotMean) {
  const std::string model = " --model models/kjv-llama-7m", quantize = "quantize models/kjv-llama-7m -o " + Out();
  const struct {
    std::string args, message;
  } cases[] = {
      {"bench decode" + model + " --batch 1,0", "bench decode: --batch: must be a positive number, not '0'"},
      {"bench prefill" + model + " --ctx 0", "bench prefill: --ctx: must be a positive number, not '0'"},
      {"bench gemv --seconds -1", "bench gemv: --seconds: must be a positive number, not '-1'"},
      {"bench gemv --tokens 0", "bench gemv: --tokens: must be a positive number, not '0'"},
      {"generate" + model + " --prompt x --temp -1", "generate: --temp: must be 0 or more, not '-1'"},
      {"generate" + model + " --prompt x --top-p 1.5", "generate: --top-p: must be in [0, 1], not '1.5'"},
      {"generate" + model + " --prompt x --top-k -3", "generate: --top-k: must be 0 or more, not '-3'"},
      {quantize + " --method llm_int8 --format int8 --threshold -1", "quantize: --threshold: must be 0 or more, not '-1'"},
      {quantize + " --method smoothquant --format int8 --alpha -1", "quantize: --alpha: must be in [0, 1], not '-1'"},
      {quantize + " --format int9", "quantize: --format: unknown format 'int9' (known: "},
      {quantize + " --format int4 --act-format int9:token", "quantize: --act-format: unknown format 'int9:token'"},
      {"bench decode" + model + " --quantize loaded,int9", "bench decode: --quantize: unknown format 'int9'"},
      {quantize + " --method gptqq --format int4", "quantize: --method: unknown quantization method 'gptqq'"},
      {"ppl" + model + " --text /dev/null --kv-cache-dtype int9", "ppl: --kv-cache-dtype: unknown KV cache dtype 'int9'"},
      {"export models/kjv-llama-7m -o " + Out() + ".gguf --type Q9_K", "export: --type: unknown GGUF type 'Q9_K'"},
      {"synth --preset llama9 -o " + Out(), "synth: --preset: unknown model preset 'llama9'"},
  };
  for (const auto& c : cases) {
    const auto r = RunLowbit(c.args);
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_NE(r.out.find("lowbit: error: " + c.message), std::string::npos) << c.args << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(Out()));
  EXPECT_FALSE(fs::exists(Out() + ".gguf"));
  EXPECT_EQ(nlohmann::json::parse(RunLowbit("synth --json --preset llama9 -o " + Out()).out)["field"], "--preset");
}

TEST_F(HostileInputTest, MistypedCommandsAreNamed) {
  auto r = RunLowbit("quantiz models/kjv-llama-7m");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("unknown command 'quantiz', did you mean 'quantize'?"), std::string::npos) << r.out;
  r = RunLowbit("frobnicate");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("unknown command 'frobnicate' (see lowbit --help)"), std::string::npos) << r.out;
}

// Options are checked before CLI11 parses (which would first ask for a missing required option), and
// CLI11's own messages are said in lowbit's words, naming the command.
TEST_F(HostileInputTest, MistypedOptionsAndCli11ErrorsNameTheCommand) {
  const struct {
    std::string args, message;
  } cases[] = {
      {"ppl --modle x", "lowbit: error: ppl: unknown option '--modle', did you mean '--model'?"},
      {"bench gemv --formt int4", "lowbit: error: bench gemv: unknown option '--formt', did you mean '--format'?"},
      {"ppl --model x --frobnicate", "lowbit: error: ppl: unknown option '--frobnicate' (lowbit ppl --help lists the options)"},
      {"ppl --model", "lowbit: error: ppl: --model needs a value (lowbit ppl --help lists the options)"},
      {"export", "lowbit: error: export: the model argument is required"},
      {"ppl --model a b c --text t", "lowbit: error: ppl: unexpected arguments 'b' 'c'"},
      {"plan --batch -3 --preset llama-2-7b", "lowbit: error: plan: --batch: must be in [1, 16777216], not '-3'"},
      {"bench", "lowbit: error: bench: a command is required: "},
  };
  for (const auto& c : cases) {
    const auto r = RunLowbit(c.args);
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }
  // Values that look like options are values ("--group -1"), and --help still exits 0.
  EXPECT_EQ(RunLowbit("quantize --help").status, 0);
}

TEST_F(HostileInputTest, JsonRunsReportErrorsAsJson) {
  const auto r = RunLowbit("ppl --json --model " + ModelWith("num_hidden_layers", -6) + kText);
  EXPECT_EQ(r.status, 1);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["file"], Config());
  EXPECT_EQ(j["field"], "num_hidden_layers");
  EXPECT_EQ(j["error"], Config() + ": num_hidden_layers: is -6, outside [0, 4294967295]");
  const auto unknown = RunLowbit("quantiz --json");
  EXPECT_EQ(nlohmann::json::parse(unknown.out)["error"], "unknown command 'quantiz', did you mean 'quantize'?");
}

}  // namespace
}  // namespace lowbit

// Chat templates rendered by lowbit against transformers' own rendering, recorded in
// tests/data/chat_template_cases.json by tests/interop/chat_templates.py (rerun by `make
// test-interop`): Qwen2.5's and Qwen3's real templates and small ones for the other constructs,
// over single and multi-turn conversations, reasoning, tool calls and results.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const fs::path kFixture = LOWBIT_SOURCE_DIR "/tests/data/chat_template_cases.json";
const fs::path kSharedHf = LOWBIT_SOURCE_DIR "/../shared/tokenizers/hf";

Json ReadOrdered(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

class ChatTemplateCases : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kSharedHf)) GTEST_SKIP() << kSharedHf << " is not available";
    fixture_ = ReadOrdered(kFixture);
  }
  std::string Source(const std::string& name) const {
    const Json& spec = fixture_["templates"][name];
    if (spec.contains("source")) return spec["source"];
    return ReadOrdered(kSharedHf / spec["path"].get<std::string>())["chat_template"];
  }
  // The variables transformers passes: messages, tools and documents (None unless given), the
  // special tokens, and the case's options.
  Json Context(const Json& conversation, const Json& options) const {
    Json context = {{"messages", fixture_["conversations"][conversation.get<std::string>()]},
                    {"tools", nullptr},
                    {"documents", nullptr}};
    for (const auto& [key, value] : fixture_["special_tokens"].items()) context[key] = value;
    for (const auto& [key, value] : options.items()) context[key] = value;
    return context;
  }
  Json fixture_;
};

TEST_F(ChatTemplateCases, RendersAsTransformersDoes) {
  ASSERT_GE(fixture_["cases"].size(), 40u);
  for (const Json& c : fixture_["cases"]) {
    const std::string name = c["template"];
    const std::string rendered = RenderChatTemplate(Source(name), Context(c["conversation"], c["options"]), name);
    EXPECT_EQ(rendered, c["rendered"].get<std::string>()) << name << " / " << c["conversation"] << " / " << c["options"];
  }
}

TEST_F(ChatTemplateCases, RaiseExceptionIsAnErrorWithTheTemplatesMessage) {
  for (const Json& r : fixture_["refusals"]) {
    const std::string name = r["template"];
    try {
      RenderChatTemplate(Source(name), Context(r["conversation"], {{"add_generation_prompt", true}}), name);
      ADD_FAILURE() << name << " accepted " << r["conversation"];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(r["message"].get<std::string>()), std::string::npos) << e.what();
    }
  }
}

TEST(ChatTemplate, LoadsFromJinjaFileConfigListOrFailsNamingTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("lowbit-chat-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  const Json user = Json::array({{{"role", "user"}, {"content", "hi"}}});
  write("tokenizer_config.json", R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D{{ messages[0].content }}{{ eos_token if add_generation_prompt }}"}]})");
  EXPECT_EQ(ApplyChatTemplate(LoadChatTemplate(dir), user, true), "<s>Dhi</s>");
  EXPECT_EQ(ApplyChatTemplate(LoadChatTemplate(dir / "tokenizer_config.json"), user, false), "<s>Dhi");
  write("chat_template.jinja", "J{{ messages | length }}{{ extra }}\n");  // transformers >= 4.47 saves it apart
  EXPECT_EQ(ApplyChatTemplate(LoadChatTemplate(dir), user, true, {{"extra", "!"}}), "J1!");
  fs::remove(dir / "chat_template.jinja");
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_THROW(LoadChatTemplate(dir), Error);
  fs::remove_all(dir);
}

// Macros as Jinja runs them: defaults evaluated at the call, keyword arguments, the template's top-level names
// visible and the caller's locals not, a namespace() of the top level changed through them; strftime_now as
// transformers defines it (the local time, here only its year's shape).
TEST(ChatTemplate, MacrosAndStrftimeNow) {
  const Json context = {{"greeting", "hi"}};
  const auto render = [&](std::string_view source) { return RenderChatTemplate(source, context, "t"); };
  EXPECT_EQ(render("{% macro m(a, b=a ~ '!') %}[{{ a }}{{ b }}{{ greeting }}]{% endmacro %}{{ m(1) }}{{ m(b=2, a=3) }}"),
            "[11!hi][32hi]");
  EXPECT_EQ(render("{% macro m() %}{{ x is defined }}{% endmacro %}{% for x in [1] %}{{ m() }}{% endfor %}"), "False");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% macro bump() %}{% set ns.n = ns.n + 1 %}{% endmacro %}"
                   "{{ bump() }}{{ bump() }}{{ ns.n }}"),
            "2");
  EXPECT_EQ(render("{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "3210");
  const std::string year = render("{{ strftime_now('%Y') }}");
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2026);
}

TEST(ChatTemplate, ErrorsNameTheTemplateAndLine) {
  const auto expect_error = [](std::string_view source, std::string_view needle) {
    try {
      RenderChatTemplate(source, Json::object(), "t.json: chat_template");
      ADD_FAILURE() << "expected an Error for " << source;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("t.json: chat_template"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("{% if x %}never closed", "endif");
  expect_error("line one\n{% filter upper %}x{% endfilter %}", "line 2");
  expect_error("{% macro m(a) %}{{ a }}", "endmacro");
  expect_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", "macro 'm' takes 1 arguments, 2 given");
  expect_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", "macro 'm' has no parameter 'b'");
  expect_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "nested deeper");
  expect_error("{% macro m() %}{{ " + std::string(120, '(') + "m()" + std::string(120, ')') + " }}{% endmacro %}{{ m() }}",
               "nested deeper");
  expect_error("{{ 'unterminated }}", "never closed");
  expect_error("{{ x | no_such_filter }}", "no_such_filter");
  expect_error("{{ 1 + }}", "unexpected end");
  expect_error("{{ 'a' - 1 }}", "needs numbers");
  expect_error("{% break %}", "outside a loop");
  // Hostile templates end in an Error, not a stack overflow or an endless render.
  expect_error("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}", "nested deeper");
  expect_error("{{ " + std::string(1000, '-') + "1 }}", "nested deeper");
  std::string deep_blocks;
  for (int i = 0; i < 1000; ++i) deep_blocks += "{% if true %}";
  expect_error(deep_blocks, "nested deeper");
  expect_error("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               "MiB");
  expect_error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "iterations");
}

}  // namespace
}  // namespace lowbit

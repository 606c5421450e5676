// Chat templates: the Jinja program in tokenizer_config.json's `chat_template` that turns a list
// of messages into the model's prompt text, rendered as transformers' apply_chat_template does
// (Jinja with trim_blocks and lstrip_blocks). The subset real templates use is implemented:
//   statements  if / elif / else, for (one or two targets, loop.index0 / index / first / last /
//               length / revindex, an `if` filter, `else`), set (a name or a namespace
//               attribute), break / continue
//   expressions literals, lists, dicts, names, .attr, [key], slices [a:b:c], calls of
//               namespace(...), raise_exception(...), range(...) and string / dict methods,
//               not / and / or, comparisons, in / not in, is [not] TEST, + - * / // % ~,
//               `a if c else b`, filters
//   filters     length count tojson trim upper lower capitalize title string int float first
//               last join default list items reverse unique safe
//   tests       defined undefined none string number integer float mapping sequence iterable
//               boolean true false even odd
// Anything else (macros, call blocks, include) is an Error naming the template and the position.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace lowbit {

// Renders `source` with the variables of `context` (an object, in insertion order as Python's dicts: messages, add_generation_prompt,
// bos_token, eos_token, tools, ...). `where` names the template in errors ("tokenizer_config.json:
// chat_template"). Throws Error for syntax errors, unsupported constructs and raise_exception.
std::string RenderChatTemplate(std::string_view source, const nlohmann::ordered_json& context,
                               const std::string& where);

// A model's chat template with the special-token strings it refers to.
struct ChatTemplate {
  std::string source;                     // the Jinja text
  std::string where;                      // file and key, for errors
  nlohmann::ordered_json special_tokens;  // bos_token, eos_token, ... (strings) as tokenizer_config.json has them
};

// The chat template of PATH: a model folder (chat_template.jinja, as transformers >= 4.47 saves it,
// else tokenizer_config.json's chat_template: a string, or a list whose "default" entry is used), a
// tokenizer_config.json, or a GGUF file (tokenizer.chat_template). Throws Error naming PATH when
// there is none.
ChatTemplate LoadChatTemplate(const std::filesystem::path& path);

// The prompt text of `messages` ([{"role": ..., "content": ...}, ...]), as
// apply_chat_template(messages, add_generation_prompt=..., tokenize=False) gives it; `variables`
// adds template variables (tools, enable_thinking, ...).
std::string ApplyChatTemplate(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                              bool add_generation_prompt,
                              const nlohmann::ordered_json& variables = nlohmann::ordered_json::object());

}  // namespace lowbit

#include "tokenizer/hf_tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace lowbit {
namespace {

// Rust's char::is_alphanumeric, which decides single_word matches.
bool IsWordChar(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  const auto cp = static_cast<UChar32>(c);
  return u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(cp) & U_GC_N_MASK) != 0;
}

uint32_t LastCodePoint(std::string_view s) {
  size_t begin = s.size() - 1;
  while (begin > 0 && (static_cast<uint8_t>(s[begin]) & 0xC0) == 0x80) --begin;
  return NextCodePointLenient(s, begin);
}

// `key` of `object`, or a null value when it is absent (the pipeline stages are optional).
JsonView Member(const JsonView& object, std::string_view key) {
  static const nlohmann::json kNull;
  return object.Has(key) ? object[key] : JsonView(kNull, object.source(), std::string(key));
}

bool IsSpace(uint32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

// A special-token member of tokenizer_config.json: a string or an AddedToken object.
std::string TokenContent(const JsonView& json) {
  if (json.value().is_string()) return json.As<std::string>();
  json.ExpectObject();
  return json.Get<std::string>("content");
}

// The special tokens a post_processor puts in front of the text.
std::vector<int32_t> PrefixIds(const JsonView& json) {
  if (json.is_null()) return {};
  json.ExpectObject();
  const std::string type = json.Get<std::string>("type");
  if (type == "ByteLevel") return {};
  if (type == "Sequence") {
    std::vector<int32_t> prefix;
    for (const JsonView& step : json["processors"].Items()) {
      const std::vector<int32_t> ids = PrefixIds(step);
      prefix.insert(prefix.end(), ids.begin(), ids.end());
    }
    return prefix;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const JsonView cls = json["cls"];
    if (cls.size() != 2) cls.Fail("expected [token, id]");
    return {cls.Items()[1].As<int32_t>()};
  }
  if (type != "TemplateProcessing")
    json["type"].Fail(fmt::format("post_processor '{}' is not supported (supported: TemplateProcessing, ByteLevel, "
                                  "Sequence, BertProcessing, RobertaProcessing)", type));
  std::vector<int32_t> prefix;
  for (const JsonView& item : json["single"].Items()) {
    item.ExpectObject();
    if (item.Has("Sequence")) return prefix;
    const std::string name = item["SpecialToken"].Get<std::string>("id");
    const JsonView special = json["special_tokens"][name];
    const std::vector<int32_t> ids = special.Get<std::vector<int32_t>>("ids");
    prefix.insert(prefix.end(), ids.begin(), ids.end());
  }
  json["single"].Fail("the template has no Sequence A");
}

}  // namespace

HfTokenizer::HfTokenizer(const std::filesystem::path& json_path) : source_(json_path.string()) {
  const nlohmann::json root_value = ReadJsonFile(json_path);
  const JsonView root(root_value, source_);
  root.ExpectObject();
  model_ = std::make_unique<HfBpeModel>(root["model"]);
  normalizer_ = ParseHfNormalizer(Member(root, "normalizer"));
  pre_tokenizer_ = ParseHfPreTokenizer(Member(root, "pre_tokenizer"));
  decoder_ = ParseHfDecoder(Member(root, "decoder"));

  vocab_size_ = model_->max_id() + 1;
  if (root.Has("added_tokens")) {
    for (const JsonView& item : root["added_tokens"].Items()) {
      HfAddedToken token;
      token.id = item.Get<int32_t>("id");
      if (token.id < 0) item["id"].Fail("expected a token id >= 0");
      token.content = item.Get<std::string>("content");
      token.single_word = item.Get<bool>("single_word", false);
      token.lstrip = item.Get<bool>("lstrip", false);
      token.rstrip = item.Get<bool>("rstrip", false);
      token.normalized = item.Get<bool>("normalized", true);
      token.special = item.Get<bool>("special", false);
      if (token.content.empty()) item["content"].Fail("an added token needs content");
      if (added_by_id_.contains(token.id)) item["id"].Fail(fmt::format("id {} is listed twice", token.id));
      added_by_id_.emplace(token.id, added_.size());
      vocab_size_ = std::max(vocab_size_, token.id + 1);
      added_.push_back(std::move(token));
    }
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    const HfAddedToken& token = added_[i];
    if (!token.normalized) {
      raw_tokens_.Insert(token.content, i);
      continue;
    }
    std::string content = token.content;
    if (normalizer_) normalizer_->Apply(content);
    if (!content.empty()) normalized_tokens_.Insert(content, i);
  }

  const auto id_of_content = [this](const std::string& content) -> int32_t {
    for (const HfAddedToken& token : added_)
      if (token.content == content) return token.id;
    return model_->Find(content);
  };
  const auto id_of = [&](const JsonView& where, const std::string& content) {
    const int32_t id = id_of_content(content);
    if (id < 0) where.Fail(fmt::format("'{}' is neither an added token nor in model.vocab", content));
    return id;
  };
  prefix_ids_ = PrefixIds(Member(root, "post_processor"));
  for (const int32_t id : prefix_ids_)
    if (id < 0 || id >= vocab_size_) root["post_processor"].Fail(fmt::format("token id {} is outside the vocabulary", id));

  // tokenizer_config.json: what transformers adds on top of tokenizer.json.
  const std::filesystem::path config_path = json_path.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const nlohmann::json config_value = ReadJsonFile(config_path);
    const JsonView config(config_value, config_path.string());
    config.ExpectObject();
    if (config.Has("bos_token")) bos_id_ = id_of(config["bos_token"], TokenContent(config["bos_token"]));
    if (config.Has("eos_token")) eos_id_ = id_of(config["eos_token"], TokenContent(config["eos_token"]));
    if (config.Has("add_bos_token")) {
      if (!config.Get<bool>("add_bos_token")) {
        prefix_ids_.clear();
      } else {
        if (bos_id_ < 0) config["add_bos_token"].Fail("is true but bos_token is not set");
        prefix_ids_ = {bos_id_};
      }
    }
  }
  if (bos_id_ < 0 && !prefix_ids_.empty()) bos_id_ = prefix_ids_.front();
  if (eos_id_ < 0) {
    // No tokenizer_config.json: the end-of-text token of the common families, if it is special.
    for (const char* name : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|im_end|>"}) {
      const int32_t id = id_of_content(name);
      if (const HfAddedToken* token = Added(id); token != nullptr && token->special) {
        eos_id_ = id;
        break;
      }
    }
  }
}

const HfAddedToken* HfTokenizer::Added(int32_t id) const {
  const auto it = added_by_id_.find(id);
  return it == added_by_id_.end() ? nullptr : &added_[it->second];
}

void HfTokenizer::SplitAdded(const Fragment& fragment, bool normalized_pass, std::vector<Fragment>& out) const {
  const TokenTrie& tokens = normalized_pass ? normalized_tokens_ : raw_tokens_;
  const std::string_view text = fragment.text;
  size_t emitted = 0;  // end of the last piece pushed to `out`
  const auto push_text = [&](size_t end) {
    if (end > emitted) out.push_back({std::string(text.substr(emitted, end - emitted)), -1, fragment.at_start && emitted == 0});
  };
  size_t index = 0, length = 0;
  for (size_t pos = 0; pos < text.size() && !tokens.empty();) {
    if (!tokens.LongestAt(text, pos, index, length)) {
      ++pos;
      continue;
    }
    const HfAddedToken& token = added_[index];
    size_t start = pos, stop = pos + length;
    pos = stop;
    if (token.single_word) {
      const bool word_before = start > 0 && IsWordChar(LastCodePoint(text.substr(0, start)));
      size_t next = stop;
      const bool word_after = stop < text.size() && IsWordChar(NextCodePointLenient(text, next));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      // White space before the token joins it, but never space a previous token already took.
      while (start > emitted && IsSpace(LastCodePoint(text.substr(0, start)))) {
        --start;
        while (start > emitted && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!IsSpace(NextCodePointLenient(text, next))) break;
        stop = next;
      }
      pos = stop;
    }
    push_text(start);
    out.push_back({std::string(), token.id, false});
    emitted = stop;
  }
  push_text(text.size());
}

void HfTokenizer::EncodeText(const Fragment& fragment, std::vector<int32_t>& out) const {
  std::vector<HfPiece> pieces{{fragment.text, fragment.at_start}};
  if (pre_tokenizer_) pre_tokenizer_->Apply(pieces);
  for (const HfPiece& piece : pieces) model_->Encode(piece.text, out);
}

std::vector<int32_t> HfTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos) out = prefix_ids_;
  // The library works on Rust strings: invalid UTF-8 arrives as U+FFFD.
  const std::string valid = ToValidUtf8(text);
  std::vector<Fragment> raw, normalized;
  SplitAdded({valid, -1, true}, /*normalized_pass=*/false, raw);
  for (Fragment& fragment : raw) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      continue;
    }
    if (normalizer_) normalizer_->Apply(fragment.text);
    normalized.clear();
    SplitAdded(fragment, /*normalized_pass=*/true, normalized);
    for (const Fragment& piece : normalized) {
      if (piece.token >= 0) {
        out.push_back(piece.token);
      } else {
        EncodeText(piece, out);
      }
    }
  }
  return out;
}

bool HfTokenizer::IsSpecial(int32_t id) const {
  const HfAddedToken* added = Added(id);
  return added != nullptr && added->special;
}

std::string HfTokenizer::DecodeOne(int32_t id, bool first) const {
  if (IsSpecial(id)) return "";
  const HfAddedToken* added = Added(id);
  const std::string* piece = added != nullptr ? &added->content : model_->Token(id);
  if (piece == nullptr) return "";
  std::string text = *piece;
  if (decoder_) {
    decoder_->Apply(text, first, false);
  } else if (!first) {
    text.insert(0, 1, ' ');  // the library joins undecoded tokens with spaces
  }
  return text;
}

std::string HfTokenizer::DecodeToken(int32_t id, int32_t previous) const {
  return DecodeOne(id, previous < 0 || IsSpecial(previous));
}

std::string HfTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  bool first = true;
  for (const int32_t id : ids) {
    text += DecodeOne(id, first);
    first = first && IsSpecial(id);
  }
  return text;
}

std::string HfTokenizer::Piece(int32_t id) const {
  if (const HfAddedToken* added = Added(id)) return added->content;
  const std::string* piece = model_->Token(id);
  return piece != nullptr ? *piece : std::string();
}

}  // namespace lowbit

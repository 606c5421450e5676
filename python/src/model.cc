// Models, tokenizers and generation. A Model keeps one engine (and its thread pool) for logits();
// generate() returns an iterator that decodes one token per step with the GIL released.
#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>

#include "bindings.h"
#include "core/error.h"
#include "model/forward.h"
#include "pipeline/generate.h"
#include "pipeline/session.h"

namespace lowbit::python {
namespace {

class PyModel {
 public:
  PyModel(const std::string& path, const std::string& tokenizer, const std::string& quantize, size_t threads,
          bool allow_nonfinite)
      : path_(path), threads_(threads) {
    LoadOptions options;
    options.allow_nonfinite = allow_nonfinite;
    loaded_ = LoadModelWithTokenizer(path, tokenizer, quantize, options);
  }

  const LoadedModel& loaded() const { return loaded_; }
  const std::string& path() const { return path_; }
  size_t threads() const { return threads_; }

  // Logits [n x vocab] of a fresh sequence (exact fp32 activations, as ppl and compare use).
  std::vector<float> Logits(const std::vector<int32_t>& tokens) {
    const ModelConfig& c = loaded_.model.config;
    if (tokens.empty()) Fail("logits: no tokens");
    if (tokens.size() > c.max_position)
      Fail("logits: {} tokens; the model's context is {}", tokens.size(), c.max_position);
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= c.vocab_size)
        Fail("logits: tokens[{}] = {} is outside the vocabulary [0, {})", i, tokens[i], c.vocab_size);
    if (!engine_) engine_ = std::make_unique<Engine>(loaded_.model, threads_);
    KvCache cache = engine_->NewCache(tokens.size());
    return engine_->Forward(cache, tokens, /*all_logits=*/true);
  }

 private:
  std::string path_;
  size_t threads_;
  LoadedModel loaded_;
  std::unique_ptr<Engine> engine_;
};

class PyGenerator {
 public:
  PyGenerator(PyModel& model, const std::string& prompt, bool chat, size_t max_tokens, const SamplerOptions& sampler)
      : generator_(model.loaded(), prompt, chat, max_tokens, sampler, model.threads()) {}
  TextGenerator& generator() { return generator_; }

 private:
  TextGenerator generator_;
};

nb::dict ConfigDict(const ModelConfig& c) {
  nb::dict d;
  d["architecture"] = c.architecture;
  d["vocab_size"] = c.vocab_size;
  d["hidden_size"] = c.dim;
  d["num_hidden_layers"] = c.n_layers;
  d["num_attention_heads"] = c.n_heads;
  d["num_key_value_heads"] = c.n_kv_heads;
  d["head_dim"] = c.head_dim;
  d["intermediate_size"] = c.ffn_dim;
  d["max_position_embeddings"] = c.max_position;
  d["rope_theta"] = c.rope_theta;
  d["rms_norm_eps"] = c.norm_eps;
  d["tie_word_embeddings"] = c.tie_embeddings;
  d["bos_token_id"] = c.bos_id;
  d["eos_token_id"] = c.eos_id;
  return d;
}

}  // namespace

void BindModel(nb::module_& m) {
  nb::class_<Tokenizer>(m, "Tokenizer", "A model's tokenizer (tokenizer.json, tokenizer.model or a GGUF vocabulary)")
      .def_static(
          "load", [](const std::filesystem::path& path) { return LoadTokenizer(path); }, nb::arg("path"),
          "A tokenizer.json, tokenizer.model, GGUF file, or a folder holding one")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_bos, bool special) {
            return special ? t.EncodeWithSpecialTokens(text) : t.Encode(text, add_bos);
          },
          nb::arg("text"), nb::arg("add_bos") = true, nb::arg("special") = false,
          "Token ids; special=True parses special tokens in the text (a rendered chat template) and adds nothing")
      .def("decode", &Tokenizer::Decode, nb::arg("ids"))
      .def("piece", &Tokenizer::Piece, nb::arg("id"))
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def_prop_ro("bos_id", &Tokenizer::bos_id)
      .def_prop_ro("eos_id", &Tokenizer::eos_id);

  nb::class_<GeneratedToken>(m, "Token", "One generated token: its id and its text in the running output")
      .def_ro("id", &GeneratedToken::id)
      .def_ro("text", &GeneratedToken::text)
      .def("__repr__", [](const GeneratedToken& t) { return "Token(" + std::to_string(t.id) + ", " + nb::repr(nb::cast(t.text)).c_str() + ")"; });

  nb::class_<PyGenerator>(m, "Generation", "An iterator of Tokens; .result holds the text and speeds so far")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__",
           [](PyGenerator& g) {
             std::optional<GeneratedToken> t = WithoutGil([&] { return g.generator().Next(); });
             if (!t) throw nb::stop_iteration();
             return *t;
           })
      .def_prop_ro("result", [](PyGenerator& g) { return JsonToPython(GenerationResultJson(g.generator().result())); });

  nb::class_<PyModel>(m, "Model", "A model lowbit reads (Hugging Face folder, lowbit folder, GGUF, engine checkpoint, llama2.c)")
      .def_static(
          "load",
          [](const std::filesystem::path& path, std::optional<std::filesystem::path> tokenizer,
             std::optional<std::string> quantize, size_t threads, bool allow_nonfinite) {
            return WithoutGil([&] {
              return std::make_unique<PyModel>(path.string(), tokenizer.value_or("").string(), quantize.value_or(""),
                                               threads, allow_nonfinite);
            });
          },
          nb::arg("path"), nb::arg("tokenizer") = nb::none(), nb::arg("quantize") = nb::none(), nb::arg("threads") = 0,
          nb::arg("allow_nonfinite") = false,
          "quantize: RTN-quantize the decoder linears in memory (e.g. 'int4:g128'); threads 0 = all cores")
      .def_prop_ro("path", &PyModel::path)
      .def_prop_ro("config", [](const PyModel& p) { return ConfigDict(p.loaded().model.config); })
      .def_prop_ro(
          "tokenizer", [](const PyModel& p) -> const Tokenizer& { return *p.loaded().tokenizer; },
          nb::rv_policy::reference_internal)
      .def(
          "logits",
          [](PyModel& p, const std::vector<int32_t>& tokens) {
            std::vector<float> v = WithoutGil([&] { return p.Logits(tokens); });
            const size_t vocab = p.loaded().model.config.vocab_size;
            return OwnedFloatArray(std::move(v), tokens.size(), vocab);
          },
          nb::arg("tokens"), "float32 [len(tokens), vocab]: the logits at every position of a fresh sequence")
      .def(
          "_time_logits",
          [](PyModel& p, int32_t token, size_t calls) {
            // The same call timed inside C++: the reference for the binding's per-call overhead.
            const std::vector<int32_t> tokens{token};
            return WithoutGil([&] {
              const auto start = std::chrono::steady_clock::now();
              for (size_t i = 0; i < calls; ++i) (void)p.Logits(tokens);
              const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
              return calls ? seconds / static_cast<double>(calls) : 0.0;
            });
          },
          nb::arg("token"), nb::arg("calls"))
      .def(
          "generate",
          [](PyModel& p, const std::string& prompt, size_t max_tokens, float temperature, int top_k, float top_p,
             uint64_t seed, bool chat, std::optional<std::string> system) {
            if (system && !chat) Fail("generate: system needs chat=True");
            const std::string text = chat ? ChatPrompt(p.path(), system.value_or(""), prompt) : prompt;
            const SamplerOptions sampler{temperature, top_k, top_p, seed};
            return WithoutGil([&] { return std::make_unique<PyGenerator>(p, text, chat, max_tokens, sampler); });
          },
          nb::arg("prompt"), nb::arg("max_tokens") = 64, nb::arg("temperature") = 0.0f, nb::arg("top_k") = 40,
          nb::arg("top_p") = 0.95f, nb::arg("seed") = 0, nb::arg("chat") = false, nb::arg("system") = nb::none(),
          nb::keep_alive<0, 1>(),
          "An iterator of Tokens. chat=True sends the prompt as a user message through the model's chat template");
}

}  // namespace lowbit::python

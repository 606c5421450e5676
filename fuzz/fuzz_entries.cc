#include "fuzz/fuzz_entries.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>

#include "core/error.h"
#include "eval/compare.h"
#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/llama2c.h"
#include "io/engine_checkpoint.h"
#include "io/hf_model.h"
#include "io/quantized_checkpoint.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/kv_calibration.h"
#include "model/recipe.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer_export.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::fuzz {
namespace fs = std::filesystem;
namespace {

// A folder private to this process, removed at exit (a crash leaves it, so scripts/fuzz.sh points
// LOWBIT_FUZZ_TMP at a folder it removes afterwards). Readers that take a path get the input
// through a file in it. Default base: /dev/shm when there is one (inputs never touch a disk).
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("LOWBIT_FUZZ_TMP");
    if (tmp == nullptr) tmp = std::getenv("TMPDIR");
    const fs::path base = std::getenv("LOWBIT_FUZZ_TMP") == nullptr && fs::is_directory("/dev/shm")
                              ? fs::path("/dev/shm")
                              : fs::path(tmp ? tmp : "/tmp");
    dir_ = base / ("lowbit-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Writes `data` to `name` inside the folder (and clears the folder's other files first, so an
  // input never sees the previous one's files).
  fs::path Write(const std::string& name, FuzzInput data) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir_)) fs::remove_all(entry.path(), ec);
    return Add(name, data);
  }
  // Writes `data` to `name` beside the files already there (a folder of several files).
  fs::path Add(const std::string& name, FuzzInput data) {
    const fs::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) throw std::runtime_error("fuzz: cannot write " + path.string());
    return path;
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

ScratchDir& Scratch() {
  static ScratchDir dir;
  return dir;
}

// Uses a tokenizer the way the CLI does: encode a fixed text, decode it back, show pieces.
void ExerciseTokenizer(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  for (const bool bos : {false, true}) {
    const std::vector<int32_t> ids = tok.Encode(" Hello, world! In the beginning\n\t<s>\xe2\x96\x81\xc3\xa9 123", bos);
    for (const int32_t id : ids)
      if (id < 0 || id >= n) throw std::logic_error("tokenizer returned an id outside its vocabulary");
    (void)tok.Decode(ids);
  }
  int32_t previous = -1;
  for (int32_t id = 0; id < std::min(n, 512); ++id) {
    (void)tok.DecodeToken(id, previous);
    (void)tok.Piece(id);
    previous = id;
  }
  (void)tok.bos_id();
  (void)tok.eos_id();
}

template <class T>
T LoadLe(FuzzInput data, size_t offset) {
  T v{};
  if (offset + sizeof(T) <= data.size()) std::memcpy(&v, data.data() + offset, sizeof(T));
  return v;
}

constexpr FuzzEntry kEntries[] = {
    {"safetensors_header", SafetensorsHeader},
    {"gguf", Gguf},
    {"llama2c", Llama2c},
    {"hf_config", HfConfig},
    {"recipe", Recipe},
    {"quantized_config", QuantizedConfig},
    {"kv_scales", KvScales},
    {"sentencepiece", SentencePiece},
    {"gguf_vocab", GgufVocab},
    {"hf_tokenizer", HfTokenizer},
    {"chat_template", ChatTemplate},
    {"topk_base", TopkBase},
    {"engine_checkpoint", EngineCheckpoint},
};

}  // namespace

void SafetensorsHeader(FuzzInput data) {
  const SafetensorsFile file = SafetensorsFile::Open(Scratch().Write("model.safetensors", data));
  for (const TensorView& t : file.tensors()) {
    if (file.Find(t.name) != &t) throw std::logic_error("Find disagrees with tensors()");
    if (t.dtype != DType::kBool) (void)ToFloat32(t);
  }
  (void)file.metadata();
}

void Gguf(FuzzInput data) {
  const fs::path path = Scratch().Write("model.gguf", data);
  const GgufFile file = GgufFile::Open(path);
  for (const GgufKeyValue& kv : file.metadata()) {
    if (file.Find(kv.key) == nullptr) throw std::logic_error("Find misses a key of metadata()");
    // Every typed getter must either fit the value or throw Error.
    try { (void)file.GetU32(kv.key); } catch (const Error&) {}
    try { (void)file.GetU64(kv.key); } catch (const Error&) {}
    try { (void)file.GetF32(kv.key); } catch (const Error&) {}
    try { (void)file.GetString(kv.key); } catch (const Error&) {}
  }
  for (const GgufTensorInfo& t : file.tensors()) {
    const GgmlTypeInfo* type = FindGgmlType(t.ggml_type);
    if (type != nullptr && type->dequantize) {
      try { (void)DequantizeGgufTensor(t); } catch (const Error&) {}
    }
  }
  (void)ReadGgufConfig(file);
  (void)LoadGgufModel(path);
}

void Llama2c(FuzzInput data) { (void)LoadLlama2cModel(Scratch().Write("model.bin", data)); }

void HfConfig(FuzzInput data) { (void)ReadHfConfig(Scratch().Write("config.json", data)); }

void Recipe(FuzzInput data) {
  const lowbit::Recipe recipe = ReadRecipe(Scratch().Write("recipe.json", data));
  (void)recipe.ToJson().dump();
}

void QuantizedConfig(FuzzInput data) {
  Scratch().Write("config.json", data);
  const fs::path& folder = Scratch().dir();
  (void)IsQuantizedCheckpoint(folder);
  const QuantizedLinears q = QuantizedLinears::FromFolder(folder);
  for (const auto& [prefix, scheme] : q.schemes()) {
    (void)q.Has(prefix);
    (void)q.InputQuantOf(prefix);
    (void)q.InputHadamardOf(prefix);
  }
  // The GPTQ / AWQ / compressed-tensors reading of the same quantization_config.
  if (const std::optional<EngineLinears> engine = EngineLinears::FromFolder(folder)) (void)engine->quant_method();
}

void KvScales(FuzzInput data) {
  // The seeds are for a 2-layer model; other layer counts take the "wrong length" path.
  (void)ReadKvScales(Scratch().Write("kv_cache_scales.json", data), 2);
}

void SentencePiece(FuzzInput data) { ExerciseTokenizer(*LoadTokenizer(Scratch().Write("tokenizer.model", data))); }

void GgufVocab(FuzzInput data) {
  const fs::path path = Scratch().Write("vocab.gguf", data);
  ExerciseTokenizer(*LoadTokenizer(path));
  // The vocabulary as Hugging Face files (tokenize --save-hf, convert of a GGUF file), read back.
  const fs::path hf = Scratch().dir() / "hf";
  fs::remove_all(hf);
  fs::create_directories(hf);
  if (WriteHfTokenizerFiles(GgufFile::Open(path), hf)) ExerciseTokenizer(*LoadTokenizer(hf));
}

void HfTokenizer(FuzzInput data) { ExerciseTokenizer(*LoadTokenizer(Scratch().Write("tokenizer.json", data))); }

void ChatTemplate(FuzzInput data) {
  // A conversation with every role, tool calls and a tools list, as apply_chat_template passes it.
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi <think>"},
                 {"role": "assistant", "content": "<think>\nr\n</think>\n\nok",
                  "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
                 {"role": "tool", "content": "{\"x\": 1}"}, {"role": "user", "content": ""}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "documents": null, "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true})");
  const std::string source(reinterpret_cast<const char*>(data.data()), data.size());
  (void)RenderChatTemplate(source, context, "chat_template");
}

void TopkBase(FuzzInput data) {
  // The run's own expectations come from the file's header fields (vocab @12, ctx @16,
  // positions @24, token hash @32), so mutations reach the records instead of stopping at
  // "made for a different text".
  BaseFileHeader expected;
  expected.vocab = LoadLe<uint32_t>(data, 12);
  expected.ctx = LoadLe<uint32_t>(data, 16);
  expected.positions = LoadLe<uint64_t>(data, 24);
  expected.token_hash = LoadLe<uint64_t>(data, 32);
  const std::vector<BaseRecord> records = ReadBaseFile(Scratch().Write("base.lbkl", data), expected);
  for (const BaseRecord& r : records)
    for (const int32_t id : r.ids)
      if (id < 0 || static_cast<uint32_t>(id) >= expected.vocab) throw std::logic_error("base id outside the vocabulary");
}

PackedCheckpoint SplitCheckpoint(FuzzInput data) {
  const size_t n = std::min<size_t>(LoadLe<uint32_t>(data, 0), data.size() > 4 ? data.size() - 4 : 0);
  const size_t start = std::min<size_t>(4, data.size());
  return {{reinterpret_cast<const char*>(data.data()) + start, n}, data.subspan(start + n)};
}

void EngineCheckpoint(FuzzInput data) {
  const PackedCheckpoint packed = SplitCheckpoint(data);
  Scratch().Write("config.json", {reinterpret_cast<const uint8_t*>(packed.config.data()), packed.config.size()});
  Scratch().Add("model.safetensors", packed.safetensors);
  const Model model = LoadHfModel(Scratch().dir());
  (void)ReadCheckpointKvScales(Scratch().dir(), model.config.n_layers);
  // Bounded by the input's own bytes (the seeds are 2-layer models of width 32).
  if (model.config.dim > 4096 || model.config.vocab_size > 4096) return;
  std::vector<float> row;
  for (const LayerWeights& layer : model.weights.layers)
    for (const ConstBlockLinear& bl : BlockLinears(layer))
      if (const auto* q = std::get_if<QuantizedTensor>(&bl.linear->weight)) {
        row.resize(q->cols());
        for (uint64_t r = 0; r < q->rows(); ++r) q->DequantizeRow(r, row.data());
      }
  Engine engine(model, 1);
  KvCache cache = engine.NewCache(3);
  const int32_t vocab = static_cast<int32_t>(model.config.vocab_size);
  const std::vector<int32_t> tokens = {1 % vocab, 2 % vocab, 3 % vocab};
  (void)engine.Forward(cache, tokens, false);
}

std::span<const FuzzEntry> AllFuzzEntries() { return kEntries; }

const FuzzEntry* FindFuzzEntry(std::string_view name) {
  for (const FuzzEntry& e : kEntries)
    if (e.name == name) return &e;
  return nullptr;
}

namespace {

bool NamesItsInput(const FuzzEntry& entry, const Error& e) {
  const std::string_view message = e.what();
  // A template arrives as a string; RenderChatTemplate is told its source's name.
  if (entry.name == "chat_template") return message.find("chat_template") != std::string_view::npos;
  // Every other input is a file (or a folder of files) in the scratch folder.
  return message.find(Scratch().dir().string()) != std::string_view::npos;
}

}  // namespace

void RunFuzzEntry(const FuzzEntry& entry, FuzzInput data) {
  try {
    entry.run(data);
  } catch (const Error& e) {
    // The promised outcome for bad input, provided the message says which file it is about.
    if (!NamesItsInput(entry, e))
      throw std::logic_error("lowbit::Error that does not name its file: " + std::string(e.what()));
  }
}

int RunFuzzTarget(std::string_view name, const uint8_t* data, size_t size) {
  const FuzzEntry* entry = FindFuzzEntry(name);
  if (entry == nullptr) {
    std::fprintf(stderr, "fuzz: no entry '%.*s'\n", static_cast<int>(name.size()), name.data());
    std::abort();
  }
  static const bool verbose = std::getenv("LOWBIT_FUZZ_VERBOSE") != nullptr;  // print each input's Error
  try {
    if (verbose) {
      try {
        entry->run({data, size});
        std::fprintf(stderr, "fuzz: ok\n");
      } catch (const Error& e) {
        std::fprintf(stderr, "fuzz: Error: %s\n", e.what());
      }
    } else {
      RunFuzzEntry(*entry, {data, size});
    }
  } catch (const std::exception& e) {
    // Not lowbit::Error: the reader broke its error promise. Abort so libFuzzer keeps the input.
    std::fprintf(stderr, "fuzz: %s escaped (not lowbit::Error): %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}

}  // namespace lowbit::fuzz

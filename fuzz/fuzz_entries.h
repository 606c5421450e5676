// The bodies of the libFuzzer targets in fuzz/, one per reader of outside data. Each fuzz target
// (fuzz/<name>_fuzz.cc) and tests/fuzz_regressions_test.cc call the same entry, so every stored
// crash input is replayed through exactly the code the fuzzer ran.
//
// An entry feeds `data` to its reader (through a scratch file when the reader takes a path) and
// uses what comes back. Bad input must end in lowbit::Error, which RunFuzzEntry swallows; any
// other exception (std::logic_error from LOWBIT_CHECK, std::bad_alloc, a json or filesystem
// exception, std::out_of_range ...) breaks the readers' error promise and is let through, so
// libFuzzer reports it as a crash and the regression test fails on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace lowbit::fuzz {

using FuzzInput = std::span<const uint8_t>;

struct FuzzEntry {
  std::string_view name;  // the target's name: fuzz/<name>_fuzz.cc, fuzz/corpus/<name>/
  void (*run)(FuzzInput data);
};

void SafetensorsHeader(FuzzInput data);  // SafetensorsFile::Open + ToFloat32 of every tensor
void Gguf(FuzzInput data);               // GgufFile::Open, typed getters, ReadGgufConfig, dequantize
void Llama2c(FuzzInput data);            // LoadLlama2cModel
void HfConfig(FuzzInput data);           // ReadHfConfig (config.json -> ModelConfig)
void Recipe(FuzzInput data);             // ReadRecipe (quantize --recipe FILE) and its card
void QuantizedConfig(FuzzInput data);    // QuantizedLinears / EngineLinears::FromFolder (quantization_config)
void KvScales(FuzzInput data);           // ReadKvScales (kv_cache_scales.json)
void SentencePiece(FuzzInput data);      // LoadTokenizer of a tokenizer.model, encode/decode
void GgufVocab(FuzzInput data);          // LoadTokenizer of a .gguf vocabulary, encode/decode
void HfTokenizer(FuzzInput data);        // LoadTokenizer of a tokenizer.json, encode/decode
void ChatTemplate(FuzzInput data);       // RenderChatTemplate of a Jinja chat template over a fixed conversation
void TopkBase(FuzzInput data);           // ReadBaseFile (--kl-base top-K file)
// A Hugging Face folder of engine-quantized linears (GPTQ, AWQ, compressed-tensors, Phi-3's fused
// projections): LoadHfModel, every linear decoded, a 3-token forward pass. The input is a checkpoint
// packed as SplitCheckpoint reads it.
void EngineCheckpoint(FuzzInput data);

// The packing of engine_checkpoint inputs: a little-endian u32 length n, n bytes of config.json, and
// the rest model.safetensors (a short input is all config).
struct PackedCheckpoint {
  std::string_view config;
  FuzzInput safetensors;
};
PackedCheckpoint SplitCheckpoint(FuzzInput data);

// Every entry, in the order above.
std::span<const FuzzEntry> AllFuzzEntries();
const FuzzEntry* FindFuzzEntry(std::string_view name);  // nullptr if unknown

// Runs `entry` on `data`: returns normally on success or on a lowbit::Error whose message names the
// input (the scratch file or folder; for chat_template the template's name); lets anything else out,
// an Error that names no file as std::logic_error (the promise is a message naming file and field).
void RunFuzzEntry(const FuzzEntry& entry, FuzzInput data);
// LLVMFuzzerTestOneInput's body: RunFuzzEntry, and abort() with the exception's type and message
// when something other than lowbit::Error escapes (so the fuzzer records the input).
int RunFuzzTarget(std::string_view name, const uint8_t* data, size_t size);

}  // namespace lowbit::fuzz

// Defines LLVMFuzzerTestOneInput for one entry (in fuzz/<name>_fuzz.cc).
#define LOWBIT_FUZZ_TARGET(entry_name)                                        \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    return lowbit::fuzz::RunFuzzTarget(entry_name, data, size);             \
  }

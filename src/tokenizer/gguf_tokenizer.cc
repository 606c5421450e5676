// Picks the tokenizer for a GGUF vocabulary by tokenizer.ggml.model.
#include "core/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/vocab.h"

namespace lowbit {

std::unique_ptr<Tokenizer> MakeGgufTokenizer(const VocabData& vocab) {
  if (vocab.model == "llama") return std::make_unique<SpmTokenizer>(vocab);
  if (vocab.model == "gpt2") return std::make_unique<BpeTokenizer>(vocab);
  // llama.cpp also knows bert, t5, rwkv, plamo2, ...; those are not implemented here.
  Fail("{}: tokenizer.ggml.model '{}' is not supported (supported: 'llama', 'gpt2')",
       vocab.source.empty() ? "vocabulary" : vocab.source, vocab.model);
}

}  // namespace lowbit

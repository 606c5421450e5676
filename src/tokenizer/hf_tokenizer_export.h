// The Hugging Face tokenizer files of a GGUF vocabulary (the inverse of gguf_vocab_export.h), as the
// model's own repository holds them, for folders written from a GGUF file:
// - "llama" (SentencePiece): tokenizer.model, a SentencePiece BPE model of the file's pieces, scores and
//   token types (its byte pieces as byte fallback; the dummy prefix and white-space handling of
//   tokenizer.ggml.add_space_prefix / remove_extra_whitespaces), which transformers, vLLM and lowbit load;
// - "gpt2" (byte-level BPE): tokenizer.json, the vocabulary and merges with the pre-tokenizer of
//   tokenizer.ggml.pre (its regexes as Split steps before ByteLevel, or GPT-2's own ByteLevel), control
//   tokens special added tokens, user-defined ones plain added tokens, BOS by a TemplateProcessing when the
//   vocabulary adds it;
// and for both tokenizer_config.json (the BOS / EOS / UNK tokens, add_bos_token, the file's chat template)
// and generation_config.json (the BOS / EOS ids).
#pragma once

#include <filesystem>
#include <string>

#include "tokenizer/vocab.h"

namespace lowbit {

class GgufFile;

// Writes the files into `dir` (which exists). `chat_template` (tokenizer.chat_template) is left out
// when empty. Error naming the vocabulary's file and key for what no Hugging Face tokenizer expresses
// as llama.cpp tokenizes it: another tokenizer.ggml.model, a pre-tokenizer name lowbit does not know or
// that is not byte-level, duplicate pieces, byte pieces without the whole byte alphabet.
void WriteHfTokenizerFiles(const VocabData& vocab, const std::string& chat_template, const std::filesystem::path& dir);

// The same for a GGUF file's vocabulary and tokenizer.chat_template. False, writing nothing, when the
// file has no vocabulary (no tokenizer.ggml.model).
bool WriteHfTokenizerFiles(const GgufFile& file, const std::filesystem::path& dir);

}  // namespace lowbit

#include "cli/session.h"

#include "core/error.h"
#include "core/file_util.h"
#include "core/thread_pool.h"
#include "io/model_loader.h"
#include "model/quantize_weights.h"

namespace lowbit::cli {

LoadedModel LoadModelWithTokenizer(const std::string& model_path, const std::string& tokenizer_path,
                                   const std::string& quantize) {
  LoadedModel m{LoadModel(model_path), LoadTokenizer(tokenizer_path.empty() ? model_path : tokenizer_path)};
  if (!quantize.empty()) QuantizeLinears(m.model.weights, ParseScheme(quantize));
  if (m.tokenizer->vocab_size() > static_cast<int32_t>(m.model.config.vocab_size))
    Fail("{}: the tokenizer has {} tokens but the model only {}", model_path, m.tokenizer->vocab_size(),
         m.model.config.vocab_size);
  return m;
}

std::vector<int32_t> TokenizeFile(const Tokenizer& tokenizer, const std::string& path) {
  return tokenizer.Encode(ReadTextFile(path), /*add_bos=*/true);
}

std::vector<int32_t> TokenizeLines(const Tokenizer& tokenizer, const std::string& text, size_t threads) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) lines.emplace_back(text.data() + start, end - start);
    start = end + 1;
  }
  std::vector<std::vector<int32_t>> parts(lines.size());
  ThreadPool pool(threads);
  pool.ParallelFor(lines.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) parts[i] = tokenizer.Encode(lines[i], false);
  });
  std::vector<int32_t> tokens = {tokenizer.bos_id()};
  for (const auto& p : parts) tokens.insert(tokens.end(), p.begin(), p.end());
  return tokens;
}

}  // namespace lowbit::cli

#include "cli/session.h"

#include "core/error.h"
#include "core/file_util.h"
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

}  // namespace lowbit::cli

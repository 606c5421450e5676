#include <gtest/gtest.h>

#include "core/error.h"
#include "quant/registry.h"

namespace lowbit {
namespace {

MethodInfo Info(std::string name) {
  return {std::move(name), "test", {ElementKind::kInt}, {GranularityKind::kGroup}, {"alpha"}};
}

class Dummy final : public QuantMethod {
 public:
  QuantizedTensor Quantize(const WeightToQuantize&, const QuantScheme& s) const override { return {s, 1, 1}; }
};

MethodRegistry::Factory DummyFactory() {
  return [](const JsonView&) { return std::make_unique<Dummy>(); };
}

TEST(Registry, DuplicateNameIsAnErrorAndKeepsTheOriginal) {
  MethodRegistry r;
  r.Register(Info("gptq"), DummyFactory());
  MethodInfo other = Info("gptq");
  other.description = "impostor";
  EXPECT_THROW(r.Register(other, DummyFactory()), Error);
  EXPECT_EQ(r.Info("gptq").description, "test");
  EXPECT_THROW(r.Register(Info("Bad Name"), DummyFactory()), Error);
}

TEST(Registry, UnknownNameListsTheKnownOnes) {
  MethodRegistry r;
  r.Register(Info("awq"), DummyFactory());
  r.Register(Info("gptq"), DummyFactory());
  try {
    r.Info("smoothquant");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("awq, gptq"), std::string::npos) << e.what();
  }
}

TEST(Registry, ValidatesConfigKeysFormatsAndGranularities) {
  MethodRegistry r;
  r.Register(Info("gptq"), DummyFactory());
  const QuantScheme int4 = ParseScheme("int4:g128");
  EXPECT_NE(r.Create("gptq", {{"alpha", 0.5}}, int4), nullptr);
  EXPECT_NE(r.Create("gptq", nullptr, int4), nullptr);
  EXPECT_THROW(r.Create("gptq", {{"alpah", 0.5}}, int4), Error);
  EXPECT_THROW(r.Create("gptq", nlohmann::json::array(), int4), Error);
  EXPECT_THROW(r.Create("gptq", nullptr, ParseScheme("mxfp4")), Error);
  EXPECT_THROW(r.Create("gptq", nullptr, ParseScheme("int4:channel")), Error);
}

TEST(Registry, BuiltinRtnQuantizesEveryPreset) {
  const MethodRegistry& r = BuiltinMethods();
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"awq", "gptq", "llm_int8", "rtn", "smoothquant"}));
  EXPECT_THROW(r.Create("rtn", {{"damp", 0.01}}, ParseScheme("int4")), Error);
  const std::vector<float> w(64, 0.25f);
  for (const SchemePreset& p : SchemePresets()) {
    if (p.name == "fp32" || p.name == "fp16" || p.name == "bf16") continue;
    const QuantScheme s = ParseScheme(p.name);
    const auto method = r.Create("rtn", nullptr, s);
    const QuantizedTensor q = method->Quantize({"w", w, 2, 32}, s);
    EXPECT_EQ(q.rows(), 2u) << p.name;
  }
}

}  // namespace
}  // namespace lowbit

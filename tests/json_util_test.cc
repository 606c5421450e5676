// Strict JSON reading (core/json_util.h): every lossy conversion nlohmann would make silently is an
// error naming the file and key path; duplicates, depth and size are bounded.
#include "core/json_util.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace lowbit {
namespace {

using nlohmann::json;

// The message of the Error `fn` throws ("" when it throws none).
template <class Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonUtil, IntegersMustBeJsonIntegersInRange) {
  const json j = json::parse(R"({"neg": -6, "frac": 5.9, "flag": true, "big": 4294967296, "ok": 7, "s": "7"})");
  const JsonView v(j, "config.json");
  EXPECT_EQ(v.Get<uint32_t>("ok"), 7u);
  EXPECT_EQ(v.Get<int8_t>("neg"), -6);
  EXPECT_EQ(ErrorOf([&] { v.Get<uint32_t>("neg"); }), "config.json: neg: is -6, outside [0, 4294967295]");
  EXPECT_EQ(ErrorOf([&] { v.Get<int>("frac"); }), "config.json: frac: must be an integer, not number 5.9");
  EXPECT_EQ(ErrorOf([&] { v.Get<int>("flag"); }), "config.json: flag: must be an integer, not boolean true");
  EXPECT_EQ(ErrorOf([&] { v.Get<uint32_t>("big"); }), "config.json: big: is 4294967296, outside [0, 4294967295]");
  EXPECT_EQ(ErrorOf([&] { v.Get<int>("s"); }), "config.json: s: must be an integer, not string \"7\"");
  EXPECT_EQ(v.Get<uint32_t>("absent", 3u), 3u);
  const json built = {{"n", 10}, {"m", -1}};  // signed integers, as JSON built in code holds them
  EXPECT_EQ(JsonView(built, "code").Get<size_t>("n"), 10u);
  EXPECT_EQ(ErrorOf([&] { JsonView(built, "code").Get<size_t>("m"); }), "code: m: is -1, outside [0, 18446744073709551615]");
  EXPECT_EQ(ErrorOf([&] { v.Get<uint32_t>("absent"); }), "config.json: missing field 'absent'");
}

TEST(JsonUtil, FloatsMustBeFiniteInTheirType) {
  const json j = json::parse(R"({"huge": 1e308, "tiny": 1e-310, "zero": 0, "x": 0.5, "b": false})");
  const JsonView v(j, "kv.json");
  EXPECT_EQ(v.Get<float>("x"), 0.5f);
  EXPECT_EQ(v.Get<float>("zero"), 0.0f);
  EXPECT_EQ(v.Get<double>("huge"), 1e308);  // finite as a double
  EXPECT_EQ(ErrorOf([&] { v.Get<float>("huge"); }), "kv.json: huge: is 1e+308, not finite as a 32-bit float");
  EXPECT_EQ(ErrorOf([&] { v.Get<float>("tiny"); }), "kv.json: tiny: is 1e-310, which rounds to 0 as a 32-bit float");
  EXPECT_EQ(ErrorOf([&] { v.Get<float>("b"); }), "kv.json: b: must be a number, not boolean false");
}

TEST(JsonUtil, ErrorsCarryTheKeyPathThroughObjectsAndArrays) {
  const json j = json::parse(R"({"a": {"list": [1, {"n": "x"}]}})");
  const JsonView v(j, "r.json");
  const std::vector<JsonView> items = v["a"]["list"].Items();
  EXPECT_EQ(ErrorOf([&] { items[1].Get<int>("n"); }), "r.json: a.list[1].n: must be an integer, not string \"x\"");
  try {
    items[1].Get<int>("n");
  } catch (const Error& e) {
    EXPECT_EQ(e.file(), "r.json");
    EXPECT_EQ(e.field(), "a.list[1].n");
  }
  EXPECT_EQ(ErrorOf([&] { v["a"].Items(); }), "r.json: a: must be an array, not object {\"list\":[1,{\"n\":\"x\"}]}");
  EXPECT_EQ((v["a"]["list"].Items()[0].As<int>()), 1);
}

TEST(JsonUtil, DuplicateKeysAreErrorsNamingTheirPath) {
  EXPECT_EQ(ErrorOf([] { ParseJson(R"({"a": 1, "a": 2})", "c.json"); }), "c.json: duplicate key 'a'");
  EXPECT_EQ(ErrorOf([] { ParseJson(R"({"x": [0, {"k": 1, "k": 1}]})", "c.json"); }), "c.json: duplicate key 'x[1].k'");
  // The same key in two different objects is fine.
  EXPECT_EQ(ParseJson(R"({"a": {"k": 1}, "b": {"k": 2}})", "c.json")["b"]["k"], 2);
}

TEST(JsonUtil, DepthAndSizeAreBounded) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(ErrorOf([&] { ParseJson(deep, "d.json"); }).find("nests deeper than 64 levels"), std::string::npos);
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(ParseJson(ok, "d.json"));
  EXPECT_EQ(ErrorOf([] { ParseJson("[1, 2, 3]", "s.json", {.max_bytes = 4}); }),
            "s.json: 9 bytes of JSON, more than the 4 this reader accepts");
  EXPECT_EQ(ErrorOf([] { ParseJson("{\"a\": }", "s.json"); }),
            "s.json: not valid JSON: parse error at line 1, column 7: syntax error while parsing value - unexpected "
            "'}'; expected '[', '{', or a literal");
}

}  // namespace
}  // namespace lowbit

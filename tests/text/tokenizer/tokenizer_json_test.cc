// The streaming tokenizer.json reader against nlohmann's own tree parser (the independent
// reference): on the real tokenizer files it must give the same settings, vocabulary and merges;
// on malformed files, an error that names the field.
#include "text/tokenizer/tokenizer_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "text/tokenizer/tokenizer.h"

namespace tpserve {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class TokenizerJsonFile : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerJsonFile, EqualsWhatTheTreeParserReads) {
  const std::string text =
      testing::ReadFile(testing::RequireAsset("tokenizers/" + GetParam() + "/tokenizer.json"));
  ASSERT_FALSE(text.empty());
  json tree = json::parse(text);
  auto streamed = ParseTokenizerJson(text, "tokenizer.json");
  ASSERT_TRUE(streamed.ok()) << streamed.status().ToString();

  json& model = tree.at("model");
  ASSERT_TRUE(streamed->has_vocab);
  ASSERT_EQ(streamed->vocab.size(), model.at("vocab").size());
  int32_t max_id = -1;
  for (const auto& [token, id] : model.at("vocab").items()) {
    auto it = streamed->vocab.find(token);
    ASSERT_NE(it, streamed->vocab.end()) << token;
    EXPECT_EQ(it->second, id.get<int32_t>()) << token;
    max_id = std::max(max_id, id.get<int32_t>());
  }
  EXPECT_EQ(streamed->max_vocab_id, max_id);

  const json& merges = model.at("merges");
  ASSERT_EQ(streamed->merges.size(), merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    // Either form the file uses: "left right" or ["left", "right"].
    const std::string left = merges[i].is_array() ? merges[i][0].get<std::string>()
                                                  : merges[i].get<std::string>().substr(
                                                        0, merges[i].get<std::string>().find(' '));
    const std::string right = merges[i].is_array()
                                  ? merges[i][1].get<std::string>()
                                  : merges[i].get<std::string>().substr(left.size() + 1);
    ASSERT_EQ(streamed->merges[i].first, left) << "merge " << i;
    ASSERT_EQ(streamed->merges[i].second, right) << "merge " << i;
  }

  model.erase("vocab");
  model.erase("merges");
  EXPECT_EQ(streamed->settings, tree);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerJsonFile, ::testing::Values("llama3", "qwen2"));

TEST(TokenizerJson, BothMergeFormsGiveTheSamePairs) {
  auto strings = ParseTokenizerJson(R"({"model": {"merges": ["a b", "ab c"]}})", "t.json");
  auto pairs = ParseTokenizerJson(R"({"model": {"merges": [["a", "b"], ["ab", "c"]]}})", "t.json");
  ASSERT_TRUE(strings.ok() && pairs.ok());
  const std::vector<std::pair<std::string, std::string>> expected = {{"a", "b"}, {"ab", "c"}};
  EXPECT_EQ(strings->merges, expected);
  EXPECT_EQ(pairs->merges, expected);
  EXPECT_FALSE(strings->has_vocab);
}

TEST(TokenizerJson, OnlyTheTopLevelModelsVocabIsStreamed) {
  // A "vocab" elsewhere (here under decoder, and model.x.vocab) stays in the settings tree.
  auto parsed = ParseTokenizerJson(
      R"({"decoder": {"vocab": {"a": 1}}, "model": {"x": {"vocab": [1]}, "vocab": {"b": 2, "c": 0}}})",
      "t.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->settings,
            json::parse(R"({"decoder": {"vocab": {"a": 1}}, "model": {"x": {"vocab": [1]}}})"));
  EXPECT_EQ(parsed->vocab.size(), 2u);
  EXPECT_EQ(parsed->max_vocab_id, 2);
}

TEST(TokenizerJson, MalformedEntriesAreNamed) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {R"({"model": {"vocab": {"a": 2.5}}})", R"(t.json: model.vocab["a"]: 2.5 is not an integer)"},
      {R"({"model": {"vocab": {"a": 4294967296}}})",
       R"(model.vocab["a"]: 4294967296 is not an integer)"},
      {R"({"model": {"vocab": {"a": "7"}}})", R"(model.vocab["a"]: "7" is not an integer)"},
      {R"({"model": {"vocab": {"a": {}}}})",
       "model.vocab holds an object where a token id belongs"},
      {R"({"model": {"vocab": {"a": [1]}}})",
       "model.vocab holds an array where a token id belongs"},
      {R"({"model": {"merges": ["ab"]}})", R"(model.merges[0] "ab" is not "left right")"},
      {R"({"model": {"merges": [["a", "b", "c"]]}})", "model.merges[0] has more than two parts"},
      {R"({"model": {"merges": ["a b", ["a"]]}})", "model.merges[1] is not a pair of strings"},
      {R"({"model": {"merges": [7]}})", "model.merges[0] is 7, not a pair of strings"},
      {R"({"model": {"merges": [[["a"], "b"]]}})",
       "model.merges holds an array where a merge belongs"},
      {R"({"model": {"vocab": {"a": 1})", "t.json: not valid JSON ("},
  };
  for (const Case& c : cases) {
    auto parsed = ParseTokenizerJson(c.text, "t.json");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(TokenizerJson, AnIdBeyondAnyVocabularyIsRefusedBeforeAllocating) {
  // 2^31 - 1 is an int32, but a table of that many tokens would take 64 GB.
  auto tokenizer = Tokenizer::FromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 2147483647}}, "pre_tokenizer": {"type": "ByteLevel"}})",
      "t.json");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(),
              HasSubstr("t.json: token id 2147483647 is beyond the 16777216 ids"));
  auto missing = Tokenizer::FromJson(
      R"({"model": {"type": "BPE"}, "pre_tokenizer": {"type": "ByteLevel"}})", "t.json");
  EXPECT_THAT(missing.status().message(), HasSubstr("t.json: model.vocab is missing"));
}

}  // namespace
}  // namespace tpserve

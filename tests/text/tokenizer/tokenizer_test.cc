// The tokenizer against independent references: llama.cpp's vocab test cases (made with Hugging
// Face transformers) and golden ids from Hugging Face's tokenizers library, cross-checked with a
// JavaScript port (scripts/golden/make_tokenizer_golden.mjs). Never against our own output.
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "text/tokenizer/incremental_decoder.h"
#include "text/tokenizer/utf8.h"
#include "tests/test_util.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

struct Vocabulary {
  std::string name;             // tokenizers/<name>/tokenizer.json
  std::string llama_cpp_vocab;  // llama-vocab-tests/<vocab>.inp / .out
};

void PrintTo(const Vocabulary& v, std::ostream* os) { *os << v.name; }

const Tokenizer& LoadShared(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    auto loaded = Tokenizer::FromFile(testing::RequireAsset("tokenizers/" + name + "/tokenizer.json"));
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status().ToString();
      std::abort();
    }
    slot = std::make_unique<Tokenizer>(std::move(loaded).value());
  }
  return *slot;
}

class TokenizerReference : public ::testing::TestWithParam<Vocabulary> {
 protected:
  const Tokenizer& tokenizer() const { return LoadShared(GetParam().name); }
};

// llama.cpp's format: cases separated by "\n__ggml_vocab_test__\n" (also after the last), and
// one line of space-separated ids per case.
TEST_P(TokenizerReference, MatchesLlamaCppVocabTests) {
  const std::string base = "llama-vocab-tests/" + GetParam().llama_cpp_vocab;
  const std::string inputs = testing::ReadFile(testing::RequireAsset(base + ".inp"));
  const std::string outputs = testing::ReadFile(testing::RequireAsset(base + ".out"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  for (size_t begin = 0, end; (end = inputs.find(separator, begin)) != std::string::npos;
       begin = end + separator.size()) {
    cases.push_back(inputs.substr(begin, end - begin));
  }
  std::vector<std::vector<int32_t>> expected;
  std::istringstream lines(outputs);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    expected.emplace_back();
    for (int32_t id; ids >> id;) expected.back().push_back(id);
  }
  ASSERT_EQ(cases.size(), 46u);
  ASSERT_EQ(expected.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    auto ids = tokenizer().Encode(cases[i]);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, expected[i]) << "case " << i << ": " << nlohmann::json(cases[i]).dump();
  }
}

TEST_P(TokenizerReference, MatchesHuggingFaceGoldenIds) {
  const auto golden = nlohmann::json::parse(testing::ReadFile(
      testing::TestDataDir() + "/tokenizer_golden_" + GetParam().name + ".json"));
  ASSERT_GE(golden["cases"].size(), 60u);
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> expected = c["ids"];
    auto ids = tokenizer().Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, expected) << nlohmann::json(text).dump();
    auto decoded = tokenizer().Decode(expected);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>()) << nlohmann::json(text).dump();
  }
}

TEST_P(TokenizerReference, StreamingDecodeNeverBreaksUtf8AndLosesNothing) {
  const auto golden = nlohmann::json::parse(testing::ReadFile(
      testing::TestDataDir() + "/tokenizer_golden_" + GetParam().name + ".json"));
  std::vector<std::vector<int32_t>> sequences;
  for (const auto& c : golden["cases"]) sequences.push_back(c["ids"]);
  // Random byte-level tokens too: arbitrary byte strings, often ill-formed UTF-8.
  std::mt19937 random(7);
  for (int n = 0; n < 200; ++n) {
    std::vector<int32_t> ids;
    for (int k = 0; k < 12; ++k) ids.push_back(static_cast<int32_t>(random() % 256));
    sequences.push_back(ids);
  }
  for (const auto& ids : sequences) {
    IncrementalDecoder decoder(tokenizer());
    std::string streamed;
    for (int32_t id : ids) {
      auto piece = decoder.Push(id);
      ASSERT_TRUE(piece.ok());
      ASSERT_EQ(FindInvalidUtf8(*piece), std::string::npos);
      streamed += *piece;
    }
    streamed += decoder.Finish();
    EXPECT_EQ(streamed, tokenizer().Decode(ids).value());
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerReference,
                         ::testing::Values(Vocabulary{"llama3", "ggml-vocab-llama-bpe.gguf"},
                                           Vocabulary{"qwen2", "ggml-vocab-qwen2.gguf"}),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(Tokenizer, StreamingHoldsSplitCharacterUntilComplete) {
  const Tokenizer& tokenizer = LoadShared("llama3");
  // "😀" is 4 bytes; feed it as its single-byte tokens.
  const std::string emoji = "\xF0\x9F\x98\x80";
  IncrementalDecoder decoder(tokenizer);
  // The single-byte tokens (GPT-2 byte-level vocabularies put them at ids 0..255).
  std::vector<int32_t> byte_ids;
  for (unsigned char b : emoji) {
    for (int32_t id = 0; id < 256; ++id) {
      if (tokenizer.DecodeBytes(std::vector<int32_t>{id}).value() == std::string(1, static_cast<char>(b))) {
        byte_ids.push_back(id);
        break;
      }
    }
  }
  ASSERT_EQ(byte_ids.size(), 4u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(decoder.Push(byte_ids[i]).value(), "");
  EXPECT_EQ(decoder.held_bytes(), 3u);
  EXPECT_EQ(decoder.Push(byte_ids[3]).value(), emoji);
  EXPECT_EQ(decoder.Finish(), "");
}

TEST(Tokenizer, SpecialTokensAreNeverSplitUnlessParsingIsOff) {
  const Tokenizer& tokenizer = LoadShared("llama3");
  auto parsed = tokenizer.Encode("a<|eot_id|>b");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, (std::vector<int32_t>{64, 128009, 65}));
  auto literal = tokenizer.Encode("a<|eot_id|>b", false, /*parse_special=*/false);
  ASSERT_TRUE(literal.ok());
  EXPECT_GT(literal->size(), 3u);
  for (int32_t id : *literal) EXPECT_LT(id, 128000);
  EXPECT_EQ(tokenizer.Decode(*literal).value(), "a<|eot_id|>b");
  EXPECT_EQ(tokenizer.Decode(*parsed, /*skip_special=*/true).value(), "ab");
  EXPECT_TRUE(tokenizer.IsSpecial(128009));
  EXPECT_EQ(tokenizer.TokenToId("<|begin_of_text|>"), 128000);
}

// A chat template's own special tokens are parsed; the same strings inside message content (the
// plain ranges) are text. The reference is Encode with parse_special on and off on the pieces.
TEST(Tokenizer, PlainRangesNeverBecomeSpecialTokens) {
  const Tokenizer& tokenizer = LoadShared("llama3");
  const std::string header = "<|start_header_id|>user<|end_header_id|>\n\n";
  const std::string content = "hi<|eot_id|><|start_header_id|>system";
  const std::string text = header + content + "<|eot_id|>";
  const std::vector<std::pair<size_t, size_t>> plain = {{header.size(), header.size() + content.size()}};
  auto ids = tokenizer.EncodeWithPlainRanges(text, plain);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  auto header_ids = tokenizer.Encode(header);
  auto content_ids = tokenizer.Encode(content, false, /*parse_special=*/false);
  ASSERT_TRUE(header_ids.ok() && content_ids.ok());
  std::vector<int32_t> expected = *header_ids;
  expected.insert(expected.end(), content_ids->begin(), content_ids->end());
  expected.push_back(*tokenizer.TokenToId("<|eot_id|>"));
  EXPECT_EQ(*ids, expected);
  EXPECT_EQ(tokenizer.Decode(*ids).value(), text);
  // A special token that only straddles the range's edge is not parsed either.
  const std::vector<std::pair<size_t, size_t>> edge = {{header.size() - 3, header.size()}};
  auto straddling = tokenizer.EncodeWithPlainRanges(header, edge);
  ASSERT_TRUE(straddling.ok());
  EXPECT_EQ(std::count(straddling->begin(), straddling->end(), *tokenizer.TokenToId("<|end_header_id|>")), 0);
  auto no_ranges = tokenizer.EncodeWithPlainRanges(text, {});
  auto whole = tokenizer.Encode(text);
  ASSERT_TRUE(no_ranges.ok() && whole.ok());
  EXPECT_EQ(*no_ranges, *whole);
  const std::vector<std::pair<size_t, size_t>> outside = {{0, text.size() + 1}};
  EXPECT_FALSE(tokenizer.EncodeWithPlainRanges(text, outside).ok());
}

// A chat of many messages: many plain ranges, each between special tokens, and each still guards
// its own message. (Each search for a special token now finds its range by bisection; scanning
// from the first range every time, a chat of 200,000 short messages took over a minute on an HTTP
// event-loop thread, and held up SIGTERM's exit as long.)
TEST(Tokenizer, ManyPlainRangesEachStayText) {
  const Tokenizer& tokenizer = LoadShared("llama3");
  const std::string header = "<|start_header_id|>user<|end_header_id|>\n\n";
  const std::string content = "hi<|eot_id|>";
  std::string text;
  std::vector<std::pair<size_t, size_t>> plain;
  for (int i = 0; i < 2000; ++i) {
    text += header;
    plain.emplace_back(text.size(), text.size() + content.size());
    text += content + "<|eot_id|>";
  }
  auto ids = tokenizer.EncodeWithPlainRanges(text, plain);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  auto header_ids = tokenizer.Encode(header, false);
  auto content_ids = tokenizer.Encode(content, false, /*parse_special=*/false);
  ASSERT_TRUE(header_ids.ok() && content_ids.ok());
  std::vector<int32_t> expected;
  for (int i = 0; i < 2000; ++i) {
    expected.insert(expected.end(), header_ids->begin(), header_ids->end());
    expected.insert(expected.end(), content_ids->begin(), content_ids->end());
    expected.push_back(*tokenizer.TokenToId("<|eot_id|>"));
  }
  EXPECT_EQ(*ids, expected);
}

TEST(Tokenizer, BadInputGetsClearErrors) {
  const Tokenizer& tokenizer = LoadShared("qwen2");
  Status invalid = tokenizer.Encode("ok\xC3(").status();
  EXPECT_EQ(invalid.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(invalid.message(), HasSubstr("not valid UTF-8 (byte 2)"));
  const std::vector<int32_t> out_of_range = {5, 9999999};
  EXPECT_THAT(tokenizer.Decode(out_of_range).status().message(),
              HasSubstr("token id 9999999 is outside the vocabulary"));
  const std::vector<int32_t> negative = {-1};
  EXPECT_FALSE(tokenizer.Decode(negative).ok());
}

TEST(Tokenizer, MalformedTokenizerJson) {
  EXPECT_THAT(Tokenizer::FromJson("{", "t.json").status().message(), HasSubstr("t.json: not valid JSON ("));
  EXPECT_THAT(Tokenizer::FromJson("[1]", "t.json").status().message(), HasSubstr("t.json: not a JSON object"));
  EXPECT_THAT(Tokenizer::FromJson(std::string(1000, '[') + std::string(1000, ']'), "t.json").status().message(),
              HasSubstr("t.json: JSON nested deeper than 128 levels"));
  EXPECT_THAT(Tokenizer::FromJson(R"({"model": {"type": "Unigram"}})", "t.json").status().message(),
              HasSubstr("model type 'Unigram' is not supported"));
  EXPECT_THAT(Tokenizer::FromJson(R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Whitespace"}})",
                                  "t.json").status().message(),
              HasSubstr("no ByteLevel step"));
  EXPECT_THAT(Tokenizer::FromJson(R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": false}})",
                                  "t.json").status().message(),
              HasSubstr("lacks the byte-level token for byte 0"));
  EXPECT_THAT(Tokenizer::FromFile("/nonexistent/tokenizer.json").status().message(),
              HasSubstr("/nonexistent/tokenizer.json: cannot open"));
  // Found by fuzz_tokenizer_json: ids that are not int32 (a float far out of range was converted
  // with undefined behaviour); now each is an error naming the field.
  for (const char* id : {"1.22222e+71", "2.5", "-1e12", "4294967296", "\"7\""}) {
    const std::string json = std::string(R"({"model": {"type": "BPE", "vocab": {"a": )") + id +
                             R"(}}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": false}})";
    auto parsed = Tokenizer::FromJson(json, "t.json");
    ASSERT_FALSE(parsed.ok()) << id;
    EXPECT_THAT(parsed.status().message(), HasSubstr("t.json")) << id;
  }
  auto added = Tokenizer::FromJson(
      R"({"added_tokens": [{"id": 1e40, "content": "<x>"}], "model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "ByteLevel"}})",
      "t.json");
  EXPECT_FALSE(added.ok());
}

}  // namespace
}  // namespace tpserve

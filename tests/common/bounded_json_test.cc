#include "common/bounded_json.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <thread>

#include "tests/test_util.h"

namespace tpserve {
namespace {

std::string Nested(size_t levels, char open = '[', char close = ']') {
  return std::string(levels, open) + std::string(levels, close);
}

TEST(BoundedJson, DepthCountsArraysAndObjectsButNotBracketsInStrings) {
  EXPECT_EQ(JsonNestingDepth("1"), 0u);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": []}], "c": {}})"), 4u);
  EXPECT_EQ(JsonNestingDepth(R"(["[[[[", "\"[[[", "\\", "]]]]]"])"), 1u);
  EXPECT_EQ(JsonNestingDepth(Nested(kMaxJsonDepth)), kMaxJsonDepth);
  // Counting stops once past the limit, whatever the length.
  EXPECT_EQ(JsonNestingDepth(std::string(1'000'000, '['), 10), 11u);
}

TEST(BoundedJson, EightyThousandLevelsAreRefusedByNameWithoutParsing) {
  const std::string deep = R"({"prompt": [)" + Nested(80'000) + "]}";
  const auto parsed = ParseJson(deep, "body");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(), "body: JSON nested deeper than 128 levels");
  EXPECT_TRUE(ParseBoundedJson<nlohmann::ordered_json>(deep).is_discarded());
  // Nesting at the limit parses.
  const auto at_limit = ParseJson(Nested(kMaxJsonDepth), "at limit");
  ASSERT_TRUE(at_limit.ok()) << at_limit.status().message();
  EXPECT_TRUE(at_limit->is_array());
}

TEST(BoundedJson, InvalidJsonNamesWhereAndWhy) {
  const auto parsed = ParseJson(R"({"a": })", "tokenizer.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("tokenizer.json: not valid JSON ("), std::string::npos)
      << parsed.status().message();
  EXPECT_NE(parsed.status().message().find("column 7"), std::string::npos)
      << parsed.status().message();
}

TEST(BoundedJson, FilesAreReadWholeAndCheckedTheSameWay) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("deep.json"), Nested(1000, '{', '}'));
  const auto deep = ReadJsonFile(dir.file("deep.json"));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(),
            dir.file("deep.json") + ": JSON nested deeper than 128 levels");
  EXPECT_EQ(ReadJsonFile(dir.file("missing.json")).status().code(), StatusCode::kNotFound);
  testing::WriteFile(dir.file("ok.json"), R"({"hidden_size": 64})");
  const auto ok = ReadJsonFile<nlohmann::ordered_json>(dir.file("ok.json"));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["hidden_size"], 64);
}

// A regular file is read in one call of its size; a pipe (a process substitution such as
// `--model <(...)`) has no size and is read as a stream, whole.
TEST(BoundedJson, PipesAreReadWholeLikeFiles) {
  testing::TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string payload(200000, 'x');
  std::thread writer([&] { testing::WriteFile(fifo, payload); });
  auto read = ReadTextFile(fifo);
  writer.join();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, payload);
  testing::WriteFile(dir.file("regular"), payload + "y");
  EXPECT_EQ(ReadTextFile(dir.file("regular")).value(), payload + "y");
}

TEST(BoundedJson, ErrorsDescribeContainersByTypeAndCutLongScalars) {
  EXPECT_EQ(DescribeJsonForError(nlohmann::json::parse("[[1, 2], 3]")), "an array");
  EXPECT_EQ(DescribeJsonForError(nlohmann::json::parse(R"({"a": 1})")), "an object");
  EXPECT_EQ(DescribeJsonForError(nlohmann::json(-5)), "-5");
  const std::string described = DescribeJsonForError(nlohmann::json(std::string(1000, 'x')));
  EXPECT_EQ(described.size(), 64u + 3u);
  EXPECT_EQ(described.substr(0, 2), "\"x");
}

}  // namespace
}  // namespace tpserve

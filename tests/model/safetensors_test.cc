// Malformed safetensors files: each must fail with an error naming the file and the problem.
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

// Bytes of a safetensors file with the given header text and data, built by hand.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

Status OpenStatus(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("bad.safetensors");
  WriteFile(path, bytes);
  return SafetensorsFile::Open(path).status();
}

TEST(Safetensors, ReadsValidFile) {
  TempDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  std::string data("\x80\x3f\x00\x40", 4);  // bf16 1.0, 2.0
  float b[2] = {3.0f, -4.5f};
  data.append(reinterpret_cast<const char*>(b), 8);
  WriteFile(dir.file("ok.safetensors"), RawFile(header, data));
  auto file = SafetensorsFile::Open(dir.file("ok.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  const SafetensorsTensor* a = file->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kBF16);
  EXPECT_EQ(a->shape, std::vector<int64_t>{2});
  EXPECT_EQ(static_cast<uint8_t>(file->Data(*a)[1]), 0x3f);
  const SafetensorsTensor* t = file->Find("b");
  float read;
  std::memcpy(&read, file->Data(*t).data() + 4, 4);
  EXPECT_EQ(read, -4.5f);
  EXPECT_EQ(file->Find("missing"), nullptr);
}

TEST(Safetensors, MissingFile) {
  TempDir dir;
  Status s = SafetensorsFile::Open(dir.file("nope.safetensors")).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("nope.safetensors"));
}

TEST(Safetensors, TooShortForHeaderLength) {
  TempDir dir;
  Status s = OpenStatus(dir, "abc");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("bad.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("truncated: 3 bytes"));
  EXPECT_THAT(OpenStatus(dir, "").message(), HasSubstr("truncated: 0 bytes"));
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  TempDir dir;
  std::string bytes = RawFile(R"({})", "");
  bytes[0] = 100;  // claims a 100-byte header
  EXPECT_THAT(OpenStatus(dir, bytes).message(), HasSubstr("header length 100 exceeds the file size"));
}

TEST(Safetensors, MalformedJson) {
  TempDir dir;
  EXPECT_THAT(OpenStatus(dir, RawFile(R"({"a": {"dtype": )", "")).message(),
              HasSubstr("header is not valid JSON"));
  EXPECT_THAT(OpenStatus(dir, RawFile(R"([1, 2])", "")).message(),
              HasSubstr("not a JSON object"));
}

TEST(Safetensors, UnknownDtype) {
  TempDir dir;
  Status s = OpenStatus(dir, RawFile(R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})",
                                     "xx"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': unknown dtype 'Q4_K'"));
}

TEST(Safetensors, SizeDisagreesWithShape) {
  TempDir dir;
  Status s = OpenStatus(dir, RawFile(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                                     std::string(8, '\0')));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': data_offsets span 8 bytes but shape"));
}

TEST(Safetensors, OffsetsOutOfBounds) {
  TempDir dir;
  Status s = OpenStatus(dir, RawFile(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                     std::string(8, '\0')));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w' data [0, 16) lies beyond the 8-byte data section"));
}

TEST(Safetensors, TruncatedDataSection) {
  TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  Status s = OpenStatus(dir, RawFile(header, std::string(12, '\0')));  // 4 bytes cut off
  EXPECT_THAT(s.message(), HasSubstr("tensor 'b'"));
  EXPECT_THAT(s.message(), HasSubstr("file truncated?"));
}

TEST(Safetensors, OverlappingOffsets) {
  TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  Status s = OpenStatus(dir, RawFile(header, std::string(12, '\0')));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'b' overlaps tensor 'a'"));
}

TEST(Safetensors, HoleBetweenTensors) {
  TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_THAT(OpenStatus(dir, RawFile(header, std::string(12, '\0'))).message(),
              HasSubstr("leaving a hole"));
}

TEST(Safetensors, TrailingBytes) {
  TempDir dir;
  EXPECT_THAT(
      OpenStatus(dir, RawFile(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "xy"))
          .message(),
      HasSubstr("data section is 2 bytes but tensors cover 1"));
}

TEST(Safetensors, NegativeShapeAndBadOffsets) {
  TempDir dir;
  EXPECT_THAT(
      OpenStatus(dir, RawFile(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "x"))
          .message(),
      HasSubstr("shape entries must be non-negative integers"));
  EXPECT_THAT(
      OpenStatus(dir, RawFile(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1]}})", "x"))
          .message(),
      HasSubstr("'data_offsets' must be [begin, end]"));
  EXPECT_THAT(OpenStatus(dir, RawFile(R"({"a":{"dtype":"U8","shape":[1]}})", "x")).message(),
              HasSubstr("'data_offsets' must be [begin, end]"));
}

}  // namespace
}  // namespace tpserve

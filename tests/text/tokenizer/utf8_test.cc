#include "text/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

// Unicode 15, §3.9, Table 3-8: U+FFFD for each maximal subpart of an ill-formed sequence.
TEST(Utf8, LossyReplacesMaximalSubparts) {
  const std::string input = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(Utf8Lossy(input),
            "a\uFFFD\uFFFD\uFFFD" "b\uFFFD" "c\uFFFD\uFFFD" "d");
}

TEST(Utf8, LossyKeepsValidText) {
  const std::string text = "h\u00e9llo \u4f60\u597d \U0001F600";
  EXPECT_EQ(Utf8Lossy(text), text);
  EXPECT_EQ(FindInvalidUtf8(text), std::string::npos);
}

TEST(Utf8, RejectsSurrogatesOverlongsAndOutOfRange) {
  EXPECT_EQ(FindInvalidUtf8("ab\xED\xA0\x80"), 2u);  // U+D800
  EXPECT_EQ(FindInvalidUtf8("\xC0\xAF"), 0u);        // overlong '/'
  EXPECT_EQ(FindInvalidUtf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xE4\xBD"), 0u);        // truncated
}

TEST(Utf8, NonFinalHoldsBackOnlyCompletableTails) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("a\xE4\xBD", /*final=*/false, &out), 1u);
  EXPECT_EQ(out, "a");
  out.clear();
  // 0xE4 0x41: can never complete, so it is replaced at once.
  EXPECT_EQ(AppendUtf8Lossy("\xE4\x41", /*final=*/false, &out), 2u);
  EXPECT_EQ(out, "\uFFFDA");
}

TEST(Utf8, OutputDoesNotDependOnHowBytesAreCut) {
  const std::string input = "x\xF0\x9F\x98\x80y\xE4\xBD\xA0\xF1\x80\xC3\xA9\xFF\xE4";
  const std::string whole = Utf8Lossy(input);
  for (size_t cut = 0; cut <= input.size(); ++cut) {
    std::string out, pending(input.substr(0, cut));
    pending.erase(0, AppendUtf8Lossy(pending, false, &out));
    pending += input.substr(cut);
    AppendUtf8Lossy(pending, true, &out);
    EXPECT_EQ(out, whole) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace tpserve

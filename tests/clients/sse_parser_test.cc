#include "clients/sse_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpserve {
namespace {

// The events of `stream` fed in pieces of `piece` bytes (0: all at once).
std::vector<std::string> Events(std::string_view stream, size_t piece = 0, SseParser parser = SseParser()) {
  std::vector<std::string> events;
  const auto on_event = [&](std::string_view data) {
    events.emplace_back(data);
    return true;
  };
  if (piece == 0) piece = std::max<size_t>(1, stream.size());
  for (size_t at = 0; at < stream.size(); at += piece) {
    EXPECT_TRUE(parser.Feed(stream.substr(at, piece), on_event).ok());
  }
  return events;
}

// What an OpenAI-compatible server sends for a short completion.
constexpr std::string_view kOpenAiStream =
    "data: {\"choices\":[{\"text\":\"Hi\"}]}\n\n"
    ": keep-alive\n\n"
    "data: {\"choices\":[{\"text\":\" there\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n"
    "data: [DONE]\n\n";

const std::vector<std::string> kOpenAiEvents = {"{\"choices\":[{\"text\":\"Hi\"}]}",
                                                "{\"choices\":[{\"text\":\" there\"}]}",
                                                "{\"choices\":[],\"usage\":{\"completion_tokens\":2}}", "[DONE]"};

TEST(SseParser, SeveralEventsInOneRead) { EXPECT_EQ(Events(kOpenAiStream), kOpenAiEvents); }

TEST(SseParser, EverySplitGivesTheSameEvents) {
  for (size_t piece = 1; piece <= 8; ++piece) EXPECT_EQ(Events(kOpenAiStream, piece), kOpenAiEvents) << piece;
  // Every single cut point, too: the two halves as two reads.
  for (size_t cut = 0; cut <= kOpenAiStream.size(); ++cut) {
    SseParser parser;
    std::vector<std::string> events;
    const auto on_event = [&](std::string_view data) {
      events.emplace_back(data);
      return true;
    };
    ASSERT_TRUE(parser.Feed(kOpenAiStream.substr(0, cut), on_event).ok());
    ASSERT_TRUE(parser.Feed(kOpenAiStream.substr(cut), on_event).ok());
    EXPECT_EQ(events, kOpenAiEvents) << "cut at " << cut;
  }
}

TEST(SseParser, CrLfAndCrLineEndsByteAtATime) {
  const std::string crlf = "data: a\r\n\r\n: comment\r\ndata: b\r\n\r\n";
  const std::string cr = "data: a\r\rdata: b\r\r";
  for (size_t piece = 0; piece <= 3; ++piece) {
    EXPECT_EQ(Events(crlf, piece), (std::vector<std::string>{"a", "b"})) << piece;
    EXPECT_EQ(Events(cr, piece), (std::vector<std::string>{"a", "b"})) << piece;
  }
  // \r then \n in the next read is one line end, not a line end and an empty line.
  EXPECT_EQ(Events("data: a\r\ndata: b\r\n\r\n", 8), (std::vector<std::string>{"a\nb"}));
}

TEST(SseParser, FieldsAsTheSpecReadsThem) {
  // Multi-line data joined with \n; one leading space dropped, no more; a field without a colon;
  // other fields ignored; an event with no data line never delivered; a byte-order mark skipped.
  EXPECT_EQ(Events("data:x\ndata:  y\n\n"), (std::vector<std::string>{"x\n y"}));
  EXPECT_EQ(Events("data\n\n"), (std::vector<std::string>{""}));
  EXPECT_EQ(Events("event: message\nid: 7\nretry: 10\ndata: z\n\n"), (std::vector<std::string>{"z"}));
  EXPECT_EQ(Events("event: ping\n\n: only a comment\n\n\n\n"), std::vector<std::string>{});
  EXPECT_EQ(Events("\xEF\xBB\xBF" "data: a\n\n", 1), (std::vector<std::string>{"a"}));
  EXPECT_EQ(Events("datax: a\n\n"), std::vector<std::string>{});
}

TEST(SseParser, AnEventCutOffByTheStreamIsNotDelivered) {
  EXPECT_EQ(Events("data: a\n\ndata: b\n"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(Events("data: a\n\ndata: b"), (std::vector<std::string>{"a"}));
}

TEST(SseParser, StopsWhenAsked) {
  SseParser parser;
  std::vector<std::string> events;
  const Status status = parser.Feed("data: [DONE]\n\ndata: after\n\n", [&](std::string_view data) {
    events.emplace_back(data);
    return data != "[DONE]";
  });
  EXPECT_TRUE(status.ok());
  EXPECT_TRUE(parser.stopped());
  EXPECT_EQ(events, (std::vector<std::string>{"[DONE]"}));
}

TEST(SseParser, ALineWithoutEndIsBounded) {
  SseParser parser(64);
  const auto ignore = [](std::string_view) { return true; };
  Status status = Status::Ok();
  for (int i = 0; i < 100 && status.ok(); ++i) status = parser.Feed("data: xxxxxxxx", ignore);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(parser.Feed("\n\n", ignore).ok());  // final
  // Many short data lines that add up past the limit are refused as well.
  SseParser joined(64);
  Status events = Status::Ok();
  for (int i = 0; i < 100 && events.ok(); ++i) events = joined.Feed("data: xxxxxxxx\n", ignore);
  EXPECT_EQ(events.code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tpserve

// A streamed response from an OpenAI-compatible server (what any server loadgen is pointed at can
// send) through loadgen's reader: the server-sent event parser and each event's chunk. The first
// byte picks how the rest is cut into reads; the events must be the same however it is cut (the
// whole stream in one read is the reference), no event's data holds a \r, and a chunk that parses
// has a sane token count.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "clients/openai_wire.h"
#include "clients/sse_parser.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

struct Parsed {
  std::vector<std::string> events;
  tpserve::StatusCode code = tpserve::StatusCode::kOk;
};

// `stream` cut into reads of 1, 2, ... bytes, cycling through the sizes in `pattern`.
Parsed Parse(std::string_view stream, std::string_view pattern) {
  tpserve::SseParser parser(4096);
  Parsed parsed;
  const auto on_event = [&](std::string_view data) {
    parsed.events.emplace_back(data);
    return true;
  };
  size_t at = 0, turn = 0;
  while (at < stream.size() && parsed.code == tpserve::StatusCode::kOk) {
    const size_t piece = pattern.empty() ? stream.size() : 1 + static_cast<uint8_t>(pattern[turn++ % pattern.size()]) % 7;
    parsed.code = parser.Feed(stream.substr(at, piece), on_event).code();
    at += piece;
  }
  return parsed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t pattern_size = data[0] % 8;
  if (size < 1 + pattern_size) return 0;
  const std::string_view pattern(reinterpret_cast<const char*>(data) + 1, pattern_size);
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1 + pattern_size, size - 1 - pattern_size);
  const Parsed whole = Parse(stream, "");
  const Parsed cut = Parse(stream, pattern.empty() ? std::string_view("\0", 1) : pattern);
  FUZZ_CHECK(whole.code == cut.code, "a different outcome when the stream is cut differently");
  if (whole.code == tpserve::StatusCode::kOk) {
    FUZZ_CHECK(whole.events == cut.events, "different events when the stream is cut differently");
  }
  for (const std::string& event : whole.events) {
    FUZZ_CHECK(event.find('\r') == std::string::npos, "a line end inside an event's data");
    auto chunk = tpserve::ParseOpenAiChunk(event);
    if (!chunk.ok()) {
      FUZZ_CHECK(chunk.status().code() == tpserve::StatusCode::kDataLoss, "a chunk refusal with an unexpected code");
      continue;
    }
    FUZZ_CHECK(!chunk->completion_tokens || *chunk->completion_tokens >= 0, "a negative token count");
    FUZZ_CHECK(chunk->error.size() <= 310, "an error message not cut short");
  }
  return 0;
}

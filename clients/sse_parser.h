// Server-sent events (the WHATWG EventSource stream format) read as the bytes arrive, for the
// streamed responses of OpenAI-compatible servers. Bytes may be split anywhere, several events
// may come in one read; lines end in \n, \r\n or \r; `data:` lines of one event are joined with
// \n; comments (lines starting with ':') and other fields (event, id, retry) are ignored; an event
// is complete at the blank line that ends it (an event the stream cuts off is never delivered).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tpserve {

class SseParser {
 public:
  // An event's data; returning false stops the parse (Feed then returns Ok without reading on).
  using OnEvent = std::function<bool(std::string_view data)>;

  // `max_event_bytes` bounds one line and one event's data: a server that never ends a line
  // cannot make the reader grow without end.
  explicit SseParser(size_t max_event_bytes = size_t{16} << 20) : max_event_bytes_(max_event_bytes) {}

  // Reads the next bytes of the stream, calling `on_event` for each event they complete. An error
  // (a line or an event over the limit) is final: later calls return it again.
  Status Feed(std::string_view bytes, const OnEvent& on_event);

  // Whether `on_event` asked to stop.
  bool stopped() const { return stopped_; }

 private:
  // One complete line (without its end); false when the event it completes stops the parse.
  bool Line(std::string_view line, const OnEvent& on_event);

  size_t max_event_bytes_;
  std::string line_;             // the line being read, not yet ended
  std::string data_;             // the event's data so far, each data line followed by \n
  bool has_data_ = false;        // a data field was seen (data: with nothing after it counts)
  bool after_cr_ = false;        // the last byte ended a line with \r: a \n right after belongs to it
  bool at_start_ = true;         // a byte-order mark is allowed only first
  bool stopped_ = false;
  Status error_;
};

}  // namespace tpserve

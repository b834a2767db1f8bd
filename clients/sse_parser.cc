#include "clients/sse_parser.h"

namespace tpserve {

Status SseParser::Feed(std::string_view bytes, const OnEvent& on_event) {
  if (!error_.ok() || stopped_) return error_;
  if (at_start_ && !bytes.empty()) {
    // U+FEFF, possibly split across reads: wait for three bytes before deciding.
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    line_.append(bytes);
    if (line_.size() < kBom.size() && kBom.substr(0, line_.size()) == line_) return Status::Ok();
    at_start_ = false;
    std::string pending = std::move(line_);
    line_.clear();
    std::string_view rest = pending;
    if (rest.substr(0, kBom.size()) == kBom) rest.remove_prefix(kBom.size());
    return Feed(rest, on_event);
  }
  size_t begin = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') continue;
    if (c == '\n' && after_cr_ && i == begin && line_.empty()) {  // the \n of a \r\n split after the \r
      after_cr_ = false;
      begin = i + 1;
      continue;
    }
    after_cr_ = c == '\r';
    std::string_view line = bytes.substr(begin, i - begin);
    if (!line_.empty()) {
      line_.append(line);
      line = line_;
    }
    if (line.size() > max_event_bytes_) {
      error_ = OutOfRange("server-sent events: a line longer than " + std::to_string(max_event_bytes_) + " bytes");
      return error_;
    }
    const bool go_on = Line(line, on_event);
    line_.clear();
    if (!go_on) {
      stopped_ = true;
      return Status::Ok();
    }
    if (!error_.ok()) return error_;
    begin = i + 1;
    if (c == '\r' && begin < bytes.size() && bytes[begin] == '\n') {
      after_cr_ = false;
      ++begin;
      ++i;
    }
  }
  if (begin < bytes.size()) {
    after_cr_ = false;
    line_.append(bytes.substr(begin));
    if (line_.size() > max_event_bytes_) {
      error_ = OutOfRange("server-sent events: a line longer than " + std::to_string(max_event_bytes_) + " bytes");
    }
  }
  return error_;
}

bool SseParser::Line(std::string_view line, const OnEvent& on_event) {
  if (line.empty()) {  // the event ends
    if (!has_data_) return true;
    std::string data = std::move(data_);
    data_.clear();
    has_data_ = false;
    data.pop_back();  // the \n after the last data line
    return on_event(data);
  }
  if (line.front() == ':') return true;  // a comment (servers send them as keep-alives)
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return true;
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (data_.size() + value.size() + 1 > max_event_bytes_) {
    error_ = OutOfRange("server-sent events: an event larger than " + std::to_string(max_event_bytes_) + " bytes");
    return true;
  }
  data_.append(value);
  data_.push_back('\n');
  has_data_ = true;
  return true;
}

}  // namespace tpserve

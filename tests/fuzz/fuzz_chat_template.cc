// Chat templates on arbitrary template text (the input is the template, then, after a NUL byte
// when there is one, the messages as JSON): Compile refuses or accepts, Render renders or fails,
// never a crash or a hang; errors carry the chat_template prefix; the untrusted ranges are sorted,
// disjoint and inside the text, and cover all of a message's content that was output verbatim.
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "text/chat/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void CheckRendered(const tpserve::Result<tpserve::RenderedChat>& rendered) {
  if (!rendered.ok()) {
    FUZZ_CHECK(rendered.status().message().rfind("chat_template", 0) == 0,
               "an error without the chat_template prefix");
    return;
  }
  size_t previous_end = 0;
  bool first = true;
  for (const tpserve::TextRange& r : rendered->from_messages) {
    FUZZ_CHECK(r.begin < r.end && r.end <= rendered->text.size(),
               "a range outside the text or empty");
    FUZZ_CHECK(first || previous_end < r.begin, "ranges unsorted, overlapping or adjacent");
    previous_end = r.end;
    first = false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  auto compiled = tpserve::ChatTemplate::Compile(source, "<s>", "</s>");
  if (!compiled.ok()) {
    FUZZ_CHECK(compiled.status().message().rfind("chat_template line ", 0) == 0,
               "a compile error without its line");
    return 0;
  }
  compiled->set_clock([] { return std::time_t{1717243200}; });
  // A fixed conversation whose content is one marker: wherever the template outputs it whole, the
  // marker's bytes must be untrusted.
  static const std::string kMarker = "\x01MARK\x02";
  const nlohmann::json conversation = nlohmann::json::parse(R"([
      {"role": "system", "content": "\u0001MARK\u0002"},
      {"role": "user", "content": "\u0001MARK\u0002", "name": "n"},
      {"role": "assistant", "content": "\u0001MARK\u0002", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}])");
  auto rendered = compiled->Render(conversation, true, {{"tools", nullptr}});
  CheckRendered(rendered);
  if (rendered.ok()) {
    for (size_t at = rendered->text.find(kMarker); at != std::string::npos;
         at = rendered->text.find(kMarker, at + 1)) {
      bool covered = false;
      for (const tpserve::TextRange& r : rendered->from_messages)
        covered |= r.begin <= at && at + kMarker.size() <= r.end;
      // The template's own text cannot hold the marker's control bytes unless the fuzzer wrote
      // them.
      FUZZ_CHECK(covered || source.find("MARK") != std::string_view::npos,
                 "message content outside the untrusted ranges");
    }
  }
  if (nul != std::string_view::npos) {
    const nlohmann::json messages =
        nlohmann::json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (!messages.is_discarded()) CheckRendered(compiled->Render(messages, false));
  }
  return 0;
}

#include "text/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace tpserve {

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
RegexSplitter::~RegexSplitter() = default;

Result<RegexSplitter> RegexSplitter::Compile(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return InvalidArgument("regex '" + pattern + "' does not compile at offset " +
                           std::to_string(error_offset) + ": " +
                           reinterpret_cast<const char*>(message));
  }
  RegexSplitter splitter;
  splitter.pattern_ = pattern;
  splitter.compiled_ = std::make_unique<Compiled>();
  splitter.compiled_->code = code;
  splitter.compiled_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return splitter;
}

void RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;        // where the next search starts
  size_t emitted_end = 0;   // end of the text already handed out
  while (offset < text.size()) {
    // The caller validated the UTF-8 once; skip PCRE2's check on every call.
    const uint32_t options = PCRE2_NO_UTF_CHECK;
    const int rc = compiled_->jit
                       ? pcre2_jit_match(compiled_->code, subject, text.size(), offset, options,
                                         match, nullptr)
                       : pcre2_match(compiled_->code, subject, text.size(), offset, options,
                                     match, nullptr);
    if (rc < 0) break;  // no further match (or a match-limit error): the rest is one gap
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > emitted_end) pieces->push_back(text.substr(emitted_end, begin - emitted_end));
    if (end > begin) {
      pieces->push_back(text.substr(begin, end - begin));
      emitted_end = end;
      offset = end;
    } else {
      // Empty match: step over one whole UTF-8 character so no search starts mid-character.
      offset = begin + 1;
      while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) {
        ++offset;
      }
      emitted_end = begin;
    }
  }
  if (emitted_end < text.size()) pieces->push_back(text.substr(emitted_end));
  pcre2_match_data_free(match);
}

}  // namespace tpserve

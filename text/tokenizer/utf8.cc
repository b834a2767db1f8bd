#include "text/tokenizer/utf8.h"

namespace tpserve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the sequence a lead byte starts and the allowed range of its second byte
// (Unicode Table 3-7); length 0 for bytes that cannot start a sequence.
struct LeadByte {
  int length;
  uint8_t second_min;
  uint8_t second_max;
};

LeadByte ClassifyLead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from `i` form a valid prefix of one sequence (up to its full length).
int ValidPrefixLength(std::string_view s, size_t i, const LeadByte& lead) {
  int n = 1;
  while (n < lead.length && i + n < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i + n]);
    const bool ok = n == 1 ? (b >= lead.second_min && b <= lead.second_max) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++n;
  }
  return n;
}

}  // namespace

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const LeadByte lead = ClassifyLead(static_cast<uint8_t>(s[i]));
    if (lead.length == 0) return i;
    if (ValidPrefixLength(s, i, lead) != lead.length) return i;
    i += lead.length;
  }
  return std::string_view::npos;
}

size_t AppendUtf8Lossy(std::string_view s, bool final, std::string* out) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      out->push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    const LeadByte lead = ClassifyLead(b);
    if (lead.length == 0) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    const int n = ValidPrefixLength(s, i, lead);
    if (n == lead.length) {
      out->append(s.substr(i, n));
    } else if (i + n == s.size() && !final) {
      return i;  // incomplete but still completable: wait for more bytes
    } else {
      out->append(kReplacement);  // the maximal subpart of an ill-formed sequence
    }
    i += n;
  }
  return i;
}

}  // namespace tpserve

#include "text/chat/pystr.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>

namespace tpserve::chat {
size_t DecodeAt(std::string_view s, size_t pos, char32_t* cp) {
  utf8proc_int32_t c = -1;
  const utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos),
                       static_cast<utf8proc_ssize_t>(s.size() - pos), &c);
  if (n <= 0 || c < 0) {
    *cp = 0xFFFFFFFF;
    return 1;
  }
  *cp = static_cast<char32_t>(c);
  return static_cast<size_t>(n);
}

void AppendCodePoint(char32_t cp, std::string* out) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

bool IsPySpace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

bool IsCased(char32_t c) {
  if (c == 0xFFFFFFFF) return false;
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT;
}

enum class Case { kUpper, kLower, kTitle };

// Appends the code point at `pos` mapped to a case; returns its length. Ill-formed bytes pass.
size_t AppendMapped(std::string_view s, size_t pos, Case mode, std::string* out) {
  char32_t c;
  const size_t n = DecodeAt(s, pos, &c);
  if (c == 0xFFFFFFFF) {
    out->push_back(s[pos]);
    return n;
  }
  // Python's full mapping differs from the simple one for a few code points; ß is the common one.
  if (c == 0xDF && mode != Case::kLower) {
    out->append(mode == Case::kUpper ? "SS" : "Ss");
    return n;
  }
  const auto cp = static_cast<utf8proc_int32_t>(c);
  const auto mapped = mode == Case::kUpper   ? utf8proc_toupper(cp)
                      : mode == Case::kLower ? utf8proc_tolower(cp)
                                             : utf8proc_totitle(cp);
  AppendCodePoint(static_cast<char32_t>(mapped), out);
  return n;
}

std::string MapAll(std::string_view s, Case mode) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) pos += AppendMapped(s, pos, mode, &out);
  return out;
}

bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  if (c == 0xFFFFFFFF) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

// Code points of `chars` (for strip's argument).
std::vector<char32_t> CodePoints(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t pos = 0; pos < s.size();) {
    char32_t c;
    pos += DecodeAt(s, pos, &c);
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t pos = 0; pos < s.size();) {
    offsets.push_back(pos);
    char32_t c;
    pos += DecodeAt(s, pos, &c);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t CodePointCount(std::string_view s) {
  size_t count = 0;
  for (size_t pos = 0; pos < s.size(); ++count) {
    char32_t c;
    pos += DecodeAt(s, pos, &c);
  }
  return count;
}

Str Strip(const Str& s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<char32_t> set = chars ? CodePoints(*chars) : std::vector<char32_t>{};
  auto strippable = [&](char32_t c) {
    if (!chars) return IsPySpace(c);
    for (char32_t x : set) {
      if (x == c) return true;
    }
    return false;
  };
  const std::vector<size_t> offsets = CodePointOffsets(s.text);
  size_t first = 0, last = offsets.size() - 1;  // code point indices [first, last)
  auto at = [&](size_t i) {
    char32_t c;
    DecodeAt(s.text, offsets[i], &c);
    return c;
  };
  if (left) {
    while (first < last && strippable(at(first))) ++first;
  }
  if (right) {
    while (last > first && strippable(at(last - 1))) --last;
  }
  return s.Slice(offsets[first], offsets[last]);
}

std::vector<Str> Split(const Str& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<Str> parts;
  const std::string& t = s.text;
  if (sep) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t hit = t.find(*sep, start);
      if (hit == std::string::npos) break;
      parts.push_back(s.Slice(start, hit));
      start = hit + sep->size();
    }
    parts.push_back(s.Slice(start, t.size()));
    return parts;
  }
  size_t pos = 0;
  auto skip_space = [&] {
    while (pos < t.size()) {
      char32_t c;
      const size_t n = DecodeAt(t, pos, &c);
      if (!IsPySpace(c)) break;
      pos += n;
    }
  };
  skip_space();
  while (pos < t.size()) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      // Python keeps the remainder verbatim, trailing whitespace included.
      parts.push_back(s.Slice(pos, t.size()));
      return parts;
    }
    const size_t begin = pos;
    while (pos < t.size()) {
      char32_t c;
      const size_t n = DecodeAt(t, pos, &c);
      if (IsPySpace(c)) break;
      pos += n;
    }
    parts.push_back(s.Slice(begin, pos));
    skip_space();
  }
  return parts;
}

std::vector<Str> RSplit(const Str& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return Split(s, sep, maxsplit);
  std::vector<Str> parts;
  const std::string& t = s.text;
  if (sep) {
    size_t end = t.size();
    while (static_cast<int64_t>(parts.size()) < maxsplit && end >= sep->size()) {
      const size_t hit = t.rfind(*sep, end - sep->size());
      if (hit == std::string::npos) break;
      parts.push_back(s.Slice(hit + sep->size(), end));
      end = hit;
    }
    parts.push_back(s.Slice(0, end));
  } else {
    const std::vector<size_t> offsets = CodePointOffsets(t);
    auto space_at = [&](size_t i) {
      char32_t c;
      DecodeAt(t, offsets[i], &c);
      return IsPySpace(c);
    };
    size_t i = offsets.size() - 1;  // code point index of the end
    while (i > 0 && space_at(i - 1)) --i;
    while (i > 0) {
      if (static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(s.Slice(0, offsets[i]));
        break;
      }
      const size_t end = i;
      while (i > 0 && !space_at(i - 1)) --i;
      parts.push_back(s.Slice(offsets[i], offsets[end]));
      while (i > 0 && space_at(i - 1)) --i;
    }
  }
  return {parts.rbegin(), parts.rend()};
}

std::string Upper(std::string_view s) {
  return MapAll(s, Case::kUpper);
}
std::string Lower(std::string_view s) {
  return MapAll(s, Case::kLower);
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (size_t pos = 0; pos < s.size();) {
    char32_t c;
    DecodeAt(s, pos, &c);
    const bool cased = IsCased(c);
    pos += AppendMapped(s, pos, previous_cased ? Case::kLower : Case::kTitle, &out);
    previous_cased = cased;
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();)
    pos += AppendMapped(s, pos, pos == 0 ? Case::kTitle : Case::kLower, &out);
  return out;
}

std::string JinjaTitle(std::string_view s) {
  // item[0].upper() + item[1:].lower() for each piece of re.split(r"([-\s({\[<]+)", s).
  auto separator = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
  };
  std::string out;
  bool word_start = true;
  for (size_t pos = 0; pos < s.size();) {
    char32_t c;
    DecodeAt(s, pos, &c);
    pos += AppendMapped(s, pos, word_start ? Case::kUpper : Case::kLower, &out);
    word_start = separator(c);
  }
  return out;
}

std::string PyRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    char32_t c;
    const size_t n = DecodeAt(s, pos, &c);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == 0xFFFFFFFF) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[pos]));
      out += buf;
    } else if (!IsPrintable(c)) {
      char buf[16];
      if (c < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      out.append(s.substr(pos, n));
    }
    pos += n;
  }
  out += quote;
  return out;
}

std::string FloatRepr(double f) {
  if (f != f) return "nan";
  if (f == std::numeric_limits<double>::infinity()) return "inf";
  if (f == -std::numeric_limits<double>::infinity()) return "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  const int decpt = exponent + 1;  // value = 0.DIGITS x 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+',
                  exponent < 0 ? -exponent : exponent);
    return out + exp;
  }
  if (decpt <= 0) return sign + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  if (decpt >= n) return sign + digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  return sign + digits.substr(0, static_cast<size_t>(decpt)) + "." +
         digits.substr(static_cast<size_t>(decpt));
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace tpserve::chat

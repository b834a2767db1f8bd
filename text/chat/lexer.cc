#include "text/chat/lexer.h"

#include <cctype>

#include "text/chat/pystr.h"

namespace tpserve::chat {
namespace {

// Python's \s (str.isspace) for the code point at `pos`; returns its length or 0.
size_t SpaceAt(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  char32_t c;
  const size_t n = DecodeAt(s, pos, &c);
  return IsPySpace(c) ? n : 0;
}

bool AllSpace(std::string_view s) {
  if (s.empty()) return false;
  for (size_t pos = 0; pos < s.size();) {
    const size_t n = SpaceAt(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string RStrip(std::string_view s) {
  Str str;
  str.text = std::string(s);
  return Strip(str, std::nullopt, false, true).text;
}

int CountNewlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal's body, as Jinja applies it.
Result<std::string> DecodeString(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        uint32_t cp = 0;
        for (size_t k = 0; k < digits; ++k) {
          const int h = i + 1 + k < body.size() ? HexValue(body[i + 1 + k]) : -1;
          if (h < 0)
            return TemplateError(line, "invalid \\" + std::string(1, e) + " escape in a string");
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          return TemplateError(line, "escape outside Unicode scalar values in a string");
        }
        AppendCodePoint(static_cast<char32_t>(cp), &out);
        i += digits;
        break;
      }
      case 'N':
        return TemplateError(line, "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k) {
            cp = cp * 8 + static_cast<uint32_t>(body[i + k] - '0');
          }
          AppendCodePoint(static_cast<char32_t>(cp), &out);
          i += k - 1;
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

// Jinja's (\d+_)*\d+
void SkipDigitRun(std::string_view s, size_t* pos) {
  auto digit = [&](size_t i) {
    return i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]));
  };
  while (digit(*pos)) ++*pos;
  while (*pos < s.size() && s[*pos] == '_' && digit(*pos + 1)) {
    ++*pos;
    while (digit(*pos)) ++*pos;
  }
}

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  Result<std::vector<Token>> Run() {
    bool line_starting = true;
    size_t pos = 0;
    while (pos < s_.size()) {
      size_t start = std::string::npos;
      char kind = 0;
      for (size_t p = s_.find('{', pos); p != std::string::npos && p + 1 < s_.size();
           p = s_.find('{', p + 1)) {
        const char k = s_[p + 1];
        if (k == '{' || k == '%' || k == '#') {
          start = p;
          kind = k;
          break;
        }
      }
      if (start == std::string::npos) {
        Emit(Token::Type::kData, s_.substr(pos));
        break;
      }
      const char sign = start + 2 < s_.size() && (s_[start + 2] == '-' || s_[start + 2] == '+')
                            ? s_[start + 2]
                            : 0;
      std::string text = s_.substr(pos, start - pos);
      const int text_lines = CountNewlines(text);
      if (sign == '-') {
        text = RStrip(text);
      } else if (sign != '+' && kind != '{') {
        const size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((l_pos > 0 || line_starting) && AllSpace(std::string_view(text).substr(l_pos)))
          text.resize(l_pos);
      }
      if (!text.empty()) Emit(Token::Type::kData, text);
      line_ += text_lines;
      pos = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        const size_t end = s_.find("#}", pos);
        if (end == std::string::npos) return TemplateError(line_, "missing end of comment tag");
        line_ += CountNewlines(std::string_view(s_).substr(pos, end - pos));
        const char end_sign =
            end > pos && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
        pos = end + 2;
        line_starting = AfterTagEnd(end_sign, /*block=*/true, &pos);
        continue;
      }
      const bool block = kind == '%';
      Emit(block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "");
      ASSIGN_OR_RETURN(line_starting, TagBody(block, &pos));
    }
    Emit(Token::Type::kEnd, "");
    return std::move(tokens_);
  }

 private:
  void Emit(Token::Type type, std::string text) {
    tokens_.push_back({type, std::move(text), line_});
  }

  // After a tag's closing delimiter at *pos: `-` strips all whitespace, a block's plain end takes
  // one newline (trim_blocks). Returns whether the consumed end finished a line.
  bool AfterTagEnd(char sign, bool block, size_t* pos) {
    const size_t before = *pos;
    if (sign == '-') {
      while (size_t n = SpaceAt(s_, *pos)) *pos += n;
    } else if (sign != '+' && block && *pos < s_.size() && s_[*pos] == '\n') {
      ++*pos;
    }
    line_ += CountNewlines(std::string_view(s_).substr(before, *pos - before));
    return *pos > before ? s_[*pos - 1] == '\n' : false;
  }

  Result<bool> TagBody(bool block, size_t* pos) {
    std::vector<char> balance;
    const std::string_view end = block ? "%}" : "}}";
    size_t& p = *pos;
    while (true) {
      if (p >= s_.size()) return TemplateError(line_, "unexpected end of template inside a tag");
      if (balance.empty()) {
        if (block && s_.compare(p, 3, "+%}") == 0) {
          p += 3;
          Emit(Token::Type::kBlockEnd, "");
          return AfterTagEnd('+', block, pos);
        }
        if (s_.compare(p, 1, "-") == 0 && s_.compare(p + 1, 2, end) == 0) {
          p += 3;
          Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "");
          return AfterTagEnd('-', block, pos);
        }
        if (s_.compare(p, 2, end) == 0) {
          p += 2;
          Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "");
          return AfterTagEnd(0, block, pos);
        }
      }
      if (size_t n = SpaceAt(s_, p)) {
        line_ += s_[p] == '\n';
        p += n;
        continue;
      }
      const unsigned char c = static_cast<unsigned char>(s_[p]);
      if (std::isdigit(c)) {
        size_t q = p;
        SkipDigitRun(s_, &q);
        bool is_float = false;
        const bool after_dot = p > 0 && s_[p - 1] == '.';
        if (!after_dot) {
          size_t r = q;
          if (r + 1 < s_.size() && s_[r] == '.' &&
              std::isdigit(static_cast<unsigned char>(s_[r + 1]))) {
            ++r;
            SkipDigitRun(s_, &r);
            is_float = true;
            q = r;
          }
          if (q < s_.size() && (s_[q] == 'e' || s_[q] == 'E')) {
            size_t t = q + 1;
            if (t < s_.size() && (s_[t] == '+' || s_[t] == '-')) ++t;
            if (t < s_.size() && std::isdigit(static_cast<unsigned char>(s_[t]))) {
              SkipDigitRun(s_, &t);
              is_float = true;
              q = t;
            }
          }
        }
        Emit(is_float ? Token::Type::kFloat : Token::Type::kInteger, s_.substr(p, q - p));
        p = q;
        continue;
      }
      if (std::isalpha(c) || c == '_') {
        size_t q = p;
        while (q < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[q])) || s_[q] == '_'))
          ++q;
        Emit(Token::Type::kName, s_.substr(p, q - p));
        p = q;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < s_.size() && s_[q] != static_cast<char>(c)) q += s_[q] == '\\' ? 2 : 1;
        if (q >= s_.size()) return TemplateError(line_, "unterminated string");
        const int start_line = line_;
        ASSIGN_OR_RETURN(std::string value,
                         DecodeString(std::string_view(s_).substr(p + 1, q - p - 1), line_));
        tokens_.push_back({Token::Type::kString, std::move(value), start_line});
        line_ += CountNewlines(std::string_view(s_).substr(p, q - p));
        p = q + 1;
        continue;
      }
      static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (std::string_view two : kTwoChar) {
        if (s_.compare(p, 2, two) == 0) op = std::string(two);
      }
      if (op.empty() && std::string_view("+-/*%~[](){}><=.:|,;").find(static_cast<char>(c)) !=
                            std::string_view::npos) {
        op = std::string(1, static_cast<char>(c));
      }
      if (op.empty()) {
        return TemplateError(
            line_, "unexpected character " + PyRepr(std::string(1, static_cast<char>(c))));
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : (op == "[" ? ']' : '}'));
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty() || balance.back() != op[0])
          return TemplateError(line_, "unexpected '" + op + "'");
        balance.pop_back();
      }
      Emit(Token::Type::kOperator, op);
      p += op.size();
    }
  }

  std::string s_;
  std::vector<Token> tokens_;
  int line_ = 1;
};

}  // namespace

Status TemplateError(int line, const std::string& what) {
  return InvalidArgument("chat_template line " + std::to_string(line) + ": " + what);
}

Result<std::vector<Token>> Tokenize(std::string_view source) {
  // Jinja reads \r\n, \r and \n as line breaks and drops one trailing newline.
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).Run();
}

}  // namespace tpserve::chat

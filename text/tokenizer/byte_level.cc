#include "text/tokenizer/byte_level.h"

#include "text/tokenizer/utf8.h"

namespace tpserve {

const ByteLevelAlphabet& ByteLevelAlphabet::Get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  codepoint_to_byte_.fill(-1);
  // Printable Latin-1 bytes stand for themselves; the other 68 are shifted to U+0100 onward, in
  // byte order (the bytes_to_unicode() table of GPT-2's encoder.py).
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int next_shifted = 256;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next_shifted++;
    AppendUtf8(cp, &byte_to_utf8_[b]);
    codepoint_to_byte_[cp] = b;
  }
}

bool ByteLevelAlphabet::Decode(std::string_view text, std::string* bytes) const {
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    char32_t cp;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // alphabet characters are all one or two UTF-8 bytes
    }
    if (cp >= codepoint_to_byte_.size() || codepoint_to_byte_[cp] < 0) return false;
    bytes->push_back(static_cast<char>(codepoint_to_byte_[cp]));
  }
  return true;
}

}  // namespace tpserve

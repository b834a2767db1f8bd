// GPT-2's byte-level alphabet: every byte maps to one printable Unicode character, so that BPE
// over bytes can use string vocabularies ("Ġ" is the space byte 0x20).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace tpserve {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& Get();

  // The UTF-8 encoding of the character standing for `byte`.
  const std::string& Encode(unsigned char byte) const { return byte_to_utf8_[byte]; }

  // Appends the bytes that a byte-level string stands for; false if it holds a character
  // outside the alphabet.
  bool Decode(std::string_view text, std::string* bytes) const;

 private:
  ByteLevelAlphabet();
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int, 324> codepoint_to_byte_;  // every alphabet character is below U+0144
};

}  // namespace tpserve

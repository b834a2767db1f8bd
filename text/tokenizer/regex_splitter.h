// Splits text into pre-tokens with a PCRE2 regex (UTF + Unicode properties, JIT-compiled), the
// "Split" pre-tokenizer of Hugging Face tokenizers with behavior "Isolated": every match is a
// piece, and so is every stretch of text between matches.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpserve {

class RegexSplitter {
 public:
  static Result<RegexSplitter> Compile(const std::string& pattern);

  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  ~RegexSplitter();

  // Appends the pieces of `text` (valid UTF-8) to `pieces`; they concatenate back to `text`.
  void Split(std::string_view text, std::vector<std::string_view>* pieces) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  RegexSplitter() = default;

  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace tpserve

// tokenizer.json read in one streaming pass. A Llama-3 tokenizer.json is 9 MB, almost all of it
// model.vocab (128k entries) and model.merges (280k); parsing them into a JSON tree first and then
// copying them out cost most of a server's start (1.0 s in release, 3.4 s under ASan). Here the two
// go straight into the containers the BPE model keeps; the rest of the file, a few kilobytes of
// settings, is still a JSON tree for the code that reads it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tpserve {

struct TokenizerJson {
  nlohmann::json settings;  // the whole file except model.vocab and model.merges
  bool has_vocab = false;   // model.vocab was present (an empty object counts)
  std::unordered_map<std::string, int32_t> vocab;           // model.vocab: token -> id
  int32_t max_vocab_id = -1;                                // the largest id in vocab
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, in rank order
};

// `text` parsed; InvalidArgument naming `source` and the problem: not JSON, nested too deeply, a
// vocab id that is not an int32, a merge that is neither "left right" nor ["left", "right"].
Result<TokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& source);

}  // namespace tpserve

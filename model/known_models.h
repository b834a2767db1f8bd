// Shapes of well-known models by name (model/known_models.json, compiled in), for
// `--load-format dummy` and the TP planner: llama-3-8b, llama-3-70b, llama-3.1-405b, qwen2-72b,
// mistral-7b, and the built-in presets tiny and small.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/model_config.h"

namespace tpserve {

struct KnownModel {
  std::string name;
  std::string source;          // where the shape comes from
  int64_t published_parameters = 0;  // as its publisher counts them (0 for the presets)
  ModelConfig config;
};

// The data file's models (not the presets, whose vocabulary is the tokenizer's).
Result<std::vector<KnownModel>> KnownModels();
std::vector<std::string> KnownModelNames();  // the data file's and the presets'

// The config of a named shape; a preset takes the vocabulary of `tokenizer` (llama3 | qwen2),
// which has `tokenizer_vocab_size` ids. NotFound lists the names when `name` is not one.
Result<ModelConfig> KnownModelConfig(const std::string& name, const std::string& tokenizer,
                                     int tokenizer_vocab_size);

}  // namespace tpserve

// `tpserve make-model`: writes a complete Hugging Face checkpoint directory with seeded random
// weights and a real tokenizer, since no trained weights can be downloaded where tpserve is
// built and tested. Its generated text is noise; its shapes, files and numerics are real.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/model_config.h"

namespace tpserve {

struct MakeModelOptions {
  std::string out_dir;
  std::string preset = "small";        // "tiny" (tests) or "small" (the default model)
  std::string tokenizer = "llama3";    // "llama3" or "qwen2": picks the vocabulary and architecture
  std::string assets_dir;              // holds tokenizers/<name>/tokenizer.json
  uint64_t seed = 0;
  int shards = 1;                      // >1 writes model-0000i-of-0000n.safetensors + index
};

std::vector<std::string> ModelPresetNames();
std::vector<std::string> TokenizerNames();

// The config make-model would write (vocab_size filled from the tokenizer).
Result<ModelConfig> PresetConfig(const std::string& preset, const std::string& tokenizer,
                                 int tokenizer_vocab_size);

Status MakeModel(const MakeModelOptions& options);

}  // namespace tpserve

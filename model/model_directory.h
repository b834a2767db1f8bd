// Opens a Hugging Face model directory: config.json (+ generation_config.json), the safetensors
// weights, tokenizer.json (+ tokenizer_config.json), and checks that they agree.
#pragma once

#include <string>

#include "common/status.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "text/tokenizer/tokenizer.h"

namespace tpserve {

struct ModelDirectory {
  std::string path;
  ModelConfig config;  // eos/bos completed from tokenizer_config.json when config.json lacks them
  Checkpoint checkpoint;
  Tokenizer tokenizer;
  // Prepend bos_token_id to prompts (tokenizer_config.json add_bos_token, default true when the
  // model has a bos token), unless the tokenizer's own template already adds it.
  bool add_bos = false;
  // Where tokenizer.json and tokenizer_config.json (its chat template) were read from.
  std::string tokenizer_dir;
};

// The ids a prompt becomes: the tokenizer's template plus bos when the model expects one.
Result<std::vector<int32_t>> EncodePrompt(const ModelDirectory& model, std::string_view text);

// Loads and cross-checks everything; weights are mapped, not read.
Result<ModelDirectory> OpenModelDirectory(const std::string& dir);

// Where a model comes from: a checkpoint directory, or (`--load-format dummy`, vLLM's name) random
// weights of a real shape, made on demand, with no checkpoint at all.
struct ModelSource {
  // auto: DIR holds a checkpoint. dummy: DIR (its config.json, and its tokenizer.json when there),
  // a config.json file, or a known model's name (model/known_models.json, or a preset).
  std::string model;
  std::string load_format = "auto";  // auto | dummy
  // dummy only:
  int num_layers = 0;                // > 0: override the layer count (a shallow copy of the shape)
  std::string tokenizer = "llama3";  // llama3 | qwen2, from assets_dir, when no tokenizer.json is beside the config
  std::string assets_dir;            // holds tokenizers/<name>/tokenizer.json
  uint64_t seed = 0;                 // the weights are make-model's for the same seed and shape
};

// OpenModelDirectory, or the dummy model the source describes (path "dummy:<model>").
Result<ModelDirectory> OpenModel(const ModelSource& source);

// Only the shape: DIR's config.json, a config.json file, or a known model's name (presets take the
// vocabulary of source.tokenizer from source.assets_dir), with --num-layers applied. No weights.
Result<ModelConfig> ResolveModelShape(const ModelSource& source);

// The folder whose tokenizer.json goes with the source's shape: DIR's (or the config file's
// folder's) when it has one, else the bundled source.tokenizer.
Result<std::string> ResolveTokenizerDir(const ModelSource& source);

// Just DIR/tokenizer.json (DIR may also name the file itself).
Result<Tokenizer> LoadTokenizer(const std::string& dir_or_file);

}  // namespace tpserve

// The architecture hyper-parameters of a Llama-family checkpoint, read from a Hugging Face
// config.json (plus the bos/eos ids of generation_config.json).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace tpserve {

enum class Architecture { kLlama, kMistral, kQwen2 };

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only (Llama-3.1's published values as defaults).
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // as in config.json, e.g. "LlamaForCausalLM"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (always on for Qwen2)
  std::string torch_dtype;      // informational: "bfloat16", ...
  std::optional<int> sliding_window;
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;

  int q_size() const { return num_heads * head_dim; }      // rows of q_proj
  int kv_size() const { return num_kv_heads * head_dim; }  // rows of k_proj and v_proj
  size_t ParameterCount() const;
};

// `source` names the file in error messages.
Result<ModelConfig> ParseModelConfig(const nlohmann::json& json, const std::string& source);

// Reads DIR/config.json and, when present, DIR/generation_config.json (whose bos/eos win).
Result<ModelConfig> LoadModelConfig(const std::string& dir);

std::string ArchitectureName(Architecture architecture);

}  // namespace tpserve

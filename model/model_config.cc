#include "model/model_config.h"

#include "common/bounded_json.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace tpserve {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Field readers that name the file and field in every error.
class FieldReader {
 public:
  FieldReader(const json& object, const std::string& source) : object_(object), source_(source) {}

  Status Error(const std::string& field, const std::string& why) const {
    return InvalidArgument(source_ + ": field '" + field + "' " + why);
  }

  bool Has(const std::string& field) const {
    return object_.contains(field) && !object_.at(field).is_null();
  }

  Result<int> PositiveInt(const std::string& field) const {
    if (!Has(field)) return Error(field, "is missing");
    const json& v = object_.at(field);
    if (!v.is_number_integer()) return Error(field, "must be an integer, got " + v.dump());
    int64_t value = v.get<int64_t>();
    if (value <= 0 || value > (int64_t{1} << 30)) {
      return Error(field, "must be a positive integer, got " + v.dump());
    }
    return static_cast<int>(value);
  }

  Result<int> PositiveInt(const std::string& field, int fallback) const {
    return Has(field) ? PositiveInt(field) : Result<int>(fallback);
  }

  Result<double> PositiveNumber(const std::string& field, double fallback) const {
    if (!Has(field)) return fallback;
    const json& v = object_.at(field);
    if (!v.is_number() || v.get<double>() <= 0) {
      return Error(field, "must be a positive number, got " + v.dump());
    }
    return v.get<double>();
  }

  Result<bool> Bool(const std::string& field, bool fallback) const {
    if (!Has(field)) return fallback;
    const json& v = object_.at(field);
    if (!v.is_boolean()) return Error(field, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }

  // An id or a list of ids ("eos_token_id": 2 or [128001, 128009]).
  Result<std::vector<int>> TokenIds(const std::string& field) const {
    std::vector<int> ids;
    if (!Has(field)) return ids;
    const json& v = object_.at(field);
    auto add = [&](const json& item) -> Status {
      // Found by fuzz_model_config: an id past INT32_MAX (88888828009) was truncated by the cast
      // into a small or negative id that passed the vocabulary check.
      if (!item.is_number_integer() || item.get<int64_t>() < 0 ||
          item.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Error(field, "must be a token id or a list of token ids, got " + v.dump());
      }
      ids.push_back(static_cast<int>(item.get<int64_t>()));
      return Status::Ok();
    };
    if (v.is_array()) {
      for (const auto& item : v) RETURN_IF_ERROR(add(item));
    } else {
      RETURN_IF_ERROR(add(v));
    }
    return ids;
  }

 private:
  const json& object_;
  const std::string& source_;
};

Result<Architecture> ParseArchitecture(const json& config, const std::string& source,
                                       std::string* name) {
  static const std::pair<const char*, Architecture> kSupported[] = {
      {"LlamaForCausalLM", Architecture::kLlama},
      {"MistralForCausalLM", Architecture::kMistral},
      {"Qwen2ForCausalLM", Architecture::kQwen2}};
  auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty()) {
    return InvalidArgument(source + ": field 'architectures' is missing or empty");
  }
  for (const auto& entry : *it) {
    for (const auto& [supported, architecture] : kSupported) {
      if (entry.is_string() && entry.get<std::string>() == supported) {
        *name = supported;
        return architecture;
      }
    }
  }
  return InvalidArgument(source + ": unsupported architecture " + it->dump() +
                         " (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)");
}

Result<RopeScaling> ParseRopeScaling(const json& config, const std::string& source) {
  RopeScaling scaling;
  auto it = config.find("rope_scaling");
  if (it == config.end() || it->is_null()) return scaling;
  if (!it->is_object()) return InvalidArgument(source + ": field 'rope_scaling' is not an object");
  const std::string field_source = source + " rope_scaling";
  FieldReader fields(*it, field_source);
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (it->contains(key) && it->at(key).is_string()) {
      type = it->at(key).get<std::string>();
      break;
    }
  }
  if (type == "default" || type.empty()) return scaling;
  ASSIGN_OR_RETURN(scaling.factor, fields.PositiveNumber("factor", 1.0));
  if (type == "linear") {
    scaling.type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    scaling.type = RopeScaling::Type::kLlama3;
    ASSIGN_OR_RETURN(scaling.low_freq_factor, fields.PositiveNumber("low_freq_factor", 1.0));
    ASSIGN_OR_RETURN(scaling.high_freq_factor, fields.PositiveNumber("high_freq_factor", 4.0));
    ASSIGN_OR_RETURN(scaling.original_max_position_embeddings,
                     fields.PositiveInt("original_max_position_embeddings", 8192));
    if (scaling.high_freq_factor <= scaling.low_freq_factor) {
      return fields.Error("high_freq_factor", "must exceed low_freq_factor");
    }
  } else {
    return InvalidArgument(source + ": rope_scaling type '" + type +
                           "' is not supported (supported: default, linear, llama3)");
  }
  return scaling;
}

Result<json> ReadJsonObjectFile(const std::string& path) {
  ASSIGN_OR_RETURN(json value, ReadJsonFile(path));
  if (!value.is_object()) return InvalidArgument(path + ": not a JSON object");
  return value;
}

}  // namespace

std::string ArchitectureName(Architecture architecture) {
  switch (architecture) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kMistral: return "MistralForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
  }
  return "?";
}

size_t ModelConfig::ParameterCount() const {
  const size_t h = hidden_size, f = intermediate_size, q = q_size(), kv = kv_size();
  size_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * f + 2 * h;
  if (attention_bias) per_layer += q + 2 * kv;
  size_t total = per_layer * num_layers + static_cast<size_t>(vocab_size) * h + h;
  if (!tie_word_embeddings) total += static_cast<size_t>(vocab_size) * h;
  return total;
}

Result<ModelConfig> ParseModelConfig(const json& config, const std::string& source) {
  if (!config.is_object()) return InvalidArgument(source + ": not a JSON object");
  FieldReader fields(config, source);
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, ParseArchitecture(config, source, &c.architecture_name));
  ASSIGN_OR_RETURN(c.hidden_size, fields.PositiveInt("hidden_size"));
  ASSIGN_OR_RETURN(c.intermediate_size, fields.PositiveInt("intermediate_size"));
  ASSIGN_OR_RETURN(c.num_layers, fields.PositiveInt("num_hidden_layers"));
  ASSIGN_OR_RETURN(c.num_heads, fields.PositiveInt("num_attention_heads"));
  ASSIGN_OR_RETURN(c.num_kv_heads, fields.PositiveInt("num_key_value_heads", c.num_heads));
  ASSIGN_OR_RETURN(c.vocab_size, fields.PositiveInt("vocab_size"));
  ASSIGN_OR_RETURN(c.max_position_embeddings, fields.PositiveInt("max_position_embeddings"));
  ASSIGN_OR_RETURN(c.rms_norm_eps, fields.PositiveNumber("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.rope_theta, fields.PositiveNumber("rope_theta", 10000.0));
  ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(config, source));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, fields.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(c.attention_bias,
                   fields.Bool("attention_bias", c.architecture == Architecture::kQwen2));
  if (fields.Has("torch_dtype") && config.at("torch_dtype").is_string()) {
    c.torch_dtype = config.at("torch_dtype").get<std::string>();
  }
  if (fields.Has("sliding_window")) {
    ASSIGN_OR_RETURN(int window, fields.PositiveInt("sliding_window"));
    // Qwen2 configs carry a sliding_window that is only used when use_sliding_window is true.
    ASSIGN_OR_RETURN(bool use_window,
                     fields.Bool("use_sliding_window", c.architecture != Architecture::kQwen2));
    if (use_window) c.sliding_window = window;
  }
  ASSIGN_OR_RETURN(std::vector<int> bos, fields.TokenIds("bos_token_id"));
  if (!bos.empty()) c.bos_token_id = bos.front();
  ASSIGN_OR_RETURN(c.eos_token_ids, fields.TokenIds("eos_token_id"));

  if (fields.Has("head_dim")) {
    ASSIGN_OR_RETURN(c.head_dim, fields.PositiveInt("head_dim"));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return InvalidArgument(source + ": num_attention_heads (" + std::to_string(c.num_heads) +
                             ") does not divide hidden_size (" + std::to_string(c.hidden_size) +
                             ") and no head_dim is given");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(source + ": num_key_value_heads (" + std::to_string(c.num_kv_heads) +
                           ") does not divide num_attention_heads (" +
                           std::to_string(c.num_heads) + ")");
  }
  if (c.head_dim % 2 != 0) {
    return InvalidArgument(source + ": head_dim (" + std::to_string(c.head_dim) +
                           ") must be even for rotary embeddings");
  }
  for (int id : c.eos_token_ids) {
    if (id >= c.vocab_size) return fields.Error("eos_token_id", "is outside the vocabulary");
  }
  if (c.bos_token_id && *c.bos_token_id >= c.vocab_size) {
    return fields.Error("bos_token_id", "is outside the vocabulary");
  }
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(json config, ReadJsonObjectFile(config_path));
  ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(config, config_path));

  const std::string generation_path = (fs::path(dir) / "generation_config.json").string();
  if (fs::exists(generation_path)) {
    ASSIGN_OR_RETURN(json generation, ReadJsonObjectFile(generation_path));
    FieldReader fields(generation, generation_path);
    ASSIGN_OR_RETURN(std::vector<int> bos, fields.TokenIds("bos_token_id"));
    ASSIGN_OR_RETURN(std::vector<int> eos, fields.TokenIds("eos_token_id"));
    for (int id : eos) {
      if (id >= c.vocab_size) return fields.Error("eos_token_id", "is outside the vocabulary");
    }
    if (!bos.empty() && bos.front() >= c.vocab_size) return fields.Error("bos_token_id", "is outside the vocabulary");
    if (!bos.empty()) c.bos_token_id = bos.front();
    if (!eos.empty()) c.eos_token_ids = eos;
  }
  return c;
}

}  // namespace tpserve

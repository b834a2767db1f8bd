#include "model/model_maker.h"

#include "common/bounded_json.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/random_weights.h"
#include "model/safetensors_writer.h"
#include "text/tokenizer/tokenizer.h"
#include "model/weight_layout.h"

namespace tpserve {
namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

// Vocabulary, special tokens and architecture that go with each bundled tokenizer.
struct TokenizerFamily {
  const char* name;
  Architecture architecture;
  std::optional<int> bos;
  std::vector<int> eos;
  double rope_theta;
  bool llama3_rope_scaling;
  // tokenizer_config.json's chat template and its special tokens, in the family's chat format.
  const char* chat_template;
  const char* bos_token;  // nullptr: none
  const char* eos_token;
};

// Llama-3.x Instruct's header/eot format (Llama-3.1's template without its tool calling).
constexpr const char* kLlama3ChatTemplate =
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n";

// Qwen2.5's ChatML with its default system message (Qwen2.5-Instruct's template without tools).
constexpr const char* kChatMlTemplate =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message['role'] == 'system' and loop.first) %}\n"
    "        {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

const TokenizerFamily* FindFamily(const std::string& name) {
  static const TokenizerFamily kFamilies[] = {
      // Llama-3.1: <|begin_of_text|>; eos <|end_of_text|>, <|eom_id|>, <|eot_id|>.
      {"llama3", Architecture::kLlama, 128000, {128001, 128008, 128009}, 500000.0, true,
       kLlama3ChatTemplate, "<|begin_of_text|>", "<|eot_id|>"},
      // Qwen2.5: no bos; eos <|im_end|>, <|endoftext|>.
      {"qwen2", Architecture::kQwen2, std::nullopt, {151645, 151643}, 1000000.0, false,
       kChatMlTemplate, nullptr, "<|im_end|>"},
  };
  for (const auto& family : kFamilies) {
    if (name == family.name) return &family;
  }
  return nullptr;
}

ordered_json ConfigJson(const ModelConfig& c) {
  ordered_json j;
  j["architectures"] = {ArchitectureName(c.architecture)};
  j["model_type"] = c.architecture == Architecture::kQwen2 ? "qwen2" : "llama";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings",
                          c.rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["attention_bias"] = c.attention_bias;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["vocab_size"] = c.vocab_size;
  j["torch_dtype"] = "bfloat16";
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  j["eos_token_id"] = c.eos_token_ids;
  return j;
}

Status WriteJson(const fs::path& path, const ordered_json& value) {
  std::ofstream out(path);
  out << value.dump(2) << "\n";
  out.close();
  if (!out) return FailedPrecondition(path.string() + ": write failed");
  return Status::Ok();
}

TensorToWrite RandomTensor(const WeightSpec& spec, const RandomWeights& random) {
  return {spec.name, DType::kBF16, spec.shape, [spec, &random](std::span<std::byte> bytes) {
            random.FillBf16(spec, 0, {reinterpret_cast<uint16_t*>(bytes.data()), bytes.size() / 2});
          }};
}

Status WriteWeights(const fs::path& dir, const ModelConfig& config, uint64_t seed, int shards) {
  std::vector<WeightSpec> specs = ExpectedWeights(config);
  const RandomWeights random(config, seed);
  if (shards <= 1) {
    std::vector<TensorToWrite> tensors;
    for (const auto& spec : specs) tensors.push_back(RandomTensor(spec, random));
    return WriteSafetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  }
  // Contiguous runs of tensors per shard, as HF's save_pretrained does.
  ordered_json weight_map = ordered_json::object();
  size_t total_bytes = 0;
  for (int shard = 0; shard < shards; ++shard) {
    char file_name[64];
    std::snprintf(file_name, sizeof(file_name), "model-%05d-of-%05d.safetensors", shard + 1, shards);
    std::vector<TensorToWrite> tensors;
    const size_t begin = specs.size() * shard / shards, end = specs.size() * (shard + 1) / shards;
    for (size_t i = begin; i < end; ++i) {
      tensors.push_back(RandomTensor(specs[i], random));
      weight_map[specs[i].name] = file_name;
      total_bytes += tensors.back().byte_size();
    }
    RETURN_IF_ERROR(WriteSafetensors((dir / file_name).string(), tensors, {{"format", "pt"}}));
  }
  return WriteJson(dir / "model.safetensors.index.json",
                   {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}});
}

}  // namespace

std::vector<std::string> ModelPresetNames() { return {"tiny", "small"}; }
std::vector<std::string> TokenizerNames() { return {"llama3", "qwen2"}; }

Result<ModelConfig> PresetConfig(const std::string& preset, const std::string& tokenizer,
                                 int tokenizer_vocab_size) {
  const TokenizerFamily* family = FindFamily(tokenizer);
  if (family == nullptr) {
    return InvalidArgument("--tokenizer '" + tokenizer + "' is not one of: llama3, qwen2");
  }
  ModelConfig c;
  c.architecture = family->architecture;
  c.architecture_name = ArchitectureName(c.architecture);
  if (preset == "tiny") {
    // Narrow and shallow for tests, but 8 query heads over 2 KV heads so that TP=8 and GQA
    // (with KV heads replicated across ranks) are both exercised.
    c.hidden_size = 128;
    c.intermediate_size = 384;
    c.num_layers = 2;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    c.max_position_embeddings = 2048;
    c.tie_word_embeddings = false;
  } else if (preset == "small") {
    c.hidden_size = 768;
    c.intermediate_size = 2048;
    c.num_layers = 12;
    c.num_heads = 12;
    c.num_kv_heads = 4;
    c.head_dim = 64;
    c.max_position_embeddings = 8192;
    c.tie_word_embeddings = true;
  } else {
    return InvalidArgument("--preset '" + preset + "' is not one of: tiny, small");
  }
  // Embedding rows padded to a multiple of 128 ids, as released checkpoints do.
  c.vocab_size = (tokenizer_vocab_size + 127) / 128 * 128;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = family->rope_theta;
  if (family->llama3_rope_scaling) {
    c.rope_scaling = {.type = RopeScaling::Type::kLlama3, .factor = 8.0, .low_freq_factor = 1.0,
                      .high_freq_factor = 4.0, .original_max_position_embeddings = 8192};
  }
  c.attention_bias = c.architecture == Architecture::kQwen2;
  c.torch_dtype = "bfloat16";
  c.bos_token_id = family->bos;
  c.eos_token_ids = family->eos;
  return c;
}

Status MakeModel(const MakeModelOptions& options) {
  if (options.out_dir.empty()) return InvalidArgument("--out is required");
  if (options.shards < 1) return InvalidArgument("--shards must be at least 1");
  if (FindFamily(options.tokenizer) == nullptr) {
    return InvalidArgument("--tokenizer '" + options.tokenizer + "' is not one of: llama3, qwen2");
  }
  const fs::path source = fs::path(options.assets_dir) / "tokenizers" / options.tokenizer;
  const fs::path tokenizer_json = source / "tokenizer.json";
  if (!fs::exists(tokenizer_json)) {
    return NotFound(tokenizer_json.string() +
                    ": tokenizer not found; run scripts/fetch_assets.sh (or pass --assets)");
  }
  ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromFile(tokenizer_json.string()));
  ASSIGN_OR_RETURN(ModelConfig config,
                   PresetConfig(options.preset, options.tokenizer, tokenizer.vocab_size()));

  const fs::path dir(options.out_dir);
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return FailedPrecondition(dir.string() + ": cannot create: " + error.message());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".safetensors") || name == "model.safetensors.index.json") {
      fs::remove(entry.path());  // a previous model's weights must not mix with these
    }
  }
  fs::copy_file(tokenizer_json, dir / "tokenizer.json", fs::copy_options::overwrite_existing, error);
  if (error) return FailedPrecondition("copying tokenizer.json: " + error.message());
  // The bundled tokenizer_config.json with the family's chat template and special tokens (the
  // bundled files' own templates are of other releases: Llama-3.0's, Qwen3's).
  ordered_json tokenizer_config = ordered_json::object();
  if (fs::exists(source / "tokenizer_config.json")) {
    ASSIGN_OR_RETURN(tokenizer_config, ReadJsonFile<ordered_json>((source / "tokenizer_config.json").string()));
    if (!tokenizer_config.is_object()) {
      return InvalidArgument((source / "tokenizer_config.json").string() + ": not a JSON object");
    }
  }
  const TokenizerFamily* family = FindFamily(options.tokenizer);
  tokenizer_config["chat_template"] = family->chat_template;
  tokenizer_config["bos_token"] =
      family->bos_token ? ordered_json(family->bos_token) : ordered_json(nullptr);
  tokenizer_config["eos_token"] = family->eos_token;
  RETURN_IF_ERROR(WriteJson(dir / "tokenizer_config.json", tokenizer_config));
  RETURN_IF_ERROR(WriteJson(dir / "config.json", ConfigJson(config)));
  ordered_json generation = {{"_from_model_config", false}, {"eos_token_id", config.eos_token_ids}};
  if (config.bos_token_id) generation["bos_token_id"] = *config.bos_token_id;
  RETURN_IF_ERROR(WriteJson(dir / "generation_config.json", generation));
  return WriteWeights(dir, config, options.seed, options.shards);
}

}  // namespace tpserve

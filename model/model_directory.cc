#include "model/model_directory.h"

#include "common/bounded_json.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/known_models.h"
#include "model/weight_layout.h"

namespace tpserve {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// bos_token / eos_token of tokenizer_config.json: a string or {"content": "..."}.
std::optional<std::string> SpecialTokenName(const json& config, const char* field) {
  auto it = config.find(field);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && it->at("content").is_string()) {
    return it->at("content").get<std::string>();
  }
  return std::nullopt;
}

// Fills bos/eos that config.json and generation_config.json left unset.
Status CompleteSpecialTokens(const std::string& dir, const Tokenizer& tokenizer,
                             ModelConfig* config, bool* add_bos) {
  const std::string path = (fs::path(dir) / "tokenizer_config.json").string();
  *add_bos = config->bos_token_id.has_value();
  if (!fs::exists(path)) return Status::Ok();
  ASSIGN_OR_RETURN(json tokenizer_config, ReadJsonFile(path));
  if (!tokenizer_config.is_object()) return InvalidArgument(path + ": not a JSON object");
  auto resolve = [&](const char* field) -> Result<std::optional<int32_t>> {
    std::optional<std::string> name = SpecialTokenName(tokenizer_config, field);
    if (!name) return std::optional<int32_t>();
    std::optional<int32_t> id = tokenizer.TokenToId(*name);
    if (!id) {
      return InvalidArgument(path + ": field '" + field + "' names '" + *name +
                             "', which tokenizer.json does not define");
    }
    return id;
  };
  ASSIGN_OR_RETURN(std::optional<int32_t> bos, resolve("bos_token"));
  ASSIGN_OR_RETURN(std::optional<int32_t> eos, resolve("eos_token"));
  if (!config->bos_token_id && bos) config->bos_token_id = *bos;
  if (config->eos_token_ids.empty() && eos) config->eos_token_ids.push_back(*eos);
  const auto flag = tokenizer_config.find("add_bos_token");
  const bool wants_bos = flag == tokenizer_config.end() || !flag->is_boolean() || flag->get<bool>();
  *add_bos = config->bos_token_id.has_value() && wants_bos;
  return Status::Ok();
}

}  // namespace

Result<Tokenizer> LoadTokenizer(const std::string& dir_or_file) {
  if (!fs::exists(dir_or_file)) return NotFound(dir_or_file + ": no such file or directory");
  const fs::path path = fs::is_directory(dir_or_file) ? fs::path(dir_or_file) / "tokenizer.json"
                                                      : fs::path(dir_or_file);
  return Tokenizer::FromFile(path.string());
}

Result<ModelDirectory> OpenModelDirectory(const std::string& dir) {
  if (!fs::is_directory(dir)) return NotFound(dir + ": not a directory");
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
  RETURN_IF_ERROR(ValidateCheckpoint(checkpoint, config));
  ASSIGN_OR_RETURN(Tokenizer tokenizer, LoadTokenizer(dir));
  if (tokenizer.vocab_size() > config.vocab_size) {
    return InvalidArgument(dir + ": tokenizer.json has " + std::to_string(tokenizer.vocab_size()) +
                           " ids but config.json vocab_size is " +
                           std::to_string(config.vocab_size));
  }
  bool add_bos = false;
  RETURN_IF_ERROR(CompleteSpecialTokens(dir, tokenizer, &config, &add_bos));
  return ModelDirectory{dir, std::move(config), std::move(checkpoint), std::move(tokenizer), add_bos, dir};
}

namespace {

// The config a dummy model has, and the directory its tokenizer comes from.
struct DummyShape {
  ModelConfig config;
  std::string tokenizer_dir;
};

Result<DummyShape> ResolveDummyShape(const ModelSource& source) {
  const std::string bundled = (fs::path(source.assets_dir) / "tokenizers" / source.tokenizer).string();
  auto beside = [&](const fs::path& dir) {
    return fs::exists(dir / "tokenizer.json") ? dir.string() : bundled;
  };
  if (fs::is_directory(source.model)) {
    ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(source.model));
    return DummyShape{std::move(config), beside(source.model)};
  }
  if (fs::is_regular_file(source.model)) {
    ASSIGN_OR_RETURN(const json value, ReadJsonFile(source.model));
    if (!value.is_object()) return InvalidArgument(source.model + ": not a JSON object");
    ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(value, source.model));
    return DummyShape{std::move(config), beside(fs::path(source.model).parent_path())};
  }
  // A name: the data file's shapes stand alone (the planner needs no tokenizer); presets take
  // their vocabulary from the bundled tokenizer.
  ASSIGN_OR_RETURN(std::vector<KnownModel> known, KnownModels());
  for (KnownModel& m : known) {
    if (m.name == source.model) return DummyShape{std::move(m.config), bundled};
  }
  ASSIGN_OR_RETURN(Tokenizer tokenizer, LoadTokenizer(bundled));
  ASSIGN_OR_RETURN(ModelConfig config, KnownModelConfig(source.model, source.tokenizer, tokenizer.vocab_size()));
  return DummyShape{std::move(config), bundled};
}

Result<ModelDirectory> OpenDummyModel(const ModelSource& source) {
  ASSIGN_OR_RETURN(DummyShape shape, ResolveDummyShape(source));
  ModelConfig& config = shape.config;
  if (source.num_layers < 0) return InvalidArgument("--num-layers must be positive");
  if (source.num_layers > 0) config.num_layers = source.num_layers;
  ASSIGN_OR_RETURN(Tokenizer tokenizer, LoadTokenizer(shape.tokenizer_dir));
  if (tokenizer.vocab_size() > config.vocab_size) {
    return InvalidArgument(source.model + ": vocab_size " + std::to_string(config.vocab_size) + " is smaller than the " +
                           std::to_string(tokenizer.vocab_size()) + " ids of the tokenizer in " + shape.tokenizer_dir +
                           " (dummy weights need a tokenizer that fits the vocabulary)");
  }
  bool add_bos = false;
  RETURN_IF_ERROR(CompleteSpecialTokens(shape.tokenizer_dir, tokenizer, &config, &add_bos));
  const std::string path = "dummy:" + source.model;
  Checkpoint checkpoint = Checkpoint::Synthetic(config, source.seed, path);
  return ModelDirectory{path, std::move(config), std::move(checkpoint), std::move(tokenizer), add_bos,
                        shape.tokenizer_dir};
}

}  // namespace

Result<ModelConfig> ResolveModelShape(const ModelSource& source) {
  ASSIGN_OR_RETURN(DummyShape shape, ResolveDummyShape(source));
  if (source.num_layers < 0) return InvalidArgument("--num-layers must be positive");
  if (source.num_layers > 0) shape.config.num_layers = source.num_layers;
  return shape.config;
}

Result<std::string> ResolveTokenizerDir(const ModelSource& source) {
  ASSIGN_OR_RETURN(DummyShape shape, ResolveDummyShape(source));
  return shape.tokenizer_dir;
}

Result<ModelDirectory> OpenModel(const ModelSource& source) {
  if (source.load_format == "auto") return OpenModelDirectory(source.model);
  if (source.load_format == "dummy") return OpenDummyModel(source);
  return InvalidArgument("--load-format '" + source.load_format + "' is not one of: auto, dummy");
}

Result<std::vector<int32_t>> EncodePrompt(const ModelDirectory& model, std::string_view text) {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, model.tokenizer.Encode(text, /*add_special_tokens=*/true));
  if (model.add_bos && (ids.empty() || ids.front() != *model.config.bos_token_id)) {
    ids.insert(ids.begin(), *model.config.bos_token_id);
  }
  return ids;
}

}  // namespace tpserve

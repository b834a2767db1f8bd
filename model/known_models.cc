#include "model/known_models.h"

#include <nlohmann/json.hpp>

#include "model/known_models_data.h"
#include "model/model_maker.h"

namespace tpserve {

Result<std::vector<KnownModel>> KnownModels() {
  // Ordered: names are listed as the file lists them.
  const auto data = nlohmann::ordered_json::parse(kKnownModelsJson, nullptr, /*allow_exceptions=*/false);
  if (!data.is_object()) return Internal("model/known_models.json: not a JSON object");
  std::vector<KnownModel> models;
  for (auto it = data.begin(); it != data.end(); ++it) {
    if (it.key().starts_with("_")) continue;  // comments
    const nlohmann::ordered_json& entry = it.value();
    const std::string where = "model/known_models.json '" + it.key() + "'";
    if (!entry.is_object() || !entry.contains("config")) return Internal(where + ": no config");
    ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(nlohmann::json::parse(entry["config"].dump()), where));
    models.push_back({it.key(), entry.value("source", ""), entry.value("parameters", int64_t{0}), std::move(config)});
  }
  return models;
}

std::vector<std::string> KnownModelNames() {
  std::vector<std::string> names;
  if (auto models = KnownModels(); models.ok()) {
    for (const KnownModel& m : *models) names.push_back(m.name);
  }
  for (const std::string& preset : ModelPresetNames()) names.push_back(preset);
  return names;
}

Result<ModelConfig> KnownModelConfig(const std::string& name, const std::string& tokenizer,
                                     int tokenizer_vocab_size) {
  for (const std::string& preset : ModelPresetNames()) {
    if (name == preset) return PresetConfig(preset, tokenizer, tokenizer_vocab_size);
  }
  ASSIGN_OR_RETURN(std::vector<KnownModel> models, KnownModels());
  for (KnownModel& m : models) {
    if (m.name == name) return std::move(m.config);
  }
  std::string names;
  for (const std::string& n : KnownModelNames()) names += (names.empty() ? "" : ", ") + n;
  return NotFound("'" + name + "' is not a model directory, a config.json or a known model (" + names + ")");
}

}  // namespace tpserve

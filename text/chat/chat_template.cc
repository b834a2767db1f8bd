#include "text/chat/chat_template.h"

#include "common/bounded_json.h"


#include "text/chat/interpreter.h"
#include "text/chat/parser.h"

namespace tpserve {
namespace {

constexpr int kMaxJsonDepth = 64;

template <typename Json>
bool DeeperThan(const Json& j, int limit) {
  if (!j.is_structured()) return false;
  if (limit <= 0) return true;
  for (const auto& item : j) {
    if (DeeperThan(item, limit - 1)) return true;
  }
  return false;
}

template <typename Json>
Result<RenderedChat> RenderWith(const chat::Program& program, const std::string& bos,
                                const std::string& eos, const std::function<std::time_t()>& clock,
                                const Json& messages, bool add_generation_prompt,
                                const Json& extra) {
  if (!messages.is_array()) return InvalidArgument("chat_template: messages must be a JSON array");
  if (!extra.is_object())
    return InvalidArgument("chat_template: extra variables must be a JSON object");
  if (DeeperThan(messages, kMaxJsonDepth) || DeeperThan(extra, kMaxJsonDepth)) {
    return InvalidArgument("chat_template: messages nested deeper than " +
                           std::to_string(kMaxJsonDepth));
  }
  auto globals = std::make_shared<chat::Scope>();
  // The request's values are untrusted (every string byte of them); the template's own are not.
  for (auto it = extra.begin(); it != extra.end(); ++it)
    globals->vars[it.key()] = chat::FromJson(it.value(), true);
  globals->vars["messages"] = chat::FromJson(messages, true);
  globals->vars["add_generation_prompt"] = chat::Value::Bool(add_generation_prompt);
  globals->vars["bos_token"] = chat::Value::Trusted(bos);
  globals->vars["eos_token"] = chat::Value::Trusted(eos);
  for (const char* function : {"raise_exception", "namespace", "range", "strftime_now", "dict"}) {
    globals->vars[function] = chat::Value::Function(function);
  }
  return chat::RenderProgram(program, std::move(globals), clock);
}

Result<std::string> TokenField(const nlohmann::json& config, const std::string& field,
                               const std::string& file) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return InvalidArgument(file + ": field '" + field +
                         "' must be a string or an object with a string 'content'");
}

}  // namespace

Result<ChatTemplate> ChatTemplate::Compile(std::string_view source, std::string bos_token,
                                           std::string eos_token) {
  ASSIGN_OR_RETURN(auto program, chat::Parse(source));
  ChatTemplate t;
  t.program_ = std::move(program);
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  return t;
}

Result<RenderedChat> ChatTemplate::Render(const nlohmann::json& messages,
                                          bool add_generation_prompt,
                                          const nlohmann::json& extra) const {
  return RenderWith(*program_, bos_token_, eos_token_, clock_, messages, add_generation_prompt,
                    extra);
}

Result<RenderedChat> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                          bool add_generation_prompt,
                                          const nlohmann::ordered_json& extra) const {
  return RenderWith(*program_, bos_token_, eos_token_, clock_, messages, add_generation_prompt,
                    extra);
}

Result<std::optional<ChatTemplate>> LoadChatTemplate(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "tokenizer_config.json";
  const std::string file = path.string();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::optional<ChatTemplate>();
  ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonFile(file));
  if (!config.is_object())
    return InvalidArgument(file + ": not a JSON object");
  auto field = config.find("chat_template");
  if (field == config.end() || field->is_null()) return std::optional<ChatTemplate>();
  std::string source;
  if (field->is_string()) {
    source = field->get<std::string>();
  } else if (field->is_array()) {
    bool found = false;
    for (const auto& entry : *field) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["name"].is_string() || !entry["template"].is_string()) {
        return InvalidArgument(
            file + ": field 'chat_template': each entry must have a string 'name' and 'template'");
      }
      if (entry["name"] == "default") {
        source = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found)
      return InvalidArgument(file + ": field 'chat_template' has no template named 'default'");
  } else {
    return InvalidArgument(file +
                           ": field 'chat_template' must be a string or a list of named templates");
  }
  ASSIGN_OR_RETURN(std::string bos, TokenField(config, "bos_token", file));
  ASSIGN_OR_RETURN(std::string eos, TokenField(config, "eos_token", file));
  Result<ChatTemplate> compiled = ChatTemplate::Compile(source, std::move(bos), std::move(eos));
  if (!compiled.ok()) return compiled.status().WithContext(file + ": field 'chat_template'");
  return std::optional<ChatTemplate>(std::move(compiled).value());
}

}  // namespace tpserve

#include <spdlog/spdlog.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/model_directory.h"
#include "text/tokenizer/utf8.h"
#include "cli/commands.h"

namespace tpserve {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string ids;
  bool json = false;
  bool no_special = false;
  bool skip_special = false;
};

Result<std::vector<int32_t>> ParseIds(const std::string& list) {
  std::vector<int32_t> ids;
  std::stringstream stream(list);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    while (used < item.size() && item[used] == ' ') ++used;
    if (used != item.size() || used == 0 || value < 0 || value > INT32_MAX) {
      return InvalidArgument("--ids: '" + item + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

// A token's text for a terminal: quoted, with control characters escaped.
std::string Printable(const std::string& text) {
  std::string out = nlohmann::json(text).dump();
  return out;
}

int Encode(const Tokenizer& tokenizer, const TokenizeOptions& options) {
  auto ids = tokenizer.Encode(options.text, /*add_special_tokens=*/!options.no_special);
  if (!ids.ok()) {
    spdlog::error("tokenize: --text: {}", ids.status().message());
    return 1;
  }
  std::vector<std::string> pieces;
  for (int32_t id : *ids) pieces.push_back(tokenizer.Decode({&id, 1}).value());
  if (options.json) {
    nlohmann::json out = {{"ids", *ids}, {"tokens", pieces}, {"count", ids->size()}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%zu tokens\n%8s  %s\n", ids->size(), "id", "text");
  for (size_t i = 0; i < ids->size(); ++i) {
    std::printf("%8d  %s%s\n", (*ids)[i], Printable(pieces[i]).c_str(),
                tokenizer.IsSpecial((*ids)[i]) ? "  (special)" : "");
  }
  return 0;
}

int Decode(const Tokenizer& tokenizer, const TokenizeOptions& options) {
  auto ids = ParseIds(options.ids);
  if (!ids.ok()) {
    spdlog::error("tokenize: {}", ids.status().message());
    return 1;
  }
  auto text = tokenizer.Decode(*ids, options.skip_special);
  if (!text.ok()) {
    spdlog::error("tokenize: --ids: {}", text.status().message());
    return 1;
  }
  if (options.json) {
    std::printf("%s\n", nlohmann::json({{"text", *text}, {"ids", *ids}}).dump().c_str());
  } else {
    std::printf("%s\n", text->c_str());
  }
  return 0;
}

}  // namespace

void AddTokenizeCommand(CLI::App& app, CommandAction* action) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Show the token ids a text becomes (with each token's text), or decode ids back to text.\n"
      "Uses the model's tokenizer.json, exactly as generation and the server do.");
  cmd->add_option("--model", options->model, "Model directory (or a tokenizer.json file)")
      ->required();
  auto* text = cmd->add_option("--text", options->text, "Text to encode");
  auto* ids = cmd->add_option("--ids", options->ids, "Comma-separated token ids to decode");
  text->excludes(ids);
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->add_flag("--no-special", options->no_special,
                "Encode without the template's special tokens (e.g. Llama-3's <|begin_of_text|>)");
  cmd->add_flag("--skip-special", options->skip_special, "Decode without special tokens");
  cmd->callback([options, action, text, ids] {
    *action = [options, text, ids] {
      if (text->count() == 0 && ids->count() == 0) {
        spdlog::error("tokenize: give --text TEXT or --ids 1,2,3");
        return 2;
      }
      auto tokenizer = LoadTokenizer(options->model);
      if (!tokenizer.ok()) {
        spdlog::error("tokenize: {}", tokenizer.status().ToString());
        return 1;
      }
      return text->count() ? Encode(*tokenizer, *options) : Decode(*tokenizer, *options);
    };
  });
}

}  // namespace tpserve

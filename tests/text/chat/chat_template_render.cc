// The C++ side of the differential test (chat_template_diff.py): reads one JSON document on stdin,
//   {"now": EPOCH_SECONDS,
//    "templates": {"NAME": {"source": ..., "bos_token": ..., "eos_token": ...}, ...},
//    "cases": [{"template": NAME, "messages": [...], "add_generation_prompt": bool, "extra":
//    {...}}, ...]}
// and prints one JSON line per template ({"template", "compile_error"}) then one per case
// ({"case": i, "text", "ranges"} or {"case": i, "error"}). Key order of the input is kept.
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "text/chat/chat_template.h"

int main() {
  using nlohmann::ordered_json;
  const std::string input{std::istreambuf_iterator<char>(std::cin),
                          std::istreambuf_iterator<char>()};
  const ordered_json doc = ordered_json::parse(input);
  const std::time_t now = doc.value("now", std::time_t{0});
  std::map<std::string, std::optional<tpserve::ChatTemplate>> templates;
  for (auto it = doc["templates"].begin(); it != doc["templates"].end(); ++it) {
    const ordered_json& t = it.value();
    auto compiled = tpserve::ChatTemplate::Compile(
        t["source"].get<std::string>(), t.value("bos_token", ""), t.value("eos_token", ""));
    ordered_json line = {{"template", it.key()}};
    if (compiled.ok()) {
      compiled->set_clock([now] { return now; });
      templates.emplace(it.key(), std::move(compiled).value());
      line["compile_error"] = nullptr;
    } else {
      templates.emplace(it.key(), std::nullopt);
      line["compile_error"] = compiled.status().message();
    }
    std::cout << line.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  }
  size_t index = 0;
  for (const ordered_json& c : doc["cases"]) {
    ordered_json line = {{"case", index++}};
    const auto& compiled = templates.at(c["template"].get<std::string>());
    if (!compiled) continue;
    auto rendered = compiled->Render(c["messages"], c.value("add_generation_prompt", false),
                                     c.value("extra", ordered_json::object()));
    if (rendered.ok()) {
      line["text"] = rendered->text;
      ordered_json ranges = ordered_json::array();
      for (const tpserve::TextRange& r : rendered->from_messages)
        ranges.push_back({r.begin, r.end});
      line["ranges"] = std::move(ranges);
    } else {
      line["error"] = rendered.status().message();
    }
    std::cout << line.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  }
  return 0;
}

// Chat templates: the Jinja2 subset that Hugging Face chat templates use (Llama-3.x, Qwen2/2.5
// ChatML, Mistral families), with Jinja's semantics as transformers configures them
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, raise_exception, strftime_now, tojson
// without ASCII escaping, loop controls). A template that uses anything else is refused at Compile
// with the construct and its line, rather than rendered wrong.
//
// Rendering tracks which bytes of the output came from the request (messages and `extra`), so the
// tokenizer can refuse to read special tokens out of them: special tokens come from the template.
#pragma once

#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpserve {

struct TextRange {
  size_t begin = 0;  // [begin, end) byte offsets
  size_t end = 0;
  bool operator==(const TextRange&) const = default;
};

struct RenderedChat {
  std::string text;
  // Sorted, non-overlapping, non-adjacent: bytes that came from the request's messages or `extra`
  // (untrusted). Exact through concatenation, trim/strip and slicing; any other transformation of
  // an untrusted string (replace, upper, tojson, join ...) makes its whole result untrusted.
  std::vector<TextRange> from_messages;
};

namespace chat {
struct Program;
}

class ChatTemplate {
 public:
  // Parses a template. An error names the unsupported construct (tag, filter, test, method,
  // function, operator) and its line, e.g. "chat_template line 3: filter 'xmlattr' is not
  // supported".
  static Result<ChatTemplate> Compile(std::string_view source, std::string bos_token,
                                      std::string eos_token);

  // messages: JSON array of {"role": str, "content": str, ...} (other keys pass through). The
  // template sees messages, add_generation_prompt, bos_token, eos_token and the keys of `extra`
  // (an object, e.g. {"tools": null}). raise_exception(msg) gives
  // InvalidArgument("chat_template: " + msg); other render failures are InvalidArgument too.
  // The ordered_json overload keeps the request's key order (visible through tojson and items()).
  Result<RenderedChat> Render(const nlohmann::json& messages, bool add_generation_prompt,
                              const nlohmann::json& extra = nlohmann::json::object()) const;
  Result<RenderedChat> Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                              const nlohmann::ordered_json& extra) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

  // strftime_now() reads this clock (the wall clock by default); tests pin it.
  void set_clock(std::function<std::time_t()> clock) { clock_ = std::move(clock); }

 private:
  ChatTemplate() = default;

  std::shared_ptr<const chat::Program> program_;
  std::string bos_token_;
  std::string eos_token_;
  std::function<std::time_t()> clock_;
};

// Reads DIR/tokenizer_config.json: chat_template (a string, or a list of {"name", "template"} of
// which "default" is taken), bos_token / eos_token (a string or {"content": ...}). Ok(nullopt)
// when the file or the field is absent; an error naming the file and field when it is malformed
// or the template is unsupported.
Result<std::optional<ChatTemplate>> LoadChatTemplate(const std::filesystem::path& model_dir);

}  // namespace tpserve

#include <spdlog/spdlog.h>

#include <chrono>

#include "model/model_maker.h"
#include "cli/commands.h"

namespace tpserve {

void AddMakeModelCommand(CLI::App& app, CommandAction* action) {
  auto options = std::make_shared<MakeModelOptions>();
  options->assets_dir = DefaultAssetsDir();
  CLI::App* cmd = app.add_subcommand(
      "make-model",
      "Write a Hugging Face checkpoint directory (config.json, safetensors, tokenizer.json) with\n"
      "seeded random bf16 weights and a real tokenizer. Its text is noise; everything else is a\n"
      "real checkpoint. Presets: tiny (tests), small (hidden 768, 12 layers, ~174M parameters).");
  cmd->add_option("--out", options->out_dir, "Directory to write (created if needed)")->required();
  cmd->add_option("--preset", options->preset, "Model size")
      ->check(CLI::IsMember(ModelPresetNames()))
      ->capture_default_str();
  cmd->add_option("--tokenizer", options->tokenizer,
                  "Vocabulary: llama3 (LlamaForCausalLM) or qwen2 (Qwen2ForCausalLM)")
      ->check(CLI::IsMember(TokenizerNames()))
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "Random seed of the weights")->capture_default_str();
  cmd->add_option("--shards", options->shards,
                  "Number of safetensors files (>1 also writes model.safetensors.index.json)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--assets", options->assets_dir,
                  "Folder with tokenizers/<name>/tokenizer.json (default: $TPSERVE_ASSETS or the "
                  "one scripts/fetch_assets.sh fills)")
      ->capture_default_str();
  cmd->callback([options, action] {
    *action = [options] {
      const auto start = std::chrono::steady_clock::now();
      Status status = MakeModel(*options);
      if (!status.ok()) {
        spdlog::error("make-model: {}", status.ToString());
        return 1;
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      spdlog::info("make-model: wrote {} ({} preset, {} tokenizer, seed {}) in {:.1f} s",
                   options->out_dir, options->preset, options->tokenizer, options->seed, seconds);
      return 0;
    };
  });
}

}  // namespace tpserve

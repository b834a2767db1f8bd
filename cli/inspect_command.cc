#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/model_directory.h"
#include "model/weight_layout.h"
#include "cli/commands.h"

namespace tpserve {
namespace {

struct InspectOptions {
  std::string model;
  int tp = 1;
  bool json = false;
};

struct RankLoad {
  size_t bytes = 0;
  size_t tensors = 0;
};

// Reads every rank's slice of every weight, as rank workers do at start-up: this proves the
// checkpoint shards for this TP degree and shows what each rank holds.
Result<std::vector<RankLoad>> LoadAllShards(const ModelDirectory& model, int tp) {
  RETURN_IF_ERROR(CheckTensorParallel(model.config, tp));
  std::vector<RankLoad> ranks(tp);
  for (const WeightSpec& spec : ExpectedWeights(model.config)) {
    for (int rank = 0; rank < tp; ++rank) {
      ASSIGN_OR_RETURN(HostTensor slice, model.checkpoint.Read(spec.name, DType::kBF16,
                                                               SliceFor(spec, model.config, rank, tp)));
      ranks[rank].bytes += slice.bytes.size();
      ranks[rank].tensors += 1;
    }
  }
  return ranks;
}

int Run(const InspectOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto model = OpenModelDirectory(options.model);
  if (!model.ok()) {
    spdlog::error("inspect: {}", model.status().ToString());
    return 1;
  }
  auto ranks = LoadAllShards(*model, options.tp);
  if (!ranks.ok()) {
    spdlog::error("inspect: {}", ranks.status().ToString());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ModelConfig& c = model->config;
  if (options.json) {
    nlohmann::json out = {{"architecture", c.architecture_name},
                          {"hidden_size", c.hidden_size},
                          {"intermediate_size", c.intermediate_size},
                          {"num_layers", c.num_layers},
                          {"num_heads", c.num_heads},
                          {"num_kv_heads", c.num_kv_heads},
                          {"head_dim", c.head_dim},
                          {"vocab_size", c.vocab_size},
                          {"parameters", c.ParameterCount()},
                          {"files", model->checkpoint.file_count()},
                          {"tp", options.tp},
                          {"load_seconds", seconds}};
    for (const RankLoad& r : *ranks) {
      out["ranks"].push_back({{"bytes", r.bytes}, {"tensors", r.tensors}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%s: %s, %.1fM parameters in %zu file(s)\n", options.model.c_str(),
              c.architecture_name.c_str(), c.ParameterCount() / 1e6, model->checkpoint.file_count());
  std::printf("  hidden %d, ffn %d, layers %d, heads %d (kv %d, head_dim %d), vocab %d "
              "(tokenizer %d)\n",
              c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads,
              c.head_dim, c.vocab_size, model->tokenizer.vocab_size());
  std::printf("  tp=%d: every rank's shard read in %.2f s\n", options.tp, seconds);
  for (int rank = 0; rank < options.tp; ++rank) {
    std::printf("    rank %d: %zu tensors, %.1f MiB bf16\n", rank, (*ranks)[rank].tensors,
                (*ranks)[rank].bytes / 1048576.0);
  }
  return 0;
}

}  // namespace

void AddInspectCommand(CLI::App& app, CommandAction* action) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Load and validate a model directory, then read each rank's shard for a TP degree and\n"
      "report what every rank holds.");
  cmd->add_option("--model", options->model, "Model directory")->required();
  cmd->add_option("--tp", options->tp, "Tensor-parallel degree")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->callback([options, action] { *action = [options] { return Run(*options); }; });
}

}  // namespace tpserve

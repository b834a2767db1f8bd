// tpserve: a tensor-parallel LLM inference server. One executable, one subcommand per job.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // Logs go to stderr so that stdout carries only results (text, JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("tpserve"));
  CLI::App app{
      "tpserve: tensor-parallel LLM inference (Llama-family models, Megatron-style sharding).\n"
      "Run `tpserve COMMAND --help` for the flags of each command."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tpserve ") + TPSERVE_VERSION);

  tpserve::CommandAction action;
  tpserve::AddMakeModelCommand(app, &action);
  tpserve::AddTokenizeCommand(app, &action);
  tpserve::AddInspectCommand(app, &action);
#if defined(TPSERVE_WITH_GRPC)
  tpserve::AddServeCommand(app, &action);
  tpserve::AddClientCommand(app, &action);
  tpserve::AddHealthCommand(app, &action);
  tpserve::AddLoadgenCommand(app, &action);
#endif
  tpserve::AddGenerateCommand(app, &action);
  tpserve::AddBenchDecodeCommand(app, &action);
  tpserve::AddBenchCommCommand(app, &action);
  tpserve::AddDevicesCommand(app, &action);
  tpserve::AddPlanCommand(app, &action);

  CLI11_PARSE(app, argc, argv);
  return action ? action() : 1;
}

#include <spdlog/spdlog.h>

#include <cstdio>

#include "kernels/cuda_module.h"
#include "server/commands/commands.h"

namespace tpserve {

void AddDevicesCommand(CLI::App& app, CommandAction* action) {
  CLI::App* cmd = app.add_subcommand(
      "devices",
      "Report the compute backends this machine offers: the CUDA module and its devices, or why\n"
      "tpserve falls back to the CPU backend.");
  cmd->callback([action] {
    *action = [] {
      auto probe = ProbeCudaBackend();
      if (!probe.ok()) {
        spdlog::info("CUDA backend unavailable ({}); using the CPU backend",
                     probe.status().message());
        std::printf("cpu\n");
        return 0;
      }
      std::printf("%s", probe->report.c_str());
      std::printf("cpu\n");
      return 0;
    };
  });
}

}  // namespace tpserve

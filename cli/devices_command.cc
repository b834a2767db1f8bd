#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>
#include <thread>

#include "kernels/cpu/linear.h"
#include "kernels/cuda_module.h"
#include "cli/commands.h"

namespace tpserve {
namespace {

// "cpu: 2 cores, linear kernel amx (runs here: amx avx512bf16 avx512 avx2 portable)"
void PrintCpu() {
  std::string available;
  for (auto kernel : cpu::kLinearKernels) {
    if (cpu::LinearKernelAvailable(kernel)) available += std::string(available.empty() ? "" : " ") + cpu::LinearKernelName(kernel);
  }
  std::printf("cpu: %u cores, linear kernel %s (runs here: %s)\n", std::thread::hardware_concurrency(),
              cpu::LinearKernelName(cpu::BestLinearKernel()), available.c_str());
}

}  // namespace

void AddDevicesCommand(CLI::App& app, CommandAction* action) {
  CLI::App* cmd = app.add_subcommand(
      "devices",
      "Report the compute backends this machine offers: the CUDA module and its devices, or why\n"
      "tpserve falls back to the CPU backend, and the CPU's Linear kernels (--linear-kernel).");
  cmd->callback([action] {
    *action = [] {
      auto probe = ProbeCudaBackend();
      if (!probe.ok()) {
        spdlog::info("CUDA backend unavailable ({}); using the CPU backend",
                     probe.status().message());
        PrintCpu();
        return 0;
      }
      std::printf("%s", probe->report.c_str());
      PrintCpu();
      return 0;
    };
  });
}

}  // namespace tpserve

#include <spdlog/spdlog.h>

#include "benchmarks/svg_chart.h"
#include "cli/commands.h"

namespace tpserve {

int WritePlotIfAsked(const std::string& command, const std::string& path,
                     const std::function<std::string()>& render_svg) {
  if (path.empty()) return 0;
  Status written = WriteChart(path, render_svg());
  if (!written.ok()) {
    spdlog::error("{}: --plot {}", command, written.message());
    return 1;
  }
  return 0;
}

}  // namespace tpserve

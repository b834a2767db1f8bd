#include <cstdlib>

#include "cli/commands.h"

namespace tpserve {

std::string DefaultAssetsDir() {
  if (const char* env = std::getenv("TPSERVE_ASSETS"); env != nullptr && *env != '\0') return env;
  return TPSERVE_DEFAULT_ASSETS_DIR;
}

}  // namespace tpserve

// Finds and loads the CUDA backend module at run time. The CPU build never includes CUDA
// headers; a machine without the module, the driver or a device falls back to the CPU backend.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tpserve {

struct CudaProbe {
  std::string module_path;  // the module that was loaded
  int device_count = 0;
  std::string report;       // one line per device
  bool has_decoder = false;  // the module can run ranks (exports tpserve_cuda_create_group)
};

// Where the module is looked for, in order: $TPSERVE_CUDA_MODULE when set (`env_module`); else
// beside the running binary (`executable`): its own folder, ./lib, ../lib (the build tree's layout:
// build/server/tpserve, build/lib/); else `built_at`, where this build wrote it. The first that
// exists is loaded, so a copied bundle finds its own module wherever it is unpacked.
std::vector<std::string> CudaModuleCandidates(const std::string& env_module, const std::string& executable,
                                              const std::string& built_at);

// Loads the first candidate that exists. An error says why CUDA is unavailable (module absent, no
// driver, no device), for the caller to log before using the CPU.
Result<CudaProbe> ProbeCudaBackend();

}  // namespace tpserve

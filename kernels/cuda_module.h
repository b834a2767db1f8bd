// Finds and loads the CUDA backend module at run time. The CPU build never includes CUDA
// headers; a machine without the module, the driver or a device falls back to the CPU backend.
#pragma once

#include <string>

#include "common/status.h"

namespace tpserve {

struct CudaProbe {
  std::string module_path;  // the module that was loaded
  int device_count = 0;
  std::string report;       // one line per device
  bool has_decoder = false;  // the module can run ranks (exports tpserve_cuda_create_group)
};

// $TPSERVE_CUDA_MODULE, else the module built next to this binary. An error says why CUDA is
// unavailable (module absent, no driver, no device), for the caller to log before using the CPU.
Result<CudaProbe> ProbeCudaBackend();

}  // namespace tpserve

#include "kernels/cuda_module.h"

#include <dlfcn.h>

#include <cstdlib>

namespace tpserve {

Result<CudaProbe> ProbeCudaBackend() {
  std::string path = TPSERVE_CUDA_MODULE_DEFAULT;
  if (const char* env = std::getenv("TPSERVE_CUDA_MODULE"); env != nullptr && *env) path = env;
  if (path.empty()) return Unimplemented("this build has no CUDA backend (nvcc was not found)");
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) return FailedPrecondition("cannot load " + path + ": " + dlerror());
  using ProbeFn = int (*)(char*, int);
  auto probe = reinterpret_cast<ProbeFn>(dlsym(module, "tpserve_cuda_probe"));
  if (probe == nullptr) return FailedPrecondition(path + " has no tpserve_cuda_probe");
  char report[4096] = {};
  const int count = probe(report, sizeof(report));
  if (count <= 0) {
    return Status(StatusCode::kUnavailable,
                  count == 0 ? std::string("no CUDA device") : std::string(report));
  }
  const bool has_decoder = dlsym(module, "tpserve_cuda_create_group") != nullptr;
  return CudaProbe{path, count, report, has_decoder};
}

}  // namespace tpserve

#include "kernels/cuda_module.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

namespace tpserve {

namespace {
constexpr char kModuleName[] = "libtpserve_cuda.so";
}  // namespace

std::vector<std::string> CudaModuleCandidates(const std::string& env_module, const std::string& executable,
                                              const std::string& built_at) {
  if (!env_module.empty()) return {env_module};
  std::vector<std::string> candidates;
  if (!executable.empty()) {
    const std::filesystem::path folder = std::filesystem::path(executable).parent_path();
    for (const std::filesystem::path& dir : {folder, folder / "lib", folder.parent_path() / "lib"}) {
      candidates.push_back((dir / kModuleName).lexically_normal().string());
    }
  }
  if (!built_at.empty()) candidates.push_back(built_at);
  return candidates;
}

Result<CudaProbe> ProbeCudaBackend() {
  const std::string built_at = TPSERVE_CUDA_MODULE_DEFAULT;
  if (built_at.empty()) return Unimplemented("this build has no CUDA backend (nvcc was not found)");
  const char* env = std::getenv("TPSERVE_CUDA_MODULE");
  std::error_code error;
  const std::filesystem::path executable = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::vector<std::string> candidates =
      CudaModuleCandidates(env != nullptr ? env : "", error ? "" : executable.string(), built_at);
  std::string path = candidates.back();  // named in the error when none exists
  for (const std::string& candidate : candidates) {
    if (std::filesystem::exists(candidate, error)) {
      path = candidate;
      break;
    }
  }
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

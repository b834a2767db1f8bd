// What the `gpu` tests of the CUDA backend share: skipping where no GPU is (and failing where one
// is but the module does not load), and bitwise comparison of logit rows that reports where they
// differ.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kernels/cuda_module.h"

namespace tpserve::testing {

// Whether the NVIDIA driver shows a GPU, whether or not the CUDA module can be loaded.
inline bool NvidiaGpuPresent() {
  std::error_code error;
  if (std::filesystem::exists("/dev/nvidia0", error)) return true;
  for ([[maybe_unused]] const auto& gpu : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", error)) {
    return true;
  }
  return false;
}

// Skipped where no GPU is; failed where one is but the module does not load (a broken bundle: a
// missing libnccl or libcublasLt must not pass as "no GPU").
#define SKIP_WITHOUT_GPU()                                                                          \
  do {                                                                                              \
    auto probe = ProbeCudaBackend();                                                                \
    if (!probe.ok()) {                                                                              \
      if (::tpserve::testing::NvidiaGpuPresent()) FAIL() << "a GPU is here but the CUDA backend is not usable: " << probe.status().message(); \
      GTEST_SKIP() << "no usable GPU: " << probe.status().message();                                \
    }                                                                                               \
  } while (0)

// Bitwise equality of two logit rows, failing with where and how they first differ instead of
// printing 100k floats. These tests rely on cuBLASLt keeping one K order for every N with a fixed
// algorithm and no split-K, which it does not document: a failure with small, scattered
// differences points there (bench_cuda_gemm shows the algorithm per shape) rather than at a kernel.
inline ::testing::AssertionResult BitwiseEqual(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " logits, expected " << want.size();
  }
  size_t first = got.size(), differing = 0;
  double largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    if (first == got.size()) first = i;
    ++differing;
    largest = std::max(largest, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  if (differing == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differing << " of " << got.size() << " logits differ; the first at " << first
                                       << ": " << got[first] << " vs " << want[first] << "; largest difference "
                                       << largest << " (small and scattered: suspect cuBLASLt's K order for this N before a kernel)";
}

}  // namespace tpserve::testing

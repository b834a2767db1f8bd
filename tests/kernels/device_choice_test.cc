#include "kernels/device_choice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda_module.h"

namespace tpserve {
namespace {

const Result<CudaProbe> kNoDriver = Status(StatusCode::kFailedPrecondition, "CUDA runtime: no driver");
const Result<CudaProbe> kGpuWithoutDecoder = CudaProbe{.module_path = "/x/libtpserve_cuda.so", .device_count = 2};
const Result<CudaProbe> kGpuWithDecoder = CudaProbe{.module_path = "/x/libtpserve_cuda.so", .device_count = 1,
                                                    .has_decoder = true};

TEST(DeviceChoice, AutoFallsBackToTheCpuSayingWhy) {
  auto no_driver = ChooseDevice(DeviceKind::kAuto, kNoDriver);
  ASSERT_TRUE(no_driver.ok());
  EXPECT_EQ(no_driver->kind, DeviceKind::kCpu);
  EXPECT_EQ(no_driver->note, "CUDA backend unavailable (CUDA runtime: no driver); using the CPU backend");
  auto no_decoder = ChooseDevice(DeviceKind::kAuto, kGpuWithoutDecoder);
  ASSERT_TRUE(no_decoder.ok());
  EXPECT_EQ(no_decoder->kind, DeviceKind::kCpu);
  EXPECT_NE(no_decoder->note.find("found 2 GPU(s) but has no CUDA decoder yet"), std::string::npos) << no_decoder->note;
  auto gpu = ChooseDevice(DeviceKind::kAuto, kGpuWithDecoder);
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(gpu->kind, DeviceKind::kCuda);
  // The log says which module runs it, so a bundle run by hand shows what it loaded.
  EXPECT_NE(gpu->note.find("using the CUDA backend (1 GPU(s), "), std::string::npos) << gpu->note;
  EXPECT_NE(gpu->note.find(kGpuWithDecoder->module_path), std::string::npos) << gpu->note;
}

TEST(DeviceChoice, CudaIsAnErrorWhenItCannotRunAndCpuNeverLooks) {
  for (const auto* probe : {&kNoDriver, &kGpuWithoutDecoder}) {
    auto choice = ChooseDevice(DeviceKind::kCuda, *probe);
    ASSERT_FALSE(choice.ok());
    EXPECT_EQ(choice.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(choice.status().message().rfind("--device cuda: ", 0), 0u) << choice.status().message();
  }
  EXPECT_EQ(ChooseDevice(DeviceKind::kCuda, kGpuWithDecoder)->kind, DeviceKind::kCuda);
  EXPECT_EQ(ChooseDevice(DeviceKind::kCpu, kGpuWithDecoder)->kind, DeviceKind::kCpu);
}

TEST(DeviceChoice, NamesRoundTrip) {
  for (DeviceKind kind : {DeviceKind::kAuto, DeviceKind::kCpu, DeviceKind::kCuda}) {
    EXPECT_EQ(ParseDeviceKind(DeviceKindName(kind)), kind);
  }
  EXPECT_FALSE(ParseDeviceKind("gpu").has_value());
}

TEST(CudaModule, TheEnvironmentWinsThenBesideTheBinaryThenWhereItWasBuilt) {
  EXPECT_EQ(CudaModuleCandidates("/opt/x.so", "/b/server/tpserve", "/build/lib/libtpserve_cuda.so"),
            std::vector<std::string>{"/opt/x.so"});
  EXPECT_EQ(CudaModuleCandidates("", "/bundle/tpserve", "/build/lib/libtpserve_cuda.so"),
            (std::vector<std::string>{"/bundle/libtpserve_cuda.so", "/bundle/lib/libtpserve_cuda.so",
                                      "/lib/libtpserve_cuda.so", "/build/lib/libtpserve_cuda.so"}));
  const auto build_tree = CudaModuleCandidates("", "/w/build/server/tpserve", "");
  ASSERT_EQ(build_tree.size(), 3u);
  EXPECT_EQ(build_tree[2], "/w/build/lib/libtpserve_cuda.so");
}

}  // namespace
}  // namespace tpserve

// The host side of the CUDA backend, on the CPU: where ranks go, how many KV blocks fit, and what
// the engine says when the CUDA backend cannot run.
#include "engine/cuda_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/cuda_module.h"
#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

TEST(AssignDevices, OneGpuPerRankInOrderOrAllOnOneWhenShared) {
  EXPECT_EQ(*AssignDevices(4, 8, false), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*AssignDevices(1, 1, false), (std::vector<int>{0}));
  EXPECT_EQ(*AssignDevices(4, 1, true), (std::vector<int>{0, 0, 0, 0}));
  auto too_many = AssignDevices(8, 4, false);
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.status().message(), HasSubstr("8 rank(s) in this process need 8 GPUs, 4 visible"));
  EXPECT_THAT(too_many.status().message(), HasSubstr("--share-gpu"));
  EXPECT_FALSE(AssignDevices(2, 0, true).ok());
  // Multi-process: a member's ranks from its first GPU (torchrun's LOCAL_RANK), one per rank.
  EXPECT_EQ(*AssignDevices(1, 8, false, 5), (std::vector<int>{5}));
  EXPECT_EQ(*AssignDevices(2, 4, false, 2), (std::vector<int>{2, 3}));
  auto past_the_end = AssignDevices(2, 4, false, 3);
  ASSERT_FALSE(past_the_end.ok());
  EXPECT_NE(past_the_end.status().message().find("from GPU 3 (LOCAL_RANK), 4 visible"), std::string::npos)
      << past_the_end.status().message();
  EXPECT_FALSE(AssignDevices(0, 2, false).ok());
}

TEST(KvBlocksForMemory, TheFullestGpuDecidesAndSharedGpusSplitTheirBudget) {
  constexpr size_t kGiB = size_t{1} << 30;
  const size_t block = 2 << 20;  // 2 MiB per rank
  // 80 GiB at 0.9 = 72 GiB allowed; 16 GiB in use leaves 56 GiB = 28672 blocks of 2 MiB.
  GpuMemory gpu0{.device = 0, .total_bytes = 80 * kGiB, .free_bytes = 64 * kGiB, .ranks = 1};
  EXPECT_EQ(*KvBlocksForMemory({gpu0}, 0.9, block), 28672);
  // A second GPU with more in use limits every rank (blocks are global ids).
  GpuMemory gpu1{.device = 1, .total_bytes = 80 * kGiB, .free_bytes = 54 * kGiB, .ranks = 1};
  EXPECT_EQ(*KvBlocksForMemory({gpu0, gpu1}, 0.9, block), 23552);  // (72 - 26) GiB / 2 MiB
  // Four ranks on one GPU: each block costs four times.
  gpu0.ranks = 4;
  EXPECT_EQ(*KvBlocksForMemory({gpu0}, 0.9, block), 7168);
}

TEST(KvBlocksForMemory, NoRoomOrABadUtilizationIsAClearError) {
  constexpr size_t kGiB = size_t{1} << 30;
  GpuMemory full{.device = 3, .total_bytes = 80 * kGiB, .free_bytes = 4 * kGiB, .ranks = 1};
  auto none = KvBlocksForMemory({full}, 0.9, 1 << 20);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(none.status().message(), HasSubstr("cuda:3"));
  EXPECT_THAT(none.status().message(), HasSubstr("--gpu-memory-utilization 0.90"));
  for (double bad : {0.0, -0.5, 1.5}) {
    auto result = KvBlocksForMemory({full}, bad, 1 << 20);
    ASSERT_FALSE(result.ok());
    EXPECT_THAT(result.status().message(), HasSubstr("--gpu-memory-utilization"));
  }
}

TEST(CreateCudaGroup, AMissingModuleOrOneWithoutADecoderIsRefusedByName) {
  CudaGroupRequest request;
  auto missing = CreateCudaGroup("/nonexistent/libtpserve_cuda.so", request);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/libtpserve_cuda.so"));
  // A real shared object that is not a tpserve module.
  auto foreign = CreateCudaGroup("libm.so.6", request);
  ASSERT_FALSE(foreign.ok());
  EXPECT_THAT(foreign.status().message(), HasSubstr("has no CUDA decoder"));
}

TEST(EngineOnCuda, WithoutAUsableGpuTheEngineSaysWhyInsteadOfFallingBack) {
  if (ProbeCudaBackend().ok()) GTEST_SKIP() << "a GPU is usable here; the gpu tests cover this path";
  EngineOptions options{.device = DeviceKind::kCuda, .tp = 1, .block_size = 4};
  auto engine = Engine::Create(testing::TinyModel(), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().message(), ProbeCudaBackend().status().message());
  options.device = DeviceKind::kAuto;
  auto unresolved = Engine::Create(testing::TinyModel(), options);
  ASSERT_FALSE(unresolved.ok());
  EXPECT_THAT(unresolved.status().message(), HasSubstr("resolved"));
}

TEST(EngineOnCuda, TheAllReduceAndGraphChoicesAreCheckedBeforeAnyGpuIsTouched) {
  EngineOptions options{.device = DeviceKind::kCpu, .tp = 2, .block_size = 4};
  options.allreduce = "oneshot";  // the CPU communicator already sums in rank order
  auto cpu = Engine::Create(testing::TinyModel(), options);
  ASSERT_FALSE(cpu.ok());
  EXPECT_THAT(cpu.status().message(), HasSubstr("--allreduce oneshot"));
  options.allreduce = "ring";
  auto unknown = Engine::Create(testing::TinyModel(), options);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("--allreduce 'ring'"));
  // auto on the CPU is harmless: the CPU backend serves.
  options.allreduce = "auto";
  EXPECT_TRUE(Engine::Create(testing::TinyModel(), options).ok());
  options.cuda_graphs = true;
  auto graphs = Engine::Create(testing::TinyModel(), options);
  ASSERT_FALSE(graphs.ok());
  EXPECT_THAT(graphs.status().message(), HasSubstr("--cuda-graphs on"));
  options.cuda_graphs = false;
  // A broken table is named before the GPU probe, so it is reported on any machine.
  testing::TempDir dir;
  testing::WriteFile(dir.file("table.json"), "[]");
  options.device = DeviceKind::kCuda;
  options.allreduce_table = dir.file("table.json");
  auto bad_table = Engine::Create(testing::TinyModel(), options);
  ASSERT_FALSE(bad_table.ok());
  EXPECT_THAT(bad_table.status().message(), HasSubstr("table.json"));
}

}  // namespace
}  // namespace tpserve

// What loadgen sends over gRPC for a load request: greedy unless the workload gives a temperature,
// then the workload's sampling and the request's own seed.
#include "clients/grpc_load_target.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

TEST(GrpcLoadRequest, GreedyUnlessATemperatureThenTheSamplingAndTheRequestsSeed) {
  LoadRequest load{.id = "loadgen-3", .prompt_ids = {4, 5}, .output_tokens = 7};
  v1::GenerateRequest greedy = ToGenerateRequest(load);
  EXPECT_EQ(greedy.request_id(), "loadgen-3");
  EXPECT_EQ(greedy.max_tokens(), 7);
  EXPECT_EQ(greedy.min_tokens(), 7);
  EXPECT_TRUE(greedy.ignore_eos());
  EXPECT_FALSE(greedy.has_sampling());  // the server's default: greedy

  load.sampling = {.temperature = 0.8f, .top_p = 0.9f, .top_k = 40};
  load.seed = 0xfedcba9876543210ull;
  const v1::GenerateRequest sampled = ToGenerateRequest(load);
  ASSERT_TRUE(sampled.has_sampling());
  EXPECT_EQ(sampled.sampling().temperature(), 0.8f);
  EXPECT_EQ(sampled.sampling().top_p(), 0.9f);
  EXPECT_EQ(sampled.sampling().top_k(), 40);
  ASSERT_TRUE(sampled.sampling().has_seed());
  EXPECT_EQ(sampled.sampling().seed(), 0xfedcba9876543210ull);
}

}  // namespace
}  // namespace tpserve

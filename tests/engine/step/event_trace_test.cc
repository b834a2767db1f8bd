#include <gtest/gtest.h>

#include "engine/step/step_trace.h"

namespace tpserve {
namespace {

// Event times as a GPU rank reads them: an embed, a projection and an AllReduce, one end a hair
// before its start (event resolution). Expected values worked out by hand.
TEST(EventTrace, EventTimesBecomeTheRankTraceTheCpuRecords) {
  const std::vector<EventSpan> spans = {
      {.op = OpKind::kEmbed, .layer = -1, .start_ms = 0.0f, .end_ms = 0.004f},
      {.op = OpKind::kOProj, .layer = 0, .start_ms = 0.004f, .end_ms = 0.0215f},
      {.op = OpKind::kAllReduceAttn, .layer = 0, .bytes = 16384, .start_ms = 0.0215f, .end_ms = 0.0345f},
      {.op = OpKind::kMlpNorm, .layer = 0, .start_ms = 0.0345f, .end_ms = 0.0344f},
  };
  const RankTrace trace = RankTraceFromEvents(3, spans);
  EXPECT_EQ(trace.rank, 3);
  ASSERT_EQ(trace.ops.size(), 4u);
  EXPECT_EQ(trace.ops[1].start_ns, 4000);
  EXPECT_EQ(trace.ops[1].duration_ns, 17500);
  EXPECT_EQ(trace.ops[1].layer, 0);
  EXPECT_EQ(trace.ops[2].bytes, 16384);
  EXPECT_EQ(trace.ops[2].duration_ns, 13000);
  EXPECT_EQ(trace.ops[3].duration_ns, 0);
  EXPECT_EQ(trace.total_ns, 34500);
  EXPECT_EQ(trace.CommNs(), 13000);
  EXPECT_EQ(trace.ComputeNs(), 4000 + 17500);
}

}  // namespace
}  // namespace tpserve

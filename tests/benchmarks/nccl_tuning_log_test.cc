#include "benchmarks/nccl_tuning_log.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

// Lines as NCCL prints them (formats from NCCL's src/enqueue.cc: 2.20+ by ncclAlgoToString's
// upper-case name, earlier by index; the symmetric kernels' from 2.28's symmetric_sched.cc), with
// the INIT lines NCCL_DEBUG=INFO also writes around them.
constexpr const char* kLog = R"(node1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
node1:4242:4242 [0] NCCL INFO comm 0x55d0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0
node1:4242:4250 [0] NCCL INFO AllReduce: 8 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}
node1:4242:4250 [0] NCCL INFO AllReduce: 8 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}
node1:4242:4250 [0] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..3}
node1:4242:4250 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo NVLS proto SIMPLE channel{Lo..Hi}={0..15}
node1:4242:4250 [0] NCCL INFO AllGather: 8388608 Bytes -> Algo Ring proto LL128 channel{Lo..Hi}={0..15}
node2:77:77 [0] NCCL INFO AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008
node2:77:77 [0] NCCL INFO AllReduce [Symmetric]: 4096 Bytes -> Kernel AllReduce_AGxLL_R nchannels 8 nthreads 512 nWorks 1
node2:77:77 [0] NCCL INFO AllReduce: 65536 Bytes -> Algo COLLNET_DIRECT proto SIMPLE channel{Lo..Hi}={0..1}
)";

TEST(NcclTuningLog, ReadsBothFormatsAndSkipsOtherLines) {
  const auto choices = ParseNcclTuningLog(kLog);
  ASSERT_EQ(choices.size(), 8u);
  EXPECT_EQ(choices[0].collective, "AllReduce");
  EXPECT_EQ(choices[0].bytes, 8u);
  EXPECT_EQ(choices[0].algorithm, "Tree");
  EXPECT_EQ(choices[0].protocol, "LL");
  EXPECT_FALSE(choices[0].symmetric);
  // Upper-case names come back in NCCL_ALGO / NCCL_PROTO's usual spelling.
  EXPECT_EQ(choices[2].algorithm, "Ring");
  EXPECT_EQ(choices[2].protocol, "Simple");
  EXPECT_EQ(choices[3].algorithm, "NVLS");
  EXPECT_EQ(choices[4].protocol, "LL128");
  // Indices (NCCL before 2.20): algorithm 1 is Ring, protocol 2 Simple.
  EXPECT_EQ(choices[5].collective, "AllGather");
  EXPECT_EQ(choices[5].bytes, 37756928u);
  EXPECT_EQ(choices[5].algorithm, "Ring");
  EXPECT_EQ(choices[5].protocol, "Simple");
  EXPECT_TRUE(choices[6].symmetric);
  EXPECT_EQ(choices[6].collective, "AllReduce");
  EXPECT_EQ(choices[6].bytes, 4096u);
  EXPECT_EQ(choices[7].algorithm, "CollNetDirect");  // ncclAlgoToString's COLLNET_DIRECT
}

TEST(NcclTuningLog, TheChoiceAtASizeIsTheMostFrequent) {
  const auto choices = ParseNcclTuningLog(kLog);
  const NcclTuningChoice* at8 = ChoiceAt(choices, "AllReduce", 8);
  ASSERT_NE(at8, nullptr);
  EXPECT_EQ(at8->algorithm, "Tree");  // twice, against Ring once
  EXPECT_EQ(ChoiceAt(choices, "AllReduce", 8388608)->algorithm, "NVLS");
  EXPECT_EQ(ChoiceAt(choices, "AllGather", 8388608)->protocol, "LL128");
  EXPECT_EQ(ChoiceAt(choices, "AllReduce", 16), nullptr);
  EXPECT_EQ(ChoiceAt(choices, "Broadcast", 8), nullptr);
}

TEST(NcclTuningLog, CountedChoicesKeepTheMajority) {
  const auto counted = CountChoices(ParseNcclTuningLog(kLog));
  ASSERT_EQ(counted.size(), 7u);  // the two identical Tree/LL lines at 8 B become one
  EXPECT_EQ(counted[0].calls, 2);
  EXPECT_EQ(counted[1].algorithm, "Ring");
  EXPECT_EQ(counted[1].calls, 1);
  EXPECT_EQ(ChoiceAt(counted, "AllReduce", 8)->algorithm, "Tree");
}

TEST(NcclTuningLog, CanonicalNames) {
  EXPECT_EQ(CanonicalNcclAlgorithm("ring"), "Ring");
  EXPECT_EQ(CanonicalNcclAlgorithm("nvlstree"), "NVLSTree");
  EXPECT_EQ(CanonicalNcclAlgorithm("4"), "NVLS");
  EXPECT_EQ(CanonicalNcclProtocol("ll128"), "LL128");
  EXPECT_EQ(CanonicalNcclProtocol("SIMPLE"), "Simple");
  EXPECT_EQ(CanonicalNcclProtocol("Bogus"), "Bogus");
}

}  // namespace
}  // namespace tpserve

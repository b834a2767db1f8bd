// The planner's terms on hand-computed cases: NCCL's collective model (ring, tree, LL/Simple on
// NVLink and PCIe), the decode-step model on a made-up model and machine, memory fit, the
// recommendations, and the profile files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "tests/planner/preset_profile.h"

namespace tpserve::planner {
namespace {

using ::testing::HasSubstr;

TEST(Profiles, EveryPresetLoadsAndCitesItsSources) {
  const std::vector<std::string> names = HardwareProfileNames();
  for (const char* required : {"a100-sxm", "h100-sxm", "h200-sxm", "l40s-pcie"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  }
  for (const std::string& name : names) {
    const HardwareProfile p = Preset(name);
    EXPECT_EQ(p.name, name);
    EXPECT_GT(p.memory_bandwidth_gb_s, 0) << name;
    for (const char* key : {"device", "fabric", "overheads"}) EXPECT_TRUE(p.sources.count(key)) << name << " " << key;
    // A profile survives a round trip through its JSON (what plan calibrate writes).
    auto again = ParseHardwareProfile(HardwareProfileJson(p), "round trip");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->intra_node.links, p.intra_node.links);
    EXPECT_EQ(again->memory_gb, p.memory_gb);
  }
  EXPECT_EQ(Preset("l40s-pcie").intra_node.hw, LinkHw::kPci);
  EXPECT_FALSE(Preset("l40s-pcie").inter_node.has_value());
}

TEST(Profiles, ABadFieldIsNamedWithItsPath) {
  nlohmann::json j = HardwareProfileJson(Preset("h100-sxm"));
  j["fabric"]["intra_node"]["links"] = "eighteen";
  auto bad = ParseHardwareProfile(j, "mine.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "mine.json: fabric.intra_node.links: must be a number");
  j = HardwareProfileJson(Preset("h100-sxm"));
  j["device"].erase("memory_bandwidth_gb_s");
  EXPECT_EQ(ParseHardwareProfile(j, "mine.json").status().message(), "mine.json: device.memory_bandwidth_gb_s: missing");
  EXPECT_THAT(LoadHardwareProfile("tpu-v9").status().message(), HasSubstr("h100-sxm"));
}

// 8 × H100 on NVSwitch, AllReduce of 64 KiB (batch 8 of a 4096-wide bf16 hidden state). By hand,
// NCCL 2.20.3's ring/LL: latency 6.6 + 2·7·0.6 = 15.0 µs; bus bandwidth min(llMaxBw 87.7,
// 18 links · 20.6 GB/s / 4) = 87.7, algorithm bandwidth 87.7 · 8 / 14 = 50.11 GB/s; time 15.0 +
// 65536 B / 50.11 GB/s = 16.31 µs. Tree/LL: 6.8 + 2·7·0.6 = 15.2 µs plus a slower transfer.
TEST(CollectiveModel, SmallAllReduceOnNvlinkIsRingLLAtNcclsLatency) {
  auto e = EstimateCollective(Preset("h100-sxm"), Collective::kAllReduce, 8, 65536);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->algorithm, "ring");
  EXPECT_EQ(e->protocol, "LL");
  EXPECT_NEAR(e->latency_us, 15.0, 1e-9);
  EXPECT_NEAR(e->bandwidth_gb_s, 87.7 * 8 / 14, 1e-9);
  EXPECT_NEAR(e->time_us, 15.0 + 65536 / (87.7 * 8 / 14 * 1e3), 1e-9);
  EXPECT_TRUE(e->latency_bound());
  // Large messages leave LL for LL128 or Simple: bandwidth-bound, and faster than LL would be.
  auto large = EstimateCollective(Preset("h100-sxm"), Collective::kAllReduce, 8, 256e6);
  ASSERT_TRUE(large.ok());
  EXPECT_NE(large->protocol, "LL");
  EXPECT_FALSE(large->latency_bound());
  EXPECT_LT(large->time_us, 15.0 + 256e6 / (87.7 * 8 / 14 * 1e3));
}

// 8 × L40S on PCIe Gen4 (24 GB/s over 2 channels of 12): no LL128 off NVLink. Ring/LL: latency
// 6.6 + 14 · 1.0 = 20.6 µs, bus bandwidth min(87.7, 24 / 4) = 6 GB/s, algorithm 6 · 8 / 14; ring/Simple
// 8.4 + 14 · 5.7 = 88.2 µs is slower at 64 KiB.
TEST(CollectiveModel, PcieHasHigherHopLatencyAndNoLL128) {
  auto e = EstimateCollective(Preset("l40s-pcie"), Collective::kAllReduce, 8, 65536);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->algorithm + "/" + e->protocol, "ring/LL");
  EXPECT_NEAR(e->time_us, 20.6 + 65536 / (6.0 * 8 / 14 * 1e3), 1e-9);
  for (double bytes : {1e3, 1e5, 1e7, 1e9}) {
    auto any = EstimateCollective(Preset("l40s-pcie"), Collective::kAllReduce, 4, bytes);
    ASSERT_TRUE(any.ok());
    EXPECT_NE(any->protocol, "LL128") << bytes;
  }
  // More ranks on the same ring: more hops, more latency.
  auto two = EstimateCollective(Preset("l40s-pcie"), Collective::kAllReduce, 2, 65536);
  ASSERT_TRUE(two.ok());
  EXPECT_LT(two->latency_us, e->latency_us);
}


// AWS g5.48xlarge: 8 × A10G on two sockets, 4 per socket (a10-pcie: socket_hop_us 2.0, the
// socket link 16 GB/s). TP=4 stays on one socket: NCCL's ring/LL by hand, 6.6 + 6 · 1.0 = 12.6 µs.
// TP=8 spans both: every one of the 14 steps waits 2.0 µs more, 6.6 + 14 · 3.0 = 48.6 µs, and the
// per-channel bandwidth drops from 24/2 to 16/2 GB/s (LL: min(87.7, 2 · 8 / 4) = 4 GB/s bus).
TEST(CollectiveModel, RanksSpanningTwoSocketsPayTheSocketHopOnEveryStep) {
  auto four = EstimateCollective(Preset("a10-pcie"), Collective::kAllReduce, 4, 8192);
  ASSERT_TRUE(four.ok()) << four.status().ToString();
  EXPECT_EQ(four->algorithm + "/" + four->protocol, "ring/LL");
  EXPECT_NEAR(four->latency_us, 12.6, 1e-9);
  auto eight = EstimateCollective(Preset("a10-pcie"), Collective::kAllReduce, 8, 8192);
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->algorithm + "/" + eight->protocol, "ring/LL");
  EXPECT_NEAR(eight->latency_us, 6.6 + 14 * 3.0, 1e-9);
  EXPECT_NEAR(eight->bandwidth_gb_s, 4.0 * 8 / 14, 1e-9);
  // The same 8 ranks on one socket's worth of GPUs would be NCCL's plain PCIe ring.
  HardwareProfile one_socket = Preset("a10-pcie");
  one_socket.intra_node.sockets = 1;
  auto flat = EstimateCollective(one_socket, Collective::kAllReduce, 8, 8192);
  ASSERT_TRUE(flat.ok());
  EXPECT_NEAR(flat->latency_us, 20.6, 1e-9);
  // A profile whose sockets do not split its GPUs evenly is refused by name.
  nlohmann::json j = HardwareProfileJson(Preset("a10-pcie"));
  j["fabric"]["intra_node"]["sockets"] = 3;
  EXPECT_THAT(ParseHardwareProfile(j, "g5.json").status().message(),
              HasSubstr("g5.json: fabric.intra_node.sockets: must divide fabric.gpus_per_node (8)"));
}
TEST(CollectiveModel, NodesBeyondTheProfileAndCpuWithoutAFitAreRefused) {
  auto pcie = EstimateCollective(Preset("l40s-pcie"), Collective::kAllReduce, 16, 65536);
  ASSERT_FALSE(pcie.ok());
  EXPECT_THAT(pcie.status().message(), HasSubstr("2 nodes of 8 GPUs"));
  auto multi = EstimateCollective(Preset("h100-sxm"), Collective::kAllReduce, 16, 65536);
  ASSERT_TRUE(multi.ok()) << multi.status().ToString();
  auto single = EstimateCollective(Preset("h100-sxm"), Collective::kAllReduce, 8, 65536);
  EXPECT_GT(multi->latency_us, single->latency_us);  // network hops

  HardwareProfile cpu = Preset("h100-sxm");
  cpu.device_kind = "cpu";
  cpu.intra_node.hw = LinkHw::kMemory;
  auto none = EstimateCollective(cpu, Collective::kAllReduce, 2, 4096);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("plan calibrate"));
  // A fit replaces the model: alpha + bytes / beta, from the range that holds the size (else the nearest).
  cpu.collective_fits = {{"all_reduce", 2, 0, 65536, 3.0, 5.0, "test"}, {"all_reduce", 2, 65536, 1e9, 20.0, 8.0, "test"}};
  auto fitted = EstimateCollective(cpu, Collective::kAllReduce, 2, 4096);
  ASSERT_TRUE(fitted.ok());
  EXPECT_EQ(fitted->algorithm, "fit");
  EXPECT_NEAR(fitted->time_us, 3.0 + 4096 / 5e3, 1e-12);
  EXPECT_NEAR(EstimateCollective(cpu, Collective::kAllReduce, 2, 4e9)->time_us, 20.0 + 4e9 / 8e3, 1e-6);
  EXPECT_FALSE(EstimateCollective(cpu, Collective::kAllReduce, 4, 4096).ok());  // no fit at 4 ranks
}

// A made-up model and machine small enough to work out by hand.
ModelConfig HandModel() {
  ModelConfig c;
  c.hidden_size = 1024;
  c.intermediate_size = 4096;
  c.num_layers = 10;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.vocab_size = 32000;
  c.tie_word_embeddings = true;
  return c;
}

HardwareProfile HandMachine() {
  HardwareProfile p = Preset("h100-sxm");
  p.memory_gb = 10;
  p.memory_bandwidth_gb_s = 100;  // 1e11 B/s
  p.bf16_tflops = 1000;           // FLOPs never bind at these batches
  p.kernel_launch_us = 0;
  p.step_host_us = 50;
  p.layer_us = 7;  // 10 layers: 0.07 ms
  p.collective_fits = {{"all_reduce", 2, 0, 1e12, 10.0, 1.0, "hand"}, {"all_gather", 2, 0, 1e12, 5.0, 10.0, "hand"}};
  return p;
}

TEST(DecodeModel, TermsMatchAHandComputation) {
  const ModelConfig c = HandModel();
  const EngineTraits engine{.kv_bytes = 2, .allreduce_bytes = 2, .logits_bytes = 4, .memory_utilization = 0.9};
  auto one = PredictDecodeStep(c, HandMachine(), engine, {.tp = 1, .batch = 4, .context = 1000, .weight_bytes = 2});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  // Per layer: q 1024·1024 + k, v 2·1024·256 + o 1024·1024 + gate/up/down 3·1024·4096 = 15204352 parameters.
  const double layer = 1024.0 * 1024 + 2 * 1024.0 * 256 + 1024.0 * 1024 + 3 * 1024.0 * 4096;
  EXPECT_NEAR(one->gemm_ms, 10 * layer * 2 / 1e11 * 1e3, 1e-9);
  // KV read per layer: 4 sequences · 1000 positions · (k + v) · 256 · 2 bytes.
  EXPECT_NEAR(one->attention_ms, 10 * 4 * 1000 * 2 * 256 * 2 / 1e11 * 1e3, 1e-9);
  EXPECT_NEAR(one->lm_head_ms, 32000.0 * 1024 * 2 / 1e11 * 1e3, 1e-9);
  EXPECT_EQ(one->allreduce_ms, 0);
  EXPECT_NEAR(one->host_ms, 0.05, 1e-12);
  EXPECT_NEAR(one->layer_overhead_ms, 10 * 7e-3, 1e-12);
  // Elementwise ops per token and layer: two residual adds with their norms (4 × 1024 each), RoPE
  // on q and k (read and write 1024 + 256), SiLU × up (read 2 × 4096, write 4096); bf16.
  EXPECT_NEAR(one->elementwise_ms, 10 * 4 * (8 * 1024 + 2 * (1024 + 256) + 3 * 4096) * 2 / 1e11 * 1e3, 1e-12);
  EXPECT_NEAR(one->step_ms,
              one->gemm_ms + one->attention_ms + one->elementwise_ms + one->lm_head_ms + 0.07 + 0.05, 1e-9);
  EXPECT_NEAR(one->tokens_per_s, 4 / (one->step_ms * 1e-3), 1e-6);
  EXPECT_FALSE(one->compute_bound_gemm);

  auto two = PredictDecodeStep(c, HandMachine(), engine, {.tp = 2, .batch = 4, .context = 1000, .weight_bytes = 2});
  ASSERT_TRUE(two.ok());
  // Half of every projection; 2 KV heads over 2 ranks: one each, 128 wide.
  EXPECT_NEAR(two->gemm_ms, 10 * (1024.0 * 512 + 2 * 1024.0 * 128 + 512.0 * 1024 + 3 * 1024.0 * 2048) * 2 / 1e11 * 1e3, 1e-9);
  // AllReduce: 4 · 1024 · 2 bytes through the fit, 2 per layer plus the embedding's.
  EXPECT_EQ(two->allreduce_message_bytes, 8192);
  EXPECT_NEAR(two->allreduce_ms, 21 * (10.0 + 8192 / 1e3) * 1e-3, 1e-9);
  // Logits: 4 rows of 32000 f32 gathered.
  EXPECT_NEAR(two->logits_ms, (5.0 + 4 * 32000 * 4 / 1e4) * 1e-3, 1e-9);
  EXPECT_NEAR(two->comm_share, (two->allreduce_ms + two->logits_ms) / two->step_ms, 1e-12);
  // At TP=2 the norms and residual adds stay whole on every rank; RoPE and SiLU halve.
  EXPECT_NEAR(two->elementwise_ms, 10 * 4 * (8 * 1024 + 2 * (512 + 128) + 3 * 2048) * 2 / 1e11 * 1e3, 1e-12);
}

TEST(DecodeModel, AnEagerEnginesStepTakesAtLeastItsHostLoop) {
  const ModelConfig c = HandModel();
  const EngineTraits engine{.kv_bytes = 2, .allreduce_bytes = 2, .logits_bytes = 4, .memory_utilization = 0.9};
  const DecodePoint point{.tp = 1, .batch = 1, .context = 100, .weight_bytes = 2};
  HardwareProfile p = HandMachine();
  auto graphs = PredictDecodeStep(c, p, engine, point);
  ASSERT_TRUE(graphs.ok());
  const double device_ms = graphs->step_ms - graphs->host_ms;  // no launch time on this machine
  EXPECT_EQ(graphs->launch_ms, 0);
  // A host loop shorter than the GPU's work hides behind it.
  p.layer_host_us = 0.5 * device_ms * 1e3 / 10;
  EXPECT_NEAR(PredictDecodeStep(c, p, engine, point)->step_ms, graphs->step_ms, 1e-12);
  // A longer one sets the step: 10 layers × 1 ms, plus the step's host time.
  p.layer_host_us = 1000;
  ASSERT_GT(10.0, device_ms);
  auto eager = PredictDecodeStep(c, p, engine, point);
  ASSERT_TRUE(eager.ok());
  EXPECT_NEAR(eager->step_ms, 10.0 + 0.05, 1e-9);
  EXPECT_NEAR(eager->launch_ms, 10.0 - device_ms, 1e-9);
}

TEST(DecodeModel, APrefillStepIsPricedByItsTokensAndItsSamplingRows) {
  const ModelConfig c = HandModel();
  const EngineTraits engine{.kv_bytes = 2, .allreduce_bytes = 2, .logits_bytes = 4, .memory_utilization = 0.9};
  HardwareProfile p = HandMachine();
  p.bf16_tflops = 1;  // 1e12 FLOP/s: a 512-token chunk is compute-bound
  // One 512-token prompt chunk from position 0 that samples at its end, at TP=2.
  const StepShape chunk{.tp = 2, .tokens = 512, .logit_rows = 1, .attention_positions = 512.0 * 513 / 2,
                        .weight_bytes = 2};
  auto t = PredictStepTime(c, p, engine, chunk);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const double layer = 1024.0 * 512 + 2 * 1024.0 * 128 + 512.0 * 1024 + 3 * 1024.0 * 2048;  // one rank's
  EXPECT_TRUE(t->compute_bound_gemm);
  EXPECT_NEAR(t->gemm_ms, 10 * 2 * 512 * layer / 1e12 * 1e3, 1e-9);
  // KV read per layer: every fed token reads its positions, (k + v) · 128 · 2 bytes each.
  EXPECT_NEAR(t->attention_ms, 10 * (512.0 * 513 / 2) * 2 * 128 * 2 / 1e11 * 1e3, 1e-9);
  // The LM head runs for the one sampling row only: streaming its half of the head binds.
  EXPECT_NEAR(t->lm_head_ms, 16000.0 * 1024 * 2 / 1e11 * 1e3, 1e-9);
  // Every AllReduce carries all 512 rows; the logits gather one row.
  EXPECT_EQ(t->allreduce_message_bytes, 512 * 1024 * 2);
  EXPECT_NEAR(t->allreduce_ms, 21 * (10.0 + 512 * 1024 * 2 / 1e3) * 1e-3, 1e-9);
  EXPECT_NEAR(t->logits_ms, (5.0 + 32000 * 4 / 1e4) * 1e-3, 1e-9);
  // A chunk that does not sample has no LM head and no gather.
  auto middle = PredictStepTime(c, p, engine, StepShape{.tp = 2, .tokens = 512, .logit_rows = 0,
                                                        .attention_positions = 512.0 * 513 / 2, .weight_bytes = 2});
  ASSERT_TRUE(middle.ok());
  EXPECT_EQ(middle->lm_head_ms, 0);
  EXPECT_EQ(middle->logits_ms, 0);
  EXPECT_FALSE(PredictStepTime(c, p, engine, StepShape{.tp = 1, .tokens = 2, .logit_rows = 3}).ok());
}

TEST(DecodeModel, TheGemmRateRisesWithTheRowsAndLongPromptsAreBoundByAttentionFlops) {
  const ModelConfig c = HandModel();
  const EngineTraits engine{.kv_bytes = 2, .allreduce_bytes = 2, .logits_bytes = 4, .memory_utilization = 0.9};
  HardwareProfile p = HandMachine();
  p.bf16_tflops = 1;
  p.compute_half_rows = 512;  // a 512-row GEMM runs at half the rate
  const double layer = 1024.0 * 512 + 2 * 1024.0 * 128 + 512.0 * 1024 + 3 * 1024.0 * 2048;  // one rank's (TP=2)
  const StepShape chunk{.tp = 2, .tokens = 512, .logit_rows = 1, .attention_positions = 512.0 * 513 / 2,
                        .weight_bytes = 2, .attention_read_positions = 4 * 512.0 * 513 / 2 / 128};
  auto t = PredictStepTime(c, p, engine, chunk);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NEAR(t->gemm_ms, 2 * (10 * 2 * 512 * layer / 1e12 * 1e3), 1e-9);
  // Attention: 4 FLOPs per (query, position) and query feature (4 heads × 128 on this rank), at
  // the GEMM rate (no separate attention rate), against the KV it reads: the FLOPs bind.
  const double attention_flops_ms = 10 * (512.0 * 513 / 2) * 4 * 512 / 1e12 * 1e3;
  EXPECT_NEAR(t->attention_ms, attention_flops_ms, 1e-9);
  EXPECT_GT(attention_flops_ms, 10 * chunk.attention_read_positions * 2 * 128 * 2 / 1e11 * 1e3);
  p.attention_compute_efficiency = 0.5;  // half the peak rate
  EXPECT_NEAR(PredictStepTime(c, p, engine, chunk)->attention_ms, 2 * attention_flops_ms, 1e-9);
  // One decode row runs at 1 / 513 of the rate: at this (extreme) half-rate row count its FLOPs bind.
  auto decode = PredictStepTime(c, p, engine, StepShape{.tp = 2, .tokens = 1, .logit_rows = 1,
                                                        .attention_positions = 100, .weight_bytes = 2});
  ASSERT_TRUE(decode.ok());
  EXPECT_NEAR(decode->gemm_ms, 10 * 2 * 1 * layer / (1e12 / 513) * 1e3, 1e-9);
}

// The names plan --kv-cache-dtype takes and bench-decode's rows write; auto and a row that names
// none keep the activations' element.
TEST(DecodeModel, KvCacheBytesPerNamedDtype) {
  EXPECT_EQ(KvCacheBytes("fp8", 2), 1);
  EXPECT_EQ(KvCacheBytes("bf16", 4), 2);
  EXPECT_EQ(KvCacheBytes("f32", 2), 4);
  EXPECT_EQ(KvCacheBytes("auto", 4), 4);
  EXPECT_EQ(KvCacheBytes("", 2), 2);
}

TEST(DecodeModel, MemoryFitAndTheLargestBatch) {
  const ModelConfig c = HandModel();
  const EngineTraits engine{.kv_bytes = 2, .allreduce_bytes = 2, .logits_bytes = 4, .memory_utilization = 0.9};
  auto p = PredictDecodeStep(c, HandMachine(), engine, {.tp = 1, .batch = 1, .context = 4096, .weight_bytes = 2});
  ASSERT_TRUE(p.ok());
  const double weights = (10 * 15204352.0 + 32000.0 * 1024) * 2;  // tied embedding: the LM head only
  EXPECT_NEAR(p->weights_gb, weights / 1e9, 1e-12);
  const double kv_per_sequence = 4096.0 * 10 * 2 * 256 * 2;
  EXPECT_NEAR(p->kv_gb, kv_per_sequence / 1e9, 1e-12);
  const double activations = 4.0 * (3 * 1024 + (1024 + 512) + 2 * 4096 + 32000);
  EXPECT_EQ(p->max_batch, static_cast<int>((9e9 - weights) / (kv_per_sequence + activations)));
  EXPECT_TRUE(p->fits);
  auto too_big = PredictDecodeStep(c, HandMachine(), engine, {.tp = 1, .batch = p->max_batch + 1, .context = 4096});
  ASSERT_TRUE(too_big.ok());
  EXPECT_FALSE(too_big->fits);
  EXPECT_FALSE(PredictDecodeStep(c, HandMachine(), engine, {.tp = 3, .batch = 1, .context = 1}).ok());  // 8 heads
}

TEST(Plan, RecommendsTheSmallestTpUnderTheSloTheBestPerDeviceAndReplicas) {
  PlanOptions options;
  options.tp = {1, 2};
  options.batch = {4};
  options.context = {1000};
  options.slo_tpot_ms = 3.0;
  options.engine = {.kv_bytes = 2, .allreduce_bytes = 2, .logits_bytes = 4, .memory_utilization = 0.9};
  auto report = RunPlan(HandModel(), "hand", HandMachine(), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->rows.size(), 2u);
  const DecodePrediction& tp1 = report->rows[0];
  const DecodePrediction& tp2 = report->rows[1];
  ASSERT_GT(tp1.step_ms, 3.0);  // TP=1 misses 3 ms; TP=2 halves the streaming and meets it
  ASSERT_LE(tp2.step_ms, 3.0);
  std::map<std::string, Recommendation> by_kind;
  for (const Recommendation& r : report->recommendations) by_kind[r.kind] = r;
  EXPECT_EQ(by_kind["smallest_tp_meeting_slo"].tp, 2);
  // Per device TP=1 wins (no AllReduce), and replicas are not suggested since TP=1 misses the SLO.
  EXPECT_EQ(by_kind["best_tokens_per_device"].tp, 1);
  EXPECT_FALSE(by_kind.count("replicas"));
  options.slo_tpot_ms.reset();
  auto no_slo = RunPlan(HandModel(), "hand", HandMachine(), options);
  ASSERT_TRUE(no_slo.ok());
  bool replicas = false;
  for (const Recommendation& r : no_slo->recommendations) {
    if (r.kind == "replicas") {
      replicas = true;
      EXPECT_EQ(r.tp, 1);
      EXPECT_EQ(r.replicas, 2);
      EXPECT_THAT(r.reason, HasSubstr("2 replicas of TP=1"));
    }
  }
  EXPECT_TRUE(replicas);
  // JSON: one row per point with its parts.
  const auto json = nlohmann::json::parse(PlanJson(*no_slo));
  ASSERT_EQ(json["rows"].size(), 2u);
  EXPECT_EQ(json["rows"][1]["tp"], 2);
  EXPECT_NEAR(json["rows"][1]["parts_ms"]["allreduce"].get<double>(), tp2.allreduce_ms, 1e-12);
}

TEST(Plan, ChartHasOnePanelPerBatchWithTpAlongXAtTheFirstContext) {
  PlanOptions options;
  options.tp = {1, 2};
  options.batch = {1, 4, 100000};
  options.context = {1000, 4000};
  options.engine = {
      .kv_bytes = 2, .allreduce_bytes = 2, .logits_bytes = 4, .memory_utilization = 0.9};
  auto report = RunPlan(HandModel(), "hand", HandMachine(), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const PanelChart chart = PlanChart(*report);
  EXPECT_THAT(chart.title, HasSubstr("hand on "));
  EXPECT_THAT(chart.title, HasSubstr("context 1000 (first of 1000, 4000)"));
  ASSERT_EQ(chart.panels.size(), 3u);
  EXPECT_EQ(chart.panels[1].title, "batch 4");
  EXPECT_EQ(chart.panels[1].categories, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(chart.panels[2].categories, (std::vector<std::string>{"1\nno fit", "2\nno fit"}));
  EXPECT_EQ(chart.panels[0].parts.size(), 9u);
  for (const DecodePrediction& row : report->rows) {
    if (row.point.batch != 4 || row.point.context != 1000) continue;
    const std::vector<double>& parts = chart.panels[1].values[row.point.tp - 1];
    EXPECT_EQ(parts,
              (std::vector<double>{row.gemm_ms, row.attention_ms, row.elementwise_ms, row.allreduce_ms,
                                   row.lm_head_ms, row.logits_ms, row.layer_overhead_ms, row.launch_ms, row.host_ms}));
  }
}

}  // namespace
}  // namespace tpserve::planner

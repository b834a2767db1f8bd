// plan calibrate's readers and fits: nccl-tests text in both of its layouts, bench-comm JSON, the
// α/β fit on synthetic data with known constants, and the decode efficiencies from a synthetic
// bench-decode report whose steps ran at a known fraction of the streaming floor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "planner/calibrate.h"
#include "planner/decode_model.h"

namespace tpserve::planner {
namespace {

using ::testing::HasSubstr;

// The layout all_reduce_perf prints (nccl-tests 2.13: root column, out-of-place and in-place halves).
constexpr char kClassic[] = R"(# nThread 1 nGpus 4 minBytes 1024 maxBytes 1048576 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41 on    node-a device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41 on    node-a device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  41 on    node-a device  2 [0x3a] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  41 on    node-a device  3 [0x5d] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    11.50    0.09    0.13      0    11.20    0.09    0.14      0
        4096          1024     float     sum      -1    11.80    0.35    0.52      0    11.70    0.35    0.52      0
       16384          4096     float     sum      -1    12.40    1.32    1.98      0    12.30    1.33    2.00      0
       65536         16384     float     sum      -1    14.90    4.40    6.60      0    14.80    4.43    6.64      0
      262144         65536     float     sum      -1    22.10   11.86   17.79      0    22.00   11.92   17.87      0
     1048576        262144     float     sum      -1    40.30   26.02   39.03      0    40.10   26.15   39.22      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 11.0
#
)";

// The newer layout (no root column, one half), from a 2-GPU PCIe box; #wrong may read N/A.
constexpr char kCompact[] = R"(# nccl-tests version 2.17.8
# Collective test starting: all_gather_perf
# Using devices
#  Rank  0 Group  0 Pid  11155 on gpuserver2 device  0 [0000:02:00] Tesla V100-PCIE-16GB
#  Rank  1 Group  0 Pid  11155 on gpuserver2 device  1 [0000:03:00] Tesla V100-PCIE-16GB
#
#       size         count    type   redop     time   algbw   busbw  #wrong
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)
           8             1   float    none    10.09    0.00    0.00     N/A
        1024           128   float    none    10.29    0.10    0.05       0
       65536          8192   float    none    29.63    2.21    1.11       0
)";

TEST(NcclTests, BothLayoutsGiveTheOutOfPlaceTimeOfEverySize) {
  auto classic = ParseNcclTestsOutput(kClassic, "h100.txt");
  ASSERT_TRUE(classic.ok()) << classic.status().ToString();
  EXPECT_EQ(classic->collective, Collective::kAllReduce);  // from the redop column
  EXPECT_EQ(classic->ranks, 4);
  ASSERT_EQ(classic->points.size(), 6u);
  EXPECT_EQ(classic->points[0].first, 1024);
  EXPECT_DOUBLE_EQ(classic->points[0].second, 11.50e-6);  // out-of-place, not in-place
  EXPECT_DOUBLE_EQ(classic->points[5].second, 40.30e-6);

  auto compact = ParseNcclTestsOutput(kCompact, "v100.txt");
  ASSERT_TRUE(compact.ok()) << compact.status().ToString();
  EXPECT_EQ(compact->collective, Collective::kAllGather);  // from the test's name
  EXPECT_EQ(compact->ranks, 2);
  ASSERT_EQ(compact->points.size(), 3u);
  EXPECT_DOUBLE_EQ(compact->points[2].second, 29.63e-6);
}

TEST(NcclTests, WrongResultsAndMissingHeadersAreErrorsThatSayWhere) {
  std::string corrupted = kClassic;
  corrupted.replace(corrupted.find("22.10   11.86   17.79      0"), 28, "22.10   11.86   17.79      3");
  auto wrong = ParseNcclTestsOutput(corrupted, "h100.txt");
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("h100.txt:16: size 262144 has #wrong 3"));
  EXPECT_FALSE(ParseNcclTestsOutput("no results here\n", "empty.txt").ok());
  EXPECT_THAT(ParseNcclTestsOutput("        1024  256  float  sum  -1  11.5  0.1  0.1  0\n", "x.txt").status().message(),
              HasSubstr("before the column header"));
}

// Samples made from known constants come back from the fit: α = 12 µs, algorithm bandwidth
// 40 GB/s below 64 KiB; α = 20 µs, 150 GB/s above 1 MiB.
TEST(FitCollective, RecoversKnownAlphaAndBetaPerSizeRange) {
  CommSamples s{Collective::kAllReduce, 8, {}, "synthetic"};
  for (double bytes = 1024; bytes < 65536; bytes *= 2) s.points.emplace_back(bytes, 12e-6 + bytes / 40e9);
  for (double bytes = 2 << 20; bytes <= (256 << 20); bytes *= 2) s.points.emplace_back(bytes, 20e-6 + bytes / 150e9);
  auto fits = FitCollective(s);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  ASSERT_EQ(fits->size(), 2u);  // the middle range has no samples
  EXPECT_NEAR((*fits)[0].alpha_us, 12, 0.12);
  EXPECT_NEAR((*fits)[0].beta_gb_s, 40, 0.4);
  EXPECT_EQ((*fits)[0].max_bytes, 32768);
  EXPECT_NEAR((*fits)[1].alpha_us, 20, 0.2);
  EXPECT_NEAR((*fits)[1].beta_gb_s, 150, 1.5);
  EXPECT_EQ((*fits)[1].ranks, 8);
}

// Found by fuzz_planner_inputs: a header whose redop column lies beyond a short row's fields read
// past the row (a heap overflow); such a row is now "not a result row".
TEST(NcclTests, ARowShorterThanTheRedopColumnIsAnError) {
  constexpr char kRedopLast[] = R"(#  Rank  0 Group  0 Pid  1 on a device  0 [0x18] GPU
#  Rank  1 Group  0 Pid  1 on a device  1 [0x19] GPU
#       size         count      type     time   algbw   busbw #wrong   redop
        1024           256     float    11.50    0.09    0.13      0
)";
  auto parsed = ParseNcclTestsOutput(kRedopLast, "short.txt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("short.txt:4: not a result row"));
}

TEST(BenchCommJson, ReadsTheSweepAndRefusesWrongResults) {
  nlohmann::json j = {{"collective", "all_reduce"}, {"backend", "local"}, {"ranks", 2},
                      {"rows", {{{"size", 1024}, {"out_of_place", {{"time_us", 1.5}, {"wrong", 0}}}},
                                {{"size", 4096}, {"out_of_place", {{"time_us", 2.0}, {"wrong", 0}}}}}}};
  auto s = ParseBenchCommJson(j, "comm.json");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->ranks, 2);
  EXPECT_DOUBLE_EQ(s->points[1].second, 2e-6);
  j["rows"][1]["out_of_place"]["wrong"] = 5;
  EXPECT_THAT(ParseBenchCommJson(j, "comm.json").status().message(), HasSubstr("size 4096 has wrong results"));
  EXPECT_FALSE(ParseBenchCommJson(nlohmann::json::object(), "comm.json").ok());
  // Found by fuzz_planner_inputs: an unknown collective's error did not name the file; a rank
  // count that is not an int was converted with undefined behaviour.
  j["rows"][1]["out_of_place"]["wrong"] = 0;
  j["collective"] = "allc_reduce";
  EXPECT_THAT(ParseBenchCommJson(j, "comm.json").status().message(), HasSubstr("comm.json: "));
  j["collective"] = "all_reduce";
  j["ranks"] = 1e30;
  EXPECT_THAT(ParseBenchCommJson(j, "comm.json").status().message(), HasSubstr("ranks"));
}

// The shape the synthetic bench-decode reports describe, and a CPU streaming its weights at 20 GB/s
// (FLOP times at 1 TFLOPS).
ModelConfig ReportShape() {
  ModelConfig c;
  c.hidden_size = 512;
  c.intermediate_size = 1024;
  c.num_layers = 4;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 8000;
  return c;
}

HardwareProfile FloorCpu() {
  HardwareProfile p;
  p.device_kind = "cpu";
  p.memory_bandwidth_gb_s = 20;
  p.bf16_tflops = 1;
  p.shared_memory_bandwidth = true;
  return p;
}

// bench-decode --json around `rows`, for ReportShape on a "Test CPU" reading 20 GB/s.
nlohmann::json Report(const nlohmann::json& rows) {
  return {{"device", "cpu"}, {"device_name", "Test CPU"}, {"read_gb_per_s", 20}, {"threads", 2},
          {"model",
           {{"hidden_size", 512}, {"intermediate_size", 1024}, {"num_hidden_layers", 4}, {"num_attention_heads", 8},
            {"num_key_value_heads", 2}, {"head_dim", 64}, {"vocab_size", 8000}}},
          {"rows", rows}};
}

// A bench-decode report whose batch-1 steps took exactly twice the streaming floor of its shape at
// the bandwidth it measured, and its elementwise ops twice theirs, with 0.3 ms of host time: memory
// efficiency 0.5, host 300 µs (the elementwise ops are the model's, not host time).
TEST(Calibrate, FitsTheMemoryEfficiencyAndHostTimeOfACpuProfile) {
  const EngineTraits traits{.kv_bytes = 4, .allreduce_bytes = 4};
  nlohmann::json rows = nlohmann::json::array();
  for (int context : {16, 256}) {
    const ComputeTerms t = ComputeTermsAt(ReportShape(), FloorCpu(), traits, {1, 1, context, 2});
    const double compute = 2 * (t.gemm_stream_ms + t.attention_ms + t.lm_head_stream_ms);
    rows.push_back({{"tp", 1}, {"batch", 1}, {"context", context}, {"compute_ms", compute},
                    {"step_ms", compute + 2 * t.elementwise_ms + 0.3}, {"host_ms", 0.3}});
  }
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "tpserve_calibrate_test.json";
  std::ofstream(path) << Report(rows).dump();
  auto calibration = Calibrate({.bench_decode = {path.string()}, .date = "2026-12-01"});
  std::filesystem::remove(path);
  ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
  const HardwareProfile& p = calibration->profile;
  EXPECT_EQ(p.device_kind, "cpu");
  EXPECT_THAT(p.description, HasSubstr("Test CPU"));
  EXPECT_THAT(p.description, HasSubstr("2026-12-01"));
  EXPECT_NEAR(p.memory_efficiency, 0.5, 1e-9);
  EXPECT_NEAR(p.step_host_us, 300, 1e-9);
  EXPECT_TRUE(p.shared_memory_bandwidth);
  // The written profile reads back as a profile.
  EXPECT_TRUE(ParseHardwareProfile(HardwareProfileJson(p), "written").ok());
  EXPECT_FALSE(Calibrate({}).ok());  // nothing to calibrate from
}

// bench-decode steps at batch 1, 2 and 8 whose GEMMs took, at half the streaming floor's rate and
// 0.05 TFLOPS, the larger of streaming and math (`overlapped`) or their sum: calibration tells
// which, and recovers the rate.
nlohmann::json BatchedReport(bool overlapped) {
  const EngineTraits traits{.kv_bytes = 4, .allreduce_bytes = 4};
  nlohmann::json rows = nlohmann::json::array();
  for (int batch : {1, 2, 8}) {
    const ComputeTerms t = ComputeTermsAt(ReportShape(), FloorCpu(), traits, {1, batch, 64, 2});
    // The layers' GEMMs and the LM head, each timed as its own op.
    auto gemm_ms = [&](double stream_ms, double flops_ms) {
      const double streaming = 2 * stream_ms, math = flops_ms / 0.05;
      return batch == 1 ? streaming : overlapped ? std::max(streaming, math) : streaming + math;
    };
    const double layers = gemm_ms(t.gemm_stream_ms, t.gemm_flops_ms);
    const double head = gemm_ms(t.lm_head_stream_ms, t.lm_head_flops_ms);
    const double attention = 2 * t.attention_ms;
    rows.push_back({{"tp", 1}, {"batch", batch}, {"context", 64}, {"compute_ms", layers + head + attention},
                    {"step_ms", layers + head + attention + 0.3},
                    {"op_ms", {{"qkv_proj", layers}, {"lm_head", head}, {"attention", attention}}}});
  }
  return Report(rows);
}

TEST(Calibrate, TellsWhetherTheGemmsOverlapMathWithStreaming) {
  for (bool overlapped : {true, false}) {
    const std::filesystem::path path = std::filesystem::temp_directory_path() / "tpserve_calibrate_overlap.json";
    std::ofstream(path) << BatchedReport(overlapped).dump();
    auto calibration = Calibrate({.bench_decode = {path.string()}, .date = "2026-12-01"});
    std::filesystem::remove(path);
    ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
    EXPECT_EQ(calibration->profile.compute_overlaps_memory, overlapped);
    EXPECT_NEAR(calibration->profile.memory_efficiency, 0.5, 1e-9);
    EXPECT_NEAR(calibration->profile.bf16_tflops, 0.05, 1e-9) << (overlapped ? "overlapped" : "sum");
  }
}

// Decode steps at batch 1, 2 and 8 and prefill steps of 32, 128 and 512 tokens on a machine whose
// GEMMs overlap math with streaming (at half the floor's bandwidth) and whose GEMM rate rises with
// the rows as 0.2 TFLOPS × M / (M + 6); attention reads the KV cache at a quarter of the floor's
// bandwidth. The sizes are counted here by hand for ReportShape at TP=1: per layer q/k/v/o and
// gate/up/down, 512·512 + 2·512·128 + 512·512 + 3·512·1024 = 2,228,224 parameters; the LM head
// 8000 × 512; K and V of one position, 2 × 128 f32 per layer.
TEST(Calibrate, FitsTheGemmRateRisingWithTheRowsFromDecodeAndPrefillSteps) {
  const double layer_params = 4 * 2228224.0, head_params = 8000.0 * 512;
  auto rate_tflops = [](double rows) { return 0.2 * rows / (rows + 6); };
  // One GEMM of `params` weights at `rows` rows: streamed at 20 GB/s × 0.5, or its math.
  auto one_gemm_ms = [&](double params, double rows) {
    return std::max(params * 2 / 10e9, 2 * rows * params / (rate_tflops(rows) * 1e12)) * 1e3;
  };
  auto gemm_ms = [&](double rows, double head_rows) {
    return one_gemm_ms(layer_params, rows) + one_gemm_ms(head_params, head_rows);
  };
  auto attention_ms = [](double positions) { return 4 * positions * 2 * 128 * 4 / 5e9 * 1e3; };  // 20 GB/s × 0.25
  // Norms and residual adds (8 × 512), RoPE on q and k (2 × (512 + 128)), SiLU (3 × 1024) per token
  // and layer, f32, at 20 GB/s × 0.5.
  auto elementwise_ms = [](double tokens) {
    return 4 * tokens * (8 * 512 + 2 * (512 + 128) + 3 * 1024) * 4 / 10e9 * 1e3;
  };
  nlohmann::json report = Report(nlohmann::json::array());
  for (int batch : {1, 2, 8}) {
    const double gemm = gemm_ms(batch, batch), attention = attention_ms(batch * 64.0);
    report["rows"].push_back({{"tp", 1}, {"batch", batch}, {"context", 64}, {"compute_ms", gemm + attention},
                              {"step_ms", gemm + attention + elementwise_ms(batch) + 0.3},
                              {"op_ms",
                               {{"qkv_proj", one_gemm_ms(layer_params, batch)},
                                {"lm_head", one_gemm_ms(head_params, batch)}, {"attention", attention}}}});
  }
  for (int tokens : {32, 128, 512}) {
    const double gemm = gemm_ms(tokens, 1), attention = attention_ms(tokens * (tokens + 1) / 2.0);
    report["prefill_rows"].push_back({{"tp", 1}, {"tokens", tokens}, {"compute_ms", gemm + attention},
                                      {"step_ms", gemm + attention + 5},
                                      {"op_ms",
                                       {{"qkv_proj", one_gemm_ms(layer_params, tokens)},
                                        {"lm_head", one_gemm_ms(head_params, 1)}, {"attention", attention}}}});
  }
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "tpserve_calibrate_prefill.json";
  std::ofstream(path) << report.dump();
  auto calibration = Calibrate({.bench_decode = {path.string()}, .date = "2026-12-03"});
  std::filesystem::remove(path);
  ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
  const HardwareProfile& p = calibration->profile;
  EXPECT_TRUE(p.compute_overlaps_memory);
  EXPECT_NEAR(p.memory_efficiency, 0.5, 1e-9);
  EXPECT_NEAR(p.bf16_tflops, 0.2, 1e-6);
  EXPECT_NEAR(p.compute_half_rows, 6, 1e-4);
  EXPECT_NEAR(p.attention_efficiency, 0.25, 1e-9);
  EXPECT_NEAR(p.step_host_us, 300, 1e-6);  // decode steps only: a prefill step's norms grow with its tokens
  // The fitted profile prices a prefill step it never saw (256 tokens) as the machine takes it.
  const EngineTraits traits{.kv_bytes = 4, .allreduce_bytes = 4};
  auto step = PredictStepTime(ReportShape(), p, traits,
                              {.tp = 1, .tokens = 256, .logit_rows = 1, .attention_positions = 256 * 257 / 2.0});
  ASSERT_TRUE(step.ok());
  EXPECT_NEAR(step->gemm_ms + step->lm_head_ms, gemm_ms(256, 1), 1e-6 * gemm_ms(256, 1));
  EXPECT_NEAR(step->attention_ms, attention_ms(256 * 257 / 2.0), 1e-9);
  // The same machine with a bf16 KV cache (bench-decode --kv-cache-dtype bf16): attention reads
  // half the bytes at the same quarter of the bandwidth, so its steps' attention takes half the
  // time; the rows say so, and the fit finds the same efficiency (read as f32, the rate would seem
  // twice it).
  for (const bool tagged : {true, false}) {
    nlohmann::json bf16 = report;
    for (const char* rows : {"rows", "prefill_rows"}) {
      for (nlohmann::json& row : bf16[rows]) {
        const double half = row["op_ms"]["attention"].get<double>() / 2;
        row["op_ms"]["attention"] = half;
        row["compute_ms"] = row["compute_ms"].get<double>() - half;
        row["step_ms"] = row["step_ms"].get<double>() - half;
        if (tagged) row["kv_cache_dtype"] = "bf16";
      }
    }
    std::ofstream(path) << bf16.dump();
    calibration = Calibrate({.bench_decode = {path.string()}, .date = "2026-12-06"});
    std::filesystem::remove(path);
    ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
    EXPECT_NEAR(calibration->profile.attention_efficiency, tagged ? 0.25 : 0.5, 1e-9)
        << (tagged ? "bf16" : "untagged");
    EXPECT_NEAR(calibration->profile.memory_efficiency, 0.5, 1e-9);
  }
  // One row count: one rate, no rise.
  report["prefill_rows"] = nlohmann::json::array({report["prefill_rows"][2]});
  report["rows"] = nlohmann::json::array({report["rows"][0]});
  std::ofstream(path) << report.dump();
  calibration = Calibrate({.bench_decode = {path.string()}, .date = "2026-12-03"});
  std::filesystem::remove(path);
  ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
  EXPECT_EQ(calibration->profile.compute_half_rows, 0);
  EXPECT_NEAR(calibration->profile.bf16_tflops, 2 * 512 * layer_params / (one_gemm_ms(layer_params, 512) * 1e9), 1e-9);
}

}  // namespace
}  // namespace tpserve::planner

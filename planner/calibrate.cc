#include "planner/calibrate.h"

#include "common/bounded_json.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/json_int.h"
#include "common/median.h"
#include "planner/decode_model.h"
#include "planner/engine_steps.h"
#include "planner/serving_simulation.h"

namespace tpserve::planner {
namespace {

using nlohmann::json;

// The machine's memory in GB (1e9), for a CPU profile made on the machine it describes.
double MachineMemoryGb() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024 / 1e9;
    meminfo.ignore(1 << 10, '\n');
  }
  return 0;
}

// The shape bench-decode --json records.
Result<ModelConfig> ShapeFromBenchDecode(const json& model, const std::string& source) {
  if (!model.is_object()) return InvalidArgument(source + ": no \"model\" shape (bench-decode from before the planner?)");
  ModelConfig c;
  try {
    c.hidden_size = JsonInt<int>(model.at("hidden_size"), "model.hidden_size");
    c.intermediate_size = JsonInt<int>(model.at("intermediate_size"), "model.intermediate_size");
    c.num_layers = JsonInt<int>(model.at("num_hidden_layers"), "model.num_hidden_layers");
    c.num_heads = JsonInt<int>(model.at("num_attention_heads"), "model.num_attention_heads");
    c.num_kv_heads = JsonInt<int>(model.at("num_key_value_heads"), "model.num_key_value_heads");
    c.head_dim = JsonInt<int>(model.at("head_dim"), "model.head_dim");
    c.vocab_size = JsonInt<int>(model.at("vocab_size"), "model.vocab_size");
    c.tie_word_embeddings = model.value("tie_word_embeddings", false);
  } catch (const std::exception& e) {  // nlohmann's, and JsonInt's out_of_range
    return InvalidArgument(source + ": model: " + e.what());
  }
  return c;
}

// A CPU profile for tpserve's CPU backend on this machine, before its numbers are fitted.
HardwareProfile CpuProfile(const json& decode, const std::string& date) {
  HardwareProfile p;
  p.name = "cpu";
  p.device_kind = "cpu";
  const std::string cpu = decode.value("device_name", std::string("unknown CPU"));
  const int threads = decode.value("threads", 1);
  p.description = cpu + ", " + std::to_string(threads) + " threads, tpserve CPU backend; calibrated " + date;
  p.memory_gb = MachineMemoryGb();
  p.memory_bandwidth_gb_s = decode.value("read_gb_per_s", 1.0);
  p.bf16_tflops = 1.0;  // fitted below when a sample is compute-bound
  p.shared_memory_bandwidth = true;
  p.kernel_launch_us = 0;
  p.kernels_per_layer = 0;
  p.gpus_per_node = std::max(1u, std::thread::hardware_concurrency());
  p.intra_node = {LinkHw::kMemory, 1, p.memory_bandwidth_gb_s, 1, false};
  p.sources["device"] = "bench-decode --json on " + cpu + " (" + date + "): DRAM read bandwidth measured in that run";
  p.sources["fabric"] = "ranks are threads sharing one memory; collectives only from bench-comm fits";
  p.sources["overheads"] = "host time per step: median of bench-decode's host column";
  return p;
}

// The GEMM rate against the row count: rate(M) = max_tflops × M / (M + half_rows)
// (HardwareProfile::compute_half_rows), fitted as a line through 1/rate against 1/M:
// 1/rate = 1/max + (half/max) / M. Fewer than two row counts, or a line that does not describe a
// rate rising with rows, give one rate (the median) at every row count.
struct RateCurve {
  double max_tflops = 0, half_rows = 0;
  double At(double rows) const { return max_tflops * rows / (rows + half_rows); }
};

RateCurve FitRateCurve(const std::vector<std::pair<double, double>>& rows_and_tflops) {
  std::vector<double> rates, xs;
  for (const auto& [rows, tflops] : rows_and_tflops) {
    rates.push_back(tflops);
    xs.push_back(1 / rows);
  }
  RateCurve flat{rates.empty() ? 0 : Median(rates), 0};
  std::sort(xs.begin(), xs.end());
  if (std::unique(xs.begin(), xs.end()) - xs.begin() < 2) return flat;
  double mx = 0, my = 0;
  for (const auto& [rows, tflops] : rows_and_tflops) {
    mx += 1 / rows;
    my += 1 / tflops;
  }
  const double n = static_cast<double>(rows_and_tflops.size());
  mx /= n;
  my /= n;
  double sxy = 0, sxx = 0;
  for (const auto& [rows, tflops] : rows_and_tflops) {
    sxy += (1 / rows - mx) * (1 / tflops - my);
    sxx += (1 / rows - mx) * (1 / rows - mx);
  }
  const double slope = sxy / sxx, intercept = my - slope * mx;
  if (!(intercept > 0) || slope < 0) return flat;
  return {1 / intercept, slope / intercept};
}

// Decode and prefill: memory efficiency from batch-1 decode steps, the compute rate and its rise
// with the row count from batched decode steps and prefill steps, the KV-read rate of attention,
// and the per-step time outside the modelled ops (host, norms, RoPE, ...; decode steps). Each
// measured step is compared with the model's terms at efficiency 1: by op where bench-decode
// recorded per-op medians (GEMMs and LM head, attention), else its whole compute time.
Status FitDecode(const std::vector<json>& decodes, const CalibrateInputs& in, Calibration* out) {
  HardwareProfile& p = out->profile;
  struct Sample {
    int rows;             // tokens through the GEMMs
    bool decode;          // a decode step (else a prefill step)
    ComputeTerms terms;   // at efficiency 1 (and unbounded FLOPs on a CPU)
    double gemm_ms;       // measured: projections + LM head (or the whole compute time)
    double layer_gemm_ms; // measured: the layers' projections alone (< 0: not recorded)
    double attention_ms;  // measured attention op (< 0: not recorded)
    double other_ms;      // measured step time outside the modelled ops
  };
  std::vector<Sample> samples;
  HardwareProfile peak = p;
  peak.memory_efficiency = peak.compute_efficiency = peak.attention_efficiency = 1;
  peak.compute_half_rows = peak.attention_compute_efficiency = 0;
  if (p.device_kind == "cpu") peak.bf16_tflops = 1e6;  // unknown yet: streaming only
  // A row's measured parts: the GEMM ops, attention, and what is neither they nor collectives.
  auto measured = [](const json& row, Sample* s) {
    const double compute = row.value("compute_ms", 0.0), step = row.value("step_ms", 0.0);
    s->gemm_ms = compute;
    s->layer_gemm_ms = s->attention_ms = -1;
    s->other_ms = step - compute;
    const json ops = row.value("op_ms", json::object());
    if (ops.empty()) return;
    s->layer_gemm_ms = 0;
    for (const char* op : {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}) s->layer_gemm_ms += ops.value(op, 0.0);
    s->gemm_ms = s->layer_gemm_ms + ops.value("lm_head", 0.0);
    s->attention_ms = ops.value("attention", 0.0);
    double collectives = 0;
    for (const auto& [name, ms] : ops.items()) {
      if (name.rfind("allreduce", 0) == 0 || name.rfind("allgather", 0) == 0) collectives += ms.get<double>();
    }
    s->other_ms = step - s->gemm_ms - s->attention_ms - collectives;
  };
  for (size_t file = 0; file < decodes.size(); ++file) {
    const json& d = decodes[file];
    ASSIGN_OR_RETURN(ModelConfig shape, ShapeFromBenchDecode(d.value("model", json()), in.bench_decode[file]));
    const int activation_bytes = d.value("device", std::string("cpu")) == "cpu" ? 4 : 2;
    // A row's KV cache holds its kv_cache_dtype (bench-decode --kv-cache-dtype; rows written before
    // it existed: the activations' type).
    auto traits_of = [&](const json& row) {
      const int kv_bytes =
          KvCacheBytes(row.value("kv_cache_dtype", std::string()), activation_bytes);
      return EngineTraits{.kv_bytes = kv_bytes, .allreduce_bytes = activation_bytes};
    };
    if (p.device_kind == "cpu") p.memory_bandwidth_gb_s = d.value("read_gb_per_s", p.memory_bandwidth_gb_s);
    peak.memory_bandwidth_gb_s = p.memory_bandwidth_gb_s;
    for (const json& row : d.value("rows", json::array())) {
      const DecodePoint point{row.value("tp", 1), row.value("batch", 1), row.value("context", 1), 2};
      if (row.value("compute_ms", 0.0) <= 0) continue;
      Sample s{point.batch, true, ComputeTermsAt(shape, peak, traits_of(row), point), 0, 0, 0, 0};
      measured(row, &s);
      samples.push_back(s);
    }
    for (const json& row : d.value("prefill_rows", json::array())) {
      const int tokens = row.value("tokens", 0);
      if (row.value("compute_ms", 0.0) <= 0 || tokens < 1) continue;
      const StepShape step = PromptStepShape(tokens, row.value("tp", 1), 2, peak.attention_query_tile);
      Sample s{tokens, false, ComputeTermsFor(shape, peak, traits_of(row), step), 0, 0, 0, 0};
      measured(row, &s);
      samples.push_back(s);
    }
  }
  auto note = [&](const char* format, auto... args) {
    char line[240];
    std::snprintf(line, sizeof(line), format, args...);
    out->notes.push_back(line);
  };
  std::vector<double> memory, attention, attention_compute, other;
  int prefill_steps = 0;
  for (const Sample& s : samples) {
    prefill_steps += s.decode ? 0 : 1;
    const double streaming = s.terms.gemm_stream_ms + s.terms.lm_head_stream_ms;
    if (s.attention_ms > 0) {
      // Whichever bound the peak rates say binds: KV reads, or FLOPs (a GPU's long prompts).
      if (s.terms.attention_flops_ms > s.terms.attention_ms) {
        attention_compute.push_back(s.terms.attention_flops_ms / s.attention_ms);
      } else {
        attention.push_back(s.terms.attention_ms / s.attention_ms);
      }
      if (s.decode && s.rows == 1) memory.push_back(streaming / s.gemm_ms);
    } else if (s.decode && s.rows == 1) {
      memory.push_back((streaming + s.terms.attention_ms) / s.gemm_ms);
    }
  }
  if (!memory.empty()) {
    p.memory_efficiency = std::clamp(Median(memory), 1e-3, 1.5);
    note("memory efficiency %.3f of %.1f GB/s (median of %zu batch-1 steps)", p.memory_efficiency,
         p.memory_bandwidth_gb_s, memory.size());
  }
  // The step outside the timed ops, less the elementwise ops the model prices (at the memory
  // efficiency just fitted).
  for (const Sample& s : samples) {
    if (s.decode) other.push_back(std::max(0.0, s.other_ms - s.terms.elementwise_ms / p.memory_efficiency));
  }
  if (!attention.empty()) {
    p.attention_efficiency = std::clamp(Median(attention), 1e-4, 1.5);
    note("attention reads the KV cache at %.3f of %.1f GB/s (median of %zu steps)", p.attention_efficiency,
         p.memory_bandwidth_gb_s, attention.size());
  }
  if (!attention_compute.empty()) {
    p.attention_compute_efficiency = std::clamp(Median(attention_compute), 1e-3, 1.5);
    note("attention computes at %.3f of %.1f TFLOPS (median of %zu FLOP-bound steps)",
         p.attention_compute_efficiency, p.bf16_tflops, attention_compute.size());
  }
  // The machine's rate over all ranks: FLOPs over the time they took: the whole GEMM time where
  // math overlaps streaming, what streaming leaves of it where it does not. The layers'
  // projections where they were timed apart from the LM head (whose rows are the sampling rows
  // alone in a prefill step), else every GEMM together.
  struct Batched {
    int rows;
    double flop_seconds_at_1tflops, streaming_ms, gemm_ms;
  };
  std::vector<Batched> batched;
  std::vector<int> row_counts;
  for (const Sample& s : samples) {
    if (s.rows == 1) continue;
    const bool layers_alone = s.layer_gemm_ms > 0;
    const double flops_ms = s.terms.gemm_flops_ms + (layers_alone ? 0 : s.terms.lm_head_flops_ms);
    const double stream_ms = s.terms.gemm_stream_ms + (layers_alone ? 0 : s.terms.lm_head_stream_ms);
    const double gemm = layers_alone        ? s.layer_gemm_ms
                        : s.attention_ms >= 0 ? s.gemm_ms
                                              : s.gemm_ms - s.terms.attention_ms / p.attention_efficiency;
    batched.push_back({s.rows, flops_ms * peak.bf16_tflops / 1e3, stream_ms / p.memory_efficiency, gemm});
    row_counts.push_back(s.rows);
  }
  auto rates = [&](bool overlapped) {
    std::vector<std::pair<double, double>> found;  // (rows, TFLOPS)
    for (const Batched& b : batched) {
      // Overlapped, a step no longer than its streaming hid its math: it bounds the rate only.
      if (overlapped && b.gemm_ms < 1.05 * b.streaming_ms) continue;
      const double math_ms = overlapped ? b.gemm_ms : b.gemm_ms - b.streaming_ms;
      if (math_ms > 0.02 * b.gemm_ms) found.emplace_back(b.rows, b.flop_seconds_at_1tflops / (math_ms * 1e-3));
    }
    return found;
  };
  // Two or more row counts tell whether this machine's GEMMs overlap math with streaming (time =
  // the larger) or do one after the other (the sum): the way that predicts them better wins.
  std::sort(row_counts.begin(), row_counts.end());
  if (std::unique(row_counts.begin(), row_counts.end()) - row_counts.begin() >= 2) {
    auto error = [&](bool overlapped) {
      const std::vector<std::pair<double, double>> r = rates(overlapped);
      if (r.empty()) return 1e300;
      const RateCurve curve = FitRateCurve(r);
      double squares = 0;
      for (const Batched& b : batched) {
        const double math_ms = b.flop_seconds_at_1tflops / curve.At(b.rows) * 1e3;
        const double predicted = overlapped ? std::max(b.streaming_ms, math_ms) : b.streaming_ms + math_ms;
        squares += std::pow(predicted / b.gemm_ms - 1, 2);
      }
      return squares;
    };
    const double overlapped_error = error(true), sum_error = error(false);
    p.compute_overlaps_memory = overlapped_error < sum_error;
    note("GEMMs %s (rms error %.1f%% against %.1f%% the other way, %zu steps of 2 or more rows)",
         p.compute_overlaps_memory ? "overlap math with weight streaming" : "stream weights, then do the math",
         100 * std::sqrt(std::min(overlapped_error, sum_error) / batched.size()),
         100 * std::sqrt(std::max(overlapped_error, sum_error) / batched.size()), batched.size());
  }
  const std::vector<std::pair<double, double>> tflops = rates(p.compute_overlaps_memory);
  if (!tflops.empty()) {
    const RateCurve curve = FitRateCurve(tflops);
    if (p.device_kind == "cpu") {
      p.bf16_tflops = curve.max_tflops;
      p.compute_efficiency = 1;
    } else {
      p.compute_efficiency = std::clamp(curve.max_tflops / p.bf16_tflops, 1e-3, 1.5);
    }
    p.compute_half_rows = curve.half_rows;
    note("compute: %.3f TFLOPS achieved at many rows, half of it at %.1f rows (%zu steps of %d to %d rows, %d of "
         "them prefill)",
         curve.max_tflops, curve.half_rows, tflops.size(), row_counts.front(), row_counts.back(), prefill_steps);
  }
  if (!other.empty()) {
    p.step_host_us = Median(other) * 1e3;
    note("%.1f us per step outside the modelled ops: host, sampling, KV writes (median of %zu decode steps)",
         p.step_host_us, other.size());
  }
  p.sources["efficiency"] = "fitted by plan calibrate from bench-decode (" + in.date + ")";
  return Status::Ok();
}

// Any engine's step times: its memory efficiency and per-layer time on the base profile's device.
Status FitEngine(const CalibrateInputs& in, Calibration* out) {
  HardwareProfile& p = out->profile;
  std::vector<EngineStep> steps;
  for (const std::string& path : in.engine_steps) {
    ASSIGN_OR_RETURN(json value, ReadJsonFile(path));
    ASSIGN_OR_RETURN(std::vector<EngineStep> more, ParseEngineSteps(value, path));
    steps.insert(steps.end(), more.begin(), more.end());
  }
  const int activation_bytes = p.device_kind == "cpu" ? 4 : 2;
  const EngineTraits traits{.kv_bytes = activation_bytes, .allreduce_bytes = activation_bytes};
  ASSIGN_OR_RETURN(EngineFit fit, FitEngineSteps(steps, p, traits));
  char line[300];
  if (fit.decode_points > 0) {
    p.memory_efficiency = p.attention_efficiency = fit.memory_efficiency;
    p.layer_us = fit.layer_us;
    std::snprintf(line, sizeof(line),
                  "engine decode steps (%d points): memory efficiency %.3f%s, %.1f us per layer outside the modelled "
                  "ops; rms error of the fit %.1f%%",
                  fit.decode_points, fit.memory_efficiency,
                  fit.efficiency_fitted ? "" : " (kept: the points cannot separate it from the per-layer time)",
                  fit.layer_us, 100 * fit.rms_relative_error);
    out->notes.push_back(line);
  }
  if (fit.prefill_points > 0) {
    p.compute_efficiency = fit.compute_efficiency;
    p.compute_half_rows = fit.compute_half_rows;
    std::snprintf(line, sizeof(line),
                  "engine prefill steps (%d points): compute efficiency %.3f of %.0f TFLOPS, half of that rate at %.0f "
                  "rows; rms error of the fit %.1f%%",
                  fit.prefill_points, fit.compute_efficiency, p.bf16_tflops, fit.compute_half_rows,
                  100 * fit.prefill_rms_relative_error);
    out->notes.push_back(line);
  }
  if (fit.eager_points > 0) {
    p.layer_host_us = fit.layer_host_us;
    std::snprintf(line, sizeof(line),
                  "eager engine decode steps (%d points): %.1f us of host time per layer; rms error of the fit %.1f%%",
                  fit.eager_points, fit.layer_host_us, 100 * fit.eager_rms_relative_error);
    out->notes.push_back(line);
  }
  std::string files;
  for (const std::string& path : in.engine_steps) files += (files.empty() ? "" : ", ") + path;
  p.sources["efficiency"] = "fitted to engine step times (" + files + ", " + in.date + ")";
  p.sources["overheads"] += "; layer_us fitted to engine step times (" + files + ", " + in.date + ")";
  return Status::Ok();
}

}  // namespace

Result<CommSamples> ParseBenchCommJson(const json& value, const std::string& source) {
  CommSamples out;
  out.source = source;
  try {
    Result<Collective> collective = ParseCollective(value.at("collective").get<std::string>());
    if (!collective.ok()) return InvalidArgument(source + ": " + collective.status().message());
    out.collective = *collective;
    out.ranks = JsonInt<int>(value.at("ranks"), "ranks");
    for (const json& row : value.at("rows")) {
      const double bytes = row.at("size").get<double>();
      const json& oop = row.at("out_of_place");
      if (oop.value("wrong", 0) != 0) {
        return InvalidArgument(source + ": size " + std::to_string(static_cast<long long>(bytes)) +
                               " has wrong results; refusing to fit it");
      }
      out.points.emplace_back(bytes, oop.at("time_us").get<double>() * 1e-6);
    }
  } catch (const std::exception& e) {  // nlohmann's, and JsonInt's out_of_range
    return InvalidArgument(source + ": not bench-comm --json output: " + e.what());
  }
  if (out.ranks < 2) return InvalidArgument(source + ": a collective over " + std::to_string(out.ranks) + " rank(s) has no cost to fit");
  return out;
}

Result<std::vector<CommSamples>> ParseBenchCommFile(const json& value, const std::string& source) {
  if (!value.is_object() || !value.contains("sweep")) {
    ASSIGN_OR_RETURN(CommSamples single, ParseBenchCommJson(value, source));
    return std::vector<CommSamples>{std::move(single)};
  }
  std::vector<CommSamples> out;
  const json& sweep = value["sweep"];
  if (!sweep.is_object() || !sweep.contains("runs") || !sweep["runs"].is_array()) {
    return InvalidArgument(source + ": sweep.runs must be an array");
  }
  for (size_t i = 0; i < sweep["runs"].size(); ++i) {
    const json& run = sweep["runs"][i];
    if (!run.is_object()) return InvalidArgument(source + ": sweep.runs[" + std::to_string(i) + "] must be an object");
    if (run.value("registered", false) || !run.contains("result") || run["result"].is_null()) continue;
    const auto text = [&](const char* key) -> std::string {
      return run.contains(key) && run[key].is_string() ? run[key].get<std::string>() : "";
    };
    ASSIGN_OR_RETURN(CommSamples samples,
                     ParseBenchCommJson(run["result"], source + ": sweep.runs[" + std::to_string(i) + "]"));
    samples.source = source;
    samples.algorithm = text("algorithm");
    samples.protocol = text("protocol");
    out.push_back(std::move(samples));
  }
  if (out.empty()) return InvalidArgument(source + ": a sweep with no measured run");
  return out;
}

Result<CommSamples> ParseNcclTestsOutput(std::string_view text, const std::string& source) {
  CommSamples out;
  out.source = source;
  std::string collective;
  std::string redop;
  // Columns from the header ("#  size  count  type  redop  root  time  algbw  busbw  #wrong ..."):
  // versions differ (no root, no in-place half, extra algo/proto columns); the first "time" and
  // "#wrong" are the out-of-place ones.
  int time_column = -1, wrong_column = -1, redop_column = -1;
  std::istringstream lines{std::string(text)};
  int line_number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_number;
    if (line.find("all_reduce_perf") != std::string::npos) collective = "all_reduce";
    if (line.find("all_gather_perf") != std::string::npos) collective = "all_gather";
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string field; fields >> field;) f.push_back(field);
    if (f.empty()) continue;
    if (f[0] == "#" && f.size() > 1 && f[1] == "Rank") ++out.ranks;
    if (f[0] == "#" && f.size() > 2 && f[1] == "size") {
      time_column = wrong_column = redop_column = -1;
      for (size_t i = 1; i < f.size(); ++i) {
        const int column = static_cast<int>(i) - 1;  // data rows have no leading "#"
        if (f[i] == "time" && time_column < 0) time_column = column;
        if (f[i] == "#wrong" && wrong_column < 0) wrong_column = column;
        if (f[i] == "redop") redop_column = column;
      }
      continue;
    }
    if (f[0][0] == '#' || !std::isdigit(static_cast<unsigned char>(f[0][0]))) continue;
    if (time_column < 0) return InvalidArgument(source + ":" + std::to_string(line_number) + ": a result row before the column header");
    if (static_cast<int>(f.size()) <= std::max({time_column, wrong_column, redop_column})) {
      return InvalidArgument(source + ":" + std::to_string(line_number) + ": not a result row: " + line);
    }
    try {
      const double bytes = std::stod(f[0]);
      const double time_us = std::stod(f[time_column]);
      if (wrong_column >= 0 && f[wrong_column] != "N/A" && std::stoll(f[wrong_column]) != 0) {
        return InvalidArgument(source + ":" + std::to_string(line_number) + ": size " + f[0] + " has #wrong " +
                               f[wrong_column] + "; refusing to fit it");
      }
      if (redop_column >= 0) redop = f[redop_column];
      out.points.emplace_back(bytes, time_us * 1e-6);
    } catch (const std::exception&) {
      return InvalidArgument(source + ":" + std::to_string(line_number) + ": not a result row: " + line);
    }
  }
  if (out.points.empty()) return InvalidArgument(source + ": no nccl-tests result rows");
  if (out.ranks < 2) return InvalidArgument(source + ": no \"#  Rank\" lines (need at least 2 ranks)");
  if (collective.empty()) collective = redop == "none" ? "all_gather" : "all_reduce";
  Result<Collective> parsed = ParseCollective(collective);
  if (!parsed.ok()) return InvalidArgument(source + ": " + parsed.status().message());
  out.collective = *parsed;
  return out;
}

Result<std::vector<CollectiveFit>> FitCollective(const CommSamples& s) {
  const double factor = BusBandwidthFactor(s.collective, s.ranks);
  const double edges[] = {0, 65536, 1 << 20, 1e18};
  std::vector<CollectiveFit> fits;
  for (int range = 0; range < 3; ++range) {
    std::vector<std::pair<double, double>> points;
    for (const auto& point : s.points) {
      if (point.first >= edges[range] && point.first < edges[range + 1]) points.push_back(point);
    }
    if (points.size() < 2) continue;
    auto fit = FitAlphaBeta(points, factor);
    if (!fit.ok()) continue;
    double min_bytes = points.front().first, max_bytes = points.front().first;
    for (const auto& point : points) {
      min_bytes = std::min(min_bytes, point.first);
      max_bytes = std::max(max_bytes, point.first);
    }
    double alpha_us = fit->alpha_s * 1e6, beta_gb_s = fit->beta_bytes_per_s / factor / 1e9;
    if (alpha_us < 0) {
      // Noise in a bandwidth-bound range can push the intercept below zero: no fixed cost there,
      // and the bandwidth is the sizes' median rate.
      std::vector<double> rates;
      for (const auto& [bytes, seconds] : points) rates.push_back(bytes / seconds / 1e9);
      alpha_us = 0;
      beta_gb_s = Median(rates);
    }
    fits.push_back({CollectiveName(s.collective), s.ranks, min_bytes, max_bytes, alpha_us, beta_gb_s, s.source,
                    s.algorithm, s.protocol});
  }
  if (fits.empty()) return InvalidArgument(s.source + ": too few sizes to fit (at least two in one size range)");
  return fits;
}

Result<Calibration> Calibrate(const CalibrateInputs& in) {
  if (in.bench_decode.empty() && in.base.empty()) {
    return InvalidArgument("plan calibrate needs --base PRESET, or --bench-decode to make a CPU profile");
  }
  if (!in.bench_decode.empty() && !in.engine_steps.empty()) {
    return InvalidArgument("--bench-decode and --engine-steps both fit the memory efficiency: give one");
  }
  Calibration out;
  std::vector<json> decodes;
  for (const std::string& path : in.bench_decode) {
    ASSIGN_OR_RETURN(json value, ReadJsonFile(path));
    decodes.push_back(std::move(value));
  }
  if (!in.base.empty()) {
    ASSIGN_OR_RETURN(out.profile, LoadHardwareProfile(in.base));
    out.profile.name += "-calibrated";
    out.profile.description += "; calibrated " + in.date;
  } else {
    out.profile = CpuProfile(decodes.front(), in.date);
  }
  HardwareProfile& p = out.profile;

  // Collectives: every sweep's α/β per size range replaces NCCL's model at its rank count.
  std::vector<CommSamples> sweeps;
  for (const std::string& path : in.bench_comm) {
    ASSIGN_OR_RETURN(json value, ReadJsonFile(path));
    ASSIGN_OR_RETURN(std::vector<CommSamples> runs, ParseBenchCommFile(value, path));
    for (CommSamples& s : runs) sweeps.push_back(std::move(s));
  }
  for (const std::string& path : in.nccl_tests) {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
    ASSIGN_OR_RETURN(CommSamples s, ParseNcclTestsOutput(text, path));
    sweeps.push_back(std::move(s));
  }
  for (const CommSamples& s : sweeps) {
    ASSIGN_OR_RETURN(std::vector<CollectiveFit> fits, FitCollective(s));
    std::erase_if(p.collective_fits, [&](const CollectiveFit& f) {
      return f.collective == CollectiveName(s.collective) && f.ranks == s.ranks && f.algorithm == s.algorithm &&
             f.protocol == s.protocol;
    });
    for (const CollectiveFit& f : fits) {
      char line[300];
      const std::string path = f.algorithm.empty() && f.protocol.empty() ? "" : " " + f.algorithm + "/" + f.protocol;
      std::snprintf(line, sizeof(line), "%s%s at %d ranks, %.0f-%.0f B: alpha %.2f us, %.2f GB/s (%s)",
                    f.collective.c_str(), path.c_str(), f.ranks, f.min_bytes, f.max_bytes, f.alpha_us, f.beta_gb_s,
                    f.source.c_str());
      out.notes.push_back(line);
      p.collective_fits.push_back(f);
    }
  }

  // Decode: memory efficiency from the memory-bound steps, the compute rate from compute-bound
  // ones, host time from all; every row's compute time (the slowest rank, collectives excluded)
  // against the model's terms at efficiency 1.
  if (!decodes.empty()) RETURN_IF_ERROR(FitDecode(decodes, in, &out));
  if (!in.engine_steps.empty()) RETURN_IF_ERROR(FitEngine(in, &out));
  return out;
}

}  // namespace tpserve::planner

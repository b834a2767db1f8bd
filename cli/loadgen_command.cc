// `tpserve loadgen`: load-tests a running server, closed loop (--concurrency) or open loop
// (--rate, Poisson or bursty arrivals), and reports what vllm bench serve / genai-perf report.
// It speaks tpserve's gRPC API or the OpenAI-compatible HTTP API (--api openai: tpserve's
// --http-port, vLLM, SGLang), the same workload and statistics either way (clients/load_target.h).
// Prompts are random token ids unless a dataset is given; output lengths are fixed through the
// server's ignore_eos / min_tokens.
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "clients/arrival_schedule.h"

#include "common/bounded_json.h"
#include "clients/connection.h"
#include "clients/grpc_load_target.h"
#include "clients/load_stats.h"
#include "clients/openai_load_target.h"
#include "common/status.h"
#include "cli/commands.h"

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;

// OpenAI's API does not say the vocabulary size: random prompts draw below 9/10 of this, which
// every Llama-2-or-later, Mistral, Qwen and GPT-2 vocabulary exceeds (--vocab-size overrides).
constexpr int kOpenAiDefaultVocab = 32000;

struct LengthRange {
  int low = 0, high = 0;
  int Draw(std::mt19937_64& random) const {
    return low == high ? low : std::uniform_int_distribution<int>(low, high)(random);
  }
};

// "128" or "64-256".
Result<LengthRange> ParseRange(const std::string& text, const char* flag) {
  LengthRange r;
  try {
    const size_t dash = text.find('-');
    r.low = std::stoi(text.substr(0, dash));
    r.high = dash == std::string::npos ? r.low : std::stoi(text.substr(dash + 1));
  } catch (...) {
    return InvalidArgument(std::string(flag) + ": '" + text + "' is not N or LOW-HIGH");
  }
  if (r.low < 1 || r.high < r.low) {
    return InvalidArgument(std::string(flag) + ": '" + text + "' must be N >= 1 or LOW-HIGH with LOW <= HIGH");
  }
  return r;
}

struct LoadgenOptions {
  std::string api = "grpc";
  std::string server;     // empty: the API's default
  std::string model;      // --api openai; empty: the first of GET /v1/models
  std::string endpoint = "completions";
  int vocab_size = 0;     // random prompts draw below 9/10 of it; 0: gRPC asks, OpenAI uses 32000
  ConnectionOptions connection;
  int concurrency = 1;
  double rate = 0;        // > 0: open loop
  double burstiness = 1;
  int requests = 100;
  double duration_s = 0;  // 0: no time bound
  int warmup = 2;
  std::string prompt_tokens = "128";
  std::string output_tokens = "128";
  std::string dataset;
  uint64_t seed = 0;
  Slo slo;
  std::string sweep;      // "concurrency=1,2,4"
  std::string plot;       // --plot FILE.svg|png
  bool json = false;
};

struct Workload {
  LengthRange prompt_len, output_len;
  std::vector<std::string> dataset;  // prompts; empty: random token ids
  int vocab = 0;
  uint64_t seed = 0;

  LoadRequest Make(int index) const {
    std::mt19937_64 random(seed * 1000003 + index);
    LoadRequest request;
    request.id = "loadgen-" + std::to_string(index);
    if (!dataset.empty()) {
      request.prompt_text = dataset[index % dataset.size()];
    } else {
      const int n = prompt_len.Draw(random);
      // The top of the vocabulary is where special tokens live: draw below it.
      std::uniform_int_distribution<int> id(0, std::max(1, vocab * 9 / 10) - 1);
      for (int i = 0; i < n; ++i) request.prompt_ids.push_back(id(random));
    }
    request.output_tokens = output_len.Draw(random);
    return request;
  }
};

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

struct RunResult {
  LoadReport report;
  double client_cpu_ms_per_token = 0;
  int concurrency = 0;
  double rate = 0;
};

// Progress on stderr: one updating line on a terminal, a plain line every 5 s otherwise.
class Progress {
 public:
  explicit Progress(int total) : total_(total), tty_(isatty(STDERR_FILENO)), start_(Clock::now()), last_(start_) {}
  void Update(int done, int in_flight) {
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(tty_ ? 250 : 5000) && done < total_) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, tty_ ? "\r[loadgen] %d/%d done, %d in flight, %.1f s" : "[loadgen] %d/%d done, %d in flight, %.1f s\n",
                 done, total_, in_flight, elapsed);
    if (tty_ && done >= total_) std::fprintf(stderr, "\n");
  }

 private:
  int total_;
  bool tty_;
  Clock::time_point start_, last_;
};

RunResult Run(LoadTarget& target, const Workload& workload, const LoadgenOptions& o, int concurrency) {
  for (int i = 0; i < o.warmup; ++i) target.Send(workload.Make(-1 - i));
  std::vector<RequestRecord> records(o.requests);
  std::atomic<int> next{0}, done{0}, in_flight{0};
  std::mutex progress_mutex;
  Progress progress(o.requests);
  const double cpu_before = CpuSeconds();
  const auto start = Clock::now();
  const auto deadline = o.duration_s > 0 ? start + std::chrono::microseconds(static_cast<int64_t>(o.duration_s * 1e6))
                                         : Clock::time_point::max();
  auto run = [&](int index) {
    ++in_flight;
    records[index] = target.Send(workload.Make(index));
    --in_flight;
    const int finished = ++done;
    std::lock_guard<std::mutex> lock(progress_mutex);
    progress.Update(finished, in_flight);
  };
  int sent = 0;
  if (o.rate > 0) {
    const std::vector<double> times = ArrivalTimes(o.rate, o.requests, o.seed, o.burstiness);
    std::vector<std::thread> threads;
    for (int i = 0; i < o.requests; ++i) {
      const auto when = start + std::chrono::microseconds(static_cast<int64_t>(times[i] * 1e6));
      if (when > deadline) break;
      std::this_thread::sleep_until(when);
      threads.emplace_back(run, i);
      ++sent;
    }
    for (auto& t : threads) t.join();
  } else {
    std::vector<std::thread> workers;
    std::atomic<int> launched{0};
    for (int w = 0; w < concurrency; ++w) {
      workers.emplace_back([&] {
        for (int i; (i = next++) < o.requests && Clock::now() < deadline;) {
          ++launched;
          run(i);
        }
      });
    }
    for (auto& t : workers) t.join();
    sent = launched;
  }
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();
  records.resize(sent);
  RunResult result;
  result.report = BuildReport(records, duration, o.slo);
  result.client_cpu_ms_per_token = (CpuSeconds() - cpu_before) * 1e3 / std::max<size_t>(1, result.report.output_tokens);
  result.concurrency = o.rate > 0 ? 0 : concurrency;
  result.rate = o.rate;
  return result;
}

nlohmann::json DistributionJson(const Distribution& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"count", d.count}};
}

nlohmann::json ResultJson(const RunResult& r) {
  const LoadReport& p = r.report;
  return {{"concurrency", r.concurrency}, {"rate", r.rate}, {"sent", p.sent}, {"completed", p.completed},
          {"failed", p.failed}, {"errors", p.errors}, {"duration_s", p.duration_s},
          {"request_throughput", p.request_throughput}, {"output_token_throughput", p.output_token_throughput},
          {"output_tokens", p.output_tokens}, {"good", p.good}, {"goodput", p.goodput},
          {"ttft_ms", DistributionJson(p.ttft_ms)}, {"tpot_ms", DistributionJson(p.tpot_ms)},
          {"itl_ms", DistributionJson(p.itl_ms)}, {"e2e_ms", DistributionJson(p.e2e_ms)},
          {"client_cpu_ms_per_token", r.client_cpu_ms_per_token}};
}

void PrintText(const RunResult& r, const Slo& slo, const std::string& target) {
  const LoadReport& p = r.report;
  std::printf("============ tpserve loadgen (%s) ============\n",
              r.rate > 0 ? ("rate " + std::to_string(r.rate) + " req/s").c_str()
                         : ("concurrency " + std::to_string(r.concurrency)).c_str());
  std::printf("%-40s %s\n", "Target:", target.c_str());
  std::printf("%-40s %zu\n%-40s %zu\n", "Successful requests:", p.completed, "Failed requests:", p.failed);
  for (const auto& [code, n] : p.errors) std::printf("  %-38s %zu\n", code.c_str(), n);
  std::printf("%-40s %.2f\n%-40s %.2f\n%-40s %.1f\n%-40s %zu\n", "Benchmark duration (s):", p.duration_s,
              "Request throughput (req/s):", p.request_throughput, "Output token throughput (tok/s):",
              p.output_token_throughput, "Total output tokens:", p.output_tokens);
  if (slo.ttft_ms > 0 || slo.tpot_ms > 0) std::printf("%-40s %.2f (%zu good)\n", "Goodput (req/s):", p.goodput, p.good);
  auto block = [](const char* name, const Distribution& d) {
    std::printf("---- %s (ms) ----\n  mean %9.2f   p50 %9.2f   p90 %9.2f   p99 %9.2f\n", name, d.mean, d.p50, d.p90, d.p99);
  };
  block("Time to first token", p.ttft_ms);
  block("Time per output token (excl. 1st)", p.tpot_ms);
  block("Inter-token latency (per message)", p.itl_ms);
  block("End-to-end latency", p.e2e_ms);
  std::printf("%-40s %.3f\n", "Client CPU per output token (ms):", r.client_cpu_ms_per_token);
}

int Main(const LoadgenOptions& o) {
  auto prompt_len = ParseRange(o.prompt_tokens, "--prompt-tokens");
  auto output_len = ParseRange(o.output_tokens, "--output-tokens");
  for (const Status& s : {prompt_len.status(), output_len.status()}) {
    if (!s.ok()) {
      spdlog::error("loadgen: {}", s.message());
      return 2;
    }
  }
  // The target, and the vocabulary random prompts draw from.
  std::unique_ptr<LoadTarget> target;
  std::string server = o.server, model;
  int vocab = o.vocab_size;
  if (o.api == "openai") {
    if (server.empty()) server = "http://127.0.0.1:8000";
    auto opened = OpenAiLoadTarget::Open({.url = server,
                                          .model = o.model,
                                          .route = o.endpoint == "chat" ? OpenAiRoute::kChatCompletions
                                                                        : OpenAiRoute::kCompletions,
                                          .connection = o.connection});
    if (!opened.ok()) {
      spdlog::error("loadgen: {}", opened.status().message());
      return opened.status().code() == StatusCode::kUnavailable ? 1 : 2;
    }
    model = (*opened)->model();
    if (vocab == 0) vocab = kOpenAiDefaultVocab;
    target = std::move(opened).value();
  } else {
    if (!o.model.empty() || o.endpoint != "completions") {
      spdlog::error("loadgen: --model and --endpoint are for --api openai (gRPC serves one model)");
      return 2;
    }
    if (server.empty()) server = "127.0.0.1:50051";
    auto opened = GrpcLoadTarget::Open(server, o.connection);
    if (!opened.ok()) {
      spdlog::error("loadgen: {}", opened.status().message());
      return opened.status().code() == StatusCode::kUnavailable ? 1 : 2;
    }
    if (vocab == 0) vocab = (*opened)->vocab_size();
    target = std::move(opened).value();
  }
  const std::string target_name =
      o.api == "openai" ? "OpenAI " + server + " /v1/" + (o.endpoint == "chat" ? "chat/completions" : "completions") +
                              ", model " + model
                        : "gRPC " + server;
  Workload workload{*prompt_len, *output_len, {}, vocab, o.seed};
  if (!o.dataset.empty()) {
    std::ifstream in(o.dataset);
    if (!in) {
      spdlog::error("loadgen: --dataset {}: cannot open", o.dataset);
      return 2;
    }
    int line_number = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_number;
      if (line.empty()) continue;
      auto row = ParseBoundedJson(line);
      if (row.is_discarded() || !row.is_object() || !row.contains("prompt") || !row["prompt"].is_string()) {
        spdlog::error("loadgen: --dataset {}: line {} is not a JSON object with a string \"prompt\"", o.dataset, line_number);
        return 2;
      }
      workload.dataset.push_back(row["prompt"]);
    }
  }
  std::vector<int> levels = {o.concurrency};
  if (!o.sweep.empty()) {
    if (o.sweep.rfind("concurrency=", 0) != 0) {
      spdlog::error("loadgen: --sweep must look like concurrency=1,2,4");
      return 2;
    }
    levels.clear();
    std::stringstream list(o.sweep.substr(12));
    for (std::string item; std::getline(list, item, ',');) levels.push_back(std::stoi(item));
  }
  nlohmann::json runs = nlohmann::json::array();
  std::vector<LoadReport> reports;
  std::vector<std::string> labels;
  for (int level : levels) {
    RunResult result = Run(*target, workload, o, level);
    reports.push_back(result.report);
    labels.push_back(o.rate > 0 ? "rate " + std::to_string(o.rate) : "c=" + std::to_string(level));
    if (o.json) {
      runs.push_back(ResultJson(result));
    } else {
      PrintText(result, o.slo, target_name);
    }
  }
  if (o.json) {
    nlohmann::json out = {{"api", o.api}, {"server", server}, {"model_vocab_size", vocab},
                          {"slo", {{"ttft_ms", o.slo.ttft_ms}, {"tpot_ms", o.slo.tpot_ms}}},
                          {"runs", runs}};
    if (o.api == "openai") {
      out["model"] = model;
      out["endpoint"] = o.endpoint;
    }
    std::printf("%s\n", out.dump().c_str());
  }
  return WritePlotIfAsked("loadgen", o.plot, [&] { return RenderSvg(LoadCurveChart(reports, labels)); });
}

}  // namespace

void AddLoadgenCommand(CLI::App& app, CommandAction* action) {
  auto o = std::make_shared<LoadgenOptions>();
  CLI::App* cmd = app.add_subcommand(
      "loadgen",
      "Load-test a running server: closed loop (--concurrency) or open loop (--rate, Poisson\n"
      "arrivals); reports throughput, TTFT / TPOT / ITL / E2E percentiles and goodput. Over tpserve's\n"
      "gRPC API, or with --api openai over the OpenAI-compatible HTTP API of tpserve (--http-port),\n"
      "vLLM or SGLang: streamed requests, TTFT at the first chunk with text, the output token count\n"
      "from the final usage chunk (else one per text chunk), lengths fixed via ignore_eos/min_tokens.");
  cmd->add_option("--api", o->api, "grpc, or openai (an OpenAI-compatible HTTP server)")
      ->check(CLI::IsMember({"grpc", "openai"}))
      ->capture_default_str();
  cmd->add_option("--server", o->server,
                  "gRPC: HOST:PORT (default 127.0.0.1:50051); openai: http(s)://HOST:PORT[/prefix] "
                  "(default http://127.0.0.1:8000)");
  cmd->add_option("--model", o->model, "openai: the model to ask for (default: the first of GET /v1/models)");
  cmd->add_option("--endpoint", o->endpoint,
                  "openai: completions (/v1/completions, random prompts as token ids) or chat "
                  "(/v1/chat/completions, the prompt as one user message; random prompts as words)")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  cmd->add_option("--vocab-size", o->vocab_size,
                  "Random prompts draw token ids below 9/10 of this (default: gRPC asks the server; openai 32000)")
      ->check(CLI::NonNegativeNumber);
  AddConnectionFlags(cmd, &o->connection);
  cmd->add_option("--concurrency", o->concurrency, "Closed loop: requests in flight")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--rate", o->rate, "Open loop: requests per second (Poisson arrivals)");
  cmd->add_option("--burstiness", o->burstiness, "Gamma shape of the gaps: 1 Poisson, < 1 burstier")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--requests", o->requests, "Requests to send")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "Stop sending after this many seconds (0: no limit)");
  cmd->add_option("--warmup", o->warmup, "Requests sent first and not counted")->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Random prompt length: N or LOW-HIGH")->capture_default_str();
  cmd->add_option("--output-tokens", o->output_tokens, "Output length: N or LOW-HIGH (exact, via ignore_eos)")->capture_default_str();
  cmd->add_option("--dataset", o->dataset, "JSONL file of {\"prompt\": \"...\"} lines instead of random prompts");
  cmd->add_option("--seed", o->seed, "Seed of prompts, lengths and arrivals")->capture_default_str();
  cmd->add_option("--slo-ttft-ms", o->slo.ttft_ms, "Goodput: time-to-first-token limit");
  cmd->add_option("--slo-tpot-ms", o->slo.tpot_ms, "Goodput: time-per-output-token limit");
  cmd->add_option("--sweep", o->sweep, "Run a series, e.g. concurrency=1,2,4,8 (a throughput-latency curve)");
  cmd->add_flag("--json", o->json, "Print one JSON object (schema: docs/API.md)");
  cmd->add_option("--plot", o->plot, "Write the throughput-latency chart (FILE.svg or FILE.png)");
  cmd->callback([o, action] { *action = [o] { return Main(*o); }; });
}

}  // namespace tpserve

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
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "clients/arrival_schedule.h"
#include "clients/load_report_format.h"
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

struct LoadgenOptions {
  std::string api = "grpc";
  std::string server;     // empty: the API's default
  std::string model;      // --api openai; empty: the first of GET /v1/models
  std::string endpoint = "completions";
  int vocab_size = 0;     // random prompts draw below 9/10 of it; 0: gRPC asks, OpenAI uses 32000
  ConnectionOptions connection;
  WorkloadOptions workload;
  double duration_s = 0;  // 0: no time bound
  int warmup = 2;
  std::string sweep;      // "concurrency=1,2,4"
  std::string plot;       // --plot FILE.svg|png
  bool json = false;
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

// One load level: open loop at `rate` requests/s when it is > 0, else closed loop at `concurrency`.
RunResult Run(LoadTarget& target, const Workload& workload, const LoadgenOptions& o, int concurrency, double rate) {
  const int requests = o.workload.requests;
  for (int i = 0; i < o.warmup; ++i) target.Send(workload.Make(-1 - i));
  std::vector<RequestRecord> records(requests);
  std::atomic<int> next{0}, done{0}, in_flight{0};
  std::mutex progress_mutex;
  Progress progress(requests);
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
  if (rate > 0) {
    const std::vector<double> times = ArrivalTimes(rate, requests, o.workload.seed, o.workload.burstiness);
    std::vector<std::thread> threads;
    for (int i = 0; i < requests; ++i) {
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
        for (int i; (i = next++) < requests && Clock::now() < deadline;) {
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
  result.report = BuildReport(records, duration, o.workload.slo);
  result.client_cpu_ms_per_token = (CpuSeconds() - cpu_before) * 1e3 / std::max<size_t>(1, result.report.output_tokens);
  result.concurrency = rate > 0 ? 0 : concurrency;
  result.rate = rate;
  return result;
}

nlohmann::json ResultJson(const RunResult& r) {
  nlohmann::json out = {{"concurrency", r.concurrency}, {"rate", r.rate}};
  out.update(LoadReportJson(r.report));
  out["client_cpu_ms_per_token"] = r.client_cpu_ms_per_token;
  return out;
}

void PrintText(const RunResult& r, const Slo& slo, const LoadSampling& sampling,
               const std::string& target) {
  std::string level = r.rate > 0 ? fmt::format("rate {:g} req/s", r.rate)
                                 : "concurrency " + std::to_string(r.concurrency);
  level += sampling.temperature > 0
               ? fmt::format(", temperature {:g} top_p {:g} top_k {}", sampling.temperature,
                             sampling.top_p, sampling.top_k)
               : ", greedy";
  std::printf("%s", FormatLoadReport(r.report, slo, "tpserve loadgen (" + level + ")", target).c_str());
  std::printf("%-40s %.3f\n", "Client CPU per output token (ms):", r.client_cpu_ms_per_token);
}

int Main(const LoadgenOptions& o) {
  // Flag and dataset errors before connecting; the vocabulary is known once connected.
  auto workload = Workload::FromOptions(o.workload, 0);
  if (!workload.ok()) {
    spdlog::error("loadgen: {}", workload.status().message());
    return 2;
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
  workload->vocab = vocab;
  // The load levels: each rate (open loop), else each concurrency of --sweep, else --concurrency.
  std::vector<int> levels = {o.workload.concurrency};
  if (!o.sweep.empty()) {
    if (!o.workload.rates.empty()) {
      spdlog::error("loadgen: --sweep is for closed loop; give open-loop levels as --rate R1,R2,...");
      return 2;
    }
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
  const size_t runs_to_make = o.workload.rates.empty() ? levels.size() : o.workload.rates.size();
  for (size_t k = 0; k < runs_to_make; ++k) {
    const double rate = o.workload.rates.empty() ? 0 : o.workload.rates[k];
    const int concurrency = o.workload.rates.empty() ? levels[k] : 0;
    RunResult result = Run(*target, *workload, o, concurrency, rate);
    reports.push_back(result.report);
    labels.push_back(rate > 0 ? fmt::format("rate {:g}", rate) : "c=" + std::to_string(concurrency));
    if (o.json) {
      runs.push_back(ResultJson(result));
    } else {
      PrintText(result, o.workload.slo, o.workload.sampling, target_name);
    }
  }
  if (o.json) {
    nlohmann::json out = {
        {"api", o.api},
        {"server", server},
        {"model_vocab_size", vocab},
        {"slo", {{"ttft_ms", o.workload.slo.ttft_ms}, {"tpot_ms", o.workload.slo.tpot_ms}}},
        {"sampling",
         {{"temperature", o.workload.sampling.temperature},
          {"top_p", o.workload.sampling.top_p},
          {"top_k", o.workload.sampling.top_k}}},
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
  AddWorkloadFlags(cmd, &o->workload);
  cmd->add_option("--temperature", o->workload.sampling.temperature,
                  "Every request's sampling temperature (0: greedy); each request gets its own "
                  "seed from --seed")
      ->capture_default_str();
  cmd->add_option("--top-p", o->workload.sampling.top_p,
                  "Nucleus mass in (0, 1], with --temperature")
      ->capture_default_str();
  cmd->add_option("--top-k", o->workload.sampling.top_k,
                  "Top-k limit (0: none), with --temperature")
      ->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "Stop sending after this many seconds (0: no limit)");
  cmd->add_option("--warmup", o->warmup, "Requests sent first and not counted")->capture_default_str();
  cmd->add_option("--sweep", o->sweep, "Run a series, e.g. concurrency=1,2,4,8 (a throughput-latency curve)");
  cmd->add_flag("--json", o->json, "Print one JSON object (schema: docs/API.md)");
  cmd->add_option("--plot", o->plot, "Write the throughput-latency chart (FILE.svg or FILE.png)");
  cmd->callback([o, action] { *action = [o] { return Main(*o); }; });
}

}  // namespace tpserve

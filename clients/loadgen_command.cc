// `tpserve loadgen`: load-tests a running server over gRPC, closed loop (--concurrency) or open
// loop (--rate, Poisson or bursty arrivals), and reports what vllm bench serve / genai-perf
// report. Prompts are random token ids from the model's vocabulary unless a dataset is given;
// output lengths are fixed through the server's ignore_eos / min_tokens.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "clients/connection.h"
#include "clients/grpc_code_name.h"
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
#include "clients/load_stats.h"
#include "common/status.h"
#include "server/commands/commands.h"
#include "tpserve/v1/tpserve.grpc.pb.h"

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;

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
  std::string server = "127.0.0.1:50051";
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

  v1::GenerateRequest Make(int index) const {
    std::mt19937_64 random(seed * 1000003 + index);
    v1::GenerateRequest request;
    request.set_request_id("loadgen-" + std::to_string(index));
    if (!dataset.empty()) {
      request.set_text(dataset[index % dataset.size()]);
    } else {
      const int n = prompt_len.Draw(random);
      // The top of the vocabulary is where special tokens live: draw below it.
      std::uniform_int_distribution<int> id(0, std::max(1, vocab * 9 / 10) - 1);
      for (int i = 0; i < n; ++i) request.mutable_token_ids()->add_ids(id(random));
    }
    const int out = output_len.Draw(random);
    request.set_max_tokens(out);
    request.set_min_tokens(out);
    request.set_ignore_eos(true);
    return request;
  }
};

RequestRecord RunOne(v1::TpServe::Stub& stub, const Connection& connection, const v1::GenerateRequest& request,
                     double timeout_s) {
  grpc::ClientContext context;
  connection.Authorize(&context);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)));
  RequestRecord record;
  const auto start = Clock::now();
  auto last = start;
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.token_ids_size() == 0) continue;
    const auto now = Clock::now();
    if (record.output_tokens == 0) {
      record.ttft_s = std::chrono::duration<double>(now - start).count();
    } else {
      record.itl_s.push_back(std::chrono::duration<double>(now - last).count());  // per message
    }
    record.output_tokens += response.token_ids_size();
    last = now;
  }
  const grpc::Status status = reader->Finish();
  record.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
  record.ok = status.ok();
  if (!status.ok()) {
    record.error_code = GrpcCodeName(status.error_code());
  }
  return record;
}

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

RunResult Run(v1::TpServe::Stub& stub, const Connection& connection, const Workload& workload, const LoadgenOptions& o, int concurrency) {
  for (int i = 0; i < o.warmup; ++i) RunOne(stub, connection, workload.Make(-1 - i), 600);
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
    records[index] = RunOne(stub, connection, workload.Make(index), 600);
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

void PrintText(const RunResult& r, const Slo& slo) {
  const LoadReport& p = r.report;
  std::printf("============ tpserve loadgen (%s) ============\n",
              r.rate > 0 ? ("rate " + std::to_string(r.rate) + " req/s").c_str()
                         : ("concurrency " + std::to_string(r.concurrency)).c_str());
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
  auto connection = Connection::Open(o.server, o.connection);
  if (!connection.ok()) {
    spdlog::error("loadgen: {}", connection.status().message());
    return 2;
  }
  auto stub = v1::TpServe::NewStub(connection->channel());
  v1::ModelInfoResponse info;
  {
    grpc::ClientContext context;
    connection->Authorize(&context);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status status = stub->ModelInfo(&context, v1::ModelInfoRequest(), &info);
    if (!status.ok()) {
      spdlog::error("loadgen: cannot reach {}: {}", o.server, status.error_message());
      return 1;
    }
  }
  Workload workload{*prompt_len, *output_len, {}, info.vocab_size(), o.seed};
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
      auto row = nlohmann::json::parse(line, nullptr, false);
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
    RunResult result = Run(*stub, *connection, workload, o, level);
    reports.push_back(result.report);
    labels.push_back(o.rate > 0 ? "rate " + std::to_string(o.rate) : "c=" + std::to_string(level));
    if (o.json) {
      runs.push_back(ResultJson(result));
    } else {
      PrintText(result, o.slo);
    }
  }
  if (o.json) {
    nlohmann::json out = {{"server", o.server}, {"model_vocab_size", info.vocab_size()},
                          {"slo", {{"ttft_ms", o.slo.ttft_ms}, {"tpot_ms", o.slo.tpot_ms}}},
                          {"runs", runs}};
    std::printf("%s\n", out.dump().c_str());
  }
  return WritePlotIfAsked("loadgen", o.plot, [&] { return RenderSvg(LoadCurveChart(reports, labels)); });
}

}  // namespace

void AddLoadgenCommand(CLI::App& app, CommandAction* action) {
  auto o = std::make_shared<LoadgenOptions>();
  CLI::App* cmd = app.add_subcommand(
      "loadgen",
      "Load-test a running tpserve server: closed loop (--concurrency) or open loop (--rate,\n"
      "Poisson arrivals); reports throughput, TTFT / TPOT / ITL / E2E percentiles and goodput.");
  cmd->add_option("--server", o->server, "Server address host:port")->capture_default_str();
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

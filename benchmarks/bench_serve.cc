// Server overhead: what a client sees per token minus what the engine spends per step, at 1 and
// N concurrent streams, against a running `tpserve serve`. The engine's own step time comes from
// the Stats RPC (step compute + comm + host histograms) in the same run; CPU time of the server's
// threads outside the engine (gRPC, the engine loop's scheduling/sampling/detokenizing) comes
// from /proc/PID/task (engine threads are named tps-rank* and tps-pool).
//
//   bench_serve --target 127.0.0.1:P --server-pid PID [--streams 1,32] [--max-tokens 64] [--json]
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "tpserve/v1/tpserve.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct CpuSplit {
  double engine_s = 0;  // tps-rank*, tps-pool threads
  double other_s = 0;   // everything else in the server process
};

CpuSplit ReadCpu(int pid) {
  CpuSplit split;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream comm_file(task.path() / "comm"), stat_file(task.path() / "stat");
    std::string comm, stat;
    std::getline(comm_file, comm);
    std::getline(stat_file, stat);
    // Fields after the ")" closing the command name: state is field 3, utime 14, stime 15.
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    const double seconds = (utime + stime) / tick;
    (comm.rfind("tps-rank", 0) == 0 || comm == "tps-pool" ? split.engine_s : split.other_s) += seconds;
  }
  return split;
}

double HistogramSum(const tpserve::v1::Histogram& h) { return h.sum(); }

struct StreamResult {
  bool ok = false;
  int tokens = 0;
  double first_s = 0, last_s = 0;
};

StreamResult RunStream(tpserve::v1::TpServe::Stub& stub, const std::string& prompt, int max_tokens, Clock::time_point t0) {
  tpserve::v1::GenerateRequest request;
  request.set_text(prompt);
  request.set_max_tokens(max_tokens);
  request.set_ignore_eos(true);
  grpc::ClientContext context;
  auto reader = stub.Generate(&context, request);
  tpserve::v1::GenerateResponse response;
  StreamResult r;
  while (reader->Read(&response)) {
    if (response.token_ids_size() == 0) continue;
    const double now = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r.tokens == 0) r.first_s = now;
    r.tokens += response.token_ids_size();
    r.last_s = now;
  }
  r.ok = reader->Finish().ok();
  return r;
}

tpserve::v1::StatsResponse Stats(tpserve::v1::TpServe::Stub& stub) {
  grpc::ClientContext context;
  tpserve::v1::StatsResponse stats;
  stub.Stats(&context, tpserve::v1::StatsRequest(), &stats);
  return stats;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Server overhead per token at several concurrency levels, against a running tpserve serve"};
  std::string target = "127.0.0.1:50051";
  int pid = 0, max_tokens = 64;
  std::vector<int> streams = {1, 32};
  bool json = false;
  app.add_option("--target", target, "Server address")->capture_default_str();
  app.add_option("--server-pid", pid, "The server's process id (for its threads' CPU time)")->required();
  app.add_option("--streams", streams, "Concurrency levels")->delimiter(',')->capture_default_str();
  app.add_option("--max-tokens", max_tokens, "Tokens per stream")->capture_default_str();
  app.add_flag("--json", json, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);

  auto stub = tpserve::v1::TpServe::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  RunStream(*stub, "warm up", 4, Clock::now());
  nlohmann::json rows = nlohmann::json::array();
  if (!json) {
    std::printf("%8s %10s %12s %12s %12s %10s %16s\n", "streams", "tok/s", "client_ms/tok", "step_ms",
                "overhead_ms", "overhead%", "cpu_s/tok(other)");
  }
  double single_tps = 0;
  for (int n : streams) {
    const auto before = Stats(*stub);
    const CpuSplit cpu_before = ReadCpu(pid);
    const auto t0 = Clock::now();
    std::vector<std::future<StreamResult>> futures;
    for (int i = 0; i < n; ++i) {
      futures.push_back(std::async(std::launch::async, [&, i] {
        return RunStream(*stub, "Stream " + std::to_string(i) + " says hello to the server", max_tokens, t0);
      }));
    }
    int tokens = 0, failed = 0;
    double gap_sum = 0;
    int gap_count = 0;
    for (auto& f : futures) {
      StreamResult r = f.get();
      if (!r.ok) ++failed;
      tokens += r.tokens;
      if (r.tokens > 1) {
        gap_sum += (r.last_s - r.first_s);
        gap_count += r.tokens - 1;
      }
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const CpuSplit cpu_after = ReadCpu(pid);
    const auto after = Stats(*stub);
    const double steps = static_cast<double>(after.steps() - before.steps());
    const double step_s = (HistogramSum(after.step_compute()) + HistogramSum(after.step_comm()) +
                           HistogramSum(after.step_host()) - HistogramSum(before.step_compute()) -
                           HistogramSum(before.step_comm()) - HistogramSum(before.step_host())) /
                          std::max(1.0, steps);
    const double client_per_token = gap_count ? gap_sum / gap_count : 0;
    const double overhead = client_per_token - step_s;
    const double tps = tokens / wall;
    if (n == 1) single_tps = tps;
    const double other_cpu_per_token = (cpu_after.other_s - cpu_before.other_s) / std::max(1, tokens);
    rows.push_back({{"streams", n}, {"tokens_per_s", tps}, {"client_s_per_token", client_per_token},
                    {"step_s", step_s}, {"overhead_s", overhead}, {"overhead_share", overhead / step_s},
                    {"other_cpu_s_per_token", other_cpu_per_token},
                    {"engine_cpu_s", cpu_after.engine_s - cpu_before.engine_s},
                    {"throughput_vs_single", single_tps > 0 ? tps / single_tps : 0}, {"failed", failed}});
    if (!json) {
      std::printf("%8d %10.1f %12.3f %12.3f %12.3f %9.1f%% %16.6f%s\n", n, tps, client_per_token * 1e3,
                  step_s * 1e3, overhead * 1e3, 100 * overhead / step_s, other_cpu_per_token,
                  failed ? "  (failures!)" : "");
    }
  }
  if (json) std::printf("%s\n", nlohmann::json{{"rows", rows}}.dump().c_str());
  else if (single_tps > 0) std::printf("throughput at %d streams / 1 stream: %.2fx\n", streams.back(),
                                       rows.back()["tokens_per_s"].get<double>() / single_tps);
  return 0;
}

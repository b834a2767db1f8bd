#include "benchmarks/comm_sweep.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

#include "benchmarks/child_process.h"
#include "common/bounded_json.h"
#include "planner/collective_model.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kProtocolNames[] = {"LL", "LL128", "Simple"};
constexpr const char* kAlgorithmNames[] = {"Ring",          "Tree",         "NVLS", "NVLSTree",
                                           "CollNetDirect", "CollNetChain", "PAT"};

// NCCL's spelling of one name of a --protocols / --algorithms list, or an error naming it.
template <size_t N>
Result<std::vector<std::string>> Canonical(const std::vector<std::string>& names, const char* flag,
                                           std::string (*spelling)(std::string_view),
                                           const char* const (&known)[N]) {
  std::vector<std::string> out;
  for (const std::string& name : names) {
    const std::string canonical = spelling(name);
    if (std::find(std::begin(known), std::end(known), canonical) == std::end(known)) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return InvalidArgument(std::string(flag) + " '" + name + "': NCCL knows " + list);
    }
    if (std::find(out.begin(), out.end(), canonical) == out.end()) out.push_back(canonical);
  }
  return out;
}

const char* NcclCollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "AllReduce";
    case Collective::kAllGather:
      return "AllGather";
    case Collective::kReduceScatter:
      return "ReduceScatter";
    case Collective::kBroadcast:
      return "Broadcast";
  }
  return "?";
}

std::string Number(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// The command line of one combination's run: the sweep's own flags, one run, JSON out.
std::vector<std::string> OneRunArgs(const CommBenchOptions& o, const std::string& tpserve,
                                    bool registered, bool distributed) {
  // Flag, value pairs.
  // clang-format off
  std::vector<std::string> args = {tpserve, "bench-comm", "--one-run", "--json",
                                   "--collective", o.collective, "--backend", o.backend,
                                   "--collective-timeout-ms", std::to_string(o.collective_timeout_ms),
                                   "-b", std::to_string(o.min_bytes), "-e", std::to_string(o.max_bytes),
                                   "-n", std::to_string(o.iters), "-w", std::to_string(o.warmup),
                                   "-c", std::to_string(o.check), "-o", o.op, "-d", o.dtype};
  // clang-format on
  if (o.step_bytes > 0) {
    args.insert(args.end(), {"-i", std::to_string(o.step_bytes)});
  } else {
    args.insert(args.end(), {"-f", Number(o.step_factor)});
  }
  // Without --ranks across processes, a child takes torchrun's WORLD_SIZE as its parent did.
  if (o.ranks_given || !distributed) args.insert(args.end(), {"--ranks", std::to_string(o.ranks)});
  // Across processes, each combination's children meet as their parents did (the leader's
  // rendezvous port is free again once the previous combination's leader has exited).
  const MembershipFlags& m = o.membership;
  if (m.nnodes) args.insert(args.end(), {"--nnodes", std::to_string(*m.nnodes)});
  if (m.node_rank) args.insert(args.end(), {"--node-rank", std::to_string(*m.node_rank)});
  if (m.rendezvous) args.insert(args.end(), {"--rendezvous", *m.rendezvous});
  if (m.group_secret_file) args.insert(args.end(), {"--group-secret-file", *m.group_secret_file});
  args.insert(args.end(), {"--bind-address", o.bind_address, "--group-timeout-ms",
                           std::to_string(o.group_timeout_ms)});
  if (o.graph > 0) args.insert(args.end(), {"--graph", std::to_string(o.graph)});
  if (registered) args.push_back("--register");
  if (o.corrupt_rank >= 0)
    args.insert(args.end(), {"--debug-corrupt-rank", std::to_string(o.corrupt_rank)});
  return args;
}

// The last non-empty line of `text`, trimmed (a failed run's reason), at most 400 characters.
std::string LastLine(const std::string& text) {
  std::istringstream lines(text);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (!line.empty()) last = line;
  }
  return last.size() > 400 ? last.substr(0, 400) + "..." : last;
}

// The JSON object a --json run printed: its last line that starts with '{'.
Result<json> LastJsonLine(const std::string& text) {
  std::istringstream lines(text);
  std::string found;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') found = line;
  }
  if (found.empty()) return InvalidArgument("no JSON line in its output");
  return ParseJson(found, "its output");
}

// A run's time at row `i`: per call inside the graph with --graph, else out of place.
double TimeUs(const CommSweepReport& r, const CommBenchRow& row) {
  return r.graph > 0 && row.graph_us > 0 ? row.graph_us : row.oop_us;
}

const CommBenchRow* RowAt(const CommSweepRun& run, size_t bytes) {
  if (!run.result) return nullptr;
  for (const CommBenchRow& row : run.result->rows) {
    if (row.bytes == bytes) return &row;
  }
  return nullptr;
}

std::string PathName(const std::string& algorithm, const std::string& protocol) {
  if (algorithm.empty()) return protocol.empty() ? "auto" : protocol;
  return protocol.empty() ? algorithm : algorithm + "/" + protocol;
}

// "h200-sxm: link peak 370.8 GB/s per GPU (...)" for the header.
std::string HardwareHeader(const planner::HardwareProfile& p, int ranks) {
  const double peak = planner::LinkPeakGbS(p, ranks);
  char line[512];
  if (peak <= 0) {
    std::snprintf(line, sizeof(line),
                  "# hardware %s: no link peak (a CPU profile); planner: its fitted collectives\n",
                  p.name.c_str());
  } else if (ranks > p.gpus_per_node) {
    std::snprintf(
        line, sizeof(line),
        "# hardware %s: link peak %.1f GB/s per GPU (fabric.inter_node: the network past %d GPUs); "
        "planner: NCCL %s's tuning model\n",
        p.name.c_str(), peak, p.gpus_per_node, planner::kNcclTuningVersion);
  } else {
    std::snprintf(line, sizeof(line),
                  "# hardware %s: link peak %.1f GB/s per GPU, one direction (fabric.intra_node: "
                  "%d links x %.1f GB/s, NCCL's per-link figure); planner: NCCL %s's tuning model\n",
                  p.name.c_str(), peak, p.intra_node.links, p.intra_node.link_gb_s,
                  planner::kNcclTuningVersion);
  }
  return line;
}

// "  41.2%" or "      -".
std::string PercentOfPeak(double busbw, double peak) {
  char text[32];
  if (peak <= 0) return "      -";
  std::snprintf(text, sizeof(text), "%6.1f%%", 100 * busbw / peak);
  return text;
}

struct Prediction {
  bool ok = false;
  double time_us = 0;
  std::string path;
};

Prediction Predict(const planner::HardwareProfile& p, Collective c, int ranks, double bytes,
                   const planner::CollectivePath& path = {}) {
  auto estimate = planner::EstimateCollective(p, c, ranks, bytes, path);
  if (!estimate.ok()) return {};
  // NCCL's spelling (the model's fitted α/β: "fit").
  return {true, estimate->time_us,
          PathName(CanonicalNcclAlgorithm(estimate->algorithm),
                   CanonicalNcclProtocol(estimate->protocol))};
}

std::string Micros(const Prediction& p) {
  if (!p.ok) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", p.time_us);
  return text;
}

}  // namespace

bool IsCommSweep(const CommBenchOptions& o) {
  return !o.one_run && (!o.protocols.empty() || !o.algorithms.empty() || o.register_windows);
}

Result<CommSweepReport> RunCommSweep(const CommBenchOptions& o, const std::string& tpserve) {
  ASSIGN_OR_RETURN(std::vector<std::string> protocols,
                   Canonical(o.protocols, "--protocols", CanonicalNcclProtocol, kProtocolNames));
  ASSIGN_OR_RETURN(
      std::vector<std::string> algorithms,
      Canonical(o.algorithms, "--algorithms", CanonicalNcclAlgorithm, kAlgorithmNames));
  ASSIGN_OR_RETURN(Collective collective, ParseCollective(o.collective));
  if (o.backend != "nccl" && o.backend != "local") {
    return InvalidArgument(
        "--protocols / --algorithms / --register sweep NCCL's paths: they need --backend nccl "
        "(or local, where NCCL_ALGO and NCCL_PROTO change nothing: a check of the sweep itself)");
  }
  if (o.register_windows && o.backend != "nccl") {
    return InvalidArgument("--register registers NCCL symmetric windows: it needs --backend nccl");
  }
  if (tpserve.empty())
    return FailedPrecondition("bench-comm: cannot find its own executable to run the sweep");
  // Across processes every member runs the same sweep; each combination's processes meet anew.
  ASSIGN_OR_RETURN(GroupMembership membership, ResolveCommBenchMembership(o));
  CommSweepReport report;
  report.member = membership.member;
  report.collective = collective;
  report.backend = o.backend;
  report.ranks = membership.distributed() ? membership.tp : o.ranks;
  report.iters = o.iters;
  report.graph = o.graph;
  report.runs.push_back({.label = "auto"});
  for (const std::string& protocol : protocols.empty() ? std::vector<std::string>{""} : protocols) {
    for (const std::string& algorithm :
         algorithms.empty() ? std::vector<std::string>{""} : algorithms) {
      if (protocol.empty() && algorithm.empty()) continue;
      report.runs.push_back(
          {.label = PathName(algorithm, protocol), .algorithm = algorithm, .protocol = protocol});
    }
  }
  if (o.register_windows) report.runs.push_back({.label = "auto+sym", .registered = true});

  char pattern[] = "/tmp/tpserve-bench-comm-XXXXXX";
  if (mkdtemp(pattern) == nullptr)
    return Internal("bench-comm: cannot make a directory for the sweep's runs");
  const fs::path dir = pattern;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    CommSweepRun& run = report.runs[i];
    const std::string stem = "run" + std::to_string(i);
    // Each run in its own process: NCCL_ALGO / NCCL_PROTO set (or removed, for NCCL's own choice),
    // the tuner's lines written to a file of its own.
    const std::vector<std::pair<std::string, std::string>> environment = {
        {"NCCL_ALGO", run.algorithm},
        {"NCCL_PROTO", run.protocol},
        {"NCCL_DEBUG", "INFO"},
        {"NCCL_DEBUG_SUBSYS", "TUNING"},
        {"NCCL_DEBUG_FILE", (dir / (stem + ".nccl.%p.log")).string()}};
    auto child =
        RunChild(OneRunArgs(o, tpserve, run.registered, membership.distributed()), environment,
                 (dir / (stem + ".out")).string(), (dir / (stem + ".err")).string());
    if (!child.ok()) {
      run.error = child.status().message();
    } else if (child->exit_code != 0) {
      run.error = "exit " + std::to_string(child->exit_code) + ": " + LastLine(child->err);
    } else if (!membership.leader()) {
      continue;  // a follower's run prints nothing: the leader's has the results
    } else {
      auto value = LastJsonLine(child->out);
      auto result = value.ok() ? ParseCommBenchJson(*value, run.label)
                               : Result<CommBenchReport>(value.status());
      if (result.ok()) {
        run.result = std::move(*result);
      } else {
        run.error = result.status().message();
      }
    }
    std::vector<NcclTuningChoice> lines;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(stem + ".nccl.", 0) == 0) {
        auto text = ReadTextFile(entry.path().string());
        if (!text.ok()) continue;  // NCCL still writing or gone: the run's other files decide
        for (NcclTuningChoice& choice : ParseNcclTuningLog(*text))
          lines.push_back(std::move(choice));
      }
    }
    // One entry per distinct choice: a run prints one line per call.
    run.tuning = CountChoices(lines);
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  if (!membership.leader()) {
    for (const CommSweepRun& run : report.runs) {
      if (!run.error.empty())
        return Internal("bench-comm: run " + run.label + " failed on this member: " + run.error);
    }
    return report;
  }
  if (std::none_of(report.runs.begin(), report.runs.end(),
                   [](const CommSweepRun& r) { return r.result.has_value(); })) {
    return Internal("bench-comm: every run of the sweep failed; the first: " +
                    report.runs.front().error);
  }
  return report;
}

json CommSweepJson(const CommSweepReport& r) {
  json runs = json::array();
  for (const CommSweepRun& run : r.runs) {
    json tuning = json::array();
    for (const NcclTuningChoice& c : run.tuning) {
      tuning.push_back({{"collective", c.collective},
                        {"bytes", c.bytes},
                        {"algorithm", c.algorithm},
                        {"protocol", c.protocol},
                        {"symmetric", c.symmetric},
                        {"calls", c.calls}});
    }
    json entry = {{"label", run.label},
                  {"algorithm", run.algorithm},
                  {"protocol", run.protocol},
                  {"registered", run.registered},
                  {"tuning", tuning}};
    entry["result"] = run.result ? CommBenchJsonValue(*run.result) : json(nullptr);
    if (!run.error.empty()) entry["error"] = run.error;
    runs.push_back(std::move(entry));
  }
  return {{"sweep",
           {{"collective", CollectiveName(r.collective)},
            {"backend", r.backend},
            {"ranks", r.ranks},
            {"iters", r.iters},
            {"graph", r.graph},
            {"runs", runs}}}};
}

Result<CommSweepReport> ParseCommSweepJson(const json& value, const std::string& source) {
  CommSweepReport r;
  if (value.is_object() && value.contains("rows")) {  // one bench-comm run
    ASSIGN_OR_RETURN(CommBenchReport single, ParseCommBenchJson(value, source));
    r.collective = single.collective;
    r.backend = single.backend;
    r.ranks = single.ranks;
    r.runs.push_back({.label = "auto", .result = std::move(single)});
    return r;
  }
  try {
    const json& sweep = value.at("sweep");
    ASSIGN_OR_RETURN(r.collective, ParseCollective(sweep.at("collective").get<std::string>()));
    r.backend = sweep.at("backend").get<std::string>();
    r.ranks = sweep.at("ranks").get<int>();
    r.iters = sweep.value("iters", 0);
    r.graph = sweep.value("graph", 0);
    for (const json& entry : sweep.at("runs")) {
      CommSweepRun run;
      run.label = entry.at("label").get<std::string>();
      run.algorithm = entry.value("algorithm", "");
      run.protocol = entry.value("protocol", "");
      run.registered = entry.value("registered", false);
      run.error = entry.value("error", "");
      if (entry.contains("result") && !entry["result"].is_null()) {
        ASSIGN_OR_RETURN(CommBenchReport result,
                         ParseCommBenchJson(entry["result"], source + ": run " + run.label));
        run.result = std::move(result);
      }
      for (const json& c : entry.value("tuning", json::array())) {
        run.tuning.push_back({c.value("collective", ""), c.at("bytes").get<size_t>(),
                              c.value("algorithm", ""), c.value("protocol", ""),
                              c.value("symmetric", false), c.value("calls", 1)});
      }
      r.runs.push_back(std::move(run));
    }
  } catch (const std::exception& e) {
    return InvalidArgument(source + ": not bench-comm --json output: " + e.what());
  }
  if (r.runs.empty()) return InvalidArgument(source + ": a sweep with no runs");
  return r;
}

std::string FormatCommSweep(const CommSweepReport& r, const planner::HardwareProfile* hardware) {
  std::string out;
  char line[1024];
  const CommSweepRun* first = nullptr;
  for (const CommSweepRun& run : r.runs) {
    if (run.result && first == nullptr) first = &run;
  }
  if (first == nullptr) return "# bench-comm sweep: no run succeeded\n";
  const CommBenchReport& base = *first->result;
  const std::string backend = DescribeBackend(base);
  std::snprintf(
      line, sizeof(line), "# tpserve bench-comm sweep: %s, backend %s%s, %d ranks, %d iters; %s\n",
      CollectiveName(r.collective).c_str(), backend.c_str(),
      base.device.empty() ? "" : (" (" + base.device + ")").c_str(), r.ranks, r.iters,
      r.graph > 0
          ? ("time per call inside a CUDA graph of " + std::to_string(r.graph) + " calls (us)")
                .c_str()
          : "out-of-place time per call (us)");
  out += line;
  out +=
      "# runs: auto = NCCL's own choice (NCCL_ALGO and NCCL_PROTO unset); A/P = NCCL_ALGO=A "
      "NCCL_PROTO=P, each in a process of its own";
  out += std::any_of(r.runs.begin(), r.runs.end(),
                     [](const CommSweepRun& run) { return run.registered; })
             ? "; auto+sym = auto on buffers registered as symmetric windows (--register)\n"
             : "\n";
  if (r.backend == "local") {
    out +=
        "# local backend: NCCL_ALGO and NCCL_PROTO change nothing here; every run times the same "
        "in-process collective (a check of the sweep itself)\n";
  }
  if (hardware != nullptr) out += HardwareHeader(*hardware, r.ranks);
  out += "#\n#       size";
  for (const CommSweepRun& run : r.runs) {
    if (run.result) {
      std::snprintf(line, sizeof(line), " %11s", run.label.c_str());
      out += line;
    }
  }
  out += "      fastest  tuner picked";
  if (hardware != nullptr) out += "  busbw(GB/s)  of peak  planner(us)  planner path";
  out += "\n";
  const double factor = BusBandwidthFactor(r.collective, r.ranks);
  const CommSweepRun& automatic = r.runs.front();
  for (const CommBenchRow& size_row : base.rows) {
    std::snprintf(line, sizeof(line), "%12zu", size_row.bytes);
    out += line;
    const CommSweepRun* fastest = nullptr;
    double fastest_us = std::numeric_limits<double>::infinity();
    for (const CommSweepRun& run : r.runs) {
      if (!run.result) continue;
      const CommBenchRow* row = RowAt(run, size_row.bytes);
      if (row == nullptr) {
        out += "           -";
        continue;
      }
      const double us = TimeUs(r, *row);
      std::snprintf(line, sizeof(line), " %11.2f", us);
      out += line;
      if (us < fastest_us && row->oop_wrong == 0) {
        fastest_us = us;
        fastest = &run;
      }
    }
    const NcclTuningChoice* pick =
        ChoiceAt(automatic.tuning, NcclCollectiveName(r.collective), size_row.bytes);
    const std::string picked = pick == nullptr ? "-" : PathName(pick->algorithm, pick->protocol);
    std::snprintf(line, sizeof(line), "  %11s  %12s", fastest ? fastest->label.c_str() : "-",
                  picked.c_str());
    out += line;
    if (hardware != nullptr) {
      const double busbw = fastest ? size_row.bytes / (fastest_us * 1e-6) / 1e9 * factor : 0;
      const Prediction predicted =
          Predict(*hardware, r.collective, r.ranks, static_cast<double>(size_row.bytes));
      std::snprintf(line, sizeof(line), "  %11.2f  %s  %11s  %12s", busbw,
                    PercentOfPeak(busbw, planner::LinkPeakGbS(*hardware, r.ranks)).c_str(),
                    Micros(predicted).c_str(), predicted.ok ? predicted.path.c_str() : "-");
      out += line;
    }
    out += "\n";
  }
  if (hardware != nullptr) {
    // The planner on each run's own path (a fit calibrated for it, else NCCL's model of it).
    out += "#\n# the planner on each run's path (us; - where " + hardware->name +
           " has no such path)\n#       size";
    for (const CommSweepRun& run : r.runs) {
      if (!run.result) continue;
      std::snprintf(line, sizeof(line), " %11s", run.label.c_str());
      out += line;
    }
    out += "\n";
    for (const CommBenchRow& size_row : base.rows) {
      std::snprintf(line, sizeof(line), "%12zu", size_row.bytes);
      out += line;
      for (const CommSweepRun& run : r.runs) {
        if (!run.result) continue;
        const Prediction predicted = run.registered ? Prediction{}
                                                    : Predict(*hardware, r.collective, r.ranks,
                                                              static_cast<double>(size_row.bytes),
                                                              {run.algorithm, run.protocol});
        std::snprintf(line, sizeof(line), " %11s", Micros(predicted).c_str());
        out += line;
      }
      out += "\n";
    }
  }
  for (const CommSweepRun& run : r.runs) {
    if (!run.result) out += "# " + run.label + " did not run: " + run.error + "\n";
    if (run.result && run.result->rows.size() > 0) {
      size_t wrong = 0;
      for (const CommBenchRow& row : run.result->rows) wrong += row.oop_wrong + row.ip_wrong;
      if (wrong > 0)
        out += "# " + run.label + ": " + std::to_string(wrong) +
               " wrong elements (not counted as fastest)\n";
    }
    if (!run.registered || !run.result) continue;
    // Whether the symmetric kernels ran: NCCL's own lines say so, size by size.
    std::vector<size_t> symmetric, other;
    for (const CommBenchRow& row : run.result->rows) {
      const bool ran = std::any_of(
          run.tuning.begin(), run.tuning.end(),
          [&](const NcclTuningChoice& c) { return c.bytes == row.bytes && c.symmetric; });
      (ran ? symmetric : other).push_back(row.bytes);
    }
    if (run.tuning.empty()) {
      out += "# " + run.label +
             ": NCCL's debug output has no tuning lines, so whether the symmetric kernels ran is "
             "unknown\n";
    } else if (symmetric.empty()) {
      out += "# " + run.label +
             ": the symmetric kernels did not run at any size (NCCL's tuning lines name none)\n";
    } else {
      std::snprintf(line, sizeof(line),
                    "# %s: the symmetric kernels ran at %zu of %zu sizes (%zu B .. %zu B)\n",
                    run.label.c_str(), symmetric.size(), run.result->rows.size(), symmetric.front(),
                    symmetric.back());
      out += line;
    }
  }
  return out;
}

LineChart CommSweepChart(const CommSweepReport& r, const planner::HardwareProfile* hardware) {
  LineChart chart;
  chart.title = CollectiveName(r.collective) + ", " + std::to_string(r.ranks) + " ranks, " +
                r.backend + ": one line per NCCL_ALGO / NCCL_PROTO";
  chart.x_label = "message size (bytes)";
  chart.y_label = r.graph > 0 ? "time per call in a CUDA graph (us)" : "time per call (us)";
  chart.log_x = chart.log_y = true;
  const CommBenchReport* base = nullptr;
  for (const CommSweepRun& run : r.runs) {
    if (!run.result) continue;
    if (base == nullptr) base = &*run.result;
    ChartSeries series;
    series.label = run.label;
    for (const CommBenchRow& row : run.result->rows) {
      series.points.emplace_back(row.bytes, TimeUs(r, row));
    }
    chart.series.push_back(std::move(series));
  }
  if (hardware != nullptr && base != nullptr) {
    ChartSeries model;
    model.label = "planner (" + hardware->name + ")";
    model.dashed = true;
    for (const CommBenchRow& row : base->rows) {
      const Prediction predicted =
          Predict(*hardware, r.collective, r.ranks, static_cast<double>(row.bytes));
      if (predicted.ok) model.points.emplace_back(row.bytes, predicted.time_us);
    }
    if (!model.points.empty()) chart.series.push_back(std::move(model));
  }
  return chart;
}

std::string FormatHardwareComparison(const CommBenchReport& r,
                                     const planner::HardwareProfile& hardware) {
  std::string out = "#\n" + HardwareHeader(hardware, r.ranks);
  out += "#       size  busbw(GB/s)  of peak  planner(us)  planner path  measured/planner\n";
  const double peak = planner::LinkPeakGbS(hardware, r.ranks);
  char line[256];
  for (const CommBenchRow& row : r.rows) {
    const Prediction predicted =
        Predict(hardware, r.collective, r.ranks, static_cast<double>(row.bytes));
    char ratio[32] = "-";
    if (predicted.ok && predicted.time_us > 0)
      std::snprintf(ratio, sizeof(ratio), "%.2fx", row.oop_us / predicted.time_us);
    std::snprintf(line, sizeof(line), "%12zu  %11.2f  %s  %11s  %12s  %15s\n", row.bytes,
                  row.oop_busbw, PercentOfPeak(row.oop_busbw, peak).c_str(),
                  Micros(predicted).c_str(), predicted.ok ? predicted.path.c_str() : "-", ratio);
    out += line;
  }
  return out;
}

}  // namespace tpserve

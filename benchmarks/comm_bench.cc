#include "benchmarks/comm_bench.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/comm_bench_values.h"
#include "benchmarks/comm_peer.h"
#include "comm/allreduce_choice.h"
#include "comm/in_process_communicator.h"
#include "engine/process_group.h"
#include "kernels/cuda_module.h"
#include "engine/cuda_backend.h"
#include "common/thread_affinity.h"

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

const char* PeerCollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "MPI_Allreduce";
    case Collective::kAllGather: return "MPI_Allgather";
    case Collective::kReduceScatter: return "MPI_Reduce_scatter_block";
    case Collective::kBroadcast: return "MPI_Bcast";
  }
  return "MPI";
}

namespace {


// Element counts per rank buffer as nccl-tests sizes them: S is the total for AllGather and
// ReduceScatter (count × n), the buffer for AllReduce and Broadcast.
size_t CountFor(Collective c, size_t bytes, int n) {
  const size_t elements = bytes / sizeof(float);
  return (c == Collective::kAllGather || c == Collective::kReduceScatter) ? elements / n : elements;
}

struct RankBuffers {
  std::vector<float> send, recv;
};

// One call of the collective on one rank; in_place uses recv for both ends.
Status Call(Collective c, Communicator& comm, RankBuffers& b, size_t count, bool in_place) {
  const int n = comm.world_size(), r = comm.rank();
  switch (c) {
    case Collective::kAllReduce:
      if (!in_place) std::memcpy(b.recv.data(), b.send.data(), count * sizeof(float));
      return comm.AllReduceSum(b.recv.data(), count);
    case Collective::kBroadcast:
      if (!in_place) std::memcpy(b.recv.data(), b.send.data(), count * sizeof(float));
      return comm.Broadcast(b.recv.data(), count, 0);
    case Collective::kAllGather:
      return comm.AllGather(in_place ? b.recv.data() + r * count : b.send.data(), b.recv.data(), count);
    case Collective::kReduceScatter:
      if (in_place) {
        // nccl-tests' in-place reduce-scatter: the input is recv, the output its own chunk.
        std::vector<float> chunk(count);
        RETURN_IF_ERROR(comm.ReduceScatterSum(b.recv.data(), chunk.data(), count));
        std::memcpy(b.recv.data() + r * count, chunk.data(), count * sizeof(float));
        return Status::Ok();
      }
      return comm.ReduceScatterSum(b.send.data(), b.recv.data(), count);
  }
  (void)n;
  return Status::Ok();
}

void Fill(Collective c, RankBuffers& b, int rank, int n, size_t count, bool in_place, int corrupt_rank) {
  const size_t input = (c == Collective::kReduceScatter) ? count * n : count;
  b.send.resize(input);
  b.recv.assign(c == Collective::kAllGather || c == Collective::kReduceScatter ? count * n : count, 0.0f);
  for (size_t i = 0; i < input; ++i) b.send[i] = CommBenchInput(rank, i);
  if (rank == corrupt_rank && input > 0) b.send[input / 2] += 1.0f;
  if (in_place) {
    if (c == Collective::kAllGather) {
      std::memcpy(b.recv.data() + rank * count, b.send.data(), count * sizeof(float));
    } else {
      std::memcpy(b.recv.data(), b.send.data(), input * sizeof(float));
    }
  }
}

// Elements of this rank's result that differ from the collective's definition.
size_t CountWrong(Collective c, const RankBuffers& b, int rank, int n, size_t count, bool in_place) {
  size_t wrong = 0;
  switch (c) {
    case Collective::kAllReduce:
      for (size_t i = 0; i < count; ++i) wrong += b.recv[i] != CommBenchSum(n, i);
      break;
    case Collective::kBroadcast:
      for (size_t i = 0; i < count; ++i) wrong += b.recv[i] != CommBenchInput(0, i);
      break;
    case Collective::kAllGather:
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) wrong += b.recv[q * count + i] != CommBenchInput(q, i);
      }
      break;
    case Collective::kReduceScatter: {
      const float* out = in_place ? b.recv.data() + rank * count : b.recv.data();
      for (size_t i = 0; i < count; ++i) wrong += out[i] != CommBenchSum(n, rank * count + i);
      break;
    }
  }
  return wrong;
}

// Runs warmup + iters calls on every rank of this process (`group`: the ranks another process
// shares the collective with, over Gloo; null: all ranks here, in a fresh in-process group);
// returns the mean time per call of its first rank and #wrong over its ranks.
Result<std::pair<double, size_t>> Measure(const CommBenchOptions& o, Collective c, size_t count, bool in_place,
                                          std::vector<std::unique_ptr<Communicator>>* group) {
  std::vector<std::unique_ptr<Communicator>> own;
  if (group == nullptr) {
    for (auto& comm : InProcessCommunicator::CreateGroup(o.ranks, std::chrono::milliseconds(o.collective_timeout_ms))) {
      own.push_back(std::move(comm));
    }
  }
  std::vector<std::unique_ptr<Communicator>>& comms = group != nullptr ? *group : own;
  const size_t local = comms.size();
  std::vector<RankBuffers> buffers(local);
  std::vector<Status> statuses(local);
  std::vector<size_t> wrong(local, 0);
  double seconds = 0;
  std::vector<std::thread> threads;
  for (size_t index = 0; index < local; ++index) {
    threads.emplace_back([&, index] {
      PinThisThreadToCore(static_cast<int>(index));
      Communicator& comm = *comms[index];
      const int r = comm.rank(), n = comm.world_size();
      RankBuffers& b = buffers[index];
      Fill(c, b, r, n, count, in_place, o.corrupt_rank);
      for (int i = 0; i < o.warmup && statuses[index].ok(); ++i) {
        statuses[index] = Call(c, comm, b, count, in_place);
        Fill(c, b, r, n, count, in_place, o.corrupt_rank);  // in-place calls consume their input
      }
      if (!statuses[index].ok()) return;
      comm.Barrier().ok();
      const auto start = Clock::now();
      for (int i = 0; i < o.iters && statuses[index].ok(); ++i) {
        statuses[index] = Call(c, comm, b, count, in_place);  // in place: sums of sums, timing only
      }
      comm.Barrier().ok();
      if (index == 0) seconds = std::chrono::duration<double>(Clock::now() - start).count() / std::max(1, o.iters);
      if (o.check) {
        Fill(c, b, r, n, count, in_place, o.corrupt_rank);
        Status s = Call(c, comm, b, count, in_place);
        if (s.ok()) wrong[index] = CountWrong(c, b, r, n, count, in_place);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : statuses) RETURN_IF_ERROR(s);
  size_t total_wrong = 0;
  for (size_t w : wrong) total_wrong += w;
  return std::make_pair(seconds, total_wrong);
}

bool IsDeviceBackend(const std::string& backend) {
  return backend == "nccl" || backend == "rank-order" || backend == "oneshot";
}

// A multi-process group's share on this process (world 0: every rank here).
struct DeviceShare {
  int world = 0;
  int first_rank = 0;
  int local_ranks = 0;
  int first_device = 0;
  std::string nccl_unique_id;
};

// The sweep's points on a device backend, one module call for all of them.
Result<DeviceCommBenchReply> MeasureOnDevice(const CommBenchOptions& o, const std::string& backend, Collective c,
                                             const std::vector<size_t>& counts, const DeviceShare& share = {}) {
  ASSIGN_OR_RETURN(CudaProbe probe, ProbeCudaBackend());
  DeviceCommBenchRequest request{.backend = backend, .all_gather = c == Collective::kAllGather,
                                 .ranks = share.world > 0 ? share.local_ranks : o.ranks,
                                 .counts = counts, .iters = o.iters, .warmup = o.warmup, .check = o.check != 0,
                                 .graph_calls = backend == o.backend ? o.graph : 0,
                                 .register_windows = backend == o.backend && o.register_windows,
                                 .world = share.world, .first_rank = share.first_rank,
                                 .first_device = share.first_device, .nccl_unique_id = share.nccl_unique_id};
  return RunDeviceCommBench(probe.module_path, request);
}

// --allreduce-table: NCCL at the same sizes (one GPU per rank), as the report's peer, and the
// table of which wins where.
Status CompareWithNccl(const CommBenchOptions& o, const std::vector<size_t>& counts, CommBenchReport* report) {
  ASSIGN_OR_RETURN(DeviceCommBenchReply nccl, MeasureOnDevice(o, "nccl", Collective::kAllReduce, counts));
  report->peer = "nccl";
  report->peer_library = nccl.library;
  report->peer_command = "bench-comm --backend nccl, same sizes and iterations, one GPU per rank";
  AllReduceTable table{.tp = o.ranks, .device = report->device, .nccl = nccl.library, .rows = {}};
  for (size_t i = 0; i < report->rows.size() && i < nccl.rows.size(); ++i) {
    CommBenchRow& row = report->rows[i];
    row.peer_us = nccl.rows[i].oop_s * 1e6;
    row.peer_wrong = nccl.rows[i].oop_wrong;
    table.rows.push_back({.bytes = row.bytes, .nccl_us = row.peer_us, .oneshot_us = row.oop_us});
  }
  return WriteAllReduceTable(o.allreduce_table, table);
}

}  // namespace

Result<GroupMembership> ResolveCommBenchMembership(const CommBenchOptions& o) {
  MembershipFlags flags = o.membership;
  if (o.ranks_given) flags.tp = o.ranks;  // else: torchrun's WORLD_SIZE, one rank per process
  return ResolveMembership(flags, MembershipEnvironment());
}

std::string DescribeBackend(const CommBenchReport& r) {
  if (r.backend != "local") return r.library + ", " + r.placement;
  if (r.members <= 1) return "local (threads)";
  return "local, Gloo over TCP across " + std::to_string(r.members) + " processes (the leader's ranks " +
         std::to_string(r.first_rank) + ".." + std::to_string(r.first_rank + r.local_ranks - 1) + " timed)";
}

Result<CommBenchReport> RunCommBench(const CommBenchOptions& options) {
  CommBenchOptions o = options;
  ASSIGN_OR_RETURN(Collective c, ParseCollective(o.collective));
  // Several processes (flags or torchrun's variables): this one runs its share of the ranks.
  ASSIGN_OR_RETURN(GroupMembership membership, ResolveCommBenchMembership(o));
  if (membership.distributed()) {
    o.ranks = membership.tp;
    if (o.backend != "local" && o.backend != "nccl") {
      return InvalidArgument("--backend " + o.backend + " runs in one process; across processes: local (Gloo) or nccl");
    }
    if (!o.peer.empty() || !o.allreduce_table.empty()) {
      return InvalidArgument("--peer and --allreduce-table run in one process, not across " +
                             std::to_string(membership.members));
    }
  }
  const bool device = IsDeviceBackend(o.backend);
  if (o.backend != "local" && !device) {
    return InvalidArgument("--backend '" + o.backend + "': one of local (ranks as threads), nccl (one GPU per rank), "
                           "rank-order (ranks sharing GPU 0), oneshot (peers' buffers read directly)");
  }
  if (!o.allreduce_table.empty() && (o.backend != "oneshot" || c != Collective::kAllReduce)) {
    return InvalidArgument("--allreduce-table compares one-shot with NCCL: it needs --backend oneshot and all_reduce");
  }
  if (o.backend == "oneshot" && c != Collective::kAllReduce) {
    return Unimplemented("--backend oneshot runs all_reduce (its AllGather is NCCL's)");
  }
  if (device && c != Collective::kAllReduce && c != Collective::kAllGather) {
    return Unimplemented("--backend " + o.backend + " runs all_reduce and all_gather (the decoder's collectives)");
  }
  if (device && !o.peer.empty()) return InvalidArgument("--peer mpi compares with the local backend only");
  if (o.graph < 0) return InvalidArgument("--graph N: N must be >= 0");
  if ((o.graph > 0 || o.register_windows) && o.backend != "nccl") {
    return InvalidArgument(std::string(o.graph > 0 ? "--graph captures" : "--register registers") +
                           " NCCL's calls: it needs --backend nccl");
  }
  if (o.dtype != "float") return Unimplemented("-d '" + o.dtype + "': bench-comm reduces float only");
  if (o.op != "sum") return Unimplemented("-o '" + o.op + "': bench-comm supports sum only");
  if (o.ranks < 1 || o.ranks > 64) return InvalidArgument("--ranks must be 1..64");
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes) return InvalidArgument("-b / -e: need 4 <= -b <= -e");
  if (o.step_bytes == 0 && o.step_factor <= 1) return InvalidArgument("-f must be > 1");
  if (!o.peer.empty() && o.peer != "mpi") return InvalidArgument("--peer '" + o.peer + "': the only peer is 'mpi'");
  CommBenchReport report;
  report.collective = c;
  report.ranks = o.ranks;
  report.backend = o.backend;
  const double factor = BusBandwidthFactor(c, o.ranks);
  std::vector<size_t> counts;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;
       bytes = o.step_bytes > 0 ? bytes + o.step_bytes : static_cast<size_t>(std::ceil(bytes * o.step_factor))) {
    const size_t count = CountFor(c, bytes, o.ranks);
    if (count > 0) counts.push_back(count);
  }
  report.local_ranks = o.ranks;
  // The group: every member checks that the others run the same sweep, then the ranks connect
  // (local: one Gloo communicator among the members; nccl: the leader's ncclUniqueId).
  std::unique_ptr<ProcessGroup> process_group;
  std::vector<std::unique_ptr<Communicator>> group_comms;
  std::string nccl_unique_id;
  if (membership.distributed()) {
    report.members = membership.members;
    report.member = membership.member;
    report.first_rank = membership.first_rank;
    report.local_ranks = membership.local_ranks;
    char fingerprint[512];
    std::snprintf(fingerprint, sizeof(fingerprint), "bench-comm %s backend %s ranks %d sizes %zu..%zu f %g i %zu n %d w %d c %d graph %d",
                  o.collective.c_str(), o.backend.c_str(), o.ranks, o.min_bytes, o.max_bytes, o.step_factor,
                  o.step_bytes, o.iters, o.warmup, o.check, o.graph);
    ASSIGN_OR_RETURN(process_group, ProcessGroup::Join(membership, fingerprint, o.bind_address,
                                                       std::chrono::milliseconds(o.group_timeout_ms)));
    if (device) {
      ASSIGN_OR_RETURN(CudaProbe probe, ProbeCudaBackend());
      ASSIGN_OR_RETURN(nccl_unique_id, process_group->ShareFromLeader("nccl_unique_id", [&] {
        return MakeNcclUniqueId(probe.module_path);
      }));
    } else {
      ASSIGN_OR_RETURN(group_comms, process_group->ConnectRanks(std::chrono::milliseconds(o.collective_timeout_ms)));
    }
    process_group->MarkReady();
  }
  DeviceCommBenchReply on_device;  // device backends: one row per count
  if (device) {
    ASSIGN_OR_RETURN(on_device, MeasureOnDevice(o, o.backend, c, counts,
                                                {.world = membership.distributed() ? o.ranks : 0,
                                                 .first_rank = membership.first_rank,
                                                 .local_ranks = membership.local_ranks,
                                                 .first_device = std::max(0, membership.local_device),
                                                 .nccl_unique_id = nccl_unique_id}));
    report.library = on_device.library;
    report.placement = on_device.placement;
    report.device = on_device.device;
  }
  std::vector<std::pair<double, double>> samples;
  for (size_t point = 0; point < counts.size(); ++point) {
    const size_t count = counts[point];
    CommBenchRow row;
    row.count = count;
    row.bytes = (c == Collective::kAllGather || c == Collective::kReduceScatter) ? count * o.ranks * sizeof(float)
                                                                                   : count * sizeof(float);
    std::pair<double, size_t> oop, ip;
    if (device) {
      const DeviceCommBenchRow& timed = on_device.rows[point];
      oop = {timed.oop_s, timed.oop_wrong};
      ip = {timed.ip_s, timed.ip_wrong};
      row.graph_us = timed.graph_s * 1e6;
    } else {
      std::vector<std::unique_ptr<Communicator>>* group = membership.distributed() ? &group_comms : nullptr;
      ASSIGN_OR_RETURN(oop, Measure(o, c, count, false, group));
      ASSIGN_OR_RETURN(ip, Measure(o, c, count, true, group));
    }
    row.oop_us = oop.first * 1e6;
    row.oop_wrong = oop.second;
    row.ip_us = ip.first * 1e6;
    row.ip_wrong = ip.second;
    row.oop_algbw = row.bytes / oop.first / 1e9;
    row.ip_algbw = row.bytes / ip.first / 1e9;
    row.oop_busbw = row.oop_algbw * factor;
    row.ip_busbw = row.ip_algbw * factor;
    samples.emplace_back(static_cast<double>(row.bytes), oop.first);
    report.rows.push_back(row);
  }
  if (o.peer == "mpi") {
    // After the local sweep, so the MPI processes never compete with the timed threads.
    std::vector<size_t> sizes;
    for (const auto& row : report.rows) sizes.push_back(row.bytes);
    ASSIGN_OR_RETURN(PeerSweep sweep, RunMpiPeer(c, o.ranks, sizes, o.iters, o.warmup));
    report.peer = sweep.name;
    report.peer_library = sweep.library;
    report.peer_command = sweep.command;
    for (auto& row : report.rows) {
      for (const PeerRow& peer_row : sweep.rows) {
        if (peer_row.bytes == row.bytes) {
          row.peer_us = peer_row.time_us;
          row.peer_wrong = peer_row.wrong;
        }
      }
    }
  }
  if (!o.allreduce_table.empty()) RETURN_IF_ERROR(CompareWithNccl(o, counts, &report));
  if (o.ranks > 1) {
    auto fit = FitAlphaBeta(samples, factor);
    if (fit.ok()) {
      report.fit = *fit;
      report.fitted = true;
    }
  }
  return report;
}

std::string FormatCommBench(const CommBenchReport& r, const CommBenchOptions& o) {
  std::string out;
  char line[512];
  const std::string backend = DescribeBackend(r);
  std::snprintf(line, sizeof(line), "# tpserve bench-comm: %s, backend %s, %d ranks, %d iters, %d warmup, check %d\n#\n",
                CollectiveName(r.collective).c_str(), backend.c_str(), r.ranks, o.iters, o.warmup, o.check);
  out += line;
  out += "#                                                              out-of-place                       in-place          \n";
  out += "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
  out += "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n";
  const bool rooted = r.collective == Collective::kBroadcast;
  const char* redop = r.collective == Collective::kAllReduce || r.collective == Collective::kReduceScatter ? "sum" : "none";
  for (const auto& row : r.rows) {
    std::snprintf(line, sizeof(line), "%12zu  %12zu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %5zu  %7.2f  %6.2f  %6.2f  %5zu\n",
                  row.bytes, row.count, "float", redop, rooted ? 0 : -1, row.oop_us, row.oop_algbw, row.oop_busbw,
                  row.oop_wrong, row.ip_us, row.ip_algbw, row.ip_busbw, row.ip_wrong);
    out += line;
  }
  double bus_sum = 0;
  for (const auto& row : r.rows) bus_sum += row.oop_busbw;
  std::snprintf(line, sizeof(line), "# Avg bus bandwidth    : %g \n", r.rows.empty() ? 0 : bus_sum / r.rows.size());
  out += line;
  if (r.fitted) {
    std::snprintf(line, sizeof(line),
                  "# alpha-beta fit (out-of-place): alpha %.2f us, beta %.2f GB/s (bus), latency and bandwidth terms equal at %.0f B\n",
                  r.fit.alpha_s * 1e6, r.fit.beta_bytes_per_s / 1e9, r.fit.crossover_bytes);
    out += line;
  }
  if (o.graph > 0) {
    std::snprintf(line, sizeof(line), "#\n# --graph %d: out-of-place calls captured in one CUDA graph, launched as one\n", o.graph);
    out += line;
    out += "#       size    eager(us)    graph(us)  graph/eager\n";
    for (const auto& row : r.rows) {
      std::snprintf(line, sizeof(line), "%12zu  %11.2f  %11.2f  %10.2fx\n", row.bytes, row.oop_us, row.graph_us,
                    row.oop_us > 0 ? row.graph_us / row.oop_us : 0);
      out += line;
    }
  }
  if (!r.peer.empty()) {
    const bool mpi = r.peer == "mpi";
    std::snprintf(line, sizeof(line), "#\n# peer: %s (%s), %d %s, same sizes and iterations, run after the sweep\n",
                  mpi ? PeerCollectiveName(r.collective) : "ncclAllReduce", r.peer_library.c_str(), r.ranks,
                  mpi ? "processes" : "ranks");
    out += line;
    out += "# " + r.peer_command + "\n";
    std::snprintf(line, sizeof(line), "#       size  %10s  %10s  %10s  %9s  #wrong\n", (r.backend + "(us)").c_str(),
                  (r.peer + "(us)").c_str(), (r.peer + "/" + r.backend).c_str(), (r.peer + "_busbw").c_str());
    out += line;
    const double factor = BusBandwidthFactor(r.collective, r.ranks);
    for (const auto& row : r.rows) {
      const double busbw = row.peer_us > 0 ? row.bytes / (row.peer_us * 1e-6) / 1e9 * factor : 0;
      std::snprintf(line, sizeof(line), "%12zu  %10.2f  %10.2f  %9.2fx  %9.2f  %6zu\n", row.bytes, row.oop_us, row.peer_us,
                    row.oop_us > 0 ? row.peer_us / row.oop_us : 0, busbw, row.peer_wrong);
      out += line;
    }
  }
  return out;
}

std::string CommBenchJson(const CommBenchReport& r) { return CommBenchJsonValue(r).dump(); }

nlohmann::json CommBenchJsonValue(const CommBenchReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    rows.push_back({{"size", row.bytes}, {"count", row.count}, {"type", "float"},
                    {"out_of_place", {{"time_us", row.oop_us}, {"algbw", row.oop_algbw}, {"busbw", row.oop_busbw}, {"wrong", row.oop_wrong}}},
                    {"in_place", {{"time_us", row.ip_us}, {"algbw", row.ip_algbw}, {"busbw", row.ip_busbw}, {"wrong", row.ip_wrong}}}});
    if (row.graph_us > 0) rows.back()["graph"] = {{"time_us", row.graph_us}};
  }
  if (!r.peer.empty()) {
    for (size_t i = 0; i < r.rows.size(); ++i) {
      rows[i]["peer"] = {{"time_us", r.rows[i].peer_us}, {"wrong", r.rows[i].peer_wrong},
                         {"ratio", r.rows[i].oop_us > 0 ? r.rows[i].peer_us / r.rows[i].oop_us : 0}};
    }
  }
  nlohmann::json out = {{"collective", CollectiveName(r.collective)}, {"backend", r.backend}, {"ranks", r.ranks}, {"rows", rows}};
  if (!r.library.empty()) {
    out["library"] = r.library;
    out["placement"] = r.placement;
    out["device"] = r.device;
  }
  if (r.members > 1) out["processes"] = {{"members", r.members}, {"first_rank", r.first_rank}, {"local_ranks", r.local_ranks}};
  if (!r.peer.empty()) out["peer"] = {{"name", r.peer}, {"library", r.peer_library}, {"command", r.peer_command}};
  if (r.fitted) {
    out["fit"] = {{"alpha_us", r.fit.alpha_s * 1e6}, {"beta_gb_s", r.fit.beta_bytes_per_s / 1e9},
                  {"crossover_bytes", r.fit.crossover_bytes}};
  }
  return out;
}

Result<CommBenchReport> ParseCommBenchJson(const nlohmann::json& value, const std::string& source) {
  CommBenchReport r;
  try {
    ASSIGN_OR_RETURN(r.collective, ParseCollective(value.at("collective").get<std::string>()));
    r.backend = value.at("backend").get<std::string>();
    r.ranks = value.at("ranks").get<int>();
    r.library = value.value("library", "");
    r.placement = value.value("placement", "");
    r.device = value.value("device", "");
    if (value.contains("processes")) {
      const nlohmann::json& processes = value["processes"];
      r.members = processes.value("members", 1);
      r.first_rank = processes.value("first_rank", 0);
      r.local_ranks = processes.value("local_ranks", 0);
    }
    const double factor = BusBandwidthFactor(r.collective, std::max(1, r.ranks));
    for (const nlohmann::json& entry : value.at("rows")) {
      CommBenchRow row;
      row.bytes = entry.at("size").get<size_t>();
      row.count = entry.value("count", size_t{0});
      const nlohmann::json& oop = entry.at("out_of_place");
      row.oop_us = oop.at("time_us").get<double>();
      row.oop_wrong = oop.value("wrong", size_t{0});
      if (!(row.oop_us > 0)) {
        return InvalidArgument(source + ": size " + std::to_string(row.bytes) + ": out_of_place.time_us must be > 0");
      }
      row.oop_algbw = row.bytes / (row.oop_us * 1e-6) / 1e9;
      row.oop_busbw = row.oop_algbw * factor;
      if (entry.contains("in_place")) {
        row.ip_us = entry["in_place"].value("time_us", 0.0);
        row.ip_wrong = entry["in_place"].value("wrong", size_t{0});
        row.ip_algbw = row.ip_us > 0 ? row.bytes / (row.ip_us * 1e-6) / 1e9 : 0;
        row.ip_busbw = row.ip_algbw * factor;
      }
      if (entry.contains("graph")) row.graph_us = entry["graph"].value("time_us", 0.0);
      r.rows.push_back(row);
    }
  } catch (const std::exception& e) {
    return InvalidArgument(source + ": not bench-comm --json output: " + e.what());
  }
  if (r.ranks < 1) return InvalidArgument(source + ": ranks must be at least 1");
  if (r.rows.empty()) return InvalidArgument(source + ": no rows");
  return r;
}

}  // namespace tpserve

namespace tpserve {

LineChart CommLatencyChart(const CommBenchReport& r) {
  LineChart chart;
  chart.title = "in-process " + CollectiveName(r.collective) + ", " + std::to_string(r.ranks) + " ranks";
  chart.x_label = "message size (bytes)";
  chart.y_label = "time per call (us)";
  chart.log_x = chart.log_y = true;
  ChartSeries out_of_place{"out-of-place", {}}, in_place{"in-place", {}}, model{"alpha-beta model", {}, true};
  const double factor = BusBandwidthFactor(r.collective, r.ranks);
  for (const auto& row : r.rows) {
    out_of_place.points.emplace_back(row.bytes, row.oop_us);
    in_place.points.emplace_back(row.bytes, row.ip_us);
    if (r.fitted) {
      model.points.emplace_back(row.bytes, (r.fit.alpha_s + row.bytes * factor / r.fit.beta_bytes_per_s) * 1e6);
    }
  }
  chart.series = {out_of_place, in_place};
  if (!r.peer.empty()) {
    chart.title += ", peer " + r.peer_library;
    ChartSeries peer{r.peer == "mpi" ? PeerCollectiveName(r.collective) : r.peer_library, {}};
    for (const auto& row : r.rows) {
      if (row.peer_us > 0) peer.points.emplace_back(row.bytes, row.peer_us);
    }
    chart.series.push_back(peer);
  }
  if (r.fitted) chart.series.push_back(model);
  return chart;
}

}  // namespace tpserve

#include "engine/cuda/device_comm_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/comm_bench_values.h"
#include "comm/cuda/nccl_communicator.h"
#include "comm/cuda/oneshot_communicator.h"
#include "comm/cuda/rank_order_communicator.h"
#include "engine/cuda/placement.h"
#include "kernels/cuda/device_buffer.h"

namespace tpserve::cuda {
namespace {

// One rank's stream and buffers for the whole sweep (sized for the largest point).
struct RankState {
  int index = 0;  // among this process's ranks (its communicator's index)
  int rank = 0;   // in the whole group
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  // f32: [count] and [count] (AllReduce) or [ranks * count] (AllGather); in send_buffer and
  // recv_buffer, or in the group's symmetric windows (--register).
  float* send = nullptr;
  float* recv = nullptr;
  DeviceBuffer send_buffer, recv_buffer;
  std::vector<float> host;
  ~RankState() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class Sweep {
 public:
  Sweep(const DeviceCommBenchRequest& request, std::vector<std::unique_ptr<DeviceCommunicator>> comms,
        std::vector<int> devices)
      : request_(request), comms_(std::move(comms)), ranks_(request.ranks), sync_(request.ranks),
        world_(request.world > 0 ? request.world : request.ranks) {
    for (int r = 0; r < request.ranks; ++r) {
      ranks_[r].index = r;
      ranks_[r].rank = request.first_rank + r;
      ranks_[r].device = devices[r];
    }
  }

  // Streams, events and every buffer for the largest count, before the first call: growing a
  // buffer later would cudaFree while a peer's one-shot kernel waits for this rank.
  Status Prepare(size_t largest_count) {
    const size_t send_bytes = std::max<size_t>(1, largest_count) * sizeof(float);
    const size_t recv_bytes = std::max<size_t>(1, OutputCount(largest_count)) * sizeof(float);
    if (request_.register_windows) {
      std::vector<DeviceCommunicator*> comms;
      std::vector<int> devices;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        comms.push_back(comms_[r].get());
        devices.push_back(ranks_[r].device);
      }
      // Both buffers the size of the larger, so every rank's are at the same offsets of equal windows.
      ASSIGN_OR_RETURN(windows_, RegisterSymmetricWindows(comms, devices, std::max(send_bytes, recv_bytes), 2));
    }
    for (RankState& s : ranks_) {
      RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s.device), "cudaSetDevice"));
      RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "stream"));
      RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&s.start), "event"));
      RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&s.stop), "event"));
      if (windows_ != nullptr) {
        s.send = windows_->buffer(s.index, 0);
        s.recv = windows_->buffer(s.index, 1);
        continue;
      }
      const std::string rank = "rank " + std::to_string(s.rank) + " ";
      RETURN_IF_ERROR(s.send_buffer.Reserve(send_bytes, rank + "send buffer"));
      RETURN_IF_ERROR(s.recv_buffer.Reserve(recv_bytes, rank + "recv buffer"));
      s.send = s.send_buffer.get<float>();
      s.recv = s.recv_buffer.get<float>();
    }
    return Status::Ok();
  }

  Result<DeviceCommBenchRow> Measure(size_t count) {
    DeviceCommBenchRow row;
    row.count = count;
    for (bool in_place : {false, true}) {
      std::vector<Status> statuses(ranks_.size());
      std::vector<double> seconds(ranks_.size()), graph_seconds(ranks_.size());
      std::vector<size_t> wrong(ranks_.size());
      std::vector<std::thread> threads;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        threads.emplace_back([&, r] {
          statuses[r] = RunRank(ranks_[r], count, in_place, &seconds[r], &wrong[r]);
          // The graph of out-of-place calls, once the eager ones are timed (nccl-tests -G).
          if (statuses[r].ok() && !in_place && request_.graph_calls > 0) {
            statuses[r] = RunRankGraph(ranks_[r], count, &graph_seconds[r]);
          }
        });
      }
      for (auto& thread : threads) thread.join();
      for (const Status& status : statuses) RETURN_IF_ERROR(status);
      double mean = 0, graph_mean = 0;
      size_t total_wrong = 0;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        mean += seconds[r] / ranks_.size();
        graph_mean += graph_seconds[r] / ranks_.size();
        total_wrong += wrong[r];
      }
      (in_place ? row.ip_s : row.oop_s) = mean;
      (in_place ? row.ip_wrong : row.oop_wrong) = total_wrong;
      if (!in_place) row.graph_s = graph_mean;
    }
    return row;
  }

 private:
  size_t OutputCount(size_t count) const { return request_.all_gather ? count * world_ : count; }

  // Writes this rank's input where the call reads it: send (out of place), recv (in place).
  Status Fill(RankState& s, size_t count, bool in_place) {
    s.host.resize(count);
    for (size_t i = 0; i < count; ++i) s.host[i] = CommBenchInput(s.rank, i);
    float* to = in_place ? s.recv + (request_.all_gather ? s.rank * count : 0) : s.send;
    return CudaStatus(cudaMemcpyAsync(to, s.host.data(), count * sizeof(float), cudaMemcpyHostToDevice, s.stream),
                      "input upload");
  }

  Status Call(RankState& s, size_t count, bool in_place) {
    DeviceCommunicator& comm = *comms_[s.index];
    float* recv = s.recv;
    if (request_.all_gather) {
      const float* input = in_place ? recv + s.rank * count : s.send;
      return comm.AllGather(input, recv, count, DeviceDtype::kF32, s.stream);
    }
    if (!in_place) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(recv, s.send, count * sizeof(float), cudaMemcpyDeviceToDevice, s.stream), "copy"));
    }
    return comm.AllReduceSum(recv, count, DeviceDtype::kF32, s.stream);
  }

  size_t CountWrong(RankState& s, size_t count) {
    std::vector<float> out(OutputCount(count));
    if (cudaMemcpy(out.data(), s.recv, out.size() * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
      return out.size();
    }
    size_t wrong = 0;
    const int n = world_;
    for (size_t i = 0; i < out.size(); ++i) {
      const float want = request_.all_gather ? CommBenchInput(static_cast<int>(i / count), i % count) : CommBenchSum(n, i);
      wrong += out[i] != want;
    }
    return wrong;
  }

  Status RunRank(RankState& s, size_t count, bool in_place, double* seconds, size_t* wrong) {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s.device), "cudaSetDevice"));
    RETURN_IF_ERROR(Fill(s, count, in_place));
    for (int i = 0; i < request_.warmup; ++i) RETURN_IF_ERROR(Call(s, count, in_place));
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s.stream), "warm-up"));
    sync_.arrive_and_wait();  // every rank starts its timed calls together
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(s.start, s.stream), "event"));
    for (int i = 0; i < request_.iters; ++i) RETURN_IF_ERROR(Call(s, count, in_place));  // in place: sums of sums
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(s.stop, s.stream), "event"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(s.stop), "timed calls"));
    float ms = 0;
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, s.start, s.stop), "cudaEventElapsedTime"));
    *seconds = ms * 1e-3 / std::max(1, request_.iters);
    if (request_.check) {
      RETURN_IF_ERROR(Fill(s, count, in_place));
      RETURN_IF_ERROR(Call(s, count, in_place));
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s.stream), "check"));
      *wrong = CountWrong(s, count);
    }
    // A timed-out or aborted group returns from its calls early, with stale sums: its times are
    // not measurements.
    return comms_[s.index]->AsyncError();
  }

  // graph_calls out-of-place calls captured into one CUDA graph on this rank's stream (each rank
  // on its own thread, so thread-local capture), launched once untimed and once timed: the time
  // per call without a host launch per call, as nccl-tests -G measures it.
  Status RunRankGraph(RankState& s, size_t count, double* seconds) {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s.device), "cudaSetDevice"));
    RETURN_IF_ERROR(Fill(s, count, false));
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s.stream), "input upload"));
    cudaGraph_t graph = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal), "begin capture"));
    Status captured = Status::Ok();
    for (int i = 0; i < request_.graph_calls && captured.ok(); ++i) captured = Call(s, count, false);
    const cudaError_t ended = cudaStreamEndCapture(s.stream, &graph);
    RETURN_IF_ERROR(captured);
    RETURN_IF_ERROR(CudaStatus(ended, "end capture of " + std::to_string(request_.graph_calls) + " calls"));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    RETURN_IF_ERROR(CudaStatus(instantiated, "cudaGraphInstantiate"));
    auto timed = [&]() -> Status {
      RETURN_IF_ERROR(CudaStatus(cudaGraphLaunch(exec, s.stream), "graph launch (warm-up)"));
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s.stream), "graph warm-up"));
      sync_.arrive_and_wait();  // every rank launches its timed graph together
      RETURN_IF_ERROR(CudaStatus(cudaEventRecord(s.start, s.stream), "event"));
      RETURN_IF_ERROR(CudaStatus(cudaGraphLaunch(exec, s.stream), "graph launch"));
      RETURN_IF_ERROR(CudaStatus(cudaEventRecord(s.stop, s.stream), "event"));
      RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(s.stop), "timed graph"));
      float ms = 0;
      RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, s.start, s.stop), "cudaEventElapsedTime"));
      *seconds = ms * 1e-3 / request_.graph_calls;
      return comms_[s.index]->AsyncError();
    };
    const Status status = timed();
    cudaGraphExecDestroy(exec);
    return status;
  }

  const DeviceCommBenchRequest& request_;
  std::vector<std::unique_ptr<DeviceCommunicator>> comms_;
  std::vector<RankState> ranks_;
  std::barrier<> sync_;  // this process's ranks (across processes, NCCL's own calls line them up)
  int world_;
  // Declared last, destroyed first: deregistered while the communicators still live.
  std::unique_ptr<SymmetricWindows> windows_;
};

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value ? value : fallback;
}

}  // namespace

Result<DeviceCommBenchReply> RunDeviceCommBench(const DeviceCommBenchRequest& request) {
  const bool oneshot = request.backend == "oneshot";
  if (request.backend != "nccl" && request.backend != "rank-order" && !oneshot) {
    return InvalidArgument("--backend '" + request.backend + "': the device backends are nccl, rank-order and oneshot");
  }
  if (oneshot && request.all_gather) return InvalidArgument("--backend oneshot runs all_reduce only");
  if ((request.graph_calls > 0 || request.register_windows) && request.backend != "nccl") {
    return InvalidArgument("--graph and --register time NCCL's own calls: they need --backend nccl");
  }
  if (request.counts.empty()) return InvalidArgument("bench-comm: no message sizes to measure");
  int visible = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&visible), "cudaGetDeviceCount"));
  // One-shot runs across GPUs where there are enough, else on one shared GPU (the test placement).
  const bool across_processes = !request.nccl_unique_id.empty();
  if (across_processes && request.backend != "nccl") {
    return InvalidArgument("--backend " + request.backend + " runs in one process; across processes: nccl");
  }
  const bool share = request.backend == "rank-order" || (oneshot && visible < request.ranks);
  std::vector<int> devices;
  if (across_processes) {
    for (int r = 0; r < request.ranks; ++r) devices.push_back(request.first_device + r);
    if (devices.back() >= visible) {
      return InvalidArgument("ranks " + std::to_string(request.first_rank) + ".. of this process need GPUs " +
                             std::to_string(request.first_device) + ".." + std::to_string(devices.back()) + "; " +
                             std::to_string(visible) + " visible");
    }
  } else {
    ASSIGN_OR_RETURN(devices, AssignDevices(request.ranks, visible, share));
  }
  std::vector<std::unique_ptr<DeviceCommunicator>> comms;
  if (across_processes) {
    ASSIGN_OR_RETURN(comms, JoinNcclGroup(devices, request.first_rank, request.world, request.nccl_unique_id));
  } else if (share) {
    ASSIGN_OR_RETURN(comms, CreateRankOrderGroup(request.ranks, devices[0], request.timeout));
  } else {
    ASSIGN_OR_RETURN(comms, CreateNcclGroup(devices));
  }
  if (oneshot) {
    size_t largest = 0;
    for (size_t count : request.counts) largest = std::max(largest, count * sizeof(float));
    ASSIGN_OR_RETURN(comms, CreateOneShotGroup(devices, std::move(comms),
                                               {.capacity_bytes = largest, .timeout = request.timeout}));
  }
  DeviceCommBenchReply reply;
  reply.library = comms[0]->name();
  if (request.backend == "nccl") {
    reply.library += " (NCCL_ALGO=" + EnvOr("NCCL_ALGO", "default") + ", NCCL_PROTO=" + EnvOr("NCCL_PROTO", "default") +
                     (request.register_windows ? ", symmetric windows" : "") + ")";
  }
  reply.placement = share               ? "ranks sharing cuda:" + std::to_string(devices[0])
                    : across_processes ? "one GPU per rank, " + std::to_string(request.ranks) + " rank(s) in this process of " +
                                             std::to_string(request.world)
                                       : "one GPU per rank";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, devices[0]) == cudaSuccess) reply.device = prop.name;
  Sweep sweep(request, std::move(comms), devices);
  RETURN_IF_ERROR(sweep.Prepare(*std::max_element(request.counts.begin(), request.counts.end())));
  for (size_t count : request.counts) {
    ASSIGN_OR_RETURN(DeviceCommBenchRow row, sweep.Measure(count));
    reply.rows.push_back(row);
  }
  return reply;
}

}  // namespace tpserve::cuda

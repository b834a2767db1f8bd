// The engine: one RankWorker thread per tensor-parallel rank, each with its shard of the weights,
// its KV cache, its communicator and its compute threads. Step() hands every rank the same
// immutable StepPlan and returns the logits and the step trace; ranks never see the scheduler.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/group_membership.h"
#include "common/status.h"
#include "engine/step/fault_injection.h"
#include "engine/step/kv_cache.h"
#include "engine/step/step_plan.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/device_choice.h"
#include "model/model_directory.h"

namespace tpserve {

class ProcessGroup;

// The context limit of a model whose config declares none (no max_position_embeddings).
inline constexpr int kDefaultMaxContext = 8192;

struct EngineOptions {
  // Resolved before Create (ResolveDevice): kCpu or kCuda. The command line's default is auto.
  DeviceKind device = DeviceKind::kCpu;
  int tp = 1;
  int threads = 0;         // compute threads in all, shared out among ranks (0: all cores)
  int block_size = 16;     // tokens per KV block
  // KV cache size in MiB, all ranks together; 0: the backend's default (CPU: 256 MiB; CUDA:
  // what --gpu-memory-utilization leaves after the weights).
  int kv_cache_mb = 0;
  int kv_cache_blocks = 0; // exact number of KV blocks (overrides kv_cache_mb when > 0)
  // The largest step the engine takes, on either backend: Step refuses a plan beyond these before
  // any rank sees it. The CUDA backend sizes its step buffers for them once, before the KV cache.
  // serve sets them from its scheduler (--max-batched-tokens, --max-batch-size, --max-model-len).
  int max_step_tokens = 8192;     // tokens in one step, prompt chunks and decode tokens together
  int max_step_sequences = 256;   // sequences in one step
  int max_context = 0;            // the largest start_position + tokens a step may reach (0: the
                                  // model's max_position_embeddings)
  double gpu_memory_utilization = 0.9;  // CUDA: share of each GPU's memory tpserve may fill
  bool share_gpu = false;               // CUDA: every rank on one GPU (tests; rank-order sums)
  // CUDA: nccl | oneshot | auto, and auto's table (comm/allreduce_choice.h).
  std::string allreduce = "nccl";
  std::string allreduce_table;
  // CUDA: replay decode steps of up to cuda_graph_max_batch sequences from CUDA graphs (the steps
  // timed per op, see trace_every, run eagerly).
  bool cuda_graphs = false;
  int cuda_graph_max_batch = 128;
  // A rank that waits this long for its peers in one collective fails the step (CPU: every wait
  // of the in-process communicator; CUDA: the step), and the engine fails (engine/engine.h). 0: never.
  int collective_timeout_ms = 60000;
  // Multi-process TP (CPU backend): with group.distributed(), this process runs global ranks
  // [group.first_rank, group.first_rank + group.local_ranks) of group.tp, and the leader sends
  // every step's plan to the others (engine/process_group.h).
  GroupMembership group;
  MembershipFlags membership;  // as the command line gave them; CreateEngineOnDevice resolves `group`
  std::string bind_address = "127.0.0.1";  // this member's Gloo address, reachable by the others
  int group_timeout_ms = 30000;            // joining, and every collective between processes
  bool trace = true;       // per-op timing in the step trace
  int trace_every = 1;     // with trace: per-op timing in every Nth step only (the others: totals)
  // StepResult::logits for every row (tests, tools). false lets a backend that samples on the
  // device (CUDA: greedy rows without logprobs) skip copying the logits back.
  bool return_logits = true;
  cpu::LinearKernel linear_kernel = cpu::BestLinearKernel();  // one kernel for every step
  // CPU: the KV cache's element type (bf16: half the memory and half the reads of attention; the
  // CUDA backend keeps f32).
  cpu::KvDtype kv_cache_dtype = cpu::KvDtype::kF32;
  int skip_mlp_allreduce_layer = -1;  // fault injection for tests
  FaultInjection fault;               // fault injection for tests (CPU backend)
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const ModelDirectory& model,
                                                const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs one step on all ranks and samples each sequence that wants a token. Block tables must
  // come from block_pool(). The result's logits are valid until the next Step.
  //
  // A plan that fails validation fails alone: over max_step_tokens, max_step_sequences or
  // max_context, a block table too short or out of range, a token outside the vocabulary. A step that fails on any rank (an error, an
  // exception, a collective that timed out) fails the engine: the ranks' communicators are
  // aborted so that peers stop waiting, and this and every later Step returns the first error
  // (the ranks' state is no longer consistent; the process must be restarted). A rank still
  // stuck collective_timeout_ms after the first error is left behind (a stalled thread cannot be
  // stopped safely): the caller should exit soon.
  Result<StepResult> Step(const StepPlan& plan);
  const Status& failure() const { return failure_; }

  // Per-op timing in the step trace on or off (EngineOptions::trace), between steps.
  void set_trace(bool on);

  // A follower of a multi-process group runs the leader's plans until the leader shuts down
  // (Ok) or the group fails (an error); it has no scheduler and calls no Step.
  bool follower() const;
  Status RunFollower();
  // Between steps, while idle: a multi-process leader tells its followers it is alive and learns
  // whether they are (a dead one fails this call, and the engine). Ok at once for one process.
  Status Heartbeat();
  // The multi-process group's size, and (leader) how many of its members are still connected;
  // 1 and 1 for one process.
  int group_size() const;
  int group_members_connected() const;

  KvBlockPool& block_pool() { return *block_pool_; }
  int block_size() const { return options_.block_size; }
  int tp() const { return options_.tp; }
  int threads_per_rank() const { return threads_per_rank_; }
  int max_step_tokens() const { return options_.max_step_tokens; }
  int max_step_sequences() const { return options_.max_step_sequences; }
  int max_context() const { return max_context_; }
  const ModelConfig& config() const { return config_; }
  size_t weight_bytes_per_rank() const { return weight_bytes_per_rank_; }

 private:
  struct Rank;
  Engine(const ModelConfig& config, const EngineOptions& options);
  // Hands `plan` to this process's rank threads and waits for them; the first error.
  Status RunRanks(const StepPlan& plan);
  // Counts the step and tells the ranks whether it is timed per op (every trace_every-th step);
  // leader and followers call it once per plan, so they agree. Returns the choice.
  bool StartStepTrace();
  // Records the first failed step in failure_ (the engine is dead from then on); returns it.
  Status Fail(Status status);
  Status CreateCpuRanks(const ModelDirectory& model);
  Status CreateCudaRanks(const ModelDirectory& model);
  void RankLoop(int rank);
  // result->tokens: one SampleToken per row of result->logits, in parallel.
  Status SampleRows(const StepPlan& plan, StepResult* result);

  ModelConfig config_;
  EngineOptions options_;
  int threads_per_rank_ = 1;
  int max_context_ = 0;  // options_.max_context, or the model's max_position_embeddings
  size_t weight_bytes_per_rank_ = 0;
  std::unique_ptr<KvBlockPool> block_pool_;
  std::unique_ptr<ProcessGroup> process_group_;  // multi-process TP only
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<std::thread> threads_;
  std::vector<float> unpadded_logits_;  // [rows, vocab_size] when the vocabulary is padded; lent out
  // Samples a step's rows in parallel while the rank threads wait: at batch 32 a 128k-vocabulary
  // argmax per row is milliseconds. Does not spin (it would steal the ranks' cores). Where rank 0
  // runs on a CPU pool at least as large, that pool samples instead (SamplingPool).
  cpu::ThreadPool sampling_pool_;
  cpu::ThreadPool& SamplingPool();

  // Hand-off between Step() and the rank threads.
  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  std::shared_ptr<const StepPlan> plan_;  // the current step's, shared with the rank threads
  uint64_t generation_ = 0;
  Status step_failure_;  // the current step's first rank error
  int RanksBusy() const; // ranks still in the current step (under mutex_)
  uint64_t steps_run_ = 0;
  Status failure_;              // the first failed step's error: the engine is dead
  StallRelease stall_release_;  // injected stalls wait here until destruction
  bool ranks_trace_ = true;  // what the ranks were last told (set_trace)
  bool stop_ = false;
};

}  // namespace tpserve

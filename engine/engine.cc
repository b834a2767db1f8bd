#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include "comm/allreduce_choice.h"
#include "comm/in_process_communicator.h"
#include "kernels/cuda_module.h"
#include "engine/cuda_backend.h"
#include "engine/cpu/decoder.h"
#include "engine/process_group.h"
#include "model/weight_layout.h"

namespace tpserve {

struct Engine::Rank {
  // CPU backend only (the CUDA decoder owns its communicator, streams and KV blocks):
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<cpu::ThreadPool> pool;
  std::unique_ptr<RankKvCache> kv_cache;
  std::unique_ptr<RankDecoder> decoder;
  int global_rank = 0;
  // Results of the current step.
  bool done = true;  // false while the rank runs a step (guarded by the engine's mutex)
  std::vector<float> logits;
  RankTrace trace;
};

Engine::Engine(const ModelConfig& config, const EngineOptions& options)
    : config_(config),
      options_(options),
      max_context_(options.max_context > 0                  ? options.max_context
                   : config.max_position_embeddings > 0 ? config.max_position_embeddings
                                                          : kDefaultMaxContext),
      sampling_pool_(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)),
                     /*spin_iterations=*/0),
      ranks_trace_(options.trace) {}

Result<std::unique_ptr<Engine>> Engine::Create(const ModelDirectory& model,
                                               const EngineOptions& options) {
  const ModelConfig& c = model.config;
  if (options.device == DeviceKind::kAuto) return InvalidArgument("--device auto must be resolved before Engine::Create");
  RETURN_IF_ERROR(CheckTensorParallel(c, options.tp));
  if (options.block_size < 1) return InvalidArgument("--block-size must be at least 1");
  if (options.kv_cache_mb < 0) return InvalidArgument("--kv-cache-mb must not be negative");
  // serve and generate take the first from --max-batched-tokens, bench-decode from --max-step-tokens.
  if (options.max_step_tokens < 1) {
    return InvalidArgument("the step token limit (--max-batched-tokens, --max-step-tokens; EngineOptions::max_step_tokens) "
                           "must be at least 1, not " + std::to_string(options.max_step_tokens));
  }
  if (options.max_step_sequences < 1) {
    return InvalidArgument("the step sequence limit (--max-batch-size; EngineOptions::max_step_sequences) must be at "
                           "least 1, not " + std::to_string(options.max_step_sequences));
  }
  if (options.max_context < 0) {
    return InvalidArgument("the context limit (--max-model-len; EngineOptions::max_context) must not be negative, not " +
                           std::to_string(options.max_context));
  }
  ASSIGN_OR_RETURN(AllReduceMode allreduce, ParseAllReduceMode(options.allreduce));
  if (options.device == DeviceKind::kCpu && allreduce == AllReduceMode::kOneShot) {
    return InvalidArgument("--allreduce oneshot chooses among the CUDA backend's AllReduces; the CPU backend's "
                           "communicator already sums in rank order (use --device cuda, or leave --allreduce out)");
  }
  if (options.device == DeviceKind::kCuda && options.kv_cache_dtype != cpu::KvDtype::kF32) {
    return InvalidArgument(std::string("--kv-cache-dtype ") + cpu::KvDtypeName(options.kv_cache_dtype) +
                           " runs on the CPU backend only; the CUDA backend's KV cache is f32 (leave the flag out, or "
                           "use --device cpu)");
  }
  if (options.device == DeviceKind::kCpu && options.cuda_graphs) {
    return InvalidArgument("--cuda-graphs on replays decode steps on a GPU; this engine runs on the CPU");
  }
  std::unique_ptr<Engine> engine(new Engine(c, options));
  RETURN_IF_ERROR(options.device == DeviceKind::kCuda ? engine->CreateCudaRanks(model) : engine->CreateCpuRanks(model));
  for (int r = 0; r < static_cast<int>(engine->ranks_.size()); ++r) {
    engine->threads_.emplace_back([e = engine.get(), r] {
      // Named so profilers (and bench_serve's CPU accounting) can tell engine threads apart.
      pthread_setname_np(pthread_self(), ("tps-rank" + std::to_string(r)).c_str());
      e->RankLoop(r);
    });
  }
  return engine;
}

namespace {

// What must be equal on every member of a multi-process group: the leader's plans address its KV
// blocks and its ranks' slices, and every member must run the same kernels and timeouts.
std::string GroupFingerprint(const ModelDirectory& model, const EngineOptions& options) {
  const ModelConfig& c = model.config;
  return "model " + c.architecture_name + " hidden " + std::to_string(c.hidden_size) + " ffn " +
         std::to_string(c.intermediate_size) + " layers " + std::to_string(c.num_layers) + " heads " +
         std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) + " vocab " + std::to_string(c.vocab_size) +
         " parameters " + std::to_string(c.ParameterCount()) + " tensors " +
         std::to_string(model.checkpoint.TensorNames().size()) +
         (model.path.rfind("dummy:", 0) == 0 ? " " + model.path : "") + "; device " +
         (options.device == DeviceKind::kCuda ? "cuda" : "cpu") + "; tp " + std::to_string(options.tp) +
         "; block_size " + std::to_string(options.block_size) + "; linear_kernel " +
         cpu::LinearKernelName(options.linear_kernel) + "; kv_cache_dtype " + cpu::KvDtypeName(options.kv_cache_dtype) +
         "; group_timeout_ms " + std::to_string(options.group_timeout_ms) +
         "; collective_timeout_ms " + std::to_string(options.collective_timeout_ms) + "; max_step_tokens " +
         std::to_string(options.max_step_tokens) + "; max_step_sequences " + std::to_string(options.max_step_sequences) +
         "; max_context " + std::to_string(options.max_context) +
         // Which steps are timed per op, and so which replay CUDA graphs: every rank must agree.
         "; trace " + std::to_string(options.trace) + " every " + std::to_string(options.trace_every) +
         "; cuda_graphs " + std::to_string(options.cuda_graphs) + " up to batch " +
         std::to_string(options.cuda_graph_max_batch);
}

}  // namespace

Status Engine::CreateCpuRanks(const ModelDirectory& model) {
  const ModelConfig& c = config_;
  const EngineOptions& options = options_;
  if (!cpu::LinearKernelAvailable(options.linear_kernel)) {
    return InvalidArgument(std::string("--linear-kernel ") + cpu::LinearKernelName(options.linear_kernel) +
                           " does not run on this CPU");
  }
  const GroupMembership& group = options.group;
  if (group.distributed() && group.tp != options.tp) {
    return InvalidArgument("--tp " + std::to_string(options.tp) + " differs from the group's " + std::to_string(group.tp));
  }
  const int local_ranks = group.distributed() ? group.local_ranks : options.tp;
  const int first_rank = group.distributed() ? group.first_rank : 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? options.threads : cores;
  threads_per_rank_ = std::max(1, threads / local_ranks);

  const RankShape shape0 = ShapeForRank(c, 0, options.tp);
  const size_t block_bytes =
      RankKvCache::BytesPerBlock(c.num_layers, options.block_size, shape0.kv_heads, c.head_dim, options.kv_cache_dtype) *
      options.tp;
  const int kv_cache_mb = options.kv_cache_mb > 0 ? options.kv_cache_mb : 256;
  const int num_blocks = options.kv_cache_blocks > 0
                             ? options.kv_cache_blocks
                             : static_cast<int>((static_cast<size_t>(kv_cache_mb) << 20) / block_bytes);
  if (num_blocks < 1) {
    return InvalidArgument("--kv-cache-mb " + std::to_string(kv_cache_mb) + " holds no block of " +
                           std::to_string(block_bytes) + " bytes");
  }
  block_pool_ = std::make_unique<KvBlockPool>(num_blocks);

  std::vector<std::unique_ptr<Communicator>> comms;
  if (group.distributed()) {
    ASSIGN_OR_RETURN(process_group_,
                     ProcessGroup::Join(group, GroupFingerprint(model, options) + "; kv_blocks " + std::to_string(num_blocks),
                                        options.bind_address, std::chrono::milliseconds(options.group_timeout_ms)));
    ASSIGN_OR_RETURN(comms, process_group_->ConnectRanks(std::chrono::milliseconds(options.collective_timeout_ms)));
  } else {
    for (auto& comm : InProcessCommunicator::CreateGroup(options.tp, std::chrono::milliseconds(options.collective_timeout_ms))) {
      comms.push_back(std::move(comm));
    }
  }
  for (int local = 0; local < local_ranks; ++local) {
    const int r = first_rank + local;
    auto rank = std::make_unique<Rank>();
    rank->global_rank = r;
    ASSIGN_OR_RETURN(RankWeights weights, LoadRankWeights(model.checkpoint, c, r, options.tp));
    ArrangeProjections(options.linear_kernel, &weights);
    weight_bytes_per_rank_ = weights.Bytes();
    rank->comm = std::move(comms[local]);
    rank->pool = std::make_unique<cpu::ThreadPool>(threads_per_rank_);
    rank->kv_cache = std::make_unique<RankKvCache>(c.num_layers, num_blocks, options.block_size,
                                                   weights.shape.kv_heads, c.head_dim, options.kv_cache_dtype);
    DecoderOptions decoder_options{.trace = options.trace,
                                   .skip_mlp_allreduce_layer = options.skip_mlp_allreduce_layer,
                                   .fault = options.fault,
                                   .stall_release = &stall_release_,
                                   .return_logits = options.return_logits};
    rank->decoder = std::make_unique<Decoder>(config_, std::move(weights), rank->kv_cache.get(), rank->comm.get(),
                                              rank->pool.get(), decoder_options);
    ranks_.push_back(std::move(rank));
  }
  return Status::Ok();
}

Status Engine::CreateCudaRanks(const ModelDirectory& model) {
  const EngineOptions& options = options_;
  if (options.skip_mlp_allreduce_layer >= 0 || options.fault.kind == FaultKind::kStall ||
      options.fault.kind == FaultKind::kCommError) {
    return Unimplemented("--debug-fault stall and comm-error run on the CPU backend only (CUDA: fail, throw)");
  }
  ASSIGN_OR_RETURN(AllReduceMode mode, ParseAllReduceMode(options.allreduce));
  ASSIGN_OR_RETURN(AllReduceDecision allreduce, DecideAllReduce(mode, options.allreduce_table, options.tp));
  if (options.tp > 1) spdlog::info("{}", allreduce.reason);
  if (options.cuda_graphs && options.trace && options.trace_every <= 1) {
    spdlog::warn("--cuda-graphs on, but every step is timed per op (--trace-every 1): those steps run eagerly; "
                 "--trace-every N replays the N - 1 untimed steps of each N from graphs");
  }
  ASSIGN_OR_RETURN(CudaProbe probe, ProbeCudaBackend());
  const GroupMembership& membership = options.group;
  std::string nccl_unique_id;
  if (membership.distributed()) {
    // The members meet and check each other as on the CPU; the leader's ncclUniqueId reaches every
    // member through the rendezvous; NCCL then joins the GPUs (the Gloo group stays, for the plans).
    if (membership.tp != options.tp) {
      return InvalidArgument("--tp " + std::to_string(options.tp) + " differs from the group's " +
                             std::to_string(membership.tp));
    }
    ASSIGN_OR_RETURN(process_group_, ProcessGroup::Join(membership, GroupFingerprint(model, options),
                                                        options.bind_address,
                                                        std::chrono::milliseconds(options.group_timeout_ms)));
    ASSIGN_OR_RETURN(nccl_unique_id, process_group_->ShareFromLeader("nccl_unique_id", [&] {
      return MakeNcclUniqueId(probe.module_path);
    }));
  }
  CudaGroupRequest request;
  request.config = &config_;
  request.options = CudaGroupOptions{
      .tp = options.tp,
      .first_rank = membership.distributed() ? membership.first_rank : 0,
      .local_ranks = membership.distributed() ? membership.local_ranks : 0,
      .first_device = membership.local_device > 0 ? membership.local_device : 0,
      .nccl_unique_id = nccl_unique_id,
      .share_gpu = options.share_gpu,
      .oneshot_max_bytes = allreduce.oneshot_max_bytes,
      .cuda_graphs = options.cuda_graphs,
      .cuda_graph_max_batch = options.cuda_graph_max_batch,
      .block_size = options.block_size,
      .kv_cache_blocks = options.kv_cache_blocks,
      .kv_cache_bytes = static_cast<int64_t>(options.kv_cache_mb) << 20,
      .gpu_memory_utilization = options.gpu_memory_utilization,
      .trace = options.trace,
      .return_logits = options.return_logits,
      .max_tokens_per_step = options.max_step_tokens,
      .max_sequences_per_step = options.max_step_sequences,
      .max_context = max_context_,
      .fault = options.fault,
      // 0 (never) as a year, which the module's waits can take as a plain timeout.
      .collective_timeout = options.collective_timeout_ms > 0
                                ? std::chrono::milliseconds(options.collective_timeout_ms)
                                : std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(24 * 365))};
  request.load_rank = [&](int r) -> Result<RankWeights> {
    ASSIGN_OR_RETURN(RankWeights weights, LoadRankWeights(model.checkpoint, config_, r, options.tp));
    weight_bytes_per_rank_ = weights.Bytes();
    return weights;
  };
  request.log = [](const std::string& line) { spdlog::info("cuda: {}", line); };
  ASSIGN_OR_RETURN(CudaGroup group, CreateCudaGroup(probe.module_path, request));
  const int local_ranks = membership.distributed() ? membership.local_ranks : options.tp;
  if (static_cast<int>(group.ranks.size()) != local_ranks) {
    return Internal("the CUDA module made " + std::to_string(group.ranks.size()) + " ranks for " +
                    std::to_string(local_ranks));
  }
  int kv_blocks = group.kv_blocks;
  if (process_group_ != nullptr) {
    // Each member sized its KV cache from its own GPUs' memory: the leader's plans may use only the
    // blocks that every member holds.
    ASSIGN_OR_RETURN(kv_blocks, process_group_->AgreeOnMinimum("kv_blocks", group.kv_blocks));
    process_group_->MarkReady();
  }
  block_pool_ = std::make_unique<KvBlockPool>(kv_blocks);
  for (auto& decoder : group.ranks) {
    auto rank = std::make_unique<Rank>();
    rank->global_rank = request.options.first_rank + static_cast<int>(ranks_.size());
    rank->decoder = std::move(decoder);
    ranks_.push_back(std::move(rank));
  }
  return Status::Ok();
}

Engine::~Engine() {
  if (process_group_ != nullptr && process_group_->membership().leader() && failure_.ok()) {
    process_group_->SendShutdown();
  }
  stall_release_.Release();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  // A rank left stuck by a failed step gets a last chance to return; one that does not is left
  // behind (with its buffers) rather than hang the process's exit.
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait_for(lock, std::chrono::seconds(2), [&] { return RanksBusy() == 0; });
    if (RanksBusy() > 0) spdlog::warn("engine: {} rank thread(s) still stuck in the failed step; leaving them", RanksBusy());
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r]->done) continue;
      threads_[r].detach();
      (void)ranks_[r].release();
    }
  }
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

int Engine::RanksBusy() const {
  int busy = 0;
  for (const auto& rank : ranks_) busy += rank->done ? 0 : 1;
  return busy;
}

Status Engine::RunRanks(const StepPlan& plan) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The ranks get their own copy (microseconds): a rank left stuck by a failed step may still
    // read it after Step has returned and the caller's plan is gone.
    plan_ = std::make_shared<const StepPlan>(plan);
    step_failure_ = Status::Ok();
    for (auto& rank : ranks_) rank->done = false;
    ++generation_;
  }
  work_ready_.notify_all();
  std::unique_lock<std::mutex> lock(mutex_);
  // Every rank, however long the step takes: until one fails. Then the others get the collective
  // timeout to notice (their communicators were aborted); a rank still busy after that is stuck.
  work_done_.wait(lock, [&] { return RanksBusy() == 0 || !step_failure_.ok(); });
  if (options_.collective_timeout_ms > 0) {
    work_done_.wait_for(lock, std::chrono::milliseconds(options_.collective_timeout_ms), [&] { return RanksBusy() == 0; });
  } else {
    work_done_.wait(lock, [&] { return RanksBusy() == 0; });
  }
  if (RanksBusy() == 0) return step_failure_;
  std::string stuck;
  for (const auto& rank : ranks_) {
    if (!rank->done) stuck += (stuck.empty() ? "" : ", ") + std::to_string(rank->global_rank);
  }
  return Status(step_failure_.code(), step_failure_.message() + "; rank(s) " + stuck + " still had not returned " +
                                          std::to_string(options_.collective_timeout_ms) + " ms later");
}

bool Engine::StartStepTrace() {
  // Per-op timing in this step? (Told to the ranks while they wait, only when it changes.)
  const bool per_op = options_.trace && (options_.trace_every <= 1 || steps_run_ % options_.trace_every == 0);
  ++steps_run_;
  if (per_op != ranks_trace_) {
    for (auto& rank : ranks_) rank->decoder->set_trace(per_op);
    ranks_trace_ = per_op;
  }
  return per_op;
}

bool Engine::follower() const { return process_group_ != nullptr && !process_group_->membership().leader(); }

Status Engine::RunFollower() {
  if (!follower()) return FailedPrecondition("RunFollower: this engine is not a follower of a multi-process group");
  while (true) {
    ASSIGN_OR_RETURN(std::optional<StepPlan> plan, process_group_->ReceivePlan());
    if (!plan) return Status::Ok();  // the leader shut down
    // The leader's choice, from the same count and options (the group fingerprint has them): a
    // CUDA rank timed per op runs eagerly, and every rank must replay or run eagerly alike.
    StartStepTrace();
    RETURN_IF_ERROR(Fail(RunRanks(*plan)));
  }
}

Status Engine::Heartbeat() {
  if (!failure_.ok()) return failure_;
  if (process_group_ == nullptr || !process_group_->membership().leader()) return Status::Ok();
  Status alive = process_group_->SendHeartbeat();
  if (!alive.ok()) alive = Status(alive.code(), "heartbeat while idle: " + alive.message());
  return Fail(alive);
}

int Engine::group_size() const {
  return process_group_ ? process_group_->membership().members : 1;
}

int Engine::group_members_connected() const {
  return process_group_ ? process_group_->ConnectedMembers() : 1;
}

void Engine::set_trace(bool on) {
  options_.trace = on;
}

void Engine::RankLoop(int r) {
  Rank& rank = *ranks_[r];
  uint64_t seen = 0;
  while (true) {
    std::shared_ptr<const StepPlan> plan;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      plan = plan_;
    }
    rank.trace = RankTrace{.rank = rank.decoder->shape().rank};
    Status status;
    try {
      status = rank.decoder->Forward(*plan, &rank.logits, &rank.trace);
    } catch (const std::exception& e) {
      status = Internal(std::string("rank ") + std::to_string(rank.global_rank) + " threw: " + e.what());
    }
    if (!status.ok()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (step_failure_.ok()) step_failure_ = status;  // the first failure is the cause
      }
      // Then peers waiting for this rank in a collective fail now rather than at their timeout
      // (after the cause is recorded, so that their "aborted" does not take its place).
      rank.decoder->AbortCollectives();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      rank.done = true;
    }
    work_done_.notify_all();
  }
}

cpu::ThreadPool& Engine::SamplingPool() {
  // Rank 0's CPU pool has just finished the step and its members still spin (ThreadPool), where
  // the sampling pool's members sleep and must be woken: at batch 8 of the default model on a
  // 2-vCPU AMD EPYC (Zen 5) the step's host time fell from ~0.28 to ~0.18 ms (9 of 9 alternated
  // runs, docs/PERFORMANCE.md, session 35). Between steps rank 0's thread waits for the next plan,
  // so its pool is free; with fewer members than the sampling pool (TP > 1 in one process) the
  // sampling pool's width wins.
  cpu::ThreadPool* rank_pool = ranks_.empty() ? nullptr : ranks_[0]->pool.get();
  return rank_pool != nullptr && rank_pool->size() >= sampling_pool_.size() ? *rank_pool
                                                                            : sampling_pool_;
}

Status Engine::SampleRows(const StepPlan& plan, StepResult* result) {
  std::vector<const SequencePlan*> rows;  // [logit rows], plan order
  for (const SequencePlan& seq : plan.sequences) {
    if (seq.want_logits) rows.push_back(&seq);
  }
  if (static_cast<int>(rows.size()) != result->logit_rows) {
    return Internal("step " + std::to_string(plan.step_id) + ": " + std::to_string(result->logit_rows) +
                    " logit rows for " + std::to_string(rows.size()) + " sequences that want a token");
  }
  const int vocab = config_.vocab_size;
  const std::span<const int32_t> device_tokens = ranks_[0]->decoder->device_tokens();
  if (!device_tokens.empty() && device_tokens.size() != rows.size()) {
    return Internal("rank 0 sampled " + std::to_string(device_tokens.size()) + " rows of " + std::to_string(rows.size()));
  }
  for (size_t row = 0; row < rows.size(); ++row) {
    if (result->logits.empty() && (device_tokens.empty() || device_tokens[row] < 0)) {
      return Internal("step " + std::to_string(plan.step_id) + ": row " + std::to_string(row) +
                      " needs host sampling but rank 0 returned no logits");
    }
  }
  result->tokens.resize(rows.size());
  if (!device_tokens.empty() &&
      std::all_of(device_tokens.begin(), device_tokens.end(), [](int32_t id) { return id >= 0; })) {
    for (size_t row = 0; row < rows.size(); ++row)
      result->tokens[row] = SampledToken{.id = device_tokens[row]};
    return Status::Ok();  // every row sampled by the rank: nothing for the pool
  }
  SamplingPool().ParallelFor(rows.size(), 1, [&](size_t begin, size_t end) {
    for (size_t row = begin; row < end; ++row) {
      if (!device_tokens.empty() && device_tokens[row] >= 0) {  // sampled on the device: greedy, no logprobs
        result->tokens[row] = SampledToken{.id = device_tokens[row]};
        continue;
      }
      const SequencePlan& seq = *rows[row];
      const std::vector<int32_t> banned = BannedTokens(seq.sampling, config_.eos_token_ids, seq.sampled_tokens);
      result->tokens[row] = SampleToken(result->logits.subspan(row * vocab, vocab), seq.sampling, banned,
                                        static_cast<uint64_t>(seq.sampled_tokens));
    }
  });
  return Status::Ok();
}

Status Engine::Fail(Status status) {
  if (!status.ok() && failure_.ok()) {
    const std::string when = steps_run_ == 0 ? "before its first step" : "at step " + std::to_string(steps_run_ - 1);
    failure_ = Status(status.code(), "the engine failed " + when + ": " + status.message());
    spdlog::error("{}", failure_.message());
  }
  return status.ok() ? status : failure_;
}

Result<StepResult> Engine::Step(const StepPlan& plan) {
  if (!failure_.ok()) return failure_;
  // Check the plan before any rank sees it: a bad plan must fail alone.
  const int tokens = plan.token_count();
  if (tokens > options_.max_step_tokens) {
    return InvalidArgument("step " + std::to_string(plan.step_id) + ": " + std::to_string(tokens) +
                           " tokens, over the engine's step limit of " + std::to_string(options_.max_step_tokens) +
                           " (max_step_tokens: split prompts into chunks)");
  }
  if (static_cast<int>(plan.sequences.size()) > options_.max_step_sequences) {
    return InvalidArgument("step " + std::to_string(plan.step_id) + ": " + std::to_string(plan.sequences.size()) +
                           " sequences, over the engine's step limit of " +
                           std::to_string(options_.max_step_sequences) + " (max_step_sequences)");
  }
  for (const SequencePlan& seq : plan.sequences) {
    if (seq.tokens.empty()) return InvalidArgument("sequence " + std::to_string(seq.sequence_id) + " has no tokens");
    const int64_t end = int64_t{seq.start_position} + static_cast<int64_t>(seq.tokens.size());
    if (end > max_context_) {
      return InvalidArgument("step " + std::to_string(plan.step_id) + ": sequence " + std::to_string(seq.sequence_id) +
                             " needs " + std::to_string(end) + " positions, over the engine's context limit of " +
                             std::to_string(max_context_) + " (max_context)");
    }
    if (seq.start_position < 0 || static_cast<int>(seq.block_table.size()) * options_.block_size < end) {
      return InvalidArgument("sequence " + std::to_string(seq.sequence_id) + ": block table covers " +
                             std::to_string(seq.block_table.size() * options_.block_size) +
                             " positions, needs " + std::to_string(end));
    }
    for (int32_t block : seq.block_table) {
      if (block < 0 || block >= block_pool_->total_blocks()) {
        return InvalidArgument("sequence " + std::to_string(seq.sequence_id) + ": block id " +
                               std::to_string(block) + " out of range");
      }
    }
    for (int32_t id : seq.tokens) {
      if (id < 0 || id >= config_.vocab_size) {
        return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                               std::to_string(config_.vocab_size) + ")");
      }
    }
  }
  const bool per_op = StartStepTrace();
  const auto start = std::chrono::steady_clock::now();
  StepResult result;
  StepTrace& trace = result.trace;
  if (process_group_ != nullptr) {
    // The followers' ranks need the plan before this process's ranks reach their first collective.
    RETURN_IF_ERROR(Fail(process_group_->SendPlan(plan)));
    trace.plan_send_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }
  RETURN_IF_ERROR(Fail(RunRanks(plan)));
  trace.step_id = plan.step_id;
  trace.batch_size = static_cast<int>(plan.sequences.size());
  trace.per_op = per_op;
  for (const SequencePlan& seq : plan.sequences) {
    (seq.tokens.size() == 1 ? trace.decode_tokens : trace.prefill_tokens) += static_cast<int>(seq.tokens.size());
  }
  for (auto& rank : ranks_) trace.ranks.push_back(std::move(rank->trace));
  // Drop the vocabulary padding: [rows, vocab_padded] -> [rows, vocab_size].
  const std::vector<float>& padded = ranks_[0]->logits;
  const int vocab_padded = ranks_[0]->decoder->shape().vocab_padded;
  for (const SequencePlan& seq : plan.sequences) result.logit_rows += seq.want_logits ? 1 : 0;
  if (!padded.empty() && padded.size() != static_cast<size_t>(result.logit_rows) * vocab_padded) {
    return Internal("rank 0 returned " + std::to_string(padded.size()) + " logits for " +
                    std::to_string(result.logit_rows) + " rows of " + std::to_string(vocab_padded));
  }
  if (padded.empty() || vocab_padded == config_.vocab_size) {
    result.logits = padded;  // no padding (or no logits): lend rank 0's buffer
  } else {
    unpadded_logits_.resize(static_cast<size_t>(result.logit_rows) * config_.vocab_size);
    for (int row = 0; row < result.logit_rows; ++row) {
      std::copy_n(padded.begin() + static_cast<size_t>(row) * vocab_padded, config_.vocab_size,
                  unpadded_logits_.begin() + static_cast<size_t>(row) * config_.vocab_size);
    }
    result.logits = unpadded_logits_;
  }
  RETURN_IF_ERROR(SampleRows(plan, &result));
  trace.step_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace tpserve

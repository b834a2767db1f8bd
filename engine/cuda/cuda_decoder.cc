#include "engine/cuda/cuda_decoder.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "comm/cuda/oneshot_communicator.h"
#include "comm/cuda/rank_order_communicator.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sampling.h"
#include "engine/cpu/decoder.h"
#include "engine/step/packed_step.h"

namespace tpserve::cuda {
namespace {

const uint16_t* Bf16(const DeviceBuffer& b) {
  return b.get<uint16_t>();
}
const float* F32(const DeviceBuffer& b) {
  return b.bytes() ? b.get<float>() : nullptr;
}

}  // namespace

// Per-step device buffers, grown to the largest step seen (never shrunk: no allocation in steady
// state).
struct CudaDecoder::Activations {
  DeviceBuffer step_ints;     // PackedStep::Concatenated()
  PinnedBuffer staged_ints;   // its host copy
  DeviceBuffer x;             // [T, hidden] f32: the residual stream
  DeviceBuffer normed;        // [T, hidden] f32
  DeviceBuffer normed_bf16;   // [T, hidden] bf16
  DeviceBuffer qkv;           // [T, q_local + 2 * kv_local] f32
  DeviceBuffer attn;          // [T, q_local] f32
  DeviceBuffer attn_bf16;     // [T, q_local] bf16
  DeviceBuffer proj;          // [T, hidden] f32: the row-parallel outputs (AllReduce'd)
  DeviceBuffer gate_up;       // [T, 2 * ffn_local] f32
  DeviceBuffer act_bf16;      // [T, ffn_local] bf16
  DeviceBuffer attn_scratch;  // PagedAttentionScratchFloats
  DeviceBuffer last;          // [R, hidden] f32: the final norm of the rows that want logits
  DeviceBuffer last_bf16;     // [R, hidden] bf16
  DeviceBuffer local_logits;  // [R, vocab_local] f32
  DeviceBuffer gathered;      // [tp, R, vocab_local] f32
  PinnedBuffer host_logits;   // the logits rank 0 reads back
  DeviceBuffer tokens;        // [R] int32: rank 0's greedy picks
  PinnedBuffer host_tokens;
  DeviceBuffer agree;         // [1] f32: AllRanksOk's sum
  PinnedBuffer host_agree;
};

// Events recorded around each op on the rank's stream, turned into the RankTrace after the step.
class CudaDecoder::Timeline {
 public:
  explicit Timeline(bool trace) : trace_(trace) {}
  void set_trace(bool on) { trace_ = on; }
  bool tracing() const { return trace_; }
  ~Timeline() {
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }

  Status Begin(cudaStream_t stream) {
    spans_.clear();
    used_ = 0;
    ASSIGN_OR_RETURN(start_, Record(stream));
    return Status::Ok();
  }

  // Runs `launch` (which enqueues the op) between two events, inside an NVTX range.
  template <typename Launch>
  Status Op(OpKind op, int layer, int64_t bytes, cudaStream_t stream, Launch&& launch) {
    nvtxRangePushA(OpName(op).data());
    int before = -1;
    if (trace_) {
      auto event = Record(stream);
      if (!event.ok()) return event.status();
      before = *event;
    }
    Status status = launch();
    nvtxRangePop();
    if (!status.ok() || !trace_) return status;
    ASSIGN_OR_RETURN(int after, Record(stream));
    spans_.push_back({op, static_cast<int16_t>(layer), bytes, before, after});
    return Status::Ok();
  }

  Status End(cudaStream_t stream) {
    ASSIGN_OR_RETURN(end_, Record(stream));
    return Status::Ok();
  }

  // After the stream finished: the RankTrace (every op when tracing, else only the total).
  RankTrace Trace(int rank) const {
    std::vector<EventSpan> spans;
    for (const Span& s : spans_)
      spans.push_back({s.op, s.layer, s.bytes, Elapsed(s.before), Elapsed(s.after)});
    RankTrace trace = RankTraceFromEvents(rank, spans);
    trace.total_ns = static_cast<int64_t>(static_cast<double>(Elapsed(end_)) * 1e6);
    return trace;
  }

 private:
  struct Span {
    OpKind op;
    int16_t layer;
    int64_t bytes;
    int before, after;  // indices into events_
  };

  Result<int> Record(cudaStream_t stream) {
    if (used_ == static_cast<int>(events_.size())) {
      cudaEvent_t event = nullptr;
      RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&event), "cudaEventCreate"));
      events_.push_back(event);
    }
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events_[used_], stream), "cudaEventRecord"));
    return used_++;
  }
  float Elapsed(int index) const {
    float ms = 0;
    cudaEventElapsedTime(&ms, events_[start_], events_[index]);
    return ms;
  }

  bool trace_;
  std::vector<cudaEvent_t> events_;
  std::vector<Span> spans_;
  int used_ = 0, start_ = 0, end_ = 0;
};

CudaDecoder::CudaDecoder(const ModelConfig& config, const RankShape& shape,
                         std::unique_ptr<DeviceCommunicator> comm, const CudaRankOptions& options)
    : config_(config),
      shape_(shape),
      comm_(std::move(comm)),
      options_(options),
      act_(std::make_unique<Activations>()),
      timeline_(std::make_unique<Timeline>(options.trace)) {}

CudaDecoder::~CudaDecoder() {
  cudaSetDevice(options_.device);
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  timeline_.reset();
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  if (finished_ != nullptr) cudaEventDestroy(finished_);
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Result<std::unique_ptr<CudaDecoder>> CudaDecoder::Create(const ModelConfig& config,
                                                         const RankWeights& weights,
                                                         std::unique_ptr<DeviceCommunicator> comm,
                                                         const CudaRankOptions& options) {
  if (options.max_tokens < 1 || options.max_sequences < 1 || options.max_context < 1) {
    return InvalidArgument("the CUDA decoder's step limits must be positive: " + std::to_string(options.max_tokens) +
                           " tokens, " + std::to_string(options.max_sequences) + " sequences, context " +
                           std::to_string(options.max_context));
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options.device),
                             "cudaSetDevice(" + std::to_string(options.device) + ")"));
  std::unique_ptr<CudaDecoder> decoder(
      new CudaDecoder(config, weights.shape, std::move(comm), options));
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  decoder->stream_ = stream;
  RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&decoder->finished_, cudaEventDisableTiming), "event"));
  RETURN_IF_ERROR(decoder->Upload(weights));

  constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper
  ASSIGN_OR_RETURN(decoder->blas_, BlasContext::Create(kWorkspaceBytes));
  const RankShape& s = weights.shape;
  const int h = config.hidden_size, q_width = s.heads * s.head_dim,
            kv_width = s.kv_heads * s.head_dim;
  const int max = options.max_tokens;
  ASSIGN_OR_RETURN(decoder->qkv_,
                   Bf16Linear::Create(*decoder->blas_, q_width + 2 * kv_width, h, max));
  ASSIGN_OR_RETURN(decoder->o_, Bf16Linear::Create(*decoder->blas_, h, q_width, max));
  ASSIGN_OR_RETURN(decoder->gate_up_, Bf16Linear::Create(*decoder->blas_, 2 * s.ffn, h, max));
  ASSIGN_OR_RETURN(decoder->down_, Bf16Linear::Create(*decoder->blas_, h, s.ffn, max));
  ASSIGN_OR_RETURN(decoder->lm_head_, Bf16Linear::Create(*decoder->blas_, s.vocab, h, max));
  if (s.rank == 0) {  // every rank has the same shapes, so the same choices (gemm.h)
    std::string line = "GEMM algorithms (one per weight, 1.." + std::to_string(max) + " tokens):";
    for (const auto& [name, linear] : {std::pair{"qkv", decoder->qkv_.get()}, std::pair{"o", decoder->o_.get()},
                                       std::pair{"gate_up", decoder->gate_up_.get()},
                                       std::pair{"down", decoder->down_.get()},
                                       std::pair{"lm_head", decoder->lm_head_.get()}}) {
      line += std::string(" ") + name + " [" + std::to_string(linear->out()) + ", " + std::to_string(linear->in()) +
              "] " + linear->algorithm() + ";";
    }
    decoder->Log(line);
  }
  const int rows = std::min(options.max_sequences, max);
  decoder->limits_ = StepDims{.tokens = max,
                              .sequences = rows,
                              .table_width = decoder->GraphWidth(options.max_context),
                              .logit_rows = rows,
                              .max_context = decoder->GraphWidth(options.max_context) * options.block_size};
  ASSIGN_OR_RETURN(decoder->step_buffer_bytes_, decoder->ReserveActivations(*decoder->act_, decoder->limits_));
  RETURN_IF_ERROR(decoder->LoadKernels());
  if (options.cuda_graphs) {
    const int max_context = std::min(options.graph_max_context, options.max_context);
    decoder->graph_batches_ = CudaGraphBatchSizes(std::min(options.graph_max_batch, rows));
    decoder->graph_contexts_ = CudaGraphContextSizes((max_context + options.block_size - 1) /
                                                     options.block_size * options.block_size);
    // A bucket's padded table must fit the buffers too (the last context bucket is max_context
    // rounded up to a block, which GraphWidth(options.max_context) already covers).
    if (decoder->graph_batches_.empty() || decoder->graph_contexts_.empty()) {
      return InvalidArgument(
          "--cuda-graph-max-batch and the model's context leave no graph to capture");
    }
  }
  return Result<std::unique_ptr<CudaDecoder>>(std::move(decoder));
}

Status CudaDecoder::Upload(const RankWeights& weights) {
  auto upload = [&](DeviceBuffer* to, const HostTensor& from, const std::string& what) -> Status {
    if (from.bytes.empty()) return Status::Ok();
    weight_bytes_ += from.bytes.size();
    return to->Upload(from.bytes.data(), from.bytes.size(),
                      "rank " + std::to_string(shape_.rank) + " " + what);
  };
  RETURN_IF_ERROR(upload(&embed_, weights.embed, "embed"));
  RETURN_IF_ERROR(upload(&final_norm_, weights.final_norm, "final norm"));
  RETURN_IF_ERROR(upload(&lm_head_weight_, weights.lm_head, "lm_head"));
  layers_.resize(weights.layers.size());
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    const LayerWeights& w = weights.layers[i];
    Layer& d = layers_[i];
    const std::string layer = "layer " + std::to_string(i) + " ";
    RETURN_IF_ERROR(upload(&d.attn_norm, w.attn_norm, layer + "attn norm"));
    RETURN_IF_ERROR(upload(&d.wqkv, w.wqkv, layer + "qkv"));
    RETURN_IF_ERROR(upload(&d.bqkv, w.bqkv, layer + "qkv bias"));
    RETURN_IF_ERROR(upload(&d.wo, w.wo, layer + "o_proj"));
    RETURN_IF_ERROR(upload(&d.mlp_norm, w.mlp_norm, layer + "mlp norm"));
    RETURN_IF_ERROR(upload(&d.w_gate_up, w.w_gate_up, layer + "gate/up"));
    RETURN_IF_ERROR(upload(&d.w_down, w.w_down, layer + "down_proj"));
  }
  const std::vector<double> inv_freq = cpu::RopeInverseFrequencies(RopeParamsFor(config_));
  return inv_freq_.Upload(inv_freq.data(), inv_freq.size() * sizeof(double), "RoPE frequencies");
}

void CudaDecoder::set_trace(bool on) {
  timeline_->set_trace(on);
}

Status CudaDecoder::AllocateKvCache(int num_blocks) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  const size_t bytes = static_cast<size_t>(num_blocks) * options_.block_size * shape_.kv_heads *
                       shape_.head_dim * sizeof(float);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string what =
        "rank " + std::to_string(shape_.rank) + " KV cache of layer " + std::to_string(i);
    RETURN_IF_ERROR(layers_[i].keys.Reserve(bytes, what));
    RETURN_IF_ERROR(layers_[i].values.Reserve(bytes, what));
  }
  kv_blocks_ = num_blocks;
  return Status::Ok();
}

Status CudaDecoder::WaitForStream() { return WaitForStream(options_.wait_timeout); }

Status CudaDecoder::WaitForStream(std::chrono::milliseconds timeout) {
  auto stream = static_cast<cudaStream_t>(stream_);
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(finished_, stream), "cudaEventRecord"));
  const auto start = std::chrono::steady_clock::now();
  auto next_comm_check = start;
  for (int spins = 0;; ++spins) {
    const cudaError_t query = cudaEventQuery(finished_);
    if (query == cudaSuccess) {
      // A group broken during the step (a one-shot timeout on any rank, an abort) may have let
      // this rank's later collectives pass without their peers: its results are not to be used.
      if (comm_ != nullptr) {
        Status comm = comm_->AsyncError();
        if (!comm.ok()) {
          comm_->Abort();
          return comm;
        }
      }
      return Status::Ok();
    }
    if (query != cudaErrorNotReady)
      return CudaStatus(query, "rank " + std::to_string(shape_.rank) + " step");
    const auto now = std::chrono::steady_clock::now();
    if (comm_ != nullptr && now >= next_comm_check) {
      Status comm = comm_->AsyncError();
      if (!comm.ok()) {
        comm_->Abort();
        return comm;
      }
      next_comm_check = now + std::chrono::milliseconds(5);
    }
    if (now - start > timeout) {
      if (comm_ != nullptr) comm_->Abort();
      return Status(
          StatusCode::kDeadlineExceeded,
          "rank " + std::to_string(shape_.rank) + " on cuda:" + std::to_string(options_.device) +
              ": the step did not finish within " + std::to_string(timeout.count()) +
              " ms (a stalled collective or kernel); the communicator was aborted");
    }
    // Decode steps take milliseconds: yield first, then sleep briefly.
    if (spins < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

Result<size_t> CudaDecoder::ReserveActivations(Activations& a, const StepDims& d) {
  const RankShape& s = shape_;
  const int h = config_.hidden_size, q_width = s.heads * s.head_dim,
            kv_width = s.kv_heads * s.head_dim;
  const size_t T = d.tokens, R = std::max(d.logit_rows, 1), S = d.sequences, W = d.table_width;
  const size_t f32 = sizeof(float), bf16 = sizeof(uint16_t), i32 = sizeof(int32_t);
  const std::string rank = "rank " + std::to_string(s.rank) + " ";
  size_t bytes = 0;
  auto device = [&](DeviceBuffer& buffer, size_t size, const char* what) -> Status {
    bytes += size;
    return buffer.Reserve(size, rank + what);
  };
  RETURN_IF_ERROR(device(a.x, f32 * T * h, "activations"));
  RETURN_IF_ERROR(device(a.normed, f32 * T * h, "activations"));
  RETURN_IF_ERROR(device(a.normed_bf16, bf16 * T * h, "activations"));
  RETURN_IF_ERROR(device(a.qkv, f32 * T * (q_width + 2 * kv_width), "activations"));
  RETURN_IF_ERROR(device(a.attn, f32 * T * q_width, "activations"));
  RETURN_IF_ERROR(device(a.attn_bf16, bf16 * T * q_width, "activations"));
  RETURN_IF_ERROR(device(a.proj, f32 * T * h, "activations"));
  RETURN_IF_ERROR(device(a.gate_up, f32 * T * 2 * s.ffn, "activations"));
  RETURN_IF_ERROR(device(a.act_bf16, bf16 * T * s.ffn, "activations"));
  RETURN_IF_ERROR(device(a.attn_scratch,
                         f32 * PagedAttentionBoundedScratchFloats(s.heads, s.head_dim, d.max_context),
                         "attention scratch"));
  RETURN_IF_ERROR(device(a.last, f32 * R * h, "activations"));
  RETURN_IF_ERROR(device(a.last_bf16, bf16 * R * h, "activations"));
  RETURN_IF_ERROR(device(a.local_logits, f32 * R * s.vocab, "logits"));
  if (s.tp > 1) RETURN_IF_ERROR(device(a.gathered, f32 * s.tp * R * s.vocab, "logits"));
  if (s.rank == 0) RETURN_IF_ERROR(device(a.tokens, i32 * R, "sampled tokens"));
  RETURN_IF_ERROR(device(a.agree, f32, "rank agreement"));
  // PackedStep::Concatenated(), then rank 0's sampling bans (offsets and ids).
  step_ints_capacity_ = T * 4 + (S + 1) + S + S * W + R + (R + 1) + R * kDeviceBansPerRow;
  RETURN_IF_ERROR(device(a.step_ints, i32 * step_ints_capacity_, "step arrays"));
  RETURN_IF_ERROR(a.staged_ints.Reserve(i32 * step_ints_capacity_, rank + "step arrays"));
  if (s.rank == 0) RETURN_IF_ERROR(a.host_tokens.Reserve(i32 * R, rank + "sampled tokens"));
  RETURN_IF_ERROR(a.host_agree.Reserve(f32, rank + "rank agreement"));
  if (s.rank == 0) RETURN_IF_ERROR(a.host_logits.Reserve(f32 * s.tp * R * s.vocab, rank + "logits"));
  return bytes;
}

Status CudaDecoder::CheckLimits(const StepDims& d, size_t ints) const {
  const struct {
    const char* what;
    size_t value, limit;
  } checks[] = {{"tokens", static_cast<size_t>(d.tokens), static_cast<size_t>(limits_.tokens)},
                {"sequences", static_cast<size_t>(d.sequences), static_cast<size_t>(limits_.sequences)},
                {"logit rows", static_cast<size_t>(d.logit_rows), static_cast<size_t>(limits_.logit_rows)},
                {"context positions", static_cast<size_t>(d.max_context), static_cast<size_t>(limits_.max_context)},
                {"KV blocks in a block table", static_cast<size_t>(d.table_width),
                 static_cast<size_t>(limits_.table_width)},
                {"step array entries", ints, step_ints_capacity_}};
  for (const auto& check : checks) {
    if (check.value > check.limit) {
      return InvalidArgument("a step of " + std::to_string(check.value) + " " + check.what +
                             "; the CUDA backend was set up for at most " + std::to_string(check.limit) +
                             " (the engine's step limits)");
    }
  }
  return Status::Ok();
}

Status CudaDecoder::Forward(const StepPlan& plan, std::vector<float>* logits, RankTrace* trace) {
  const int64_t forward = forwards_++;
  RETURN_IF_ERROR(InjectFault(options_.fault, forward, shape_.rank, nullptr));
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  if (kv_blocks_ == 0)
    return FailedPrecondition("rank " + std::to_string(shape_.rank) + ": no KV cache allocated");
  ASSIGN_OR_RETURN(PackedStep packed, PackStep(plan, options_.block_size));
  const int T = packed.num_tokens;
  const int R = static_cast<int>(packed.logit_tokens.size());  // the step's own logit rows
  for (int32_t block : packed.block_tables) {
    if (block >= kv_blocks_)
      return InvalidArgument("KV block " + std::to_string(block) + " is out of range");
  }
  const RankShape& s = shape_;
  const bool rank0 = s.rank == 0;
  DeviceSamplingPlan sampling;
  if (rank0) {
    sampling = PlanDeviceSampling(plan, config_.eos_token_ids, config_.vocab_size);
    MoveManyBansToHost(kDeviceBansPerRow, &sampling);
  }
  // Rank 0 copies back every row's logits when they are wanted, else only the host's rows.
  const std::vector<int32_t> host_rows =
      rank0 ? HostLogitRows(sampling, options_.return_logits) : std::vector<int32_t>{};
  device_tokens_.clear();
  for (int32_t on : sampling.on_device)
    device_tokens_.push_back(on ? 0 : -1);  // filled in after the step

  // A pure decode step that fits a graph is padded to its bucket; the rest run eagerly.
  GraphKey key;
  const bool graph = ChooseGraph(packed, &key);
  if (graph) RETURN_IF_ERROR(PadDecodeStep(key.batch, GraphWidth(key.context), &packed, &sampling));
  const StepDims dims{.tokens = packed.num_tokens,
                      .sequences = packed.num_sequences,
                      .table_width = packed.block_table_width,
                      .logit_rows = static_cast<int>(packed.logit_tokens.size()),
                      .max_context = graph ? key.context
                                     : T   ? *std::max_element(packed.context_lengths.begin(),
                                                               packed.context_lengths.end())
                                           : 0};
  Activations& a = *act_;

  // The step's arrays in one host-to-device copy (rank 0 adds its sampling bans), outside any
  // graph.
  std::vector<int32_t> ints = packed.Concatenated();
  if (rank0) {
    ints.insert(ints.end(), sampling.banned_offsets.begin(), sampling.banned_offsets.end());
    ints.insert(ints.end(), sampling.banned_ids.begin(), sampling.banned_ids.end());
  }
  RETURN_IF_ERROR(CheckLimits(dims, ints.size()));
  auto stream = static_cast<cudaStream_t>(stream_);
  std::memcpy(a.staged_ints.get(), ints.data(), ints.size() * sizeof(int32_t));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(a.step_ints.get(), a.staged_ints.get(),
                                 ints.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
                 "step arrays upload"));

  Timeline& tl = *timeline_;
  RETURN_IF_ERROR(tl.Begin(stream));
  if (graph) {
    RETURN_IF_ERROR(LaunchGraph(key, dims));
  } else {
    RETURN_IF_ERROR(Enqueue(dims, a));
  }
  // After the graph or the eager ops, outside any graph: which rows go back changes every step.
  RETURN_IF_ERROR(EnqueueLogitsDownload(dims, host_rows));
  RETURN_IF_ERROR(tl.End(stream));
  RETURN_IF_ERROR(WaitForStream());

  // Only the step's own rows: a graph's padding rows are dropped here.
  if (rank0) {
    for (int row = 0; row < R; ++row) {
      if (device_tokens_[row] >= 0) device_tokens_[row] = a.host_tokens.get<int32_t>()[row];
    }
  }
  if (host_rows.empty()) {
    logits->clear();
  } else {
    // -> [R, vocab_padded]. host_logits holds [tp, dims.logit_rows, vocab_local] (every row) or
    // [host rows, tp, vocab_local]; with return_logits off the rows the device sampled are left as
    // they were (the engine reads only the host's rows).
    const float* host = a.host_logits.get<float>();
    const size_t vocab = s.vocab;
    logits->resize(static_cast<size_t>(R) * s.vocab_padded);
    for (size_t k = 0; k < host_rows.size(); ++k) {
      const size_t row = host_rows[k];
      for (int r = 0; r < s.tp; ++r) {
        const float* from = options_.return_logits ? host + (r * static_cast<size_t>(dims.logit_rows) + row) * vocab
                                                   : host + (k * s.tp + r) * vocab;
        std::memcpy(&(*logits)[row * s.vocab_padded + r * vocab], from, vocab * sizeof(float));
      }
    }
  }
  *trace = tl.Trace(s.rank);
  trace->graph_replay = graph && graphs_off_.empty();  // a failed capture ran the step eagerly
  return Status::Ok();
}

bool CudaDecoder::ChooseGraph(const PackedStep& packed, GraphKey* key) {
  if (!options_.cuda_graphs || !graphs_off_.empty() || timeline_->tracing() ||
      !IsPureDecode(packed))
    return false;
  const int batch = BucketFor(packed.num_tokens, graph_batches_);
  const int width = packed.block_table_width;
  const int context = BucketFor(std::max(width * options_.block_size, 1), graph_contexts_);
  if (batch == 0 || context == 0) return false;
  const size_t reduce_bytes = static_cast<size_t>(batch) * config_.hidden_size * sizeof(float);
  const size_t gather_bytes = static_cast<size_t>(batch) * shape_.vocab * sizeof(float);
  if (comm_ != nullptr && !comm_->CanCapture(reduce_bytes, gather_bytes)) {
    if (!comm_->CanCapture(0, 0)) {  // none of its collectives: graphs off for the run
      graphs_off_ = comm_->name() + " cannot be captured in a CUDA graph";
      Log("rank " + std::to_string(shape_.rank) + ": CUDA graphs off: " + graphs_off_);
    } else if (eager_batches_.insert(batch).second) {  // this bucket's messages are too large: it alone runs eagerly
      Log("rank " + std::to_string(shape_.rank) + ": batch bucket " + std::to_string(batch) + " runs eagerly: " +
          comm_->name() + " cannot capture " + std::to_string(gather_bytes) + "-byte gathers");
    }
    return false;
  }
  *key = GraphKey{.batch = batch, .context = context};
  return true;
}

Status CudaDecoder::LoadKernels() {
  RETURN_IF_ERROR(PreloadOpsKernels());
  RETURN_IF_ERROR(PreloadAttentionKernels());
  RETURN_IF_ERROR(PreloadSamplingKernels());
  RETURN_IF_ERROR(PreloadOneShotKernels());
  RETURN_IF_ERROR(PreloadRankOrderKernels());
  // cuBLASLt's kernels load at their first launch too: one call of each projection, on zeros.
  Activations& a = *act_;
  auto stream = static_cast<cudaStream_t>(stream_);
  const RankShape& s = shape_;
  const size_t bf16 = sizeof(uint16_t);  // one row of each GEMM input: the calls below take 1 token
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(a.normed_bf16.get(), 0, bf16 * config_.hidden_size, stream), "GEMM warm-up"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(a.attn_bf16.get(), 0, bf16 * s.heads * s.head_dim, stream), "GEMM warm-up"));
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(a.act_bf16.get(), 0, bf16 * s.ffn, stream), "GEMM warm-up"));
  if (layers_.empty()) return Status::Ok();
  const Layer& w = layers_[0];
  const DeviceBuffer& head = LmHeadWeight();
  RETURN_IF_ERROR(qkv_->Run(Bf16(w.wqkv), a.normed_bf16.get<uint16_t>(), a.qkv.get<float>(), 1, stream));
  RETURN_IF_ERROR(o_->Run(Bf16(w.wo), a.attn_bf16.get<uint16_t>(), a.proj.get<float>(), 1, stream));
  RETURN_IF_ERROR(gate_up_->Run(Bf16(w.w_gate_up), a.normed_bf16.get<uint16_t>(), a.gate_up.get<float>(), 1, stream));
  RETURN_IF_ERROR(down_->Run(Bf16(w.w_down), a.act_bf16.get<uint16_t>(), a.proj.get<float>(), 1, stream));
  RETURN_IF_ERROR(lm_head_->Run(Bf16(head), a.normed_bf16.get<uint16_t>(), a.local_logits.get<float>(), 1, stream));
  return CudaStatus(cudaStreamSynchronize(stream), "rank " + std::to_string(s.rank) + " kernel loading");
}

Result<bool> CudaDecoder::AllRanksOk(bool ok) {
  if (comm_ == nullptr || shape_.tp == 1) return ok;
  auto stream = static_cast<cudaStream_t>(stream_);
  Activations& a = *act_;
  *a.host_agree.get<float>() = ok ? 1.0f : 0.0f;
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(a.agree.get(), a.host_agree.get(), sizeof(float),
                                             cudaMemcpyHostToDevice, stream),
                             "rank agreement upload"));
  RETURN_IF_ERROR(comm_->AllReduceSum(a.agree.get(), 1, DeviceDtype::kF32, stream));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(a.host_agree.get(), a.agree.get(), sizeof(float),
                                             cudaMemcpyDeviceToHost, stream),
                             "rank agreement download"));
  RETURN_IF_ERROR(WaitForStream());
  return *a.host_agree.get<float>() == static_cast<float>(shape_.tp);
}

Result<cudaGraphExec_t> CudaDecoder::Capture(const StepDims& dims) {
  // Capture on this rank's stream only (thread-local mode: the other ranks' threads keep issuing
  // their own work); collectives are recorded, not run, so the ranks capture independently.
  auto stream = static_cast<cudaStream_t>(stream_);
  RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "graph capture"));
  const Status enqueued = Enqueue(dims, *act_);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  Status made = enqueued.ok() ? CudaStatus(ended, "cudaStreamEndCapture") : enqueued;
  if (made.ok()) made = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (made.ok()) return exec;
  cudaGetLastError();  // a failed capture's error is not sticky; clear it
  return made;
}

Status CudaDecoder::LaunchGraph(const GraphKey& key, const StepDims& dims) {
  auto stream = static_cast<cudaStream_t>(stream_);
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    // The bucket's first step, at the same step on every rank (the choice is shared; no rank has
    // a variant of its own: the logits download runs outside the graph). Then every rank learns
    // whether all captured: all replay from now on, or none does.
    Result<cudaGraphExec_t> exec = Capture(dims);
    ASSIGN_OR_RETURN(const bool all_captured, AllRanksOk(exec.ok()));
    if (!all_captured) {
      if (exec.ok()) cudaGraphExecDestroy(*exec);
      graphs_off_ = "capturing batch " + std::to_string(key.batch) + " failed on " +
                    (exec.ok() ? std::string("another rank") : "this rank: " + exec.status().message());
      Log("rank " + std::to_string(shape_.rank) + ": CUDA graphs off on every rank: " + graphs_off_);
      return Enqueue(dims, *act_);  // the same buffers; eager from now on
    }
    found = graphs_.emplace(key, *exec).first;
  }
  return CudaStatus(cudaGraphLaunch(found->second, stream), "cudaGraphLaunch");
}

Status CudaDecoder::EnqueueLogitsDownload(const StepDims& dims, const std::vector<int32_t>& rows) {
  if (rows.empty()) return Status::Ok();
  Activations& a = *act_;
  auto stream = static_cast<cudaStream_t>(stream_);
  const size_t vocab_bytes = static_cast<size_t>(shape_.vocab) * sizeof(float);
  // The step's logits on the device: [tp, dims.logit_rows, vocab_local] (tp 1: the local ones).
  const auto* result = (shape_.tp > 1 ? a.gathered : a.local_logits).get<char>();
  const size_t slice_pitch = static_cast<size_t>(dims.logit_rows) * vocab_bytes;
  auto* host = a.host_logits.get<char>();
  if (options_.return_logits) {  // every row: one copy, [tp, dims.logit_rows, vocab_local] as it is
    return CudaStatus(cudaMemcpyAsync(host, result, shape_.tp * slice_pitch, cudaMemcpyDeviceToHost, stream),
                      "logits download");
  }
  // Row r of every rank's slice, as [tp, vocab_local], into host row k: one 2-D copy per row.
  for (size_t k = 0; k < rows.size(); ++k) {
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy2DAsync(host + k * shape_.tp * vocab_bytes, vocab_bytes, result + rows[k] * vocab_bytes,
                          slice_pitch, vocab_bytes, shape_.tp, cudaMemcpyDeviceToHost, stream),
        "logits download"));
  }
  return Status::Ok();
}

Status CudaDecoder::WarmUpCollectives() {
  if (comm_ == nullptr || shape_.tp == 1) return Status::Ok();
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  auto stream = static_cast<cudaStream_t>(stream_);
  Activations& a = *act_;
  const size_t largest_reduce = static_cast<size_t>(limits_.tokens) * config_.hidden_size;
  const size_t largest_gather = static_cast<size_t>(limits_.logit_rows) * shape_.vocab;
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(a.x.get(), 0, a.x.bytes(), stream), "warm-up"));
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(a.local_logits.get(), 0, a.local_logits.bytes(), stream), "warm-up"));
  // The largest first (a communicator that sizes a scratch by the message then never grows it),
  // then a decode row.
  RETURN_IF_ERROR(comm_->AllReduceSum(a.x.get(), largest_reduce, DeviceDtype::kF32, stream));
  RETURN_IF_ERROR(comm_->AllGather(a.local_logits.get(), a.gathered.get(), largest_gather, DeviceDtype::kF32, stream));
  RETURN_IF_ERROR(comm_->AllReduceSum(a.x.get(), config_.hidden_size, DeviceDtype::kF32, stream));
  // The first collective of a group whose processes may still be loading their weights: up to
  // ten minutes, not the step timeout.
  return WaitForStream(std::max<std::chrono::milliseconds>(options_.wait_timeout, std::chrono::minutes(10)));
}

Status CudaDecoder::Enqueue(const StepDims& d, Activations& a) {
  const int T = d.tokens, S = d.sequences, W = d.table_width, R = d.logit_rows,
            max_context = d.max_context;
  const RankShape& s = shape_;
  const int h = config_.hidden_size, q_width = s.heads * s.head_dim,
            kv_width = s.kv_heads * s.head_dim;
  const int qkv_width = q_width + 2 * kv_width;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const size_t f32 = sizeof(float);
  const bool rank0 = s.rank == 0;
  auto stream = static_cast<cudaStream_t>(stream_);
  const int32_t* ids = a.step_ints.get<int32_t>();
  const int32_t* positions = ids + T;
  const int32_t* slots = positions + T;
  const int32_t* token_sequence = slots + T;
  const int32_t* block_tables =
      token_sequence + T + (S + 1) + S;  // past query_start and context_lengths
  const int32_t* logit_tokens = block_tables + static_cast<size_t>(S) * W;
  const int32_t* banned_offsets = logit_tokens + R;  // rank 0: [R + 1], then the banned ids
  const int32_t* banned_ids = banned_offsets + R + 1;

  float* x = a.x.get<float>();
  float* normed = a.normed.get<float>();
  uint16_t* normed_bf16 = a.normed_bf16.get<uint16_t>();
  float* qkv = a.qkv.get<float>();
  float* proj = a.proj.get<float>();
  const int64_t hidden_bytes = static_cast<int64_t>(T) * h * static_cast<int64_t>(f32);
  Timeline& tl = *timeline_;
  auto all_reduce = [&](OpKind op, int layer, float* data) -> Status {
    return tl.Op(op, layer, hidden_bytes, stream, [&] {
      return comm_->AllReduceSum(data, static_cast<size_t>(T) * h, DeviceDtype::kF32, stream);
    });
  };
  auto norm_to_bf16 = [&]() {
    return CastToBf16(normed, normed_bf16, static_cast<size_t>(T) * h, stream);
  };
  // The AllReduce of a row-parallel output (`proj`), then the residual add and the next norm: one
  // kernel where the communicator fuses them (one-shot), traced as the AllReduce.
  auto reduce_add_norm = [&](OpKind reduce, int reduce_layer, OpKind norm, int norm_layer,
                             const float* weight,
                             const std::function<Status()>& after_norm) -> Status {
    if (s.tp > 1 && comm_->FusesAddRmsNorm(static_cast<size_t>(T) * h)) {
      return tl.Op(reduce, reduce_layer, hidden_bytes, stream, [&] {
        RETURN_IF_ERROR(comm_->AllReduceAddRmsNorm(proj, x, weight, normed, T, h, eps, stream));
        return after_norm();
      });
    }
    if (s.tp > 1) RETURN_IF_ERROR(all_reduce(reduce, reduce_layer, proj));
    return tl.Op(norm, norm_layer, 0, stream, [&] {
      RETURN_IF_ERROR(AddRmsNorm(x, proj, weight, normed, T, h, eps, stream));
      return after_norm();
    });
  };

  RETURN_IF_ERROR(tl.Op(OpKind::kEmbed, -1, 0, stream, [&] {
    return EmbeddingGather(Bf16(embed_), ids, x, T, h, s.vocab_begin, s.vocab, stream);
  }));
  if (s.tp > 1) RETURN_IF_ERROR(all_reduce(OpKind::kEmbedAllReduce, -1, x));
  RETURN_IF_ERROR(tl.Op(OpKind::kAttnNorm, 0, 0, stream, [&] {
    RETURN_IF_ERROR(RmsNorm(x, F32(layers_[0].attn_norm), normed, T, h, eps, stream));
    return norm_to_bf16();
  }));

  for (int layer = 0; layer < config_.num_layers; ++layer) {
    const Layer& w = layers_[layer];
    // Attention block (its norm ran fused with the previous residual add).
    RETURN_IF_ERROR(tl.Op(OpKind::kQkvProj, layer, 0, stream, [&] {
      RETURN_IF_ERROR(qkv_->Run(Bf16(w.wqkv), normed_bf16, qkv, T, stream));
      return w.bqkv.bytes() ? AddBias(qkv, F32(w.bqkv), T, qkv_width, stream) : Status::Ok();
    }));
    RETURN_IF_ERROR(tl.Op(OpKind::kRope, layer, 0, stream, [&] {
      RETURN_IF_ERROR(ApplyRopeStrided(qkv, qkv_width, 0, positions, inv_freq_.get<double>(), T,
                                       s.heads, s.head_dim, stream));
      return ApplyRopeStrided(qkv, qkv_width, q_width, positions, inv_freq_.get<double>(), T,
                              s.kv_heads, s.head_dim, stream);
    }));
    RETURN_IF_ERROR(tl.Op(OpKind::kKvWrite, layer, 0, stream, [&] {
      return WriteKv(qkv, qkv_width, q_width, q_width + kv_width, kv_width, slots,
                     w.keys.get<float>(), w.values.get<float>(), T, stream);
    }));
    RETURN_IF_ERROR(tl.Op(OpKind::kAttention, layer, 0, stream, [&] {
      PagedAttentionArgs args;
      args.q = qkv;
      args.q_stride = qkv_width;
      args.key_cache = w.keys.get<float>();
      args.value_cache = w.values.get<float>();
      args.block_tables = block_tables;
      args.block_table_width = W;
      args.token_sequence = token_sequence;
      args.positions = positions;
      args.out = a.attn.get<float>();
      args.scratch = a.attn_scratch.get<float>();
      args.scratch_floats = a.attn_scratch.bytes() / sizeof(float);
      args.tokens = T;
      args.heads = s.heads;
      args.kv_heads = s.kv_heads;
      args.head_dim = s.head_dim;
      args.block_size = options_.block_size;
      args.max_context = max_context;
      args.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
      RETURN_IF_ERROR(PagedAttention(args, stream));
      return CastToBf16(a.attn.get<float>(), a.attn_bf16.get<uint16_t>(),
                        static_cast<size_t>(T) * q_width, stream);
    }));
    RETURN_IF_ERROR(tl.Op(OpKind::kOProj, layer, 0, stream, [&] {
      return o_->Run(Bf16(w.wo), a.attn_bf16.get<uint16_t>(), proj, T, stream);
    }));
    // MLP block: the AllReduce, the residual add and its norm.
    RETURN_IF_ERROR(reduce_add_norm(OpKind::kAllReduceAttn, layer, OpKind::kMlpNorm, layer,
                                    F32(w.mlp_norm), norm_to_bf16));
    RETURN_IF_ERROR(tl.Op(OpKind::kGateUpProj, layer, 0, stream, [&] {
      return gate_up_->Run(Bf16(w.w_gate_up), normed_bf16, a.gate_up.get<float>(), T, stream);
    }));
    RETURN_IF_ERROR(tl.Op(OpKind::kSiluMul, layer, 0, stream, [&] {
      return SiluMulRowsToBf16(a.gate_up.get<float>(), a.act_bf16.get<uint16_t>(), T, s.ffn,
                               stream);
    }));
    RETURN_IF_ERROR(tl.Op(OpKind::kDownProj, layer, 0, stream, [&] {
      return down_->Run(Bf16(w.w_down), a.act_bf16.get<uint16_t>(), proj, T, stream);
    }));
    // The AllReduce and the residual add with the next norm: the next layer's attention norm, or
    // the final norm.
    const bool last_layer = layer + 1 == config_.num_layers;
    const float* next_weight = last_layer ? F32(final_norm_) : F32(layers_[layer + 1].attn_norm);
    auto after_next_norm = [&]() -> Status {
      if (!last_layer) return norm_to_bf16();
      RETURN_IF_ERROR(GatherRows(normed, logit_tokens, a.last.get<float>(), R, h, stream));
      return CastToBf16(a.last.get<float>(), a.last_bf16.get<uint16_t>(),
                        static_cast<size_t>(R) * h, stream);
    };
    RETURN_IF_ERROR(reduce_add_norm(OpKind::kAllReduceMlp, layer,
                                    last_layer ? OpKind::kFinalNorm : OpKind::kAttnNorm,
                                    last_layer ? -1 : layer + 1, next_weight, after_next_norm));
  }

  // LM head over the rows that want logits; vocab-parallel, then gathered.
  const DeviceBuffer& head = LmHeadWeight();
  float* local = a.local_logits.get<float>();
  RETURN_IF_ERROR(tl.Op(OpKind::kLmHead, -1, 0, stream, [&] {
    return lm_head_->Run(Bf16(head), a.last_bf16.get<uint16_t>(), local, R, stream);
  }));
  const size_t local_count = static_cast<size_t>(R) * s.vocab;
  const float* result = local;  // [tp, R, vocab_local]
  if (s.tp > 1) {
    RETURN_IF_ERROR(
        tl.Op(OpKind::kAllGatherLogits, -1, static_cast<int64_t>(local_count * f32), stream, [&] {
          return comm_->AllGather(local, a.gathered.get<float>(), local_count, DeviceDtype::kF32,
                                  stream);
        }));
    result = a.gathered.get<float>();
  }
  if (rank0) {
    GreedyArgs greedy{.logits = result,
                      .rows = R,
                      .tp = s.tp,
                      .vocab_local = s.vocab,
                      .vocab_size = config_.vocab_size,
                      .banned_offsets = banned_offsets,
                      .banned_ids = banned_ids,
                      .out = a.tokens.get<int32_t>()};
    RETURN_IF_ERROR(GreedySample(greedy, stream));
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(a.host_tokens.get(), a.tokens.get(),
                                               sizeof(int32_t) * R, cudaMemcpyDeviceToHost, stream),
                               "sampled tokens download"));
  }
  return Status::Ok();
}

}  // namespace tpserve::cuda

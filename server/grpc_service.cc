#include "server/grpc_service.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <random>

#include "common/splitmix64.h"
#include "server/request_wire.h"

namespace tpserve {
namespace {

// The seed of a request that set none: SplitMix64 over a per-process random start and a counter,
// so every such request draws its own, and a restarted server does not repeat the last one's.
uint64_t DrawSeed() {
  static const uint64_t start = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  static std::atomic<uint64_t> drawn{0};
  return SplitMix64At(start, drawn.fetch_add(1));
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void FillHistogram(const Histogram::Snapshot& h, v1::Histogram* out) {
  for (double b : h.upper_bounds) out->add_upper_bounds(b);
  for (uint64_t c : h.counts) out->add_counts(c);
  out->set_sum(h.sum);
  out->set_count(h.count);
}

// One Generate call: the sink the engine loop writes to, and the gRPC reactor that drains it one
// write at a time (serialized here: the method is registered raw, see ParseGenerateRequest). The
// engine thread and gRPC's threads meet only under `mutex_`; reactor methods are called outside
// it (gRPC may run reactions inline).
class GenerateCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public std::enable_shared_from_this<GenerateCall> {
 public:
  // The sink handed to the engine loop. It keeps the call alive only through a weak pointer, so
  // a finished call is never written to.
  class Sink final : public GenerationSink {
   public:
    explicit Sink(std::weak_ptr<GenerateCall> call) : call_(std::move(call)) {}
    void OnDelta(std::string text, std::vector<SampledToken> tokens) override {
      if (auto c = call_.lock()) c->Delta(std::move(text), tokens);
    }
    void OnFinish(FinishReason reason, int prompt_tokens, int completion_tokens,
                  const RequestTiming& timing) override {
      if (auto c = call_.lock()) c->Final(reason, prompt_tokens, completion_tokens, timing);
    }
    void OnError(Status status) override {
      if (auto c = call_.lock()) c->Error(ToGrpcStatus(status));
    }

   private:
    std::weak_ptr<GenerateCall> call_;
  };

  GenerateCall(EngineLoop* loop, std::string request_id, ServerMetrics* metrics)
      : loop_(loop), request_id_(std::move(request_id)), metrics_(metrics) {}

  // Keeps itself alive until gRPC says the call is done.
  void Start(Result<ServeRequest> request) {
    self_ = shared_from_this();
    if (!request.ok()) {
      metrics_->CountError(std::string(StatusCodeName(request.status().code())));
      FinishOnce(ToGrpcStatus(request.status()));
      return;
    }
    request->sink = std::make_shared<Sink>(weak_from_this());
    seed_ = request->sampling.seed;
    auto id = loop_->Submit(std::move(request).value());
    if (!id.ok()) {
      metrics_->CountError(std::string(StatusCodeName(id.status().code())));
      FinishOnce(ToGrpcStatus(id.status()));
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    engine_id_ = *id;
  }

  void OnWriteDone(bool ok) override {
    bool next = false;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.pop_front();
      writing_ = false;
      if (!ok || cancelled_) {
        ok = false;
        finish = true;  // the client went away; OnCancel cancels the sequence
      } else if (!queue_.empty()) {
        next = true;
        writing_ = true;
      } else {
        finish = final_queued_;
      }
    }
    if (next) WriteFront();
    if (finish) FinishOnce(ok ? final_status_ : grpc::Status::CANCELLED);
  }

  // Client cancel, disconnect or deadline: the sequence is cancelled (its KV blocks are freed
  // before the next step); the call finishes now, or when the write in flight completes.
  void OnCancel() override {
    uint64_t id;
    bool finish_now;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      id = engine_id_;
      cancelled_ = true;
      finish_now = !writing_;
    }
    if (id != 0) loop_->Cancel(id);
    if (finish_now) FinishOnce(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    std::shared_ptr<GenerateCall> keep = std::move(self_);  // released when this returns
  }

 private:
  void Delta(std::string text, const std::vector<SampledToken>& tokens) {
    v1::GenerateResponse response;
    response.set_text(std::move(text));
    for (const SampledToken& t : tokens) {
      response.add_token_ids(t.id);
      if (t.top.empty()) continue;
      v1::TokenLogprobs* lp = response.add_logprobs();
      lp->set_id(t.id);
      lp->set_logprob(t.logprob);
      for (const TokenLogprob& alt : t.top) {
        v1::TokenLogprob* a = lp->add_top();
        a->set_id(alt.id);
        a->set_logprob(alt.logprob);
      }
    }
    Enqueue(std::move(response), false);
  }

  void Final(FinishReason reason, int prompt_tokens, int completion_tokens, const RequestTiming& t) {
    v1::GenerateResponse response;
    response.set_finish_reason(ToProto(reason));
    response.set_prompt_tokens(prompt_tokens);
    response.set_completion_tokens(completion_tokens);
    response.set_seed(seed_);
    v1::Timing* timing = response.mutable_timing();
    timing->set_queue_seconds(t.queue_s);
    timing->set_time_to_first_token_seconds(t.time_to_first_token_s);
    timing->set_decode_seconds(t.decode_s);
    timing->set_e2e_seconds(t.e2e_s);
    timing->set_compute_seconds(t.compute_s);
    timing->set_comm_seconds(t.comm_s);
    timing->set_preemptions(t.preemptions);
    Enqueue(std::move(response), true);
  }

  void Error(grpc::Status status) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      final_status_ = status;
      if (writing_) {
        final_queued_ = true;  // finish after the write in flight
        return;
      }
    }
    FinishOnce(status);
  }

  void Enqueue(v1::GenerateResponse response, bool last) {
    bool start = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (finished_ || cancelled_) return;
      // The request id goes out once, on the first message: echoing it on every message let one
      // client make the server send ~2,000x the bytes it received.
      if (!request_id_sent_) {
        response.set_request_id(std::move(request_id_));
        request_id_sent_ = true;
      }
      // While the client is slower than the engine, fold new deltas into the last queued message
      // (never into the one being written): fewer, larger messages instead of a growing backlog.
      if (queue_.size() >= 2 && queue_.back().finish_reason() == v1::FINISH_REASON_UNSPECIFIED) {
        v1::GenerateResponse& back = queue_.back();
        back.mutable_text()->append(response.text());
        back.mutable_token_ids()->MergeFrom(response.token_ids());
        back.mutable_logprobs()->MergeFrom(response.logprobs());
        if (last) {
          back.set_finish_reason(response.finish_reason());
          back.set_prompt_tokens(response.prompt_tokens());
          back.set_completion_tokens(response.completion_tokens());
          back.set_seed(response.seed());
          *back.mutable_timing() = response.timing();
          final_queued_ = true;
        }
        return;
      }
      queue_.push_back(std::move(response));
      final_queued_ = final_queued_ || last;
      if (!writing_) {
        writing_ = true;
        start = true;
      }
    }
    if (start) WriteFront();
  }

  // Writes queue_.front(). Only one write is in flight (writing_), and the front is never merged
  // into, so it is read here without the lock; deque::push_back keeps references valid.
  void WriteFront() {
    const v1::GenerateResponse* front;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      front = &queue_.front();
    }
    bool own_buffer = false;
    wire_.Clear();  // the previous message's bytes: written by now
    grpc::SerializationTraits<v1::GenerateResponse>::Serialize(*front, &wire_, &own_buffer);
    StartWrite(&wire_);
  }

  void FinishOnce(const grpc::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  EngineLoop* loop_;
  std::string request_id_;
  ServerMetrics* metrics_;
  std::shared_ptr<GenerateCall> self_;
  uint64_t seed_ = 0;  // the request's, or the one drawn for it: sent on the last message

  std::mutex mutex_;
  std::deque<v1::GenerateResponse> queue_;  // front: the write in flight
  grpc::ByteBuffer wire_;                   // queue_.front() serialized, while it is written
  bool writing_ = false;
  bool final_queued_ = false;
  bool finished_ = false;
  bool cancelled_ = false;
  bool request_id_sent_ = false;
  grpc::Status final_status_ = grpc::Status::OK;
  uint64_t engine_id_ = 0;
};

}  // namespace

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

TpServeService::TpServeService(const ModelDirectory* model, EngineLoop* loop, Engine* engine,
                               ServerMetrics* metrics, const EngineLoopOptions& loop_options,
                               const ServiceLimits& limits, const AccessControl* access)
    : model_(model), loop_(loop), engine_(engine), metrics_(metrics), loop_options_(loop_options),
      limits_(limits), access_(access) {
  if (limits_.max_model_len <= 0) limits_.max_model_len = model->config.max_position_embeddings;
}

Result<ServeRequest> TpServeService::Validate(const v1::GenerateRequest& r) const {
  ServeRequest out;
  if (r.request_id().size() > static_cast<size_t>(limits_.max_request_id_bytes)) {
    return InvalidArgument("request_id: " + std::to_string(r.request_id().size()) + " bytes, at most " +
                           std::to_string(limits_.max_request_id_bytes));
  }
  out.request_id = r.request_id();
  if (r.prompt_case() == v1::GenerateRequest::kText) {
    if (r.text().empty()) return InvalidArgument("prompt: text is empty");
    RETURN_IF_ERROR(CheckUtf8Field("prompt: text", r.text()));  // for requests built in process
    ASSIGN_OR_RETURN(out.prompt, EncodePrompt(*model_, r.text()));
  } else if (r.prompt_case() == v1::GenerateRequest::kTokenIds) {
    if (r.token_ids().ids().empty()) return InvalidArgument("prompt: token_ids is empty");
    for (int32_t id : r.token_ids().ids()) {
      if (id < 0 || id >= model_->config.vocab_size) {
        return InvalidArgument("prompt: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                               std::to_string(model_->config.vocab_size - 1) + ")");
      }
    }
    out.prompt.assign(r.token_ids().ids().begin(), r.token_ids().ids().end());
  } else {
    return InvalidArgument("prompt: neither text nor token_ids is set");
  }
  const int prompt = static_cast<int>(out.prompt.size());
  const int limit = limits_.max_model_len;
  if (prompt >= limit) {
    return InvalidArgument("prompt: " + std::to_string(prompt) + " tokens, but the context window is " +
                           std::to_string(limit) + " tokens");
  }
  if (r.max_tokens() <= 0) {
    return InvalidArgument("max_tokens: must be at least 1, got " + std::to_string(r.max_tokens()));
  }
  const int64_t total = int64_t{prompt} + r.max_tokens();
  if (total > limit) {
    return InvalidArgument("max_tokens: prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" +
                           std::to_string(r.max_tokens()) + ") = " + std::to_string(total) +
                           " exceeds the context window of " + std::to_string(limit) + " tokens");
  }
  if (limits_.max_new_tokens > 0 && r.max_tokens() > limits_.max_new_tokens) {
    return InvalidArgument("max_tokens: " + std::to_string(r.max_tokens()) + " is over this server's limit of " +
                           std::to_string(limits_.max_new_tokens) + " (--max-new-tokens)");
  }
  out.max_tokens = r.max_tokens();
  if (r.min_tokens() < 0 || r.min_tokens() > r.max_tokens()) {
    return InvalidArgument("min_tokens: must be in [0, max_tokens], got " + std::to_string(r.min_tokens()));
  }
  if (r.logprobs() < 0 || r.logprobs() > limits_.max_logprobs) {
    return InvalidArgument("logprobs: must be in [0, " + std::to_string(limits_.max_logprobs) + "], got " +
                           std::to_string(r.logprobs()));
  }
  if (r.stop_size() > limits_.max_stop_strings) {
    return InvalidArgument("stop: " + std::to_string(r.stop_size()) + " strings, at most " +
                           std::to_string(limits_.max_stop_strings));
  }
  for (const std::string& stop : r.stop()) {
    if (stop.empty() || static_cast<int>(stop.size()) > limits_.max_stop_bytes) {
      return InvalidArgument("stop: each string must be 1.." + std::to_string(limits_.max_stop_bytes) + " bytes");
    }
    out.stop.push_back(stop);
  }
  for (int32_t id : r.stop_token_ids()) {
    if (id < 0 || id >= model_->config.vocab_size) {
      return InvalidArgument("stop_token_ids: " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  if (r.stop_token_ids_size() > limits_.max_stop_strings) {
    return InvalidArgument("stop_token_ids: at most " + std::to_string(limits_.max_stop_strings));
  }
  const v1::SamplingParams& s = r.sampling();
  out.sampling = {.temperature = s.temperature(),
                  .top_k = s.top_k(),
                  .top_p = s.top_p() == 0 ? 1.0f : s.top_p(),
                  .seed = s.has_seed() ? s.seed() : DrawSeed(),
                  .min_tokens = r.min_tokens(),
                  .ignore_eos = r.ignore_eos(),
                  .logprobs = r.logprobs(),
                  .stop_token_ids = {r.stop_token_ids().begin(), r.stop_token_ids().end()}};
  RETURN_IF_ERROR(ValidateSamplingParams(out.sampling, "sampling."));
  return out;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* TpServeService::Generate(grpc::CallbackServerContext* context,
                                                                     const grpc::ByteBuffer* wire) {
  Result<ServeRequest> request = Accept(context, *wire);
  auto call = std::make_shared<GenerateCall>(loop_, request.ok() ? request->request_id : "", metrics_);
  call->Start(std::move(request));
  return call.get();
}

Status TpServeService::Authorize(grpc::CallbackServerContext* context) const {
  if (access_ == nullptr || !access_->requires_key()) return Status::Ok();
  const auto& metadata = context->client_metadata();
  const auto found = metadata.find("authorization");
  const std::string_view value =
      found == metadata.end() ? std::string_view() : std::string_view(found->second.data(), found->second.size());
  return access_->CheckAuthorization(value);
}

Result<ServeRequest> TpServeService::Accept(grpc::CallbackServerContext* context, const grpc::ByteBuffer& wire) const {
  RETURN_IF_ERROR(Authorize(context));
  if (draining_) return Status(StatusCode::kUnavailable, "the server is shutting down");
  if (!loop_->healthy()) return Status(StatusCode::kUnavailable, "the engine has failed; retry on another server");
  std::vector<grpc::Slice> slices;
  if (!wire.Dump(&slices).ok()) return InvalidArgument("request: no message");
  std::string bytes;
  bytes.reserve(wire.Length());
  for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  ASSIGN_OR_RETURN(v1::GenerateRequest request, ParseGenerateRequest(bytes, limits_.max_request_bytes));
  return Validate(request);
}

grpc::ServerUnaryReactor* TpServeService::ModelInfo(grpc::CallbackServerContext* context,
                                                   const v1::ModelInfoRequest* /*request*/,
                                                   v1::ModelInfoResponse* response) {
  if (Status allowed = Authorize(context); !allowed.ok()) {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  const ModelConfig& c = model_->config;
  response->set_architecture(c.architecture_name);
  response->set_hidden_size(c.hidden_size);
  response->set_num_layers(c.num_layers);
  response->set_num_heads(c.num_heads);
  response->set_num_kv_heads(c.num_kv_heads);
  response->set_vocab_size(c.vocab_size);
  response->set_parameters(static_cast<int64_t>(c.ParameterCount()));
  response->set_tensor_parallel(engine_->tp());
  response->set_backend("cpu");
  response->set_max_model_len(limits_.max_model_len);
  response->set_max_batch_size(loop_options_.scheduler.max_batch_size);
  response->set_max_batched_tokens(loop_options_.scheduler.max_batched_tokens);
  response->set_max_queue(loop_options_.max_queue);
  response->set_kv_cache_blocks(engine_->block_pool().total_blocks());
  response->set_kv_block_size(engine_->block_size());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* TpServeService::Stats(grpc::CallbackServerContext* context,
                                               const v1::StatsRequest* /*request*/,
                                               v1::StatsResponse* response) {
  if (Status allowed = Authorize(context); !allowed.ok()) {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  const ServerMetrics& m = *metrics_;
  response->set_requests_running(m.requests_running.load());
  response->set_requests_waiting(m.requests_waiting.load());
  response->set_kv_cache_usage(m.kv_cache_usage.load());
  response->set_kv_blocks_free(m.kv_blocks_free.load());
  response->set_kv_blocks_total(m.kv_blocks_total.load());
  response->set_steps(m.steps.load());
  response->set_requests_finished(m.finished_total());
  response->set_preemptions(m.preemptions.load());
  response->set_max_batch_seen(m.max_batch_seen.load());
  response->set_prefix_cache_queries(m.prefix_cache_queries.load());
  response->set_prefix_cache_hits(m.prefix_cache_hits.load());
  response->set_kv_blocks_cached(m.kv_blocks_cached.load());
  FillHistogram(m.step_compute.Get(), response->mutable_step_compute());
  FillHistogram(m.step_comm.Get(), response->mutable_step_comm());
  FillHistogram(m.step_host.Get(), response->mutable_step_host());
  for (const auto& [bytes, h] : m.AllReduceSnapshot()) {
    v1::AllReduceLatency* entry = response->add_allreduce();
    entry->set_bytes(bytes);
    FillHistogram(h, entry->mutable_latency());
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tpserve

#include "engine/cpu/decoder.h"

#include <malloc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/cache_line_allocator.h"
#include "engine/step/packed_step.h"
#include "kernels/cpu/linear.h"

namespace tpserve {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Times one op into the rank's trace.
class OpTimer {
 public:
  OpTimer(RankTrace* trace, int64_t step_start, bool enabled)
      : trace_(trace), step_start_(step_start), enabled_(enabled) {}
  // Runs fn and returns what it returns (a Status for collectives, nothing for compute ops).
  template <typename Fn>
  auto Run(OpKind op, int layer, int64_t bytes, Fn&& fn) {
    if (!enabled_) return fn();
    const int64_t start = NowNs();
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
      fn();
      Record(op, layer, bytes, start);
    } else {
      auto result = fn();
      Record(op, layer, bytes, start);
      return result;
    }
  }

 private:
  void Record(OpKind op, int layer, int64_t bytes, int64_t start) {
    const int64_t end = NowNs();
    trace_->ops.push_back({op, static_cast<int16_t>(layer), start - step_start_, end - start, bytes});
  }

  RankTrace* trace_;
  int64_t step_start_;
  bool enabled_;
};


const uint16_t* Bf16(const HostTensor& t) { return t.view<uint16_t>().data(); }
const float* F32(const HostTensor& t) { return t.bytes.empty() ? nullptr : t.view<float>().data(); }

// Steps of at most this many tokens ask for their KV cache rows ahead of the write (2 KiB a token
// at the default model's 4 KV heads of 64, f32).
constexpr int kMaxPrefetchedStoreTokens = 32;

constexpr int kProjectionsPerLayer = 4;  // qkv, o, gate/up, down: the order a layer calls them
std::array<HostTensor*, kProjectionsPerLayer> Projections(LayerWeights& w) {
  return {&w.wqkv, &w.wo, &w.w_gate_up, &w.w_down};
}

}  // namespace

cpu::RopeParams RopeParamsFor(const ModelConfig& c) {
  cpu::RopeParams p;
  p.head_dim = c.head_dim;
  p.theta = c.rope_theta;
  p.factor = c.rope_scaling.factor;
  p.low_freq_factor = c.rope_scaling.low_freq_factor;
  p.high_freq_factor = c.rope_scaling.high_freq_factor;
  p.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  switch (c.rope_scaling.type) {
    case RopeScaling::Type::kNone: p.scaling = cpu::RopeParams::Scaling::kNone; break;
    case RopeScaling::Type::kLinear: p.scaling = cpu::RopeParams::Scaling::kLinear; break;
    case RopeScaling::Type::kLlama3: p.scaling = cpu::RopeParams::Scaling::kLlama3; break;
  }
  return p;
}

struct Decoder::Batch {
  std::vector<int32_t> ids;        // [tokens]
  std::vector<int32_t> positions;  // [tokens]
  std::vector<int32_t> sequence;   // [tokens] index into plan.sequences
  std::vector<int32_t> logit_rows; // token indices whose logits are wanted
  const StepPlan* plan = nullptr;
};

Decoder::Decoder(const ModelConfig& config, RankWeights weights, RankKvCache* kv_cache,
                 Communicator* comm, cpu::ThreadPool* pool, DecoderOptions options)
    : config_(config),
      weights_(std::move(weights)),
      kv_cache_(kv_cache),
      comm_(comm),
      pool_(pool),
      options_(options),
      rope_inv_freq_(cpu::RopeInverseFrequencies(RopeParamsFor(config))) {
  PlaceLayerProjections();
  const int h = config_.hidden_size;
  if (!options_.return_logits && weights_.shape.tp == 1 &&
      weights_.shape.vocab == config_.vocab_size &&
      cpu::GreedyLinearScreens(weights_.kernel, weights_.layout(h))) {
    lm_head_norms_ = cpu::RowNormBounds(Bf16(weights_.output_projection()), weights_.shape.vocab, h,
                                        weights_.layout(h), pool_);
  }
}

void Decoder::PlaceLayerProjections() {
  std::vector<cpu::MemberPlacement::Matrix> matrices;
  std::vector<HostTensor*> tensors;
  for (LayerWeights& layer : weights_.layers) {
    for (HostTensor* t : Projections(layer)) {
      const int out = static_cast<int>(t->shape[0]), in = static_cast<int>(t->shape[1]);
      matrices.push_back({Bf16(*t), out, in, weights_.layout(in)});
      tensors.push_back(t);
    }
  }
  placement_ = cpu::MemberPlacement(matrices, pool_ != nullptr ? pool_->size() : 1, [&](size_t i) {
    std::vector<std::byte, HugePageAllocator<std::byte>>().swap(tensors[i]->bytes);
    // Back to the system now: glibc keeps freed heap pages (its mmap threshold has risen past
    // these sizes), and the placement would then peak at two copies of the weights.
    malloc_trim(0);
  });
}

void Decoder::Embed(const Batch& batch, float* x) {
  const RankShape& s = weights_.shape;
  const int h = config_.hidden_size;
  const cpu::WeightLayout embed_layout = weights_.embed_layout();
  for (size_t t = 0; t < batch.ids.size(); ++t) {
    const int local = batch.ids[t] - s.vocab_begin;
    float* row = x + t * h;
    if (local < 0 || local >= s.vocab) {
      std::fill(row, row + h, 0.0f);  // another rank owns this id; the AllReduce brings it
      continue;
    }
    cpu::ReadWeightRow(Bf16(weights_.embed), s.vocab, h, embed_layout, local, row);
  }
}

void Decoder::Attention(const Batch& batch, int layer, const float* q, float* out) {
  const RankShape& s = weights_.shape;
  const int q_width = s.heads * s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const cpu::KvLayerView kv = kv_cache_->Layer(layer);
  // Split by (token, KV head, part of its query heads): a KV group's heads share one read of its K
  // and V rows (AttendHeads), and a group is cut into as few parts as give every thread work
  // (decode's one token at TP 8 may have one KV head a rank). A head's result does not depend on
  // the parts. Tokens in the order first, last, second, second-to-last, ...: a prompt's later
  // tokens attend to more positions, and the pool's contiguous pieces then get even shares.
  const size_t tokens = batch.ids.size();
  const int group = s.heads / s.kv_heads;
  const size_t groups = tokens * s.kv_heads;
  const int parts = static_cast<int>(
      std::clamp<size_t>((pool_->size() + groups - 1) / groups, 1, static_cast<size_t>(group)));
  const size_t per_token = static_cast<size_t>(s.kv_heads) * parts;
  pool_->ParallelFor(tokens * per_token, 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> scores;  // each pool member's own, kept between calls
    for (size_t unit = begin; unit < end; ++unit) {
      const size_t order = unit / per_token;
      const size_t t = order % 2 == 0 ? order / 2 : tokens - 1 - order / 2;
      const int slot = static_cast<int>(unit % per_token);  // [kv_heads, parts]
      const int kv_head = slot / parts, part = slot % parts;
      const int first = kv_head * group + part * group / parts, last = kv_head * group + (part + 1) * group / parts;
      const SequencePlan& seq = batch.plan->sequences[batch.sequence[t]];
      const int length = batch.positions[t] + 1;  // causal: itself and everything before
      const size_t needed = static_cast<size_t>(std::min(last - first, cpu::kMaxHeadsPerPass)) * length;
      if (scores.size() < needed) scores.resize(needed);
      cpu::AttendHeads(q + t * q_width, first, last - first, s.heads, kv, seq.block_table.data(), length, scale,
                       out + t * q_width, scores.data());
    }
  });
}

Status Decoder::Forward(const StepPlan& plan, std::vector<float>* logits, RankTrace* trace) {
  const int64_t forward = forwards_++;
  const FaultInjection& fault = options_.fault;
  const bool fault_at_collective = fault.kind == FaultKind::kStall || fault.kind == FaultKind::kCommError;
  if (!fault_at_collective || weights_.shape.tp == 1) {
    RETURN_IF_ERROR(InjectFault(fault, forward, weights_.shape.rank, options_.stall_release));
  }
  const int64_t step_start = NowNs();
  OpTimer timer(trace, step_start, options_.trace);
  const RankShape& s = weights_.shape;
  const int h = config_.hidden_size;
  const int q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);

  Batch batch;
  batch.plan = &plan;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const SequencePlan& seq = plan.sequences[i];
    for (size_t j = 0; j < seq.tokens.size(); ++j) {
      batch.ids.push_back(seq.tokens[j]);
      batch.positions.push_back(seq.start_position + static_cast<int32_t>(j));
      batch.sequence.push_back(static_cast<int32_t>(i));
    }
    if (seq.want_logits && !seq.tokens.empty()) batch.logit_rows.push_back(batch.ids.size() - 1);
  }
  const int T = static_cast<int>(batch.ids.size());
  const int64_t hidden_bytes = static_cast<int64_t>(T) * h * sizeof(float);

  // On whole cache lines: the Linears read their activations in 512-bit loads (cpu::Linear copies
  // a misaligned input first).
  using Activations = std::vector<float, CacheLineAllocator<float>>;
  Activations x(T * h), normed(T * h), proj(T * h);      // [T, hidden]
  Activations q(T * q_width), attn(T * q_width);           // [T, heads_local * head_dim]
  Activations k(T * kv_width), v(T * kv_width);            // [T, kv_local * head_dim]
  Activations qkv(T * (q_width + 2 * kv_width));          // [T, q + k + v widths]
  Activations gate_up(T * 2 * s.ffn);                      // [T, 2 * ffn_local]
  Activations act(T * s.ffn);                              // [T, ffn_local]
  const int half = s.head_dim / 2;
  std::vector<float> cos(T * half), sin(T * half);                // [T, head_dim / 2]
  for (int t = 0; t < T; ++t) {
    cpu::RopeAngles(rope_inv_freq_, batch.positions[t], &cos[t * half], &sin[t * half]);
  }
  // Layer `layer`'s projection (0..3: qkv, o, gate/up, down), placed per pool member.
  auto linear = [&](int layer, int projection, const float* in, const HostTensor& bias, float* out,
                    int in_features, int out_features) {
    const cpu::LinearArgs args{
        .x = in,
        .bias = F32(bias),
        .y = out,
        .tokens = T,
        .in = in_features,
        .out = out_features,
        .layout = weights_.layout(in_features),
        .placed = &placement_.rows(static_cast<size_t>(layer) * kProjectionsPerLayer + projection)};
    cpu::Linear(args, pool_, weights_.kernel);
  };
  auto norm_rows = [&](const float* in, const HostTensor& weight, float* out) {
    for (int t = 0; t < T; ++t) cpu::RmsNorm(in + t * h, F32(weight), out + t * h, h, eps);
  };
  bool first_collective = true;
  auto all_reduce = [&](OpKind op, int layer, float* data) {
    return timer.Run(op, layer, hidden_bytes, [&] {
      if (first_collective && fault_at_collective) {
        first_collective = false;
        RETURN_IF_ERROR(InjectFault(fault, forward, weights_.shape.rank, options_.stall_release));
      }
      return comm_->AllReduceSum(data, T * h);
    });
  };

  timer.Run(OpKind::kEmbed, -1, 0, [&] { Embed(batch, x.data()); });
  if (s.tp > 1) RETURN_IF_ERROR(all_reduce(OpKind::kEmbedAllReduce, -1, x.data()));

  // Token t's block and slot in the KV cache.
  auto cache_slot = [&](int t) {
    const SequencePlan& seq = plan.sequences[batch.sequence[t]];
    const int position = batch.positions[t];
    return std::pair<int32_t, int>{seq.block_table[position / kv_cache_->block_size()],
                                   position % kv_cache_->block_size()};
  };
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    // The cache rows this layer's KV write will store to, asked for now: the norm and the QKV
    // projection run before it, and the stores no longer wait on memory (kv_write at batch 8:
    // 0.060 -> 0.015 ms a step, at batch 1 0.007 -> 0.002; docs/PERFORMANCE.md, session 35). A
    // decode step's rows only: a long prompt's would not stay in cache until the write.
    for (int t = 0; t < (T <= kMaxPrefetchedStoreTokens ? T : 0); ++t) {
      const auto [block, slot] = cache_slot(t);
      kv_cache_->PrefetchStore(layer, block, slot);
    }
    // Attention block.
    timer.Run(OpKind::kAttnNorm, layer, 0, [&] { return norm_rows(x.data(), w.attn_norm, normed.data()); });
    timer.Run(OpKind::kQkvProj, layer, 0, [&] {
      const int width = q_width + 2 * kv_width;
      linear(layer, 0, normed.data(), w.bqkv, qkv.data(), h, width);
      for (int t = 0; t < T; ++t) {  // [T, q | k | v] -> q, k, v
        const float* row = &qkv[t * width];
        std::copy_n(row, q_width, &q[t * q_width]);
        std::copy_n(row + q_width, kv_width, &k[t * kv_width]);
        std::copy_n(row + q_width + kv_width, kv_width, &v[t * kv_width]);
      }
    });
    timer.Run(OpKind::kRope, layer, 0, [&] {
      for (int t = 0; t < T; ++t) {
        cpu::ApplyRope(&q[t * q_width], s.heads, s.head_dim, &cos[t * half], &sin[t * half]);
        cpu::ApplyRope(&k[t * kv_width], s.kv_heads, s.head_dim, &cos[t * half], &sin[t * half]);
      }
    });
    timer.Run(OpKind::kKvWrite, layer, 0, [&] {
      for (int t = 0; t < T; ++t) {
        const auto [block, slot] = cache_slot(t);
        kv_cache_->Store(layer, block, slot, &k[t * kv_width], &v[t * kv_width]);
      }
    });
    timer.Run(OpKind::kAttention, layer, 0, [&] { Attention(batch, layer, q.data(), attn.data()); });
    timer.Run(OpKind::kOProj, layer, 0,
              [&] { return linear(layer, 1, attn.data(), HostTensor{}, proj.data(), q_width, h); });
    if (s.tp > 1) RETURN_IF_ERROR(all_reduce(OpKind::kAllReduceAttn, layer, proj.data()));
    cpu::AddInPlace(x.data(), proj.data(), T * h);

    // MLP block.
    timer.Run(OpKind::kMlpNorm, layer, 0, [&] { return norm_rows(x.data(), w.mlp_norm, normed.data()); });
    timer.Run(OpKind::kGateUpProj, layer, 0, [&] {
      return linear(layer, 2, normed.data(), HostTensor{}, gate_up.data(), h, 2 * s.ffn);
    });
    timer.Run(OpKind::kSiluMul, layer, 0, [&] {
      // Element-wise, so split among the rank's threads by element: the same arithmetic per element.
      pool_->ParallelFor(static_cast<size_t>(T) * s.ffn, 512, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end;) {
          const size_t t = i / s.ffn, j = i % s.ffn, n = std::min<size_t>(end - i, s.ffn - j);
          const float* row = &gate_up[t * 2 * s.ffn];
          cpu::SiluMul(row + j, row + s.ffn + j, &act[t * s.ffn + j], static_cast<int>(n));
          i += n;
        }
      });
    });
    timer.Run(OpKind::kDownProj, layer, 0,
              [&] { return linear(layer, 3, act.data(), HostTensor{}, proj.data(), s.ffn, h); });
    if (s.tp > 1 && layer != options_.skip_mlp_allreduce_layer) {
      RETURN_IF_ERROR(all_reduce(OpKind::kAllReduceMlp, layer, proj.data()));
    }
    cpu::AddInPlace(x.data(), proj.data(), T * h);
  }

  // LM head over the rows whose logits are wanted; vocab-parallel, then gathered.
  const int rows = static_cast<int>(batch.logit_rows.size());
  Activations last(rows * h);  // [rows, hidden]
  timer.Run(OpKind::kFinalNorm, -1, 0, [&] {
    for (int r = 0; r < rows; ++r) {
      cpu::RmsNorm(&x[batch.logit_rows[r] * h], F32(weights_.final_norm), &last[r * h], h, eps);
    }
  });
  // Every row greedy (no logprobs) and no logits wanted: the LM head finds the tokens itself, on
  // the hi halves first (cpu::GreedyLinear); at batch 8 on a 2-vCPU AMD EPYC (Zen 5) it took
  // the LM head from 4.3-4.9 to 3.3-3.7 ms (docs/PERFORMANCE.md, session 36). A token it cannot
  // settle (a non-finite activation, too many near ties) sends the step down the logits path below.
  device_tokens_.clear();
  if (!lm_head_norms_.bounds.empty() && rows > 0) {
    const DeviceSamplingPlan sampling =
        PlanDeviceSampling(plan, config_.eos_token_ids, config_.vocab_size);
    if (sampling.all_on_device()) {
      device_tokens_.resize(rows);
      timer.Run(OpKind::kLmHead, -1, 0, [&] {
        cpu::GreedyLinear({.x = last.data(),
                           .w = Bf16(weights_.output_projection()),
                           .tokens = rows,
                           .in = h,
                           .out = s.vocab,
                           .layout = weights_.layout(h),
                           .norms = &lm_head_norms_,
                           .banned_offsets = sampling.banned_offsets.data(),
                           .banned_ids = sampling.banned_ids.data()},
                          pool_, weights_.kernel, device_tokens_.data());
      });
      if (std::all_of(device_tokens_.begin(), device_tokens_.end(),
                      [](int32_t id) { return id >= 0; })) {
        logits->clear();
        trace->total_ns = NowNs() - step_start;
        return Status::Ok();
      }
      device_tokens_.clear();
    }
  }
  // The logits buffers persist across steps (megabytes at batch 32: fresh ones cost page faults).
  // At TP=1 the LM head writes straight into the output.
  std::vector<float>& local = s.tp == 1 ? *logits : local_logits_;  // [rows, vocab_local]
  local.resize(static_cast<size_t>(rows) * s.vocab);
  timer.Run(OpKind::kLmHead, -1, 0, [&] {
    cpu::Linear({last.data(), Bf16(weights_.output_projection()), nullptr, local.data(), rows, h, s.vocab,
                 weights_.layout(h)},
                pool_, weights_.kernel);
  });
  if (s.tp > 1) {
    gathered_logits_.resize(static_cast<size_t>(s.tp) * rows * s.vocab);  // [tp, rows, vocab_local]
    RETURN_IF_ERROR(timer.Run(OpKind::kAllGatherLogits, -1, static_cast<int64_t>(local.size() * sizeof(float)),
                              [&] { return comm_->AllGather(local.data(), gathered_logits_.data(), local.size()); }));
    // [tp, rows, vocab_local] -> [rows, vocab_padded]: every element is written (vocab_padded = tp ×
    // vocab_local).
    logits->resize(static_cast<size_t>(rows) * s.vocab_padded);
    for (int r = 0; r < s.tp; ++r) {
      for (int row = 0; row < rows; ++row) {
        std::memcpy(&(*logits)[static_cast<size_t>(row) * s.vocab_padded + r * s.vocab],
                    &gathered_logits_[(static_cast<size_t>(r) * rows + row) * s.vocab], s.vocab * sizeof(float));
      }
    }
  }
  trace->total_ns = NowNs() - step_start;
  return Status::Ok();
}

}  // namespace tpserve

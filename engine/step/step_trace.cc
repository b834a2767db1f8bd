#include "engine/step/step_trace.h"

#include <algorithm>
#include <cmath>

namespace tpserve {

std::string_view OpName(OpKind op) {
  switch (op) {
    case OpKind::kEmbed: return "embed";
    case OpKind::kEmbedAllReduce: return "allreduce.embed";
    case OpKind::kAttnNorm: return "attn_norm";
    case OpKind::kQkvProj: return "qkv_proj";
    case OpKind::kRope: return "rope";
    case OpKind::kKvWrite: return "kv_write";
    case OpKind::kAttention: return "attention";
    case OpKind::kOProj: return "o_proj";
    case OpKind::kAllReduceAttn: return "allreduce.attn";
    case OpKind::kMlpNorm: return "mlp_norm";
    case OpKind::kGateUpProj: return "gate_up_proj";
    case OpKind::kSiluMul: return "silu_mul";
    case OpKind::kDownProj: return "down_proj";
    case OpKind::kAllReduceMlp: return "allreduce.mlp";
    case OpKind::kFinalNorm: return "final_norm";
    case OpKind::kLmHead: return "lm_head";
    case OpKind::kAllGatherLogits: return "allgather.logits";
    case OpKind::kCount: break;
  }
  return "?";
}

bool IsCollective(OpKind op) {
  return op == OpKind::kAllReduceAttn || op == OpKind::kAllReduceMlp ||
         op == OpKind::kAllGatherLogits || op == OpKind::kEmbedAllReduce;
}

int64_t RankTrace::CommNs() const {
  int64_t ns = 0;
  for (const auto& op : ops) {
    if (IsCollective(op.op)) ns += op.duration_ns;
  }
  return ns;
}

int64_t RankTrace::ComputeNs() const { return total_ns - CommNs(); }

int StepTrace::SlowestRank() const {
  int slowest = 0;
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (ranks[r].total_ns > ranks[slowest].total_ns) slowest = static_cast<int>(r);
  }
  return slowest;
}

int64_t StepTrace::HostNs() const {
  if (ranks.empty()) return step_ns;
  return std::max<int64_t>(0, step_ns - ranks[SlowestRank()].total_ns);
}

RankTrace RankTraceFromEvents(int rank, std::span<const EventSpan> spans) {
  RankTrace trace;
  trace.rank = rank;
  trace.ops.reserve(spans.size());
  for (const EventSpan& span : spans) {
    const auto start_ns = static_cast<int64_t>(std::llround(static_cast<double>(span.start_ms) * 1e6));
    const auto end_ns = static_cast<int64_t>(std::llround(static_cast<double>(span.end_ms) * 1e6));
    trace.ops.push_back({.op = span.op, .layer = span.layer, .start_ns = start_ns,
                         .duration_ns = std::max<int64_t>(0, end_ns - start_ns), .bytes = span.bytes});
    trace.total_ns = std::max(trace.total_ns, end_ns);
  }
  return trace;
}

}  // namespace tpserve

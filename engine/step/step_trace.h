// The per-step latency breakdown: for every rank, every op it ran (with its layer) and how long
// it took; collectives also carry their message size. Derived views answer "where did the step
// go": compute vs communication vs host time, and which rank was slowest.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpserve {

enum class OpKind : uint8_t {
  kEmbed,
  kAttnNorm,
  kQkvProj,
  kRope,
  kKvWrite,
  kAttention,
  kOProj,
  kAllReduceAttn,
  kMlpNorm,
  kGateUpProj,
  kSiluMul,
  kDownProj,
  kAllReduceMlp,
  kFinalNorm,
  kLmHead,
  kAllGatherLogits,
  kEmbedAllReduce,
  kCount,
};

std::string_view OpName(OpKind op);
bool IsCollective(OpKind op);

struct OpRecord {
  OpKind op = OpKind::kEmbed;
  int16_t layer = -1;      // -1 outside the layers
  int64_t start_ns = 0;    // steady clock, relative to the step's start
  int64_t duration_ns = 0;
  int64_t bytes = 0;       // collectives: the message size per rank
};

struct RankTrace {
  int rank = 0;
  int64_t total_ns = 0;
  std::vector<OpRecord> ops;
  bool graph_replay = false;  // CUDA: the step replayed a captured graph (its ops are not timed)

  int64_t CommNs() const;
  int64_t ComputeNs() const;  // everything that is not a collective
};

// One op timed on a GPU stream: the elapsed milliseconds (cudaEventElapsedTime) from the step's
// start event to the events recorded before and after the op.
struct EventSpan {
  OpKind op = OpKind::kEmbed;
  int16_t layer = -1;
  int64_t bytes = 0;
  float start_ms = 0;
  float end_ms = 0;
};

// The same RankTrace the CPU records, from a GPU rank's event times. Events resolve ~0.5 µs, so
// an end read a hair before its start counts as 0 ns; total_ns is the latest end.
RankTrace RankTraceFromEvents(int rank, std::span<const EventSpan> spans);

struct StepTrace {
  int64_t step_id = 0;
  int prefill_tokens = 0;
  int decode_tokens = 0;
  int cached_tokens = 0;    // prompt tokens whose KV this step took from the prefix cache (not computed)
  int batch_size = 0;       // sequences in the step
  bool per_op = true;       // the ranks recorded every op (false: only their totals; --trace-every)
  int64_t step_ns = 0;      // engine wall time for the step (plan handed out -> results back)
  int64_t plan_send_ns = 0; // multi-process TP: the leader sending this plan to its followers
  std::vector<RankTrace> ranks;

  int SlowestRank() const;
  // Host time: step wall time not spent inside the slowest rank's forward pass.
  int64_t HostNs() const;
};

}  // namespace tpserve

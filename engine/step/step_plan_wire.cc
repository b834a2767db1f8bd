#include "engine/step/step_plan_wire.h"

#include <bit>
#include <cstring>
#include <string>

namespace tpserve {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire format is the host's little-endian layout");

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(T value) {
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &value, sizeof(T));
  }
  void PutInts(const std::vector<int32_t>& values) {
    Put<uint32_t>(static_cast<uint32_t>(values.size()));
    const size_t at = out_->size();
    out_->resize(at + values.size() * sizeof(int32_t));
    if (!values.empty()) std::memcpy(out_->data() + at, values.data(), values.size() * sizeof(int32_t));
  }

 private:
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  Status Get(T* value, const char* field) {
    if (bytes_.size() - at_ < sizeof(T)) return Short(field);
    std::memcpy(value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return Status::Ok();
  }
  Status GetInts(std::vector<int32_t>* values, const char* field) {
    uint32_t count = 0;
    RETURN_IF_ERROR(Get(&count, field));
    if ((bytes_.size() - at_) / sizeof(int32_t) < count) return Short(field);
    values->resize(count);
    if (count > 0) std::memcpy(values->data(), bytes_.data() + at_, count * sizeof(int32_t));
    at_ += count * sizeof(int32_t);
    return Status::Ok();
  }
  size_t left() const { return bytes_.size() - at_; }

 private:
  Status Short(const char* field) const {
    return InvalidArgument("step plan message ends inside " + std::string(field) + " (byte " + std::to_string(at_) +
                           " of " + std::to_string(bytes_.size()) + ")");
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

}  // namespace

void EncodeStepPlan(const StepPlan& plan, std::vector<uint8_t>* out) {
  out->clear();
  Writer w(out);
  w.Put(kStepPlanMagic);
  w.Put(kStepPlanWireVersion);
  w.Put<int64_t>(plan.step_id);
  w.Put<uint32_t>(static_cast<uint32_t>(plan.sequences.size()));
  for (const SequencePlan& s : plan.sequences) {
    w.Put<int64_t>(s.sequence_id);
    w.Put<int32_t>(s.start_position);
    w.Put<uint8_t>(s.want_logits ? 1 : 0);
    w.Put<int32_t>(s.sampled_tokens);
    w.PutInts(s.tokens);
    w.PutInts(s.block_table);
    const SamplingParams& p = s.sampling;
    w.Put<float>(p.temperature);
    w.Put<int32_t>(p.top_k);
    w.Put<float>(p.top_p);
    w.Put<uint64_t>(p.seed);
    w.Put<int32_t>(p.min_tokens);
    w.Put<uint8_t>(p.ignore_eos ? 1 : 0);
    w.Put<int32_t>(p.logprobs);
    w.PutInts(p.stop_token_ids);
  }
}

Result<StepPlan> DecodeStepPlan(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  uint32_t magic = 0;
  uint16_t version = 0;
  RETURN_IF_ERROR(r.Get(&magic, "the header"));
  if (magic != kStepPlanMagic) return InvalidArgument("not a step plan message (bad magic)");
  RETURN_IF_ERROR(r.Get(&version, "the header"));
  if (version != kStepPlanWireVersion) {
    return InvalidArgument("step plan wire version " + std::to_string(version) + ", this build reads " +
                           std::to_string(kStepPlanWireVersion) + " (leader and followers must be the same build)");
  }
  StepPlan plan;
  uint32_t count = 0;
  RETURN_IF_ERROR(r.Get(&plan.step_id, "step_id"));
  RETURN_IF_ERROR(r.Get(&count, "the sequence count"));
  // Each sequence takes at least its fixed fields: a count beyond the bytes left is corruption.
  constexpr size_t kMinSequenceBytes = 8 + 4 + 1 + 4 + 4 + 4 + 4 + 4 + 4 + 8 + 4 + 1 + 4 + 4;
  if (count > r.left() / kMinSequenceBytes) return InvalidArgument("step plan message claims " + std::to_string(count) + " sequences, more than it holds");
  plan.sequences.resize(count);
  for (SequencePlan& s : plan.sequences) {
    uint8_t want_logits = 0, ignore_eos = 0;
    RETURN_IF_ERROR(r.Get(&s.sequence_id, "sequence_id"));
    RETURN_IF_ERROR(r.Get(&s.start_position, "start_position"));
    RETURN_IF_ERROR(r.Get(&want_logits, "want_logits"));
    RETURN_IF_ERROR(r.Get(&s.sampled_tokens, "sampled_tokens"));
    RETURN_IF_ERROR(r.GetInts(&s.tokens, "tokens"));
    RETURN_IF_ERROR(r.GetInts(&s.block_table, "block_table"));
    SamplingParams& p = s.sampling;
    RETURN_IF_ERROR(r.Get(&p.temperature, "sampling.temperature"));
    RETURN_IF_ERROR(r.Get(&p.top_k, "sampling.top_k"));
    RETURN_IF_ERROR(r.Get(&p.top_p, "sampling.top_p"));
    RETURN_IF_ERROR(r.Get(&p.seed, "sampling.seed"));
    RETURN_IF_ERROR(r.Get(&p.min_tokens, "sampling.min_tokens"));
    RETURN_IF_ERROR(r.Get(&ignore_eos, "sampling.ignore_eos"));
    RETURN_IF_ERROR(r.Get(&p.logprobs, "sampling.logprobs"));
    RETURN_IF_ERROR(r.GetInts(&p.stop_token_ids, "sampling.stop_token_ids"));
    if (want_logits > 1 || ignore_eos > 1) return InvalidArgument("step plan message has a flag that is neither 0 nor 1");
    s.want_logits = want_logits == 1;
    p.ignore_eos = ignore_eos == 1;
  }
  if (r.left() != 0) return InvalidArgument("step plan message has " + std::to_string(r.left()) + " bytes past its end");
  return plan;
}

}  // namespace tpserve

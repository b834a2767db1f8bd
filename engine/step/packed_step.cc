#include "engine/step/packed_step.h"

#include <algorithm>
#include <limits>
#include <string>

namespace tpserve {

std::vector<int32_t> PackedStep::Concatenated() const {
  std::vector<int32_t> out;
  for (const auto* part : {&token_ids, &positions, &slot_mapping, &token_sequence, &query_start, &context_lengths,
                           &block_tables, &logit_tokens}) {
    out.insert(out.end(), part->begin(), part->end());
  }
  return out;
}

Result<PackedStep> PackStep(const StepPlan& plan, int block_size) {
  if (block_size < 1) return InvalidArgument("block size must be at least 1, got " + std::to_string(block_size));
  PackedStep packed;
  packed.num_sequences = static_cast<int>(plan.sequences.size());
  // Only the blocks a sequence's positions reach: a scheduler may allocate ahead, and the table's
  // width decides the GPU's limits check and its graph's context bucket.
  for (const SequencePlan& s : plan.sequences) {
    const int64_t end = int64_t{std::max(s.start_position, 0)} + static_cast<int64_t>(s.tokens.size());
    const int64_t needed = std::min<int64_t>((end + block_size - 1) / block_size, s.block_table.size());
    packed.block_table_width = std::max(packed.block_table_width, static_cast<int>(needed));
  }
  packed.query_start.push_back(0);
  for (int index = 0; index < packed.num_sequences; ++index) {
    const SequencePlan& s = plan.sequences[index];
    const std::string who = "sequence " + std::to_string(s.sequence_id) + ": ";
    if (s.tokens.empty()) return InvalidArgument(who + "no tokens in the step");
    if (s.start_position < 0) return InvalidArgument(who + "negative start position");
    const int64_t end = int64_t{s.start_position} + static_cast<int64_t>(s.tokens.size());
    const int64_t blocks_needed = (end + block_size - 1) / block_size;
    if (static_cast<int64_t>(s.block_table.size()) < blocks_needed) {
      return InvalidArgument(who + std::to_string(end) + " positions need " + std::to_string(blocks_needed) +
                             " KV blocks, the block table has " + std::to_string(s.block_table.size()));
    }
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      const int32_t position = s.start_position + static_cast<int32_t>(t);
      const int32_t block = s.block_table[position / block_size];
      const int64_t slot = int64_t{block} * block_size + position % block_size;
      if (block < 0 || slot > std::numeric_limits<int32_t>::max()) {
        return InvalidArgument(who + "block " + std::to_string(block) + " is not a valid KV block");
      }
      packed.token_ids.push_back(s.tokens[t]);
      packed.positions.push_back(position);
      packed.slot_mapping.push_back(static_cast<int32_t>(slot));
      packed.token_sequence.push_back(index);
    }
    packed.query_start.push_back(static_cast<int32_t>(packed.token_ids.size()));
    packed.context_lengths.push_back(static_cast<int32_t>(end));
    std::vector<int32_t> row(s.block_table.begin(), s.block_table.begin() + blocks_needed);
    row.resize(packed.block_table_width, -1);
    packed.block_tables.insert(packed.block_tables.end(), row.begin(), row.end());
    if (s.want_logits) packed.logit_tokens.push_back(packed.query_start.back() - 1);
  }
  packed.num_tokens = static_cast<int>(packed.token_ids.size());
  return packed;
}

bool DeviceSamplingPlan::all_on_device() const {
  return std::all_of(on_device.begin(), on_device.end(), [](int32_t on) { return on != 0; });
}

DeviceSamplingPlan PlanDeviceSampling(const StepPlan& plan, std::span<const int> eos_ids, int vocab_size) {
  DeviceSamplingPlan out;
  out.banned_offsets.push_back(0);
  for (const SequencePlan& seq : plan.sequences) {
    if (!seq.want_logits) continue;
    const bool greedy = !(seq.sampling.temperature >= kGreedyTemperature);  // NaN too, as SampleToken
    out.on_device.push_back(greedy && seq.sampling.logprobs <= 0 ? 1 : 0);
    std::vector<int32_t> banned = BannedTokens(seq.sampling, eos_ids, seq.sampled_tokens);
    std::erase_if(banned, [&](int32_t id) { return id < 0 || id >= vocab_size; });
    std::sort(banned.begin(), banned.end());
    banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
    if (static_cast<int>(banned.size()) == vocab_size) banned.clear();  // nothing left: ignore the bans
    out.banned_ids.insert(out.banned_ids.end(), banned.begin(), banned.end());
    out.banned_offsets.push_back(static_cast<int32_t>(out.banned_ids.size()));
  }
  return out;
}

int MoveManyBansToHost(int max_bans_per_row, DeviceSamplingPlan* plan) {
  const std::vector<int32_t> offsets = std::move(plan->banned_offsets);
  const std::vector<int32_t> ids = std::move(plan->banned_ids);
  plan->banned_offsets = {0};
  plan->banned_ids.clear();
  int moved = 0;
  for (size_t row = 0; row + 1 < offsets.size(); ++row) {
    const int32_t begin = offsets[row], end = offsets[row + 1];
    if (end - begin > max_bans_per_row) {
      plan->on_device[row] = 0;
      ++moved;
    } else {
      plan->banned_ids.insert(plan->banned_ids.end(), ids.begin() + begin, ids.begin() + end);
    }
    plan->banned_offsets.push_back(static_cast<int32_t>(plan->banned_ids.size()));
  }
  return moved;
}

std::vector<int32_t> HostLogitRows(const DeviceSamplingPlan& plan, bool return_logits) {
  std::vector<int32_t> rows;
  for (size_t row = 0; row < plan.on_device.size(); ++row) {
    if (return_logits || plan.on_device[row] == 0) rows.push_back(static_cast<int32_t>(row));
  }
  return rows;
}

}  // namespace tpserve

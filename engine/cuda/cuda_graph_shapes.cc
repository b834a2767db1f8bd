#include "engine/cuda/cuda_graph_shapes.h"

#include <algorithm>
#include <string>

namespace tpserve {

std::vector<int> CudaGraphBatchSizes(int max_batch) {
  std::vector<int> sizes;
  for (int size : {1, 2, 4}) {
    if (size <= max_batch) sizes.push_back(size);
  }
  for (int size = 8; size <= max_batch; size += 8) sizes.push_back(size);
  return sizes;
}

std::vector<int> CudaGraphContextSizes(int max_context) {
  std::vector<int> sizes;
  for (int size = 256; size < max_context; size *= 2) sizes.push_back(size);
  if (max_context > 0) sizes.push_back(max_context);
  return sizes;
}

int BucketFor(int n, const std::vector<int>& sizes) {
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), n);
  return it == sizes.end() ? 0 : *it;
}

bool IsPureDecode(const PackedStep& step) {
  if (step.num_tokens != step.num_sequences ||
      static_cast<int>(step.logit_tokens.size()) != step.num_tokens) {
    return false;
  }
  for (int i = 0; i < step.num_tokens; ++i) {
    if (step.token_sequence[i] != i || step.logit_tokens[i] != i) return false;
  }
  return true;
}

Status PadDecodeStep(int batch, int width, PackedStep* step, DeviceSamplingPlan* sampling) {
  const int rows = step->num_tokens;
  if (!IsPureDecode(*step))
    return InvalidArgument("only a pure decode step is padded for a CUDA graph");
  if (rows > batch || step->block_table_width > width) {
    return InvalidArgument("a decode step of " + std::to_string(rows) + " rows and " +
                           std::to_string(step->block_table_width) +
                           " blocks does not fit the graph of " + std::to_string(batch) +
                           " rows and " + std::to_string(width) + " blocks");
  }
  // Block tables: every row `width` wide (-1 past its end); padding rows hold block 0 alone.
  std::vector<int32_t> tables(static_cast<size_t>(batch) * width, -1);
  for (int r = 0; r < rows; ++r) {
    std::copy_n(step->block_tables.begin() + static_cast<ptrdiff_t>(r) * step->block_table_width,
                step->block_table_width, tables.begin() + static_cast<ptrdiff_t>(r) * width);
  }
  for (int r = rows; r < batch; ++r) {
    tables[static_cast<size_t>(r) * width] = 0;
    step->token_ids.push_back(0);
    step->positions.push_back(0);
    step->slot_mapping.push_back(-1);
    step->token_sequence.push_back(r);
    step->query_start.push_back(r + 1);
    step->context_lengths.push_back(1);
    step->logit_tokens.push_back(r);
  }
  step->block_tables = std::move(tables);
  step->num_tokens = step->num_sequences = batch;
  step->block_table_width = width;
  if (sampling != nullptr && !sampling->banned_offsets.empty()) {
    const int32_t end = sampling->banned_offsets.back();
    sampling->on_device.resize(batch, 0);
    sampling->banned_offsets.resize(static_cast<size_t>(batch) + 1, end);
  }
  return Status::Ok();
}

}  // namespace tpserve

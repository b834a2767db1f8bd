// A Hugging Face checkpoint's weights: model.safetensors, or the shards named by
// model.safetensors.index.json. Files are memory-mapped; Read() copies out one tensor, or just one
// rank's slice of it, converting to the dtype the caller computes in, so tensor-parallel sharding
// never copies (or even pages in) the whole model.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "model/host_tensor.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace tpserve {

// Which part of a tensor to read. dim = -1 reads it whole; otherwise dimension `dim` is cut into
// `num_parts` equal chunks and chunk `part` is read. With zero_pad, a dimension that does not
// divide is rounded up to a multiple of num_parts and the missing rows read as zeros (the padded
// vocabulary of a vocab-parallel embedding).
struct SliceSpec {
  int dim = -1;
  int part = 0;
  int num_parts = 1;
  bool zero_pad = false;
};

class Checkpoint {
 public:
  static Result<Checkpoint> Open(const std::string& dir);
  // Random bf16 weights of `config`'s shapes, made on demand for `--load-format dummy`: every
  // Read (whole or a slice) is bitwise what make-model with the same seed writes. `source` names
  // the checkpoint in messages (dir()).
  static Checkpoint Synthetic(const ModelConfig& config, uint64_t seed, const std::string& source);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> TensorNames() const;  // sorted
  size_t file_count() const { return files_.size(); }

  // nullptr when no file of the checkpoint holds the tensor.
  const SafetensorsTensor* Find(std::string_view name) const;

  // Copies `name` (or the slice `spec` selects) into a new tensor of dtype `to`.
  Result<HostTensor> Read(std::string_view name, DType to, const SliceSpec& spec = {}) const;

 private:
  struct Location {
    size_t file = 0;
    const SafetensorsTensor* tensor = nullptr;
  };
  struct SyntheticWeights;
  Status AddFile(const std::string& file_name);

  std::string dir_;
  std::shared_ptr<const SyntheticWeights> synthetic_;  // only for Synthetic(); then files_ is empty
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, Location> tensors_;
};

}  // namespace tpserve

// Writes a safetensors file tensor by tensor, so a model never has to sit in memory whole.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace tpserve {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  // Fills the tensor's bytes (row-major, product(shape) * DTypeSize(dtype)).
  std::function<void(std::span<std::byte>)> fill;

  size_t byte_size() const;
};

// Header padded with spaces to a multiple of 8 bytes (as the reference writer does), tensors in
// the order given.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace tpserve

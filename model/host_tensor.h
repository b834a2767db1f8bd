// A dense row-major tensor in host memory that owns its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/huge_page_allocator.h"

namespace tpserve {

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;   // row-major
  // [product(shape) * DTypeSize(dtype)]; huge pages for large tensors (weights are streamed).
  std::vector<std::byte, HugePageAllocator<std::byte>> bytes;

  size_t element_count() const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }

  template <typename T>
  std::span<const T> view() const {
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
  template <typename T>
  std::span<T> view() {
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }

  // Element i converted to float, whatever the dtype (for tests and diagnostics, not hot loops).
  float at(size_t i) const;
};

std::string ShapeToString(std::span<const int64_t> shape);

}  // namespace tpserve

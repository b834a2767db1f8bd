#include "model/host_tensor.h"

namespace tpserve {

float HostTensor::at(size_t i) const {
  float value;
  ConvertElements(bytes.data() + i * DTypeSize(dtype), dtype, &value, DType::kF32, 1);
  return value;
}

std::string ShapeToString(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace tpserve

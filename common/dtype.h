// Element types of checkpoint tensors and the conversions between them.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tpserve {

enum class DType { kF32, kF16, kBF16 };

size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);          // "F32", "F16", "BF16" (safetensors spelling)
std::optional<DType> DTypeFromName(std::string_view name);

inline float BF16ToF32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Round to nearest even, NaN stays NaN (quiet).
inline uint16_t F32ToBF16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);

// Converts `count` elements from `src` (of type `from`) to `dst` (of type `to`).
void ConvertElements(const void* src, DType from, void* dst, DType to, size_t count);

}  // namespace tpserve

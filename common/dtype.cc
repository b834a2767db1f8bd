#include "common/dtype.h"

#include <cmath>

namespace tpserve {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t F32ToF16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return sign | 0x7e00u;
  if (magnitude >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (magnitude < 6.103515625e-05f) {                 // subnormal half: round(m * 2^24)
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f));
  }
  // Normal: keep 10 mantissa bits, round to nearest even.
  uint32_t abs_bits = bits & 0x7fffffffu;
  uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded >> 13) - (112u << 10));
}

namespace {

float LoadAsF32(const std::byte* src, DType from, size_t i) {
  uint16_t half;
  switch (from) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, src + 4 * i, 4);
      return f;
    }
    case DType::kF16:
      std::memcpy(&half, src + 2 * i, 2);
      return F16ToF32(half);
    case DType::kBF16:
      std::memcpy(&half, src + 2 * i, 2);
      return BF16ToF32(half);
  }
  return 0.0f;
}

void StoreFromF32(std::byte* dst, DType to, size_t i, float value) {
  uint16_t half;
  switch (to) {
    case DType::kF32:
      std::memcpy(dst + 4 * i, &value, 4);
      return;
    case DType::kF16:
      half = F32ToF16(value);
      std::memcpy(dst + 2 * i, &half, 2);
      return;
    case DType::kBF16:
      half = F32ToBF16(value);
      std::memcpy(dst + 2 * i, &half, 2);
      return;
  }
}

}  // namespace

void ConvertElements(const void* src, DType from, void* dst, DType to, size_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * DTypeSize(from));
    return;
  }
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  for (size_t i = 0; i < count; ++i) StoreFromF32(out, to, i, LoadAsF32(in, from, i));
}

}  // namespace tpserve

// Vector code written once, with GCC's vector extensions, and compiled per instruction set: the
// functions here are always inlined, and a function inlines into a caller whose instruction set
// includes its own, so a caller with __attribute__((target("avx512f"))) gets one AVX-512
// instruction per operation on 16 floats and a plain caller four SSE ones. What differs between
// the two: AVX-512 fuses a * b + c into one rounding, SSE rounds twice; a process picks one and
// keeps it (cpu::HasAvx512F), so its results do not depend on the call.
#pragma once

#include <cstdint>
#include <cstring>

// GCC and Clang warn, here and wherever they are used, that a 64-byte vector argument or return
// value is passed differently with and without AVX-512; these functions are always inlined, so none
// crosses a call. (Left off for the rest of the file that includes this header: it is about the ABI
// only.)
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace tpserve::cpu::simd16 {

using Float16 = float __attribute__((vector_size(64)));
using Int16 = int32_t __attribute__((vector_size(64)));
using Float4 = float __attribute__((vector_size(16)));

#define TPSERVE_SIMD16_INLINE __attribute__((always_inline)) inline

TPSERVE_SIMD16_INLINE Float16 Load(const float* p) {
  Float16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

TPSERVE_SIMD16_INLINE void Store(float* p, Float16 v) {
  std::memcpy(p, &v, sizeof(v));
}

// Sixteen bf16 values (bit patterns) widened to f32, exactly: each one's bits in the high half.
TPSERVE_SIMD16_INLINE Float16 LoadBf16(const uint16_t* p) {
  using Bits16 = uint16_t __attribute__((vector_size(32)));
  using Bits32 = uint32_t __attribute__((vector_size(64)));
  Bits16 half;
  std::memcpy(&half, p, sizeof(half));
  const Bits32 bits = __builtin_convertvector(half, Bits32) << 16;
  Float16 v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// exp of 16 floats: Cephes' expf (x = n ln 2 + r, a degree-5 polynomial in r, 2^n built in the
// exponent bits; relative error ~1e-7), the argument clamped to [-87, 88.7] so that 2^n stays a
// normal float up to 2^128, whose bits are infinity (exp past ~88.4 is infinity, as it should be).
TPSERVE_SIMD16_INLINE Float16 Exp(Float16 x) {
  x = x < -87.0f ? Float16{} - 87.0f : (x > 88.7f ? Float16{} + 88.7f : x);
  const Float16 fx = x * 1.44269504088896341f + 0.5f;
  Float16 whole = __builtin_convertvector(__builtin_convertvector(fx, Int16), Float16);
  whole = whole > fx ? whole - 1.0f : whole;  // floor
  const Float16 r = x - whole * 0.693359375f - whole * -2.12194440e-4f;
  Float16 y = 1.9875691500e-4f * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const Int16 exponent = (__builtin_convertvector(whole, Int16) + 127) << 23;
  Float16 two_to_n;
  std::memcpy(&two_to_n, &exponent, sizeof(two_to_n));
  return y * two_to_n;
}

// The 16 lanes summed pairwise in one fixed order: lanes j + 8, then j + 4, then the four left as
// (0 + 2) + (1 + 3).
TPSERVE_SIMD16_INLINE float Sum(Float16 v) {
  Float4 quarter[4];
  std::memcpy(quarter, &v, sizeof(v));
  const Float4 sum = (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
  return (sum[0] + sum[2]) + (sum[1] + sum[3]);
}

}  // namespace tpserve::cpu::simd16

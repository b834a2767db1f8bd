#include "kernels/cpu/linear_amx.h"

#include <algorithm>

#include "kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TPSERVE_AMX_POSSIBLE 1
#endif

namespace tpserve::cpu::amx {

#if defined(TPSERVE_AMX_POSSIBLE)
namespace {

#define TPSERVE_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))
#define TPSERVE_TARGET_AVX512 __attribute__((target("avx512f,avx512bw")))

constexpr int kTokenGroupsPerPass = 16;  // 128 tokens' packed activations stay in L2 per pass
// Each 16-output block of weight tiles is one contiguous stream; its lines are fetched two chunks
// (2 KiB) ahead, and on into the next block near its end (MultiplyTiles). bench_linear at one token,
// LM head 128256x768: 99-104% of the DRAM ceiling; 87-94% without running on into the next block,
// 86-89% with the hardware prefetcher alone; 1 KiB and 8 KiB ahead measured no better.
constexpr size_t kPrefetchAheadBytes = 2048;

// Linux keeps the 8 KiB tile data state off until a process asks (arch_prctl, kernel >= 5.16).
bool RequestTileData() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool amx_bf16 = (edx >> 22) & 1, amx_tile = (edx >> 24) & 1;
  if (!amx_bf16 || !amx_tile || !__builtin_cpu_supports("avx512f") ||
      !__builtin_cpu_supports("avx512bw")) {
    return false;
  }
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long permitted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &permitted) != 0) return false;
  return (permitted >> kXfeatureXtiledata) & 1;
}

// Palette 1 with all 8 tiles 16 rows × 64 bytes: tmm0-3 C (16 rows × 16 outputs, f32), tmm4-5 A
// (activations: 16 rows × 32 inputs, bf16), tmm6-7 B (weights: 16 input pairs × 16 outputs × 2
// bf16). The configuration is per thread.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

TPSERVE_TARGET_AMX void ConfigureTilesForThisThread() {
  thread_local bool configured = false;
  if (configured) return;
  TileConfig config;
  for (int i = 0; i < 8; ++i) {
    config.colsb[i] = 64;
    config.rows[i] = 16;
  }
  _tile_loadconfig(&config);
  configured = true;
}

// x rounded to the nearest bf16 (ties to even), as an f32 with the low 16 bits clear.
TPSERVE_TARGET_AVX512 inline __m512 RoundToBf16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
  return _mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// The high halves (the bf16) of 32 f32 values, in order: 16 lanes of (even, odd) input pairs.
TPSERVE_TARGET_AVX512 inline __m512i HighHalves(__m512 first16, __m512 last16) {
  const __m512i odd_words = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37,
                                             35, 33, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9,
                                             7, 5, 3, 1);
  return _mm512_permutex2var_epi16(_mm512_castps_si512(first16), odd_words,
                                   _mm512_castps_si512(last16));
}

TPSERVE_TARGET_AVX512 void PackAvx512(const float* x, int tokens, int in, PackedActivations* packed) {
  const int chunks = in / kChunk;
  packed->tokens = tokens;
  packed->in = in;
  packed->data.resize(static_cast<size_t>(packed->groups()) * chunks * kTileElements);
  if (tokens % kTokensPerGroup != 0) {  // the last group's unused rows multiply as zeros
    std::fill(packed->data.end() - static_cast<ptrdiff_t>(chunks) * kTileElements, packed->data.end(), 0);
  }
  for (int t = 0; t < tokens; ++t) {
    const int row = t % kTokensPerGroup;
    for (int c = 0; c < chunks; ++c) {
      const float* src = x + static_cast<size_t>(t) * in + c * kChunk;
      const __m512 a = _mm512_loadu_ps(src), b = _mm512_loadu_ps(src + 16);
      const __m512 a_hi = RoundToBf16(a), b_hi = RoundToBf16(b);
      const __m512 a_lo = RoundToBf16(_mm512_sub_ps(a, a_hi));  // exact difference
      const __m512 b_lo = RoundToBf16(_mm512_sub_ps(b, b_hi));
      uint16_t* tile = packed->tile(t / kTokensPerGroup, c);
      _mm512_storeu_si512(tile + row * kChunk, HighHalves(a_hi, b_hi));
      _mm512_storeu_si512(tile + (row + kTokensPerGroup) * kChunk, HighHalves(a_lo, b_lo));
    }
  }
}

// One 16-output block's weight tile for chunk k is 1 KiB at w + k * 1 KiB (WeightLayout::kAmxTiles);
// the next block's starts in / 32 KiB further on.
//
// C tiles for `kGroups` × 8 tokens and `kOutTiles` × 16 outputs, accumulated over all chunks:
// c[g][r] holds rows 0-7 = the group's tokens against their hi parts, rows 8-15 = their lo parts,
// 16 outputs each. Tiles: C(g, r) = tmm(2g + r), activations tmm4 + g, weights tmm6 + r.
template <int kGroups, int kOutTiles>
TPSERVE_TARGET_AMX void MultiplyTiles(const uint16_t* w, size_t block_bytes, int chunks,
                                      const uint16_t* x0, const uint16_t* x1,
                                      float (*c)[2][kTileRows * 16]) {
  const auto* w0 = reinterpret_cast<const char*>(w);
  const char* w1 = w0 + block_bytes;
  const auto* a0 = reinterpret_cast<const char*>(x0);
  const auto* a1 = reinterpret_cast<const char*>(x1);
  _tile_zero(0);
  if constexpr (kOutTiles == 2) _tile_zero(1);
  if constexpr (kGroups == 2) _tile_zero(2);
  if constexpr (kGroups == 2 && kOutTiles == 2) _tile_zero(3);
  for (int k = 0; k < chunks; ++k) {
    const size_t offset = static_cast<size_t>(k) * kTileElements * sizeof(uint16_t);
    // Each weight block is one contiguous stream, fetched 2 KiB ahead; near its end the prefetch
    // runs on into the next block's stream (kOutTiles blocks further on), so none starts cold.
    size_t ahead = offset + kPrefetchAheadBytes;
    if (ahead >= block_bytes) ahead += (kOutTiles - 1) * block_bytes;
    for (size_t line = 0; line < 16; ++line) {
      _mm_prefetch(w0 + ahead + line * 64, _MM_HINT_T0);
      if constexpr (kOutTiles == 2) _mm_prefetch(w1 + ahead + line * 64, _MM_HINT_T0);
    }
    _tile_loadd(6, w0 + offset, 64);
    _tile_loadd(4, a0 + offset, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kOutTiles == 2) {
      _tile_loadd(7, w1 + offset, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kGroups == 2) {
      _tile_loadd(5, a1 + offset, 64);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kOutTiles == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c[0][0], 64);
  if constexpr (kOutTiles == 2) _tile_stored(1, c[0][1], 64);
  if constexpr (kGroups == 2) _tile_stored(2, c[1][0], 64);
  if constexpr (kGroups == 2 && kOutTiles == 2) _tile_stored(3, c[1][1], 64);
}

using MultiplyFn = void (*)(const uint16_t*, size_t, int, const uint16_t*, const uint16_t*,
                            float (*)[2][kTileRows * 16]);

TPSERVE_TARGET_AMX void LinearRowsAmx(const LinearArgs& a, const PackedActivations& x,
                                      size_t row_begin, size_t row_end) {
  ConfigureTilesForThisThread();
  constexpr MultiplyFn kMultiply[2][2] = {{MultiplyTiles<1, 1>, MultiplyTiles<1, 2>},
                                          {MultiplyTiles<2, 1>, MultiplyTiles<2, 2>}};
  const int chunks = a.in / kChunk;
  const size_t block_bytes = static_cast<size_t>(kTileRows) * a.in * sizeof(uint16_t);
  alignas(64) float c[2][2][kTileRows * 16];  // [group, output tile, 16 rows × 16 outputs]
  for (int pass = 0; pass < x.groups(); pass += kTokenGroupsPerPass) {
    const int pass_end = std::min(x.groups(), pass + kTokenGroupsPerPass);
    for (size_t row = row_begin; row < row_end; row += 2 * kTileRows) {
      const int out_tiles = row_end - row >= 2 * kTileRows ? 2 : 1;
      for (int group = pass; group < pass_end; group += 2) {
        const int groups = std::min(2, pass_end - group);
        kMultiply[groups - 1][out_tiles - 1](a.w + row * a.in, block_bytes, chunks, x.tile(group, 0),
                                             x.tile(groups == 2 ? group + 1 : group, 0), c);
        // Row t of a C tile is token t's 16 outputs from its hi part, row t + 8 from its lo part.
        for (int g = 0; g < groups; ++g) {
          for (int r = 0; r < out_tiles; ++r) {
            const size_t o = row + r * kTileRows;
            const __m512 bias = a.bias ? _mm512_loadu_ps(a.bias + o) : _mm512_setzero_ps();
            for (int i = 0; i < kTokensPerGroup; ++i) {
              const int t = (group + g) * kTokensPerGroup + i;
              if (t >= a.tokens) break;
              __m512 dot = _mm512_add_ps(_mm512_load_ps(c[g][r] + i * 16),
                                         _mm512_load_ps(c[g][r] + (i + kTokensPerGroup) * 16));
              if (a.bias) dot = _mm512_add_ps(dot, bias);
              _mm512_storeu_ps(a.y + static_cast<size_t>(t) * a.YStride() + o, dot);
            }
          }
        }
      }
    }
  }
}

}  // namespace

bool Available() {
  static const bool available = RequestTileData();
  return available;
}

void Pack(const float* x, int tokens, int in, PackedActivations* packed) {
  PackAvx512(x, tokens, in, packed);
}

void LinearRows(const LinearArgs& args, const PackedActivations& x, size_t row_begin,
                size_t row_end) {
  LinearRowsAmx(args, x, row_begin, row_end);
}

#else  // no AMX on this platform: Available() is false and nothing else is called

bool Available() { return false; }
void Pack(const float*, int, int, PackedActivations*) {}
void LinearRows(const LinearArgs&, const PackedActivations&, size_t, size_t) {}

#endif

}  // namespace tpserve::cpu::amx

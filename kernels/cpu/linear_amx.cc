#include "kernels/cpu/linear_amx.h"

#include <algorithm>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TPSERVE_AMX_POSSIBLE 1
#endif

// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 headers as
// "maybe uninitialized" once they are inlined here; the warning is about the headers, not us.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tpserve::cpu::amx {

#if defined(TPSERVE_AMX_POSSIBLE)
namespace {

#define TPSERVE_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))
#define TPSERVE_TARGET_AVX512 __attribute__((target("avx512f,avx512bw")))

constexpr int kTokenGroupsPerPass = 16;  // 128 tokens' packed activations stay in L2 per pass
// In the tile layout each A tile is a contiguous stream; its lines are fetched two chunks (2 KiB)
// ahead. bench_linear at one token, LM head 128256x768: 87-94% of the DRAM ceiling at 2 KiB, 86-96%
// at 1 KiB, 89-90% at 8 KiB, 86-89% with the hardware prefetcher alone (the AVX-512 kernel: 94-99%).
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

// Palette 1 with all 8 tiles 16 rows × 64 bytes: tmm0-3 C (f32 16×16), tmm4-5 A (16 weight rows ×
// 32 bf16), tmm6-7 B (16 input pairs × 16 columns × 2 bf16). The configuration is per thread.
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
  packed->data.resize(static_cast<size_t>(packed->groups()) * chunks * 512);
  if (tokens % kTokensPerGroup != 0) {  // the last group's unused columns multiply as zeros
    std::fill(packed->data.end() - static_cast<ptrdiff_t>(chunks) * 512, packed->data.end(), 0);
  }
  // Input pair p of a column is the 32-bit word at row p: 16 words (64 bytes) apart.
  const __m512i row_words = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(16));
  for (int t = 0; t < tokens; ++t) {
    const int column = t % kTokensPerGroup;
    for (int c = 0; c < chunks; ++c) {
      const float* src = x + static_cast<size_t>(t) * in + c * kChunk;
      const __m512 a = _mm512_loadu_ps(src), b = _mm512_loadu_ps(src + 16);
      const __m512 a_hi = RoundToBf16(a), b_hi = RoundToBf16(b);
      const __m512 a_lo = RoundToBf16(_mm512_sub_ps(a, a_hi));  // exact difference
      const __m512 b_lo = RoundToBf16(_mm512_sub_ps(b, b_hi));
      auto* tile = reinterpret_cast<int*>(packed->tile(t / kTokensPerGroup, c));
      _mm512_i32scatter_epi32(tile + column, row_words, HighHalves(a_hi, b_hi), 4);
      _mm512_i32scatter_epi32(tile + column + kTokensPerGroup, row_words, HighHalves(a_lo, b_lo), 4);
    }
  }
}

// Where a block of 32 weight rows' A tiles are: tile (r, chunk) starts at
// base + r * tile_offset + chunk * chunk_step, its 16 rows row_stride bytes apart.
struct TileAddressing {
  size_t chunk_step = 0;
  size_t row_stride = 0;
  size_t tile_offset = 0;
  bool prefetch = false;  // tiles are 1 KiB contiguous: fetch each one's next chunk ahead
};

// C tiles for `kRowTiles` × 16 weight rows and `kGroups` × 8 tokens, accumulated over all chunks:
// c[r][g] holds rows 16r.. of w against token group g (hi columns 0-7, lo columns 8-15).
template <int kRowTiles, int kGroups>
TPSERVE_TARGET_AMX void MultiplyTiles(const uint16_t* w, TileAddressing at, int chunks,
                                      const uint16_t* b0, const uint16_t* b1,
                                      float (*c)[2][kTileRows * 16]) {
  const auto* a0 = reinterpret_cast<const char*>(w);
  const char* a1 = a0 + at.tile_offset;
  const auto* p0 = reinterpret_cast<const char*>(b0);
  const auto* p1 = reinterpret_cast<const char*>(b1);
  _tile_zero(0);
  if constexpr (kGroups == 2) _tile_zero(1);
  if constexpr (kRowTiles == 2) _tile_zero(2);
  if constexpr (kRowTiles == 2 && kGroups == 2) _tile_zero(3);
  // Near the end of this block the prefetch runs on into the next block's same tile stream, so
  // no stream starts cold (the next block is kRowTiles tiles further on).
  const size_t stream_bytes = static_cast<size_t>(chunks) * at.chunk_step;
  for (int k = 0; k < chunks; ++k) {
    const size_t offset = static_cast<size_t>(k) * at.chunk_step;
    if (at.prefetch) {
      size_t ahead = offset + kPrefetchAheadBytes;
      if (ahead >= stream_bytes) ahead += kRowTiles * at.tile_offset - stream_bytes;
      for (size_t line = 0; line < 16; ++line) {
        _mm_prefetch(a0 + ahead + line * 64, _MM_HINT_T0);
        if constexpr (kRowTiles == 2) _mm_prefetch(a1 + ahead + line * 64, _MM_HINT_T0);
      }
    }
    _tile_loadd(4, a0 + offset, at.row_stride);
    _tile_loadd(6, p0 + k * 1024, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kGroups == 2) {
      _tile_loadd(7, p1 + k * 1024, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kRowTiles == 2) {
      _tile_loadd(5, a1 + offset, at.row_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kGroups == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c[0][0], 64);
  if constexpr (kGroups == 2) _tile_stored(1, c[0][1], 64);
  if constexpr (kRowTiles == 2) _tile_stored(2, c[1][0], 64);
  if constexpr (kRowTiles == 2 && kGroups == 2) _tile_stored(3, c[1][1], 64);
}

using MultiplyFn = void (*)(const uint16_t*, TileAddressing, int, const uint16_t*, const uint16_t*,
                            float (*)[2][kTileRows * 16]);

TPSERVE_TARGET_AMX void LinearRowsAmx(const LinearArgs& a, const PackedActivations& x,
                                      size_t row_begin, size_t row_end) {
  ConfigureTilesForThisThread();
  constexpr MultiplyFn kMultiply[2][2] = {{MultiplyTiles<1, 1>, MultiplyTiles<1, 2>},
                                          {MultiplyTiles<2, 1>, MultiplyTiles<2, 2>}};
  const int chunks = a.in / kChunk;
  const size_t row_bytes = static_cast<size_t>(a.in) * sizeof(uint16_t);
  const TileAddressing at =
      a.layout == WeightLayout::kAmxTiles
          ? TileAddressing{.chunk_step = kTileRows * kChunk * sizeof(uint16_t), .row_stride = 64,
                           .tile_offset = kTileRows * row_bytes, .prefetch = true}
          : TileAddressing{.chunk_step = 64, .row_stride = row_bytes, .tile_offset = kTileRows * row_bytes};
  alignas(64) float c[2][2][kTileRows * 16];  // [row tile, group, 16 rows × 16 columns]
  for (int pass = 0; pass < x.groups(); pass += kTokenGroupsPerPass) {
    const int pass_end = std::min(x.groups(), pass + kTokenGroupsPerPass);
    for (size_t row = row_begin; row < row_end; row += 2 * kTileRows) {
      const int row_tiles = row_end - row >= 2 * kTileRows ? 2 : 1;
      for (int group = pass; group < pass_end; group += 2) {
        const int groups = std::min(2, pass_end - group);
        kMultiply[row_tiles - 1][groups - 1](a.w + row * a.in, at, chunks,
                                             x.tile(group, 0),
                                             x.tile(groups == 2 ? group + 1 : group, 0), c);
        for (int r = 0; r < row_tiles; ++r) {
          for (int g = 0; g < groups; ++g) {
            for (int i = 0; i < kTileRows; ++i) {
              const size_t o = row + r * kTileRows + i;
              for (int col = 0; col < kTokensPerGroup; ++col) {
                const int t = (group + g) * kTokensPerGroup + col;
                if (t >= a.tokens) break;
                const float dot = c[r][g][i * 16 + col] + c[r][g][i * 16 + col + kTokensPerGroup];
                a.y[static_cast<size_t>(t) * a.out + o] = a.bias ? dot + a.bias[o] : dot;
              }
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

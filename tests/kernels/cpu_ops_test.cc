// CPU kernels against hand-computed values and naive float64 loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "common/cache_line_allocator.h"
#include "common/dtype.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace tpserve::cpu {
namespace {

// Values computed by hand from the formulas in Hugging Face's modeling code (rotate_half,
// _compute_llama3_parameters), independently of this implementation.
TEST(Rope, RotateHalfLayoutHandComputed) {
  // head_dim 4, theta 10000: inv_freq = [1, 0.01]; position 3; pairs (x0, x2) and (x1, x3).
  RopeParams params{.head_dim = 4, .theta = 10000.0};
  auto inv_freq = RopeInverseFrequencies(params);
  ASSERT_EQ(inv_freq.size(), 2u);
  EXPECT_DOUBLE_EQ(inv_freq[0], 1.0);
  EXPECT_DOUBLE_EQ(inv_freq[1], 0.01);
  float cos[2], sin[2];
  RopeAngles(inv_freq, 3, cos, sin);
  float x[4] = {1, 2, 3, 4};
  ApplyRope(x, 1, 4, cos, sin);
  EXPECT_NEAR(x[0], -1.413352520780047, 1e-6);
  EXPECT_NEAR(x[1], 1.8791180666879925, 1e-6);
  EXPECT_NEAR(x[2], -2.828857481741469, 1e-6);
  EXPECT_NEAR(x[3], 4.058191135400942, 1e-6);
}

TEST(Rope, Llama3ScalingHandComputed) {
  // head_dim 8, theta 10000 -> inv_freq 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 63, 628, 6283).
  // original context 64, factors low 1 / high 4: wavelength < 16 kept, > 64 divided by 8, and
  // 62.8 blended: smooth = (64 / 62.83 - 1) / 3.
  RopeParams params{.head_dim = 8, .theta = 10000.0, .scaling = RopeParams::Scaling::kLlama3,
                    .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                    .original_max_position_embeddings = 64};
  auto f = RopeInverseFrequencies(params);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[1], 0.013042256043820465, 1e-15);
  EXPECT_NEAR(f[2], 0.00125, 1e-15);
  EXPECT_NEAR(f[3], 0.000125, 1e-15);
}

TEST(Attention, GqaHeadsReadTheirGroupsKvHead) {
  // 4 query heads over 2 KV heads: heads 0,1 -> KV head 0; heads 2,3 -> KV head 1. One position,
  // so softmax is 1 and each head's output is exactly its KV head's value.
  const int head_dim = 2, block_size = 4;
  std::vector<float> keys(block_size * 2 * head_dim, 0.0f), values(block_size * 2 * head_dim, 0.0f);
  const int head_1 = block_size * head_dim;  // block 0, KV head 1, slot 0
  values[0] = 10; values[1] = 11;  // block 0, KV head 0, slot 0
  values[head_1] = 20; values[head_1 + 1] = 21;
  KvLayerView kv{keys.data(), values.data(), block_size, 2, head_dim};
  const int32_t block_table[1] = {0};
  float q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8], scores[2];  // 2 heads a group, 1 position
  AttendOneToken(q, 4, kv, block_table, 1, 1.0f, out, scores);
  EXPECT_EQ(out[0], 10); EXPECT_EQ(out[1], 11);
  EXPECT_EQ(out[2], 10); EXPECT_EQ(out[3], 11);
  EXPECT_EQ(out[4], 20); EXPECT_EQ(out[5], 21);
  EXPECT_EQ(out[6], 20); EXPECT_EQ(out[7], 21);
}

// A KV cache of `dtype` holding `values` (bf16: each rounded to nearest even), and the values it
// holds as floats (bf16 widened exactly, BF16ToF32).
struct TestKvCache {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<float> held;
  TestKvCache(const std::vector<float>& values, KvDtype dtype) {
    if (dtype == KvDtype::kF32) {
      f32 = held = values;
      return;
    }
    for (float v : values) {
      bf16.push_back(F32ToBF16(v));
      held.push_back(BF16ToF32(bf16.back()));
    }
  }
  const void* data() const {
    return f32.empty() ? static_cast<const void*>(bf16.data()) : f32.data();
  }
};

// Against a float64 softmax over the same paged blocks: head_dim below 16, 64 and 128 (the unrolled
// bodies) and 16k + 8 (main loop and tail), GQA groups of 3, lengths below, at and past the
// sixteen positions scored together, a shuffled block table; an f32 cache and a bf16 one (against
// the values it holds).
TEST(Attention, MatchesNaiveSoftmaxOverPagedBlocks) {
  struct Case {
    KvDtype dtype;
    int d, length;
  };
  std::vector<Case> cases;
  for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kBf16}) {
    for (const Case c : {Case{dtype, 8, 7}, Case{dtype, 64, 200}, Case{dtype, 72, 33},
                         Case{dtype, 128, 47}, Case{dtype, 64, 16}, Case{dtype, 64, 1}}) {
      cases.push_back(c);
    }
  }
  for (const Case c : cases) {
    const int heads = 6, kv_heads = 2, d = c.d, block_size = 3, length = c.length;
    const int blocks = (length + block_size - 1) / block_size;
    std::mt19937 random(3);
    std::normal_distribution<float> normal;
    std::vector<int32_t> block_table(blocks);
    for (int b = 0; b < blocks; ++b) block_table[b] = (b * 5 + 2) % blocks;  // 5 and blocks coprime
    // The keys' values, then the values' values.
    std::vector<float> stored(static_cast<size_t>(blocks) * block_size * kv_heads * d * 2);
    for (auto& v : stored) v = normal(random);
    const size_t half = stored.size() / 2;
    const TestKvCache key_cache({stored.begin(), stored.begin() + half}, c.dtype),
        value_cache({stored.begin() + half, stored.end()}, c.dtype);
    const std::vector<float>& keys = key_cache.held;
    const std::vector<float>& values = value_cache.held;
    std::vector<float> q(heads * d);
    for (auto& v : q) v = normal(random);
    std::vector<float> out(heads * d), scores(static_cast<size_t>(heads / kv_heads) * length);
    const float scale = 0.3f;
    AttendOneToken(q.data(), heads,
                   {key_cache.data(), value_cache.data(), block_size, kv_heads, d, c.dtype},
                   block_table.data(), length, scale, out.data(), scores.data());
    auto at = [&](const std::vector<float>& cache, int p, int kv_head) {
      const size_t block = block_table[p / block_size];  // head-major: [block, kv head, slot, d]
      return &cache[((block * kv_heads + kv_head) * block_size + p % block_size) * d];
    };
    for (int h = 0; h < heads; ++h) {
      const int kv_head = h / (heads / kv_heads);
      std::vector<double> s(length);
      double max_s = -1e300, z = 0;
      for (int p = 0; p < length; ++p) {
        double dot = 0;
        for (int i = 0; i < d; ++i)
          dot += static_cast<double>(q[h * d + i]) * at(keys, p, kv_head)[i];
        s[p] = dot * scale;
        max_s = std::max(max_s, s[p]);
      }
      for (double& v : s) z += (v = std::exp(v - max_s));
      for (int i = 0; i < d; ++i) {
        double expected = 0;
        for (int p = 0; p < length; ++p) expected += s[p] / z * at(values, p, kv_head)[i];
        ASSERT_NEAR(out[h * d + i], expected, 1e-5)
            << KvDtypeName(c.dtype) << " d " << d << " length " << length << " head " << h << " "
            << i;
      }
    }
  }
}

// The decoder cuts a KV group's query heads into parts by batch size and thread count: a head's
// output must be bitwise the same whether it shares its pass over K and V with 0, 1, 2 or 3 other
// heads, or is one of 8 split into passes of 4 (decode's batch invariance rests on it).
TEST(Attention, HeadsGivesEachHeadTheSameBitsHoweverGrouped) {
  for (const auto& [dtype, d] : std::vector<std::pair<KvDtype, int>>{{KvDtype::kF32, 64},
                                                                     {KvDtype::kF32, 128},
                                                                     {KvDtype::kF32, 40},
                                                                     {KvDtype::kBf16, 64},
                                                                     {KvDtype::kBf16, 128},
                                                                     {KvDtype::kBf16, 40}}) {
    const int heads = 16, kv_heads = 2, group = heads / kv_heads, block_size = 16, length = 77;
    const int blocks = (length + block_size - 1) / block_size;
    std::mt19937 random(5);
    std::normal_distribution<float> normal;
    std::vector<int32_t> block_table(blocks);
    for (int b = 0; b < blocks; ++b) block_table[b] = blocks - 1 - b;
    std::vector<float> key_values(static_cast<size_t>(blocks) * block_size * kv_heads * d),
        value_values(key_values.size());
    for (auto& v : key_values) v = normal(random);
    for (auto& v : value_values) v = normal(random);
    const TestKvCache keys(key_values, dtype), values(value_values, dtype);
    std::vector<float> q(heads * d);
    for (auto& v : q) v = normal(random);
    const KvLayerView kv{keys.data(), values.data(), block_size, kv_heads, d, dtype};
    std::vector<float> scores(static_cast<size_t>(kMaxHeadsPerPass) * length);
    std::vector<float> alone(heads * d), grouped(heads * d);
    for (int h = 0; h < heads; ++h) {
      AttendHeads(q.data(), h, 1, heads, kv, block_table.data(), length, 0.2f, alone.data(),
                  scores.data());
    }
    for (const int part : {2, 3, 4, group}) {
      std::fill(grouped.begin(), grouped.end(), -1.0f);
      for (int g = 0; g < kv_heads; ++g) {
        for (int first = g * group; first < (g + 1) * group; first += part) {
          const int count = std::min(part, (g + 1) * group - first);
          AttendHeads(q.data(), first, count, heads, kv, block_table.data(), length, 0.2f,
                      grouped.data(), scores.data());
        }
      }
      for (int i = 0; i < heads * d; ++i) {
        ASSERT_EQ(grouped[i], alone[i])
            << KvDtypeName(dtype) << " d " << d << " heads a call " << part << " element " << i;
      }
    }
  }
}

// Rows long enough for the 16-element steps, with a tail (n % 16 != 0) and without, against the
// definition in float64.
TEST(RmsNorm, LongRowsMatchTheFloat64Definition) {
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int n : {16, 768, 775, 4099}) {
    std::vector<float> x(n), w(n), y(n);
    for (int i = 0; i < n; ++i) x[i] = normal(random), w[i] = 1.0f + 0.1f * normal(random);
    RmsNorm(x.data(), w.data(), y.data(), n, 1e-5f);
    double sum_sq = 0;
    for (float v : x) sum_sq += static_cast<double>(v) * v;
    const double inv_rms = 1.0 / std::sqrt(sum_sq / n + 1e-5);
    for (int i = 0; i < n; ++i) {
      const double want = x[i] * inv_rms * w[i];
      ASSERT_NEAR(y[i], want, 1e-6 * std::abs(want) + 1e-7) << "n " << n << " element " << i;
    }
  }
}

TEST(RmsNorm, MatchesDefinition) {
  float x[4] = {1, -2, 3, -4}, w[4] = {1, 0.5f, 2, 1}, y[4];
  RmsNorm(x, w, y, 4, 1e-5f);
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-5);
  EXPECT_NEAR(y[0], 1 / rms, 1e-6);
  EXPECT_NEAR(y[1], -1 / rms, 1e-6);
  EXPECT_NEAR(y[2], 6 / rms, 1e-6);
  EXPECT_NEAR(y[3], -4 / rms, 1e-6);
}

// SiLU(gate)·up against float64 across the range the clamp covers and past it, and element by
// element the same bits whatever the call's start and length (a thread's range in the engine).
TEST(SiluMul, MatchesFloat64AndDoesNotDependOnTheRange) {
  std::vector<float> gate, up;
  for (float g = -120.0f; g <= 120.0f; g += 0.37f) gate.push_back(g);
  for (float g : {-1e-6f, 0.0f, 1e-6f, -87.5f, 88.5f, 3.4e38f, -3.4e38f}) gate.push_back(g);
  std::mt19937 random(7);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(normal(random));
  const int n = static_cast<int>(gate.size());
  std::vector<float> out(n);
  SiluMul(gate.data(), up.data(), out.data(), n);
  for (int i = 0; i < n; ++i) {
    const double g = gate[i];
    const double expected = g / (1.0 + std::exp(-g)) * up[i];
    ASSERT_NEAR(out[i], expected, 1e-6 * std::abs(expected) + 1e-30) << "gate " << gate[i];
  }
  for (int start : {1, 5, 17}) {
    for (int length : {1, 3, 16, 31}) {
      std::vector<float> part(length);
      SiluMul(gate.data() + start, up.data() + start, part.data(), length);
      ASSERT_EQ(0, std::memcmp(part.data(), out.data() + start, length * sizeof(float)))
          << start << "+" << length;
    }
  }
}

// The softmax's numerators: exp(x - shift) against float64, relative, over scores as attention
// makes them (at most 0 after the shift) and past the clamp; the same bits for any range start.
TEST(ExpShifted, MatchesFloat64AndDoesNotDependOnTheRange) {
  std::vector<float> x;
  for (float v = -100.0f; v <= 3.0f; v += 0.13f) x.push_back(v);
  const float shift = 2.5f;
  std::vector<float> y = x;
  ExpShifted(y.data(), static_cast<int>(y.size()), shift);
  for (size_t i = 0; i < x.size(); ++i) {
    const double expected = std::exp(static_cast<double>(x[i] - shift));
    ASSERT_NEAR(y[i], expected, 1e-6 * expected + 1e-37) << "x " << x[i];
  }
  for (int start : {1, 7, 20}) {
    for (int length : {1, 5, 16, 33}) {
      std::vector<float> part(x.begin() + start, x.begin() + start + length);
      ExpShifted(part.data(), length, shift);
      ASSERT_EQ(0, std::memcmp(part.data(), y.data() + start, length * sizeof(float)))
          << start << "+" << length;
    }
  }
}

// (kernel, tokens, in, out): every kernel against float64, in the layout the engine gives it.
class LinearTest : public ::testing::TestWithParam<std::tuple<LinearKernel, int, int, int>> {};

TEST_P(LinearTest, MatchesFloat64AndIsBatchInvariant) {
  const auto [kernel, tokens, in, out] = GetParam();
  if (!LinearKernelAvailable(kernel)) GTEST_SKIP() << LinearKernelName(kernel) << " does not run on this CPU";
  std::mt19937 random(tokens * 1000 + in);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> w(static_cast<size_t>(out) * in);
  for (auto& v : w) v = F32ToBF16(normal(random) * 0.1f);
  std::vector<float> x(static_cast<size_t>(tokens) * in), bias(out), y(static_cast<size_t>(tokens) * out);
  for (auto& v : x) v = normal(random);
  for (auto& v : bias) v = normal(random);
  const WeightLayout layout = PreferredLayout(kernel, in);
  std::vector<uint16_t> arranged = w;
  ArrangeWeights(arranged.data(), out, in, layout);
  ThreadPool pool(2);
  Linear({x.data(), arranged.data(), bias.data(), y.data(), tokens, in, out, layout}, &pool, kernel);
  for (int t = 0; t < tokens; ++t) {
    for (int o = 0; o < out; ++o) {
      double expected = bias[o];
      for (int i = 0; i < in; ++i) expected += static_cast<double>(x[t * in + i]) * BF16ToF32(w[o * in + i]);
      ASSERT_NEAR(y[t * out + o], expected, 1e-4 * std::sqrt(in)) << t << "," << o;
    }
    // The same row alone, without a thread pool: bitwise the same.
    std::vector<float> alone(out);
    Linear({&x[t * in], arranged.data(), bias.data(), alone.data(), 1, in, out, layout}, nullptr, kernel);
    ASSERT_EQ(0, std::memcmp(alone.data(), &y[t * out], out * sizeof(float))) << "token " << t;
  }
  // The input on a cache line's start and 4 floats past one (Linear reads misaligned activations
  // from an aligned copy): bitwise the same.
  std::vector<float, CacheLineAllocator<float>> placed(x.size() + 16);
  for (int offset : {0, 4}) {
    std::copy(x.begin(), x.end(), placed.begin() + offset);
    std::vector<float> again(y.size());
    Linear({placed.data() + offset, arranged.data(), bias.data(), again.data(), tokens, in, out, layout}, &pool,
           kernel);
    ASSERT_EQ(0, std::memcmp(again.data(), y.data(), y.size() * sizeof(float))) << "offset " << offset;
  }
  if (kernel == LinearKernel::kAmx) {
    // Without the tile layout the AMX kernel takes the AVX-512 path: bitwise that kernel's result.
    std::vector<float> amx_row_major(y.size()), avx512(y.size());
    Linear({x.data(), w.data(), bias.data(), amx_row_major.data(), tokens, in, out}, &pool, kernel);
    Linear({x.data(), w.data(), bias.data(), avx512.data(), tokens, in, out}, &pool, LinearKernel::kAvx512);
    EXPECT_EQ(0, std::memcmp(amx_row_major.data(), avx512.data(), y.size() * sizeof(float)));
  }
}

// Shapes: odd sizes (the AVX-512 tails and, for AMX, in % 32 != 0), AMX tails (out % 16 != 0,
// odd numbers of 16-row tiles and of 8-token groups) and more than 128 tokens (several passes).
INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    ::testing::Combine(::testing::ValuesIn(kLinearKernels),
                       ::testing::Values(1, 3, 9, 32), ::testing::Values(47, 64, 768),
                       ::testing::Values(5, 40)),
    [](const auto& param_info) {
      return std::string(LinearKernelName(std::get<0>(param_info.param))) + "_t" + std::to_string(std::get<1>(param_info.param)) +
             "_in" + std::to_string(std::get<2>(param_info.param)) + "_out" + std::to_string(std::get<3>(param_info.param));
    });

INSTANTIATE_TEST_SUITE_P(LargeShapes, LinearTest,
                         ::testing::Values(std::make_tuple(LinearKernel::kAmx, 17, 128, 50),
                                           std::make_tuple(LinearKernel::kAmx, 140, 64, 48),
                                           std::make_tuple(LinearKernel::kAmx, 8, 2048, 80),
                                           std::make_tuple(LinearKernel::kAvx512, 140, 64, 48),
                                           std::make_tuple(LinearKernel::kAvx512Bf16, 37, 300, 33),
                                           std::make_tuple(LinearKernel::kAvx512Bf16, 140, 1024,
                                                           48),
                                           // Pair groups above 32 tokens, whole groups: four over
                                           // both blocks, eights over one, then one (37 = 4 + 4 x 8
                                           // + 1); a row-major tail of 20 rows; in = 2048 as in the
                                           // default model's down projection. (9 and 32 tokens
                                           // above take the chunks: in = 768 is three.)
                                           std::make_tuple(LinearKernel::kAvx512Bf16, 37, 2048, 84),
                                           std::make_tuple(LinearKernel::kAvx512Bf16, 8, 768, 96),
                                           // The most tokens one pass over each group takes (4),
                                           // and the fewest that go chunk by chunk (5: one block a
                                           // pass); 12 = eight over one block, then four over both.
                                           std::make_tuple(LinearKernel::kAvx512Bf16, 4, 768, 96),
                                           std::make_tuple(LinearKernel::kAvx512Bf16, 5, 768, 64),
                                           std::make_tuple(LinearKernel::kAvx512Bf16, 12, 768, 64),
                                           // AVX2: twelve chains, one sweep per token of a
                                           // tile; 6 = 4 + 2 tokens (two sweeps of six), in =
                                           // 2 x 96 + 8 (a last 16-weight group of 8).
                                           std::make_tuple(LinearKernel::kAvx2, 6, 200, 24),
                                           std::make_tuple(LinearKernel::kAvx2, 37, 300, 33),
                                           std::make_tuple(LinearKernel::kAvx2, 140, 1024, 48)));

// A step can hand a rank no tokens (a chunked prefill's empty part): every kernel leaves y alone.
TEST(Linear, NoTokensWritesNothing) {
  for (const LinearKernel kernel : kLinearKernels) {
    if (!LinearKernelAvailable(kernel)) continue;
    const int in = 64, out = 64;
    const WeightLayout layout = PreferredLayout(kernel, in);
    std::vector<uint16_t> w(static_cast<size_t>(out) * in, F32ToBF16(1.0f));
    ArrangeWeights(w.data(), out, in, layout);
    std::vector<float> x(in, 1.0f), y(out, -7.0f);
    ThreadPool pool(2);
    Linear({x.data(), w.data(), nullptr, y.data(), 0, in, out, layout}, &pool, kernel);
    EXPECT_EQ(std::count(y.begin(), y.end(), -7.0f), out) << LinearKernelName(kernel);
  }
}

TEST(WeightLayout, TiledLayoutsKeepEveryRowReadable) {
  for (const WeightLayout tiled : {WeightLayout::kAmxTiles, WeightLayout::kPairGroups}) {
    for (const auto& [out, in] :
         {std::pair{40, 64}, std::pair{16, 32}, std::pair{7, 96}, std::pair{33, 47}, std::pair{70, 64}}) {
      std::vector<uint16_t> w(static_cast<size_t>(out) * in);
      for (size_t i = 0; i < w.size(); ++i) w[i] = F32ToBF16(static_cast<float>(i % 256));  // exact in bf16
      const WeightLayout layout = in % 32 == 0 ? tiled : WeightLayout::kRowMajor;
      std::vector<uint16_t> arranged = w;
      ArrangeWeights(arranged.data(), out, in, layout);
      if (layout == WeightLayout::kAmxTiles && out >= 16 && in >= 64) {
        // A tile is 16 input pairs × 16 outputs × 2: element (pair p, output o, e) = W[o][2p + e].
        EXPECT_EQ(arranged[1], w[1]) << out << "x" << in;  // p 0, o 0, e 1
        EXPECT_EQ(arranged[2], w[in]);                     // p 0, o 1, e 0: row 1, column 0
        EXPECT_EQ(arranged[32], w[2]);                     // p 1, o 0, e 0: row 0, column 2
        EXPECT_EQ(arranged[16 * 32], w[32]);               // tile of chunk 1: row 0, column 32
      }
      if (layout == WeightLayout::kPairGroups && out >= 32) {
        // A group is [in / 2 pairs][2 blocks][16 outputs][2]: (p, b, o, e) = W[16 b + o][2p + e].
        EXPECT_EQ(arranged[1], w[1]) << out << "x" << in;  // p 0, b 0, o 0, e 1
        EXPECT_EQ(arranged[2], w[in]);                     // p 0, b 0, o 1, e 0: row 1, column 0
        EXPECT_EQ(arranged[32], w[16 * in]);               // p 0, b 1, o 0: row 16, column 0
        EXPECT_EQ(arranged[64], w[2]);                     // p 1, b 0, o 0: row 0, column 2
        EXPECT_EQ(arranged[32 * in], w[32 * in]);          // the next unit starts at row 32
      }
      if (layout != WeightLayout::kRowMajor) {
        const size_t unit = layout == WeightLayout::kPairGroups ? 32 : 16;
        const size_t tail = out / unit * unit * in;  // rows past the last full unit stay row-major
        EXPECT_TRUE(std::equal(w.begin() + tail, w.end(), arranged.begin() + tail)) << out << "x" << in;
      }
      std::vector<float> row(in);
      for (int r = 0; r < out; ++r) {
        ReadWeightRow(arranged.data(), out, in, layout, r, row.data());
        for (int i = 0; i < in; ++i) {
          ASSERT_EQ(row[i], BF16ToF32(w[static_cast<size_t>(r) * in + i])) << r << "," << i;
        }
      }
    }
  }
}

TEST(LinearKernelNames, ParseAndReject) {
  EXPECT_TRUE(ParseLinearKernel("portable").ok());
  auto unknown = ParseLinearKernel("sse2");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'sse2'"), std::string::npos);
  EXPECT_TRUE(LinearKernelAvailable(BestLinearKernel()));
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 7u, 100u, 1001u}) {
    std::vector<int> hits(n, 0);
    pool.ParallelFor(n, 4, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) ++hits[i];
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << n << ":" << i;
  }
}

struct BalancedChunk {
  int owner;
  size_t begin, end;
  std::thread::id thread;
};

std::vector<BalancedChunk> RunBalanced(
    ThreadPool& pool, size_t n, size_t grain, size_t min_chunk,
    const std::function<void(const BalancedChunk&)>& work = nullptr) {
  std::mutex mutex;
  std::vector<BalancedChunk> chunks;
  pool.ParallelForBalanced(n, grain, min_chunk, [&](int owner, size_t begin, size_t end) {
    const BalancedChunk chunk{owner, begin, end, std::this_thread::get_id()};
    if (work) work(chunk);
    std::lock_guard<std::mutex> lock(mutex);
    chunks.push_back(chunk);
  });
  return chunks;
}

TEST(ThreadPoolBalanced, CoversEveryIndexOnceInWholeGrainChunksOfItsOwnersPiece) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 7u, 100u, 1001u, 4096u}) {
      for (size_t min_chunk : {0u, 50u}) {
        const size_t grain = 4;
        const std::vector<BalancedChunk> chunks = RunBalanced(pool, n, grain, min_chunk);
        std::vector<int> hits(n, 0);
        std::map<int, std::vector<BalancedChunk>> by_owner;
        for (const BalancedChunk& c : chunks) {
          ASSERT_LT(c.begin, c.end);
          ASSERT_GE(c.owner, 0);
          ASSERT_LT(c.owner, threads);
          for (size_t i = c.begin; i < c.end; ++i) ++hits[i];
          by_owner[c.owner].push_back(c);
        }
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i], 1) << threads << " threads, n " << n << ": " << i;
        for (auto& [owner, own] : by_owner) {
          const auto [piece_begin, piece_end] = ThreadPool::Piece(n, grain, threads, owner);
          std::sort(own.begin(), own.end(),
                    [](const auto& a, const auto& b) { return a.begin < b.begin; });
          EXPECT_LE(own.size(), ThreadPool::kChunksPerPiece);
          for (size_t k = 0; k < own.size(); ++k) {
            EXPECT_GE(own[k].begin, piece_begin);
            EXPECT_LE(own[k].end, piece_end);
            EXPECT_EQ((own[k].begin - piece_begin) % grain, 0u);
            // All but a piece's last chunk: one length, whole grains, at least min_chunk.
            if (k + 1 < own.size()) {
              EXPECT_EQ(own[k].end - own[k].begin, own[0].end - own[0].begin);
              EXPECT_EQ((own[k].end - own[k].begin) % grain, 0u);
              EXPECT_GE(own[k].end - own[k].begin, min_chunk);
            }
          }
        }
      }
    }
  }
}

TEST(ThreadPoolBalanced, AMemberDoneEarlyTakesASlowMembersChunksFromTheBack) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  // 16 chunks of 50 a piece; every chunk on the worker thread takes 5 ms, on the caller none.
  const std::vector<BalancedChunk> chunks =
      RunBalanced(pool, 1600, 1, 0, [&](const BalancedChunk& c) {
        if (c.thread != caller) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      });
  size_t covered = 0, stolen = 0, worker_last_end = 0, caller_first_begin = SIZE_MAX;
  for (const BalancedChunk& c : chunks) {
    covered += c.end - c.begin;
    if (c.owner != 1) continue;
    if (c.thread == caller) {
      ++stolen;
      caller_first_begin = std::min(caller_first_begin, c.begin);
    } else {
      worker_last_end = std::max(worker_last_end, c.end);
    }
  }
  EXPECT_EQ(covered, 1600u);
  EXPECT_GE(stolen, 1u) << "the caller, done with its own piece at once, took none of the worker's";
  EXPECT_LT(stolen, 16u) << "the owner keeps the chunk its stream reaches next";
  EXPECT_EQ(worker_last_end, caller_first_begin)
      << "stolen chunks are a suffix of the worker's piece";
}

}  // namespace
}  // namespace tpserve::cpu

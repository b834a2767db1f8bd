// The KV cache's element types: what a bf16 cache stores, the memory it takes, and where it runs.
#include "engine/step/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/dtype.h"
#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

// The bits the view holds for `value` stored in a one-head, one-position, one-element-wide cache.
uint16_t StoredBf16(float value) {
  RankKvCache cache(/*layers=*/1, /*num_blocks=*/1, /*block_size=*/1, /*kv_heads=*/1,
                    /*head_dim=*/1, cpu::KvDtype::kBf16);
  const float other = 0;
  cache.Store(0, 0, 0, &value, &other);
  return *static_cast<const uint16_t*>(cache.Layer(0).keys);
}

// Hand-picked values with their bf16 bits worked out by hand (sign, 8 exponent bits, 7 fraction
// bits): exact ones, halfway cases that tie to the even neighbour either way, a round-up, the
// overflow to infinity, and NaN kept a NaN.
TEST(RankKvCache, Bf16StoresEachElementRoundedToNearestEven) {
  EXPECT_EQ(StoredBf16(1.0f), 0x3f80);
  EXPECT_EQ(StoredBf16(-2.5f), 0xc020);
  EXPECT_EQ(StoredBf16(-0.0f), 0x8000);
  EXPECT_EQ(StoredBf16(1.0f + 0x1p-8f), 0x3f80);      // halfway between 0x3f80 and 0x3f81: even
  EXPECT_EQ(StoredBf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // halfway between 0x3f81 and 0x3f82: even
  EXPECT_EQ(StoredBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);          // just past halfway: up
  EXPECT_EQ(StoredBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past bf16's largest
  const uint16_t nan = StoredBf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
}

// Every head's row lands where the view says, and an f32 cache keeps the values as they are.
TEST(RankKvCache, StoresEveryHeadAtItsRowInEitherDtype) {
  const int layers = 2, blocks = 3, block_size = 4, kv_heads = 2, head_dim = 8;
  for (const cpu::KvDtype dtype : {cpu::KvDtype::kF32, cpu::KvDtype::kBf16}) {
    RankKvCache cache(layers, blocks, block_size, kv_heads, head_dim, dtype);
    std::vector<float> keys(kv_heads * head_dim), values(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i] = 1.0f + static_cast<float>(i) / 4;  // exact in bf16 too
      values[i] = -keys[i];
    }
    cache.Store(1, 2, 3, keys.data(), values.data());
    const cpu::KvLayerView view = cache.Layer(1);
    EXPECT_EQ(view.dtype, dtype);
    for (int h = 0; h < kv_heads; ++h) {
      for (int i = 0; i < head_dim; ++i) {
        const size_t at = view.RowOffset(2, h, 3) + i;
        // Element `at` of a layer's keys or values, as a float.
        auto held = [&](const void* elements) {
          return dtype == cpu::KvDtype::kF32
                     ? static_cast<const float*>(elements)[at]
                     : BF16ToF32(static_cast<const uint16_t*>(elements)[at]);
        };
        const float key = held(view.keys), value = held(view.values);
        EXPECT_EQ(key, keys[h * head_dim + i])
            << cpu::KvDtypeName(dtype) << " head " << h << " element " << i;
        EXPECT_EQ(value, values[h * head_dim + i])
            << cpu::KvDtypeName(dtype) << " head " << h << " element " << i;
      }
    }
  }
}

// --kv-cache-mb buys twice the blocks with bf16 elements.
TEST(RankKvCache, Bf16HoldsTwiceTheBlocksInTheSameMemory) {
  EXPECT_EQ(RankKvCache::BytesPerBlock(12, 16, 4, 64, cpu::KvDtype::kF32),
            2 * RankKvCache::BytesPerBlock(12, 16, 4, 64, cpu::KvDtype::kBf16));
  for (const cpu::KvDtype dtype : {cpu::KvDtype::kF32, cpu::KvDtype::kBf16}) {
    EngineOptions options{
        .tp = 1, .threads = 2, .block_size = 4, .kv_cache_mb = 16, .kv_cache_dtype = dtype};
    auto engine = Engine::Create(testing::TinyModel(), options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    const ModelConfig& c = testing::TinyModel().config;
    const size_t f32_block =
        RankKvCache::BytesPerBlock(c.num_layers, 4, c.num_kv_heads, c.head_dim);
    const int f32_blocks = static_cast<int>((size_t{16} << 20) / f32_block);
    EXPECT_EQ((*engine)->block_pool().free_blocks(),
              dtype == cpu::KvDtype::kBf16 ? 2 * f32_blocks : f32_blocks)
        << cpu::KvDtypeName(dtype);
  }
}

// Each dtype's name reads back as that dtype; other spellings are refused by name.
TEST(RankKvCache, DtypeNamesReadBackAndOthersAreRefused) {
  for (cpu::KvDtype dtype : {cpu::KvDtype::kF32, cpu::KvDtype::kBf16}) {
    auto parsed = cpu::ParseKvDtype(cpu::KvDtypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << cpu::KvDtypeName(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
  for (const char* name : {"fp8", "BF16", "auto", ""}) {
    auto parsed = cpu::ParseKvDtype(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_NE(parsed.status().message().find("'" + std::string(name) + "'"), std::string::npos)
        << parsed.status().message();
  }
}

// The CUDA backend keeps f32: asking it for bf16 fails before any GPU is touched, naming the flag.
TEST(RankKvCache, CudaRefusesABf16CacheNamingTheFlag) {
  EngineOptions options{
      .device = DeviceKind::kCuda, .tp = 1, .kv_cache_dtype = cpu::KvDtype::kBf16};
  auto engine = Engine::Create(testing::TinyModel(), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("--kv-cache-dtype bf16"), std::string::npos)
      << engine.status().ToString();
}

}  // namespace
}  // namespace tpserve

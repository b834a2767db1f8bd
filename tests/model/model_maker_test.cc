// make-model writes a checkpoint that loads through the same path as a downloaded one, with
// weights of the intended scale, reproducibly from its seed.
#include "model/model_maker.h"

#include <gtest/gtest.h>

#include <cmath>

#include "text/chat/chat_template.h"
#include "model/model_directory.h"
#include "model/weight_layout.h"
#include "tests/test_util.h"

namespace tpserve {
namespace {

using testing::TempDir;

MakeModelOptions TinyOptions(const TempDir& dir, const std::string& tokenizer = "llama3") {
  return {.out_dir = dir.path().string(), .preset = "tiny", .tokenizer = tokenizer,
          .assets_dir = testing::AssetsDir(), .seed = 1, .shards = 1};
}

struct Moments {
  double mean = 0, stddev = 0;
};

Moments MomentsOf(const HostTensor& t) {
  double sum = 0, sum_sq = 0;
  const size_t n = t.element_count();
  for (size_t i = 0; i < n; ++i) {
    const double v = t.at(i);
    sum += v;
    sum_sq += v * v;
  }
  const double mean = sum / n;
  return {mean, std::sqrt(sum_sq / n - mean * mean)};
}

TEST(MakeModel, TinyLlamaLoadsAndValidates) {
  TempDir dir;
  ASSERT_TRUE(MakeModel(TinyOptions(dir)).ok());
  auto model = OpenModelDirectory(dir.path().string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_GE(c.num_heads, 8);
  EXPECT_LT(c.num_kv_heads, c.num_heads);
  EXPECT_TRUE(CheckTensorParallel(c, 8).ok());
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(model->tokenizer.vocab_size(), 128256);
}

TEST(MakeModel, WeightsHaveTheIntendedScale) {
  TempDir dir;
  ASSERT_TRUE(MakeModel(TinyOptions(dir)).ok());
  auto model = OpenModelDirectory(dir.path().string());
  ASSERT_TRUE(model.ok());
  const double hidden = model->config.hidden_size;
  auto q = model->checkpoint.Read("model.layers.0.self_attn.q_proj.weight", DType::kF32).value();
  Moments mq = MomentsOf(q);
  EXPECT_NEAR(mq.mean, 0.0, 0.01);
  EXPECT_NEAR(mq.stddev, 1.0 / std::sqrt(hidden), 0.05 / std::sqrt(hidden));
  auto norm = model->checkpoint.Read("model.norm.weight", DType::kF32).value();
  EXPECT_NEAR(MomentsOf(norm).mean, 1.0, 0.02);
  auto head = model->checkpoint.Read("lm_head.weight", DType::kF32).value();
  EXPECT_NEAR(MomentsOf(head).stddev * std::sqrt(hidden), 4.0, 0.1);
  for (size_t i = 0; i < head.element_count(); i += 997) ASSERT_TRUE(std::isfinite(head.at(i)));
}

TEST(MakeModel, SeedDeterminesWeights) {
  TempDir a, b, c;
  MakeModelOptions options = TinyOptions(a);
  ASSERT_TRUE(MakeModel(options).ok());
  options.out_dir = b.path().string();
  ASSERT_TRUE(MakeModel(options).ok());
  options.out_dir = c.path().string();
  options.seed = 2;
  ASSERT_TRUE(MakeModel(options).ok());
  const std::string weights = "model.safetensors";
  EXPECT_EQ(testing::ReadFile(a.file(weights)), testing::ReadFile(b.file(weights)));
  EXPECT_NE(testing::ReadFile(a.file(weights)), testing::ReadFile(c.file(weights)));
}

TEST(MakeModel, ShardedOutputHoldsTheSameTensors) {
  TempDir single, sharded;
  ASSERT_TRUE(MakeModel(TinyOptions(single)).ok());
  MakeModelOptions options = TinyOptions(sharded);
  options.shards = 3;
  ASSERT_TRUE(MakeModel(options).ok());
  EXPECT_TRUE(std::filesystem::exists(sharded.file("model.safetensors.index.json")));
  EXPECT_FALSE(std::filesystem::exists(sharded.file("model.safetensors")));
  auto a = OpenModelDirectory(single.path().string());
  auto b = OpenModelDirectory(sharded.path().string());
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_EQ(b->checkpoint.file_count(), 3u);
  ASSERT_EQ(a->checkpoint.TensorNames(), b->checkpoint.TensorNames());
  for (const auto& name : a->checkpoint.TensorNames()) {
    EXPECT_EQ(a->checkpoint.Read(name, DType::kBF16)->bytes, b->checkpoint.Read(name, DType::kBF16)->bytes)
        << name;
  }
}

TEST(MakeModel, Qwen2HasAttentionBiasAndNoBos) {
  TempDir dir;
  ASSERT_TRUE(MakeModel(TinyOptions(dir, "qwen2")).ok());
  auto model = OpenModelDirectory(dir.path().string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->config.architecture, Architecture::kQwen2);
  EXPECT_TRUE(model->config.attention_bias);
  EXPECT_NE(model->checkpoint.Find("model.layers.1.self_attn.k_proj.bias"), nullptr);
  EXPECT_FALSE(model->config.bos_token_id.has_value());
  EXPECT_EQ(model->config.eos_token_ids, (std::vector<int>{151645, 151643}));
  EXPECT_EQ(model->config.vocab_size % 128, 0);
  EXPECT_GE(model->config.vocab_size, model->tokenizer.vocab_size());
}

TEST(MakeModel, SmallPresetHasTheDocumentedSize) {
  auto config = PresetConfig("small", "llama3", 128256);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->hidden_size, 768);
  EXPECT_EQ(config->num_layers, 12);
  EXPECT_TRUE(config->tie_word_embeddings);
  // 174M parameters, 98.5M of them the embedding (issue #2's figures).
  EXPECT_NEAR(config->ParameterCount() / 1e6, 174.0, 0.5);
}

// The presets carry their family's chat template, which loads back and renders that format.
TEST(MakeModel, WritesTheFamilysChatTemplate) {
  const nlohmann::json messages = nlohmann::json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi! "}])");
  struct Case {
    std::string tokenizer, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"llama3",
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"},
           {"qwen2",
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi! <|im_end|>\n"
            "<|im_start|>assistant\n"}}) {
    TempDir dir;
    ASSERT_TRUE(MakeModel(TinyOptions(dir, c.tokenizer)).ok());
    auto loaded = LoadChatTemplate(dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    ASSERT_TRUE(loaded->has_value()) << c.tokenizer;
    auto rendered = (*loaded)->Render(messages, /*add_generation_prompt=*/true);
    ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
    EXPECT_EQ(rendered->text, c.expected) << c.tokenizer;
    // The special tokens it names are in the vocabulary (the directory opens with them).
    EXPECT_TRUE(OpenModelDirectory(dir.path().string()).ok()) << c.tokenizer;
  }
}

TEST(MakeModel, BadOptionsAreRejected) {
  TempDir dir;
  MakeModelOptions options = TinyOptions(dir);
  options.preset = "huge";
  EXPECT_THAT(MakeModel(options).message(), ::testing::HasSubstr("--preset 'huge'"));
  options = TinyOptions(dir);
  options.assets_dir = "/nonexistent";
  EXPECT_THAT(MakeModel(options).message(), ::testing::HasSubstr("run scripts/fetch_assets.sh"));
}

}  // namespace
}  // namespace tpserve

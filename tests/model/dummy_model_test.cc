// --load-format dummy: random weights of a real shape with no checkpoint. Checked against the
// checkpoint make-model writes for the same shape and seed (an independent writer and reader),
// and the named shapes against their publishers' parameter counts.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/known_models.h"
#include "model/weight_layout.h"
#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

ModelSource DummyTiny() {
  return {.model = "tiny", .load_format = "dummy", .tokenizer = "llama3", .assets_dir = testing::AssetsDir(),
          .seed = 7};
}

TEST(DummyModel, EveryTensorAndSliceIsBitwiseWhatMakeModelWrites) {
  const ModelDirectory& written = testing::TinyModel();  // make-model, tiny, llama3, seed 7
  auto dummy = OpenModel(DummyTiny());
  ASSERT_TRUE(dummy.ok()) << dummy.status().ToString();
  EXPECT_EQ(dummy->path, "dummy:tiny");
  EXPECT_EQ(dummy->config.num_layers, written.config.num_layers);
  EXPECT_EQ(dummy->config.vocab_size, written.config.vocab_size);
  EXPECT_EQ(dummy->config.eos_token_ids, written.config.eos_token_ids);
  EXPECT_EQ(dummy->add_bos, written.add_bos);
  ASSERT_EQ(dummy->checkpoint.TensorNames(), written.checkpoint.TensorNames());
  for (const WeightSpec& spec : ExpectedWeights(written.config)) {
    for (auto [rank, tp] : {std::pair{0, 1}, std::pair{1, 2}, std::pair{3, 8}}) {
      const SliceSpec slice = SliceFor(spec, written.config, rank, tp);
      auto a = written.checkpoint.Read(spec.name, DType::kF32, slice);
      auto b = dummy->checkpoint.Read(spec.name, DType::kF32, slice);
      ASSERT_TRUE(a.ok() && b.ok()) << spec.name;
      EXPECT_EQ(a->shape, b->shape) << spec.name;
      EXPECT_TRUE(std::equal(a->bytes.begin(), a->bytes.end(), b->bytes.begin(), b->bytes.end()))
          << spec.name << " rank " << rank << " of " << tp;
    }
  }
}

TEST(DummyModel, AnEngineOnDummyWeightsGivesTheCheckpointsLogits) {
  auto dummy = OpenModel(DummyTiny());
  ASSERT_TRUE(dummy.ok()) << dummy.status().ToString();
  EngineOptions options{.tp = 2, .threads = 2, .block_size = 4, .kv_cache_mb = 16};
  auto on_dummy = Engine::Create(*dummy, options);
  auto on_checkpoint = Engine::Create(testing::TinyModel(), options);
  ASSERT_TRUE(on_dummy.ok() && on_checkpoint.ok());
  const std::vector<int32_t> prompt = {128000, 791, 6864, 315, 9822, 374};
  EXPECT_EQ(testing::RunForced(**on_dummy, prompt, {11, 12}), testing::RunForced(**on_checkpoint, prompt, {11, 12}));
}

TEST(DummyModel, NamedShapesAConfigFileAndALayerOverride) {
  ModelSource source = DummyTiny();
  source.model = "llama-3-8b";
  source.num_layers = 1;
  auto model = OpenModel(source);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->config.hidden_size, 4096);
  EXPECT_EQ(model->config.num_layers, 1);
  EXPECT_EQ(model->config.bos_token_id, 128000);
  auto norm = model->checkpoint.Read("model.layers.0.input_layernorm.weight", DType::kF32);
  ASSERT_TRUE(norm.ok()) << norm.status().ToString();
  EXPECT_EQ(norm->shape, (std::vector<int64_t>{4096}));
  EXPECT_FALSE(model->checkpoint.Read("model.layers.1.input_layernorm.weight", DType::kF32).ok());

  source.model = testing::TinyModelPath() + "/config.json";  // a config file, tokenizer beside it
  source.num_layers = 0;
  auto from_file = OpenModel(source);
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(from_file->config.hidden_size, testing::TinyModel().config.hidden_size);
}

TEST(DummyModel, ErrorsNameTheProblem) {
  ModelSource source = DummyTiny();
  source.model = "llama-9";
  auto unknown = OpenModel(source);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'llama-9' is not a model directory, a config.json or a known model "
                                            "(llama-3-8b, "),
            std::string::npos)
      << unknown.status().message();
  source.model = "mistral-7b";  // 32768 ids; the Llama-3 tokenizer has 128256
  auto too_small = OpenModel(source);
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("vocab_size 32768 is smaller than the 128256 ids"), std::string::npos)
      << too_small.status().message();
  source.load_format = "gguf";
  EXPECT_NE(OpenModel(source).status().message().find("--load-format 'gguf' is not one of: auto, dummy"),
            std::string::npos);
}

// The shapes are those their publishers released: the parameter count each publisher states is
// what ModelConfig::ParameterCount computes from the shape.
TEST(KnownModels, ParameterCountsMatchThePublishedOnes) {
  auto models = KnownModels();
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  std::vector<std::string> names;
  for (const KnownModel& m : *models) {
    names.push_back(m.name);
    EXPECT_FALSE(m.source.empty()) << m.name;
    EXPECT_EQ(static_cast<int64_t>(m.config.ParameterCount()), m.published_parameters) << m.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"llama-3-8b", "llama-3-70b", "llama-3.1-405b", "qwen2-72b", "mistral-7b",
                                             "llama-2-7b", "llama-2-13b", "llama-2-70b", "qwen2.5-32b", "qwen2.5-7b"}));
  const auto all = KnownModelNames();
  EXPECT_NE(std::find(all.begin(), all.end(), "tiny"), all.end());
  EXPECT_NE(std::find(all.begin(), all.end(), "small"), all.end());
}

}  // namespace
}  // namespace tpserve

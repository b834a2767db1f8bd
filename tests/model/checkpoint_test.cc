// Loading a checkpoint written independently of tpserve (tests/data/make_fixture_checkpoint.py:
// sharded, with an index, mixed F32/F16/BF16), whole and as per-rank slices, and every kind of
// bad checkpoint directory.
#include "model/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "model/weight_layout.h"
#include "tests/test_util.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// The fixture script's value formula, recomputed here.
double FixtureValue(int tensor_index, size_t i) {
  return static_cast<double>(static_cast<int64_t>((i * 37 + tensor_index * 101) % 251) - 125) / 64.0;
}

class FixtureCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string command = "python3 " + testing::TestDataDir() +
                                "/make_fixture_checkpoint.py " + dir_->path().string();
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() { delete dir_; }

  static int TensorIndex(const Checkpoint& checkpoint, const std::string& name) {
    auto names = checkpoint.TensorNames();
    return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
  }

  static inline TempDir* dir_ = nullptr;
};

TEST_F(FixtureCheckpoint, LoadsShardedCheckpointThroughIndex) {
  auto checkpoint = Checkpoint::Open(dir_->path().string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->file_count(), 3u);
  auto config = LoadModelConfig(dir_->path().string());
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(ValidateCheckpoint(*checkpoint, *config).ok());
  EXPECT_EQ(checkpoint->TensorNames().size(), ExpectedWeights(*config).size());

  // Every element of every tensor, in whatever dtype it was stored, read back as F32.
  for (const std::string& name : checkpoint->TensorNames()) {
    auto tensor = checkpoint->Read(name, DType::kF32);
    ASSERT_TRUE(tensor.ok()) << tensor.status().ToString();
    const int t = TensorIndex(*checkpoint, name);
    auto values = tensor->view<float>();
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(values[i], FixtureValue(t, i)) << name << "[" << i << "]";
    }
  }
}

TEST_F(FixtureCheckpoint, StoredDtypesAreThoseTheScriptWrote) {
  auto checkpoint = Checkpoint::Open(dir_->path().string());
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_EQ(checkpoint->Find("model.norm.weight")->dtype, DType::kF16);
  EXPECT_EQ(checkpoint->Find("lm_head.weight")->dtype, DType::kF32);
  EXPECT_EQ(checkpoint->Find("model.layers.1.self_attn.q_proj.weight")->dtype, DType::kBF16);
}

TEST_F(FixtureCheckpoint, ColumnAndRowSlicesHoldTheRightElements) {
  auto checkpoint = Checkpoint::Open(dir_->path().string());
  ASSERT_TRUE(checkpoint.ok());
  const std::string q = "model.layers.0.self_attn.q_proj.weight";  // [16, 16]
  const int tq = TensorIndex(*checkpoint, q);
  // Rank 1 of 2, column-parallel: output rows 8..15.
  auto rows = checkpoint->Read(q, DType::kF32, {.dim = 0, .part = 1, .num_parts = 2});
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->shape, (std::vector<int64_t>{8, 16}));
  for (size_t r = 0; r < 8; ++r) {
    for (size_t c = 0; c < 16; ++c) {
      ASSERT_EQ(rows->view<float>()[r * 16 + c], FixtureValue(tq, (8 + r) * 16 + c));
    }
  }
  // Rank 3 of 4, row-parallel o_proj [16, 16]: input columns 12..15 of every row, as bf16.
  const std::string o = "model.layers.1.self_attn.o_proj.weight";
  const int to = TensorIndex(*checkpoint, o);
  auto cols = checkpoint->Read(o, DType::kBF16, {.dim = 1, .part = 3, .num_parts = 4});
  ASSERT_TRUE(cols.ok());
  EXPECT_EQ(cols->shape, (std::vector<int64_t>{16, 4}));
  for (size_t r = 0; r < 16; ++r) {
    for (size_t c = 0; c < 4; ++c) ASSERT_EQ(cols->at(r * 4 + c), FixtureValue(to, r * 16 + 12 + c));
  }
}

TEST_F(FixtureCheckpoint, VocabSliceIsZeroPaddedWhenVocabDoesNotDivide) {
  auto checkpoint = Checkpoint::Open(dir_->path().string());
  ASSERT_TRUE(checkpoint.ok());
  const std::string embed = "model.embed_tokens.weight";  // [100, 16]; 100 = 7 * 13 + 9
  const int te = TensorIndex(*checkpoint, embed);
  auto last = checkpoint->Read(embed, DType::kF32,
                               {.dim = 0, .part = 7, .num_parts = 8, .zero_pad = true});
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->shape, (std::vector<int64_t>{13, 16}));
  for (size_t r = 0; r < 13; ++r) {
    for (size_t c = 0; c < 16; ++c) {
      const double expected = 91 + r < 100 ? FixtureValue(te, (91 + r) * 16 + c) : 0.0;
      ASSERT_EQ(last->view<float>()[r * 16 + c], expected) << r << "," << c;
    }
  }
  Status uneven = checkpoint->Read(embed, DType::kF32, {.dim = 0, .part = 0, .num_parts = 8}).status();
  EXPECT_THAT(uneven.message(), HasSubstr("dim 0 (size 100) does not split into 8 equal parts"));
  EXPECT_THAT(uneven.message(), HasSubstr(embed));
}

TEST_F(FixtureCheckpoint, SlicesForEveryTpDegreeTileTheWholeTensor) {
  auto checkpoint = Checkpoint::Open(dir_->path().string());
  auto config = LoadModelConfig(dir_->path().string());
  ASSERT_TRUE(checkpoint.ok() && config.ok());
  for (int tp : {1, 2, 4}) {
    ASSERT_TRUE(CheckTensorParallel(*config, tp).ok()) << tp;
    for (const WeightSpec& spec : ExpectedWeights(*config)) {
      // Sum of |x| over the real (unpadded) rows of all distinct slices equals the whole tensor's.
      auto whole = checkpoint->Read(spec.name, DType::kF32);
      ASSERT_TRUE(whole.ok());
      double whole_sum = 0, slices_sum = 0;
      for (float v : whole->view<float>()) whole_sum += std::abs(v);
      int previous_part = -1;
      for (int rank = 0; rank < tp; ++rank) {
        SliceSpec slice = SliceFor(spec, *config, rank, tp);
        if (slice.dim >= 0 && slice.part == previous_part) continue;  // replicated KV head
        if (slice.dim < 0 && rank > 0) continue;                      // replicated weight
        previous_part = slice.part;
        auto part = checkpoint->Read(spec.name, DType::kF32, slice);
        ASSERT_TRUE(part.ok()) << part.status().ToString();
        for (float v : part->view<float>()) slices_sum += std::abs(v);
      }
      ASSERT_DOUBLE_EQ(whole_sum, slices_sum) << spec.name << " tp=" << tp;
    }
  }
}

TEST_F(FixtureCheckpoint, KvHeadsAreReplicatedWhenFewerThanRanks) {
  auto config = LoadModelConfig(dir_->path().string());
  ASSERT_TRUE(config.ok());
  ASSERT_EQ(config->num_kv_heads, 2);
  WeightSpec k{"k", {8, 16}, TpSplit::kKvColumn};
  // tp=4 over 2 KV heads: ranks 0,1 read head 0 and ranks 2,3 read head 1.
  for (int rank = 0; rank < 4; ++rank) {
    SliceSpec s = SliceFor(k, *config, rank, 4);
    EXPECT_EQ(s.num_parts, 2);
    EXPECT_EQ(s.part, rank / 2);
  }
  EXPECT_THAT(CheckTensorParallel(*config, 3).message(),
              HasSubstr("--tp 3 does not divide num_attention_heads (4)"));
}

TEST_F(FixtureCheckpoint, ConfigFieldsAreRead) {
  auto config = LoadModelConfig(dir_->path().string());
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->architecture, Architecture::kLlama);
  EXPECT_EQ(config->head_dim, 4);
  EXPECT_EQ(config->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(config->rope_scaling.original_max_position_embeddings, 128);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int>{2, 3}));
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_DOUBLE_EQ(config->rope_theta, 500000.0);
}

// --- Bad checkpoint directories -------------------------------------------------------------

class BrokenCheckpoint : public FixtureCheckpoint {
 protected:
  void SetUp() override {
    std::filesystem::copy(dir_->path(), copy_.path(), std::filesystem::copy_options::recursive);
  }
  std::string Path(const std::string& name) const { return copy_.file(name); }
  nlohmann::json ReadJson(const std::string& name) const {
    return nlohmann::json::parse(testing::ReadFile(Path(name)));
  }
  void WriteJson(const std::string& name, const nlohmann::json& value) const {
    testing::WriteFile(Path(name), value.dump());
  }
  Status Validate() const {
    auto config = LoadModelConfig(copy_.path().string());
    if (!config.ok()) return config.status();
    auto checkpoint = Checkpoint::Open(copy_.path().string());
    if (!checkpoint.ok()) return checkpoint.status();
    return ValidateCheckpoint(*checkpoint, *config);
  }
  TempDir copy_;
};

TEST_F(BrokenCheckpoint, MissingShardFile) {
  std::filesystem::remove(Path("model-00002-of-00003.safetensors"));
  Status s = Validate();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model-00002-of-00003.safetensors"));
}

TEST_F(BrokenCheckpoint, TruncatedShardFile) {
  const std::string shard = Path("model-00001-of-00003.safetensors");
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 10);
  Status s = Validate();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("model-00001-of-00003.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
}

TEST_F(BrokenCheckpoint, IndexMapsTensorToWrongFile) {
  auto index = ReadJson("model.safetensors.index.json");
  index["weight_map"]["model.norm.weight"] =
      index["weight_map"]["model.norm.weight"] == "model-00001-of-00003.safetensors"
          ? "model-00002-of-00003.safetensors"
          : "model-00001-of-00003.safetensors";
  WriteJson("model.safetensors.index.json", index);
  EXPECT_THAT(Validate().message(), HasSubstr("tensor 'model.norm.weight' is mapped to"));
}

TEST_F(BrokenCheckpoint, IndexWithoutWeightMap) {
  WriteJson("model.safetensors.index.json", {{"metadata", {}}});
  EXPECT_THAT(Validate().message(), HasSubstr("missing object field 'weight_map'"));
}

TEST_F(BrokenCheckpoint, NoWeightsAtAll) {
  for (const auto& entry : std::filesystem::directory_iterator(copy_.path())) {
    if (entry.path().filename() != "config.json") std::filesystem::remove(entry.path());
  }
  EXPECT_THAT(Validate().message(),
              HasSubstr("neither model.safetensors nor model.safetensors.index.json found"));
}

TEST_F(BrokenCheckpoint, MissingTensor) {
  auto config = ReadJson("config.json");
  config["num_hidden_layers"] = 3;  // layer 2's tensors do not exist
  WriteJson("config.json", config);
  Status s = Validate();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("missing tensor 'model.layers.2.input_layernorm.weight'"));
}

TEST_F(BrokenCheckpoint, WrongShapeForConfig) {
  auto config = ReadJson("config.json");
  config["intermediate_size"] = 32;
  WriteJson("config.json", config);
  EXPECT_THAT(Validate().message(),
              HasSubstr("tensor 'model.layers.0.mlp.gate_proj.weight' has shape [24, 16] but "
                        "config.json implies [32, 16]"));
}

TEST_F(BrokenCheckpoint, TiedEmbeddingsNeedNoLmHead) {
  auto config = ReadJson("config.json");
  config["tie_word_embeddings"] = true;
  WriteJson("config.json", config);
  EXPECT_TRUE(Validate().ok()) << Validate().ToString();
  auto parsed = LoadModelConfig(copy_.path().string());
  ASSERT_TRUE(parsed.ok());
  for (const WeightSpec& spec : ExpectedWeights(*parsed)) EXPECT_NE(spec.name, "lm_head.weight");
}

TEST_F(BrokenCheckpoint, UnsupportedArchitecture) {
  auto config = ReadJson("config.json");
  config["architectures"] = {"GPT2LMHeadModel"};
  WriteJson("config.json", config);
  Status s = Validate();
  EXPECT_THAT(s.message(), HasSubstr("config.json: unsupported architecture [\"GPT2LMHeadModel\"]"));
}

TEST_F(BrokenCheckpoint, HeadsNotDividingHidden) {
  auto config = ReadJson("config.json");
  config["num_attention_heads"] = 5;
  WriteJson("config.json", config);
  EXPECT_THAT(Validate().message(),
              HasSubstr("num_attention_heads (5) does not divide hidden_size (16)"));
}

TEST_F(BrokenCheckpoint, KvHeadsNotDividingHeads) {
  auto config = ReadJson("config.json");
  config["num_key_value_heads"] = 3;
  WriteJson("config.json", config);
  EXPECT_THAT(Validate().message(),
              HasSubstr("num_key_value_heads (3) does not divide num_attention_heads (4)"));
}

TEST_F(BrokenCheckpoint, BadFieldTypes) {
  auto config = ReadJson("config.json");
  config["hidden_size"] = "sixteen";
  WriteJson("config.json", config);
  EXPECT_THAT(Validate().message(),
              HasSubstr("config.json: field 'hidden_size' must be an integer, got \"sixteen\""));
  config["hidden_size"] = 16;
  config.erase("vocab_size");
  WriteJson("config.json", config);
  EXPECT_THAT(Validate().message(), HasSubstr("field 'vocab_size' is missing"));
  config["vocab_size"] = 100;
  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  WriteJson("config.json", config);
  EXPECT_THAT(Validate().message(), HasSubstr("rope_scaling type 'yarn' is not supported"));
}

TEST_F(BrokenCheckpoint, ConfigNotJson) {
  testing::WriteFile(Path("config.json"), "{ not json");
  EXPECT_THAT(Validate().message(), HasSubstr("config.json: not valid JSON"));
}

TEST_F(BrokenCheckpoint, GenerationConfigEosOutsideVocab) {
  WriteJson("generation_config.json", {{"eos_token_id", {2, 1000}}});
  EXPECT_THAT(Validate().message(),
              HasSubstr("generation_config.json: field 'eos_token_id' is outside the vocabulary"));
}

// Found by fuzz_model_config: an id past INT32_MAX was truncated into one inside the vocabulary.
TEST_F(BrokenCheckpoint, GenerationConfigIdsPastInt32AreRefused) {
  WriteJson("generation_config.json", {{"eos_token_id", {2, 88888828009LL}}});
  EXPECT_THAT(Validate().message(), HasSubstr("generation_config.json: field 'eos_token_id' must be a token id"));
  WriteJson("generation_config.json", {{"bos_token_id", 4294967296LL}});
  EXPECT_THAT(Validate().message(), HasSubstr("generation_config.json: field 'bos_token_id' must be a token id"));
  WriteJson("generation_config.json", {{"bos_token_id", 1000}});
  EXPECT_THAT(Validate().message(), HasSubstr("generation_config.json: field 'bos_token_id' is outside the vocabulary"));
}

}  // namespace
}  // namespace tpserve

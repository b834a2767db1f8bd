// A tiny model written once per build of a test binary, and helpers that drive the engine step by step.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/model_directory.h"
#include "model/model_maker.h"
#include "tests/test_util.h"

namespace tpserve::testing {

// The `tiny` preset (8 heads over 2 KV heads, Llama-3 vocabulary), made once per build of the
// test binary and shared by its processes: ctest runs every test case in a process of its own, and
// making the model in each (73 MB of random weights) took much of a sanitizer stage's time. It
// lives beside the binary, in test-models/BINARY-MTIME/, so a rebuilt binary makes a fresh one
// (and removes its older ones); processes that race make it side by side and the first rename
// wins.
inline std::filesystem::path SharedTinyModelDir() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  const auto built = std::filesystem::last_write_time(exe, error).time_since_epoch().count();
  const std::filesystem::path root = exe.parent_path() / "test-models";
  const std::string prefix = exe.filename().string() + "-";
  const std::filesystem::path dir = root / (prefix + std::to_string(built));
  if (std::filesystem::exists(dir / "config.json")) return dir;
  std::filesystem::create_directories(root, error);
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {  // older builds' models
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && entry.path() != dir && name.find(".part") == std::string::npos) {
      std::filesystem::remove_all(entry.path(), error);
    }
  }
  const std::filesystem::path part = root / (prefix + std::to_string(built) + ".part" + std::to_string(::getpid()));
  MakeModelOptions options{.out_dir = part.string(), .preset = "tiny", .tokenizer = "llama3",
                           .assets_dir = AssetsDir(), .seed = 7};
  Status made = MakeModel(options);
  EXPECT_TRUE(made.ok()) << made.ToString();
  std::filesystem::rename(part, dir, error);  // fails when another process got there first
  if (error) std::filesystem::remove_all(part, error);
  return dir;
}

// The tiny model's directory, for tests that hand it to a server process: opening it here would
// load its tokenizer for nothing (seconds under ASan, once per test process).
inline const std::string& TinyModelPath() {
  static const std::string path = SharedTinyModelDir().string();
  return path;
}

inline const ModelDirectory& TinyModel() {
  static std::unique_ptr<ModelDirectory> model;
  if (!model) {
    auto opened = OpenModelDirectory(SharedTinyModelDir().string());
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    model = std::make_unique<ModelDirectory>(std::move(opened).value());
  }
  return *model;
}

inline std::unique_ptr<Engine> MakeEngine(int tp, int skip_layer = -1, int threads = 2,
                                          cpu::LinearKernel kernel = cpu::BestLinearKernel(),
                                          cpu::KvDtype kv_dtype = cpu::KvDtype::kF32) {
  EngineOptions options{.tp = tp,
                        .threads = threads,
                        .block_size = 4,
                        .kv_cache_mb = 16,
                        .linear_kernel = kernel,
                        .kv_cache_dtype = kv_dtype,
                        .skip_mlp_allreduce_layer = skip_layer};
  auto engine = Engine::Create(TinyModel(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

// Blocks for `positions` tokens from the engine's pool.
inline std::vector<int32_t> AllocateBlocks(Engine& engine, int positions) {
  std::vector<int32_t> blocks;
  for (int p = 0; p < positions; p += engine.block_size()) blocks.push_back(*engine.block_pool().Allocate());
  return blocks;
}

// Feeds `prompt` in one step, then each of `forced` as a decode step (teacher forcing, so every
// engine sees the same inputs). Returns one logits row per step: [1 + forced.size(), vocab].
inline std::vector<std::vector<float>> RunForced(Engine& engine, const std::vector<int32_t>& prompt,
                                                 const std::vector<int32_t>& forced) {
  const int total = static_cast<int>(prompt.size() + forced.size());
  SequencePlan seq{.sequence_id = 1, .tokens = prompt, .start_position = 0,
                   .block_table = AllocateBlocks(engine, total)};
  std::vector<std::vector<float>> rows;
  for (size_t step = 0; step <= forced.size(); ++step) {
    if (step > 0) {
      seq.start_position = static_cast<int32_t>(prompt.size() + step - 1);
      seq.tokens = {forced[step - 1]};
    }
    auto result = engine.Step(StepPlan{.step_id = static_cast<int64_t>(step), .sequences = {seq}});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    rows.emplace_back(result->logits.begin(), result->logits.end());  // a copy: the span is lent
  }
  for (int32_t b : seq.block_table) engine.block_pool().Free(b);
  return rows;
}

inline int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace tpserve::testing

// The sampler's cost per row of logits (SampleToken: greedy, temperature, top-k, top-p, logprobs)
// over a Llama-3-sized vocabulary, next to what the same run measures for one read of the row
// (greedy's vector search: the least any sampler does) and for the two steps a sampler that sorts
// the whole vocabulary pays (every id sorted by logit; exp of every logit in float64). Medians of
// --reps rows; the machine is shared. Rows are an LLM's shape: a broad spread and a few far above
// it (peaked), or a near-uniform row (flat), whose top-p nucleus is most of the vocabulary.
//
//   bench_sampler [--vocab 128256] [--reps 41] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "common/median.h"
#include "engine/step/sampler.h"

namespace {

using tpserve::Median;
using tpserve::SamplingParams;

template <typename Fn>
double MedianMs(int reps, Fn&& fn) {
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn(r);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return Median(ms);
}

std::vector<float> Row(int vocab, bool flat) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, flat ? 0.1f : 2.5f);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = normal(random);
  if (!flat) {
    for (int i = 0; i < 20; ++i) logits[random() % vocab] += 12.0f;
  }
  return logits;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Sampler cost per row against one read of the row and a whole-vocabulary sort, same run"};
  int vocab = 128256, reps = 41;
  bool json = false;
  app.add_option("--vocab", vocab, "Vocabulary size")->check(CLI::Range(16, 1 << 22));
  app.add_option("--reps", reps, "Rows timed per point (median)")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "One JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json out = {{"vocab", vocab}, {"reps", reps}, {"rows", nlohmann::json::array()}};
  int32_t sink = 0;  // every result is used
  for (const bool flat : {false, true}) {
    const std::vector<float> logits = Row(vocab, flat);
    const char* row_kind = flat ? "flat" : "peaked";
    const double read_ms = MedianMs(
        reps, [&](int) { sink += tpserve::FirstLargestLogit(logits, tpserve::SimdPath::kBest); });
    std::vector<int32_t> ids(vocab);
    const double sort_ms = MedianMs(reps, [&](int) {
      std::iota(ids.begin(), ids.end(), 0);
      std::sort(ids.begin(), ids.end(),
                [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      sink += ids[0];
    });
    const double exp_ms = MedianMs(reps, [&](int) {
      double total = 0;
      for (float l : logits) total += std::exp(static_cast<double>(l) - 20.0);
      sink += total > 0;
    });
    const std::vector<std::pair<const char*, SamplingParams>> modes = {
        {"greedy", {}},
        {"T=0.8", {.temperature = 0.8f}},
        {"T=0.6 top_p=0.9", {.temperature = 0.6f, .top_p = 0.9f}},
        {"T=1.0 top_p=0.95", {.temperature = 1.0f, .top_p = 0.95f}},
        {"T=0.8 top_k=50", {.temperature = 0.8f, .top_k = 50}},
        {"T=1.0 top_k=50 top_p=0.9", {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f}},
        {"greedy logprobs=5", {.logprobs = 5}},
    };
    if (!json) {
      std::printf(
          "%s row, %d ids: one read (greedy's search) %.3f ms; whole-vocabulary sort %.2f ms; "
          "float64 exp of every logit %.3f ms\n",
          row_kind, vocab, read_ms, sort_ms, exp_ms);
      std::printf("  %-26s %10s %10s %10s\n", "mode", "ms/row", "x read", "x sort");
    }
    for (const auto& [name, params] : modes) {
      const double ms = MedianMs(reps, [&](int r) {
        sink += tpserve::SampleToken(logits, params, {}, static_cast<uint64_t>(r)).id;
      });
      if (!json)
        std::printf("  %-26s %10.3f %10.1f %10.3f\n", name, ms, ms / read_ms, ms / sort_ms);
      out["rows"].push_back({{"row", row_kind},
                             {"mode", name},
                             {"ms_per_row", ms},
                             {"read_ms", read_ms},
                             {"sort_ms", sort_ms},
                             {"exp_ms", exp_ms}});
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return sink == 42 ? 1 : 0;  // never: keeps the work from being optimized out
}

// What sending a step plan to followers costs on the leader and each follower, before any network:
// EncodeStepPlan + DecodeStepPlan of decode steps at batch 1 and 32 (context 2048, 16-token
// blocks: 128-entry block tables), next to a memcpy of the same bytes (the floor), median of runs.
//
//   bench_plan_wire [--context 2048] [--runs 2000]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/step/step_plan_wire.h"

int main(int argc, char** argv) {
  CLI::App app("step plan wire form: encode + decode time per step");
  int context = 2048, runs = 2000;
  app.add_option("--context", context);
  app.add_option("--runs", runs);
  CLI11_PARSE(app, argc, argv);
  using Clock = std::chrono::steady_clock;
  std::printf("%6s %8s %12s %12s %10s\n", "batch", "bytes", "encode+decode_us", "memcpy_us", "ratio");
  for (int batch : {1, 8, 32, 128}) {
    tpserve::StepPlan plan{.step_id = 1};
    for (int b = 0; b < batch; ++b) {
      tpserve::SequencePlan s{.sequence_id = b, .tokens = {b + 1}, .start_position = context - 1};
      for (int block = 0; block < context / 16; ++block) s.block_table.push_back(b * 1000 + block);
      s.sampling.stop_token_ids = {128001, 128009};
      plan.sequences.push_back(std::move(s));
    }
    std::vector<uint8_t> bytes, copy;
    std::vector<double> wire_us, copy_us;
    for (int run = 0; run < runs; ++run) {
      const auto start = Clock::now();
      tpserve::EncodeStepPlan(plan, &bytes);
      auto decoded = tpserve::DecodeStepPlan(bytes);
      const auto middle = Clock::now();
      copy.resize(bytes.size());
      std::memcpy(copy.data(), bytes.data(), bytes.size());
      const auto end = Clock::now();
      if (!decoded.ok() || decoded->sequences.size() != plan.sequences.size() || copy[0] != bytes[0]) return 1;
      wire_us.push_back(std::chrono::duration<double, std::micro>(middle - start).count());
      copy_us.push_back(std::chrono::duration<double, std::micro>(end - middle).count());
    }
    std::sort(wire_us.begin(), wire_us.end());
    std::sort(copy_us.begin(), copy_us.end());
    const double wire = wire_us[wire_us.size() / 2], floor = std::max(1e-3, copy_us[copy_us.size() / 2]);
    std::printf("%6d %8zu %12.2f %12.3f %9.1fx\n", batch, bytes.size(), wire, floor, wire / floor);
  }
  return 0;
}

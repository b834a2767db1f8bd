// Linear (y = x · Wᵀ, bf16 weights) per kernel, shape and token count, next to the ceiling measured
// in the same run with the same threads: the weights streamed from DRAM at the machine's read
// bandwidth. At decode's few tokens a kernel should run at that ceiling; as tokens grow it turns
// compute-bound, and the ratio to one token shows whether batching pays. Each timed call is
// paired with a read of the same bytes right after it (another cold copy, same threads): of-read,
// the median of read time over call time, is the kernel against the floor of its own size in the
// same moment, which a shared machine's drift cannot tilt.
//
//   bench_linear [--threads 0] [--tokens 1,8,32] [--shapes 128256x768,2048x768,...] [--reps 15]
//                [--kernels amx,avx512bf16,avx512,avx2] [--greedy] [--json]
// --greedy also times the greedy LM head (cpu::GreedyLinear: each token's first largest output)
// where a kernel screens, as kernel "NAME+greedy", on random weights (the default fill repeats
// rows, and repeated rows are ties the screen must compute exactly).
// It also measures the compute ceilings (kernels/cpu/compute_peak.h): bf16 (VDPBF16PS, where the
// CPU has AVX512_BF16) and the f32-grade one (what a kernel under the float64 bound can reach), and
// prints each point's useful FLOPs over each; and, per token count of 4, 8, 16 or 32, the
// f32-grade rate with the weights streamed from DRAM at that batch's intensity (of-strm): what the
// machine sustains when it must fetch the weights and do the arithmetic at once.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/huge_page_allocator.h"
#include "common/median.h"
#include "kernels/cpu/compute_peak.h"
#include "kernels/cpu/greedy_linear.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/cpu/thread_pool.h"

namespace {

using namespace tpserve;
using Clock = std::chrono::steady_clock;

struct Shape {
  int out = 0, in = 0;
};

std::vector<Shape> ParseShapes(const std::string& text) {
  std::vector<Shape> shapes;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    Shape shape;
    if (std::sscanf(text.substr(begin, end - begin).c_str(), "%dx%d", &shape.out, &shape.in) != 2 ||
        shape.out <= 0 || shape.in <= 0) {
      throw CLI::ValidationError("--shapes", "expected OUTxIN[,OUTxIN...], got '" + text + "'");
    }
    shapes.push_back(shape);
    begin = end + 1;
  }
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Linear kernels against the DRAM read ceiling, same run, same threads"};
  int threads = 0, reps = 15;
  std::vector<int> token_counts = {1, 8, 32};
  // The small model's LM head and its layers' fused QKV, gate/up, O and down projections.
  std::string shapes_text = "128256x768,1280x768,4096x768,768x768,768x2048";
  std::vector<std::string> kernel_names;
  bool json = false, greedy = false;
  app.add_option("--threads", threads, "Threads (0: every core)")->check(CLI::NonNegativeNumber);
  app.add_option("--tokens", token_counts, "Token counts")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--shapes", shapes_text, "Weight shapes OUTxIN, comma-separated");
  app.add_option("--reps", reps, "Timed repetitions per point (median)")->check(CLI::PositiveNumber);
  app.add_option("--kernels", kernel_names, "Kernels (default: every one this CPU runs but portable)")
      ->delimiter(',');
  app.add_flag("--greedy", greedy,
               "Also time the greedy LM head (GreedyLinear) where a kernel screens");
  app.add_flag("--json", json, "One JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);
  std::vector<Shape> shapes;
  try {
    shapes = ParseShapes(shapes_text);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  std::vector<cpu::LinearKernel> kernels;
  for (const std::string& name : kernel_names) {
    auto kernel = cpu::ParseLinearKernel(name);
    if (!kernel.ok()) {
      std::fprintf(stderr, "bench_linear: %s\n", kernel.status().message().c_str());
      return 2;
    }
    kernels.push_back(*kernel);
  }
  if (kernels.empty()) {
    for (auto kernel : cpu::kLinearKernels) {
      if (kernel != cpu::LinearKernel::kPortable && cpu::LinearKernelAvailable(kernel)) kernels.push_back(kernel);
    }
    if (kernels.empty()) kernels.push_back(cpu::LinearKernel::kPortable);
  }
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu::ThreadPool pool(threads);
  const cpu::BandwidthResult bandwidth = cpu::MeasureMemoryBandwidth(size_t{1} << 30, 5, &pool);
  const double bf16_peak_gflops = cpu::MeasureBf16PeakGflops(&pool);  // 0 without AVX512_BF16
  const double fma_peak_gflops = cpu::MeasureF32FmaPeakGflops(&pool);  // 0 without AVX2 / AVX-512
  // The f32-grade ceiling (compute_peak.h): the most a kernel under the float64 bound can reach.
  const double f32_grade_peak_gflops = std::max(fma_peak_gflops, bf16_peak_gflops / 2);
  // tokens -> VDPBF16PS GFLOP/s streamed at that intensity (MeasureStreamedBf16Gflops; 0: none).
  std::map<int, double> streamed_bf16_gflops;
  for (int tokens : token_counts) streamed_bf16_gflops[tokens] = cpu::MeasureStreamedBf16Gflops(&pool, tokens);

  nlohmann::json points = nlohmann::json::array();
  if (!json) {
    std::printf("ceiling: DRAM read %.1f GB/s with %d threads (measured in this run)\n",
                bandwidth.read_gb_per_s, threads);
    if (bf16_peak_gflops > 0) {
      std::printf("ceiling: bf16 compute %.0f GFLOP/s with %d threads (VDPBF16PS back to back, this run); "
                  "of-bf16 = 2 x out x in x tokens / time over it\n",
                  bf16_peak_gflops, threads);
    }
    if (f32_grade_peak_gflops > 0) {
      std::printf("ceiling: f32 FMA %.0f GFLOP/s (this run); f32-grade = max(f32 FMA, bf16 / 2) = %.0f GFLOP/s, "
                  "the most a kernel with f32-grade activations can do; of-f32g = 2 x out x in x tokens / time "
                  "over it\n",
                  fma_peak_gflops, f32_grade_peak_gflops);
    }
    for (const auto& [tokens, gflops] : streamed_bf16_gflops) {
      if (gflops <= 0) continue;
      std::printf("ceiling: bf16 compute while streaming from DRAM at %d tokens' intensity (%d VDPBF16PS per "
                  "64-byte line, nothing else; this run) %.0f GFLOP/s = %.0f%% of bf16 compute; of-strm = "
                  "2 x out x in x tokens / time over half of it\n",
                  tokens, 2 * tokens, gflops, 100 * gflops / bf16_peak_gflops);
    }
    std::printf("of-read: median over calls of (a read of the same bytes, cold, right after the call) / "
                "(the call)\n");
    std::printf("%10s %6s %8s %6s %10s %10s %8s %8s %9s %7s %7s %7s\n", "kernel", "out", "in", "tokens", "time_us",
                "ceiling_us", "of-ceil", "of-read", "x_tok1", "of-bf16", "of-f32g", "of-strm");
  }
  std::mt19937 random(7);
  std::normal_distribution<float> normal;
  for (const Shape& shape : shapes) {
    // Several copies of the weights, used in turn, so every call streams them from DRAM as decode
    // does (a copy would otherwise stay in the last-level cache).
    const size_t weight_bytes = static_cast<size_t>(shape.out) * shape.in * sizeof(uint16_t);
    // At least 4: the paired read takes the copy half the rotation away, cold, and not the next.
    const int copies = static_cast<int>(std::max<size_t>(4, (size_t{1} << 30) / weight_bytes));
    std::vector<uint16_t, HugePageAllocator<uint16_t>> w(weight_bytes / 2 * copies);
    const double ceiling_us = weight_bytes / (bandwidth.read_gb_per_s * 1e3);
    for (cpu::LinearKernel kernel : kernels) {
      // Each copy in the layout the engine gives this kernel.
      const cpu::WeightLayout layout = cpu::PreferredLayout(kernel, shape.in);
      const bool screens = greedy && cpu::GreedyLinearScreens(kernel, layout);
      if (screens) {
        for (size_t i = 0; i < weight_bytes / 2; ++i) w[i] = F32ToBF16(0.05f * normal(random));
        for (int copy = 1; copy < copies; ++copy) {
          std::copy_n(w.begin(), weight_bytes / 2, w.begin() + copy * (weight_bytes / 2));
        }
      } else {
        for (size_t i = 0; i < w.size(); ++i)
          w[i] = F32ToBF16(0.02f * static_cast<float>(i % 97) - 1.0f);
      }
      for (int copy = 0; copy < copies; ++copy) {
        cpu::ArrangeWeights(w.data() + copy * (weight_bytes / 2), shape.out, shape.in, layout);
      }
      // The copies are alike: one set of row norms serves them all.
      const cpu::RowNorms norms =
          screens ? cpu::RowNormBounds(w.data(), shape.out, shape.in, layout, &pool)
                  : cpu::RowNorms{};
      std::map<std::string, double> one_token_us;  // per label
      for (int tokens : token_counts) {
        std::vector<float> x(static_cast<size_t>(tokens) * shape.in), y(static_cast<size_t>(tokens) * shape.out);
        std::vector<int32_t> ids(static_cast<size_t>(tokens));
        for (float& v : x) v = normal(random);
        // Times `call` on each copy in turn (two untimed warm-up calls), each paired with a cold
        // read.
        auto point = [&](const std::string& label,
                         const std::function<void(const uint16_t*)>& call) {
          std::vector<double> micros, read_micros, read_over_call;
          for (int rep = -2; rep < reps; ++rep) {
            const size_t copy = static_cast<size_t>(rep + 2) % copies;
            const auto start = Clock::now();
            call(w.data() + copy * (weight_bytes / 2));
            const double us =
                std::chrono::duration<double, std::micro>(Clock::now() - start).count();
            const uint16_t* cold = w.data() + ((copy + copies / 2) % copies) * (weight_bytes / 2);
            const double read_us = 1e6 * cpu::TimeRead(cold, weight_bytes, &pool);
            if (rep >= 0) {
              micros.push_back(us);
              read_micros.push_back(read_us);
              read_over_call.push_back(read_us / us);
            }
          }
          const double us = Median(micros);
          const double of_read = Median(read_over_call);
          if (tokens == token_counts.front()) one_token_us[label] = us / tokens;
          const double per_token_gain = one_token_us[label] / (us / tokens);
          const double gflops = 2.0 * shape.out * shape.in * tokens / (us * 1e3);
          const double of_bf16_peak = bf16_peak_gflops > 0 ? gflops / bf16_peak_gflops : 0;
          const double of_f32_grade_peak =
              f32_grade_peak_gflops > 0 ? gflops / f32_grade_peak_gflops : 0;
          const double streamed = streamed_bf16_gflops[tokens];
          const double of_streamed = streamed > 0 ? gflops / (streamed / 2) : 0;
          char of_streamed_text[16] = "-";
          if (streamed > 0)
            std::snprintf(of_streamed_text, sizeof(of_streamed_text), "%.0f%%", 100 * of_streamed);
          if (json) {
            points.push_back({{"kernel", label},
                              {"out", shape.out},
                              {"in", shape.in},
                              {"tokens", tokens},
                              {"time_us", us},
                              {"ceiling_us", ceiling_us},
                              {"of_ceiling", ceiling_us / us},
                              {"read_us", Median(read_micros)},
                              {"of_read", of_read},
                              {"tokens_per_s_vs_first", per_token_gain},
                              {"gflops", gflops},
                              {"of_bf16_peak", of_bf16_peak},
                              {"of_f32_grade_peak", of_f32_grade_peak},
                              {"of_streamed_f32_grade", of_streamed}});
          } else {
            std::printf(
                "%10s %6d %8d %6d %10.1f %10.1f %7.0f%% %7.0f%% %8.2fx %6.0f%% %6.0f%% %7s\n",
                label.c_str(), shape.out, shape.in, tokens, us, ceiling_us, 100 * ceiling_us / us,
                100 * of_read, per_token_gain, 100 * of_bf16_peak, 100 * of_f32_grade_peak,
                of_streamed_text);
          }
        };
        const std::string name = cpu::LinearKernelName(kernel);
        point(name, [&](const uint16_t* weights) {
          cpu::Linear({x.data(), weights, nullptr, y.data(), tokens, shape.in, shape.out, layout},
                      &pool, kernel);
        });
        if (screens) {
          point(name + "+greedy", [&](const uint16_t* weights) {
            cpu::GreedyLinear({.x = x.data(),
                               .w = weights,
                               .tokens = tokens,
                               .in = shape.in,
                               .out = shape.out,
                               .layout = layout,
                               .norms = &norms},
                              &pool, kernel, ids.data());
          });
        }
      }
    }
  }
  if (json) {
    std::printf("%s\n", nlohmann::json{{"threads", threads},
                                       {"dram_read_gb_per_s", bandwidth.read_gb_per_s},
                                       {"bf16_peak_gflops", bf16_peak_gflops},
                                       {"f32_fma_peak_gflops", fma_peak_gflops},
                                       {"f32_grade_peak_gflops", f32_grade_peak_gflops},
                                       {"streamed_bf16_gflops", streamed_bf16_gflops},
                                       {"points", points}}
                            .dump(2)
                            .c_str());
  }
  return 0;
}

// Weights placed per pool member (kernels/cpu/member_placement.h) give every Linear kernel the
// outputs of the matrix they came from, bitwise, on odd shapes (rows past the last tiled unit, more
// members than units), at 1, 8 and 37 tokens, with a pool, without one, and with a pool of another
// size than the placement's.
#include "kernels/cpu/member_placement.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/thread_pool.h"

namespace tpserve::cpu {
namespace {

TEST(SplitRows, WholeUnitsAsEvenlyAsThePoolSplitsARange) {
  EXPECT_EQ(SplitRows(100, 32, 2), (std::vector<size_t>{0, 64, 100}));    // 4 units: 2 + 2
  EXPECT_EQ(SplitRows(96, 32, 2), (std::vector<size_t>{0, 64, 96}));      // 3 units: 2 + 1
  EXPECT_EQ(SplitRows(20, 16, 3), (std::vector<size_t>{0, 16, 20, 20}));  // a member without rows
  EXPECT_EQ(SplitRows(0, 16, 2), (std::vector<size_t>{0, 0, 0}));
}

class PlacedLinear : public ::testing::TestWithParam<std::tuple<LinearKernel, int, int>> {};

TEST_P(PlacedLinear, MatchesTheWholeMatrixBitwise) {
  const auto [kernel, members, tokens] = GetParam();
  if (!LinearKernelAvailable(kernel))
    GTEST_SKIP() << LinearKernelName(kernel) << " does not run on this CPU";
  std::mt19937 random(members * 100 + tokens);
  std::normal_distribution<float> normal;
  // Two matrices placed together, as a layer's are: the second one's pieces follow the first's.
  struct Shape {
    int out, in;
  };
  const Shape shapes[] = {{200, 96}, {83, 64}, {40, 50}};  // past the last unit; in % 32 != 0
  std::vector<std::vector<uint16_t>> weights;
  std::vector<MemberPlacement::Matrix> matrices;
  for (const Shape& shape : shapes) {
    std::vector<uint16_t> w(static_cast<size_t>(shape.out) * shape.in);
    for (auto& v : w) v = F32ToBF16(normal(random) * 0.1f);
    const WeightLayout layout = PreferredLayout(kernel, shape.in);
    ArrangeWeights(w.data(), shape.out, shape.in, layout);
    weights.push_back(std::move(w));
    matrices.push_back({weights.back().data(), shape.out, shape.in, layout});
  }
  const MemberPlacement placement(matrices, members);
  ASSERT_EQ(placement.size(), matrices.size());
  ThreadPool two(2), three(3);
  for (size_t i = 0; i < matrices.size(); ++i) {
    const MemberPlacement::Matrix& m = matrices[i];
    std::vector<float> x(static_cast<size_t>(tokens) * m.in), bias(m.out);
    for (auto& v : x) v = normal(random);
    for (auto& v : bias) v = normal(random);
    std::vector<float> whole(static_cast<size_t>(tokens) * m.out);
    Linear({x.data(), m.w, bias.data(), whole.data(), tokens, m.in, m.out, m.layout}, &two, kernel);
    for (ThreadPool* pool : {&two, &three, static_cast<ThreadPool*>(nullptr)}) {
      std::vector<float> placed(whole.size(), -1.0f);
      LinearArgs args{x.data(), nullptr, bias.data(), placed.data(), tokens, m.in, m.out, m.layout};
      args.placed = &placement.rows(i);
      Linear(args, pool, kernel);
      ASSERT_EQ(0, std::memcmp(placed.data(), whole.data(), whole.size() * sizeof(float)))
          << "matrix " << i << ", pool of " << (pool != nullptr ? pool->size() : 0);
    }
    // Into a wider output (y_stride): the same values, the columns past `out` untouched.
    std::vector<float> wide(static_cast<size_t>(tokens) * (m.out + 7), -2.0f);
    LinearArgs args{x.data(), nullptr, bias.data(), wide.data(), tokens, m.in, m.out, m.layout};
    args.placed = &placement.rows(i);
    args.y_stride = m.out + 7;
    Linear(args, &two, kernel);
    for (int t = 0; t < tokens; ++t) {
      ASSERT_EQ(0, std::memcmp(&wide[t * (m.out + 7)], &whole[t * m.out], m.out * sizeof(float)))
          << t;
      for (int c = m.out; c < m.out + 7; ++c) ASSERT_EQ(wide[t * (m.out + 7) + c], -2.0f);
    }
  }
}

// A matrix whose pieces are several kBalancedChunkBytes chunks (ThreadPool::ParallelForBalanced),
// placed and not: with a pool of 2 or 3, whichever thread takes a chunk, every output is what one
// thread computing the whole matrix gives, bitwise.
class BalancedLinear : public ::testing::TestWithParam<LinearKernel> {};

TEST_P(BalancedLinear, ChunksOnAnyThreadGiveTheOneThreadOutputsBitwise) {
  const LinearKernel kernel = GetParam();
  if (!LinearKernelAvailable(kernel))
    GTEST_SKIP() << LinearKernelName(kernel) << " does not run on this CPU";
  // Five tokens: AVX-512 BF16's two passes over each chunk of a group (four tokens, then one).
  const int in = 256, tokens = 5;
  // Pieces of three members still span two chunks or more; 5 rows past the last tiled unit.
  const int out = static_cast<int>(3 * 2 * kBalancedChunkBytes / (2 * in)) + 32 + 5;
  std::mt19937 random(7);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> w(static_cast<size_t>(out) * in);  // 24 MiB: uniform, cheaper to draw
  std::uniform_int_distribution<int> steps(-1000, 1000);
  for (auto& v : w) v = F32ToBF16(static_cast<float>(steps(random)) * 1e-4f);
  const WeightLayout layout = PreferredLayout(kernel, in);
  ArrangeWeights(w.data(), out, in, layout);
  std::vector<float> x(static_cast<size_t>(tokens) * in), bias(out);
  for (auto& v : x) v = normal(random);
  for (auto& v : bias) v = normal(random);
  std::vector<float> one_thread(static_cast<size_t>(tokens) * out);
  Linear({x.data(), w.data(), bias.data(), one_thread.data(), tokens, in, out, layout}, nullptr,
         kernel);
  const MemberPlacement::Matrix matrix{w.data(), out, in, layout};
  for (int members : {2, 3}) {
    ThreadPool pool(members);
    const MemberPlacement placement(std::span(&matrix, 1), members);
    for (bool placed : {false, true}) {
      for (int repeat = 0; repeat < 2; ++repeat) {  // the chunks' threads change from call to call
        std::vector<float> y(one_thread.size(), -1.0f);
        LinearArgs args{x.data(), w.data(), bias.data(), y.data(), tokens, in, out, layout};
        if (placed) args.placed = &placement.rows(0);
        Linear(args, &pool, kernel);
        ASSERT_EQ(0, std::memcmp(y.data(), one_thread.data(), y.size() * sizeof(float)))
            << members << " members, " << (placed ? "placed" : "one matrix") << ", call " << repeat;
      }
    }
  }
}

// A step without logit rows calls the LM head with no tokens and no output (chunked prefill):
// nothing is computed or written, placed or not, with a pool or without (the sanitizer build
// checks that no offset is applied to the null output).
TEST_P(BalancedLinear, NoTokensIsANoOp) {
  const LinearKernel kernel = GetParam();
  if (!LinearKernelAvailable(kernel))
    GTEST_SKIP() << LinearKernelName(kernel) << " does not run on this CPU";
  const int in = 64, out = 96;
  const WeightLayout layout = PreferredLayout(kernel, in);
  std::vector<uint16_t> w(static_cast<size_t>(out) * in, F32ToBF16(0.5f));
  ArrangeWeights(w.data(), out, in, layout);
  const MemberPlacement::Matrix matrix{w.data(), out, in, layout};
  const MemberPlacement placement(std::span(&matrix, 1), 2);
  ThreadPool pool(2);
  for (ThreadPool* p : {&pool, static_cast<ThreadPool*>(nullptr)}) {
    for (bool placed : {false, true}) {
      LinearArgs args{nullptr, w.data(), nullptr, nullptr, 0, in, out, layout};
      if (placed) args.placed = &placement.rows(0);
      Linear(args, p, kernel);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, BalancedLinear, ::testing::ValuesIn(kLinearKernels),
                         [](const auto& param_info) {
                           return std::string(LinearKernelName(param_info.param));
                         });

INSTANTIATE_TEST_SUITE_P(Kernels, PlacedLinear,
                         ::testing::Combine(::testing::ValuesIn(kLinearKernels),
                                            ::testing::Values(1, 2, 5),
                                            ::testing::Values(1, 8, 37)),
                         [](const auto& param_info) {
                           return std::string(LinearKernelName(std::get<0>(param_info.param))) +
                                  "_m" + std::to_string(std::get<1>(param_info.param)) + "_t" +
                                  std::to_string(std::get<2>(param_info.param));
                         });

}  // namespace
}  // namespace tpserve::cpu

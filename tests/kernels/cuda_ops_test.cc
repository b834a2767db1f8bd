// The CUDA ops against the CPU ops (the reference), on random data of odd sizes. Labelled `gpu`:
// without a usable device every test reports SKIPPED, never Passed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace tpserve {
namespace {

// Why no device can be used, or "" when one can.
std::string NoDeviceReason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return std::string("CUDA runtime: ") + cudaGetErrorName(error);
  return count > 0 ? "" : "no CUDA device";
}

#define SKIP_WITHOUT_GPU()                                 \
  do {                                                     \
    const std::string reason = NoDeviceReason();           \
    if (!reason.empty()) GTEST_SKIP() << reason;           \
  } while (0)

// A device copy of a host vector, read back with Download.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, size_) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() { return static_cast<T*>(data_); }
  std::vector<T> Download() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t size_;
};

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// f32 results of the same math in another order (GPU tree vs CPU sequential sums, fused
// multiply-adds): within a few ulps. 1e-6 relative is ~8 ulps of float.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-7f) << what << " element " << i;
  }
}

TEST(CudaOps, RmsNormAndTheFusedResidualAddMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (int n : {1, 257, 4099}) {
    const int rows = 5;
    const std::vector<float> x = Random(static_cast<size_t>(rows) * n, n, 3.0f);
    const std::vector<float> delta = Random(x.size(), n + 1);
    const std::vector<float> weight = Random(n, n + 2);
    std::vector<float> want(x.size()), residual_want = x;
    DeviceBuffer<float> dx(x), dweight(weight), dy{std::vector<float>(x.size())}, dresidual(x), ddelta(delta);
    ASSERT_TRUE(cuda::RmsNorm(dx.get(), dweight.get(), dy.get(), rows, n, 1e-5f, nullptr).ok());
    for (int r = 0; r < rows; ++r) cpu::RmsNorm(&x[r * n], weight.data(), &want[r * n], n, 1e-5f);
    ExpectClose(dy.Download(), want, "RmsNorm");

    ASSERT_TRUE(cuda::AddRmsNorm(dresidual.get(), ddelta.get(), dweight.get(), dy.get(), rows, n, 1e-5f, nullptr).ok());
    cpu::AddInPlace(residual_want.data(), delta.data(), static_cast<int>(x.size()));
    for (int r = 0; r < rows; ++r) cpu::RmsNorm(&residual_want[r * n], weight.data(), &want[r * n], n, 1e-5f);
    EXPECT_EQ(dresidual.Download(), residual_want);  // one f32 add per element: exact
    ExpectClose(dy.Download(), want, "AddRmsNorm");
  }
}

TEST(CudaOps, SiluMulMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const size_t n = 100003;
  const std::vector<float> gate = Random(n, 1, 4.0f), up = Random(n, 2);
  std::vector<float> want(n);
  cpu::SiluMul(gate.data(), up.data(), want.data(), static_cast<int>(n));
  DeviceBuffer<float> dgate(gate), dup(up), dout{std::vector<float>(n)};
  ASSERT_TRUE(cuda::SiluMul(dgate.get(), dup.get(), dout.get(), n, nullptr).ok());
  ExpectClose(dout.Download(), want, "SiluMul");
}

TEST(CudaOps, RopeWithLlama3ScalingMatchesTheCpuAtLargePositions) {
  SKIP_WITHOUT_GPU();
  const int heads = 3, head_dim = 128;
  const std::vector<int32_t> positions = {0, 1, 17, 8191, 131071};
  const cpu::RopeParams params{.head_dim = head_dim, .theta = 500000.0, .scaling = cpu::RopeParams::Scaling::kLlama3,
                               .factor = 8.0};
  const std::vector<double> inv_freq = cpu::RopeInverseFrequencies(params);
  const int tokens = static_cast<int>(positions.size());
  const std::vector<float> x = Random(static_cast<size_t>(tokens) * heads * head_dim, 9);
  std::vector<float> want = x, cos(head_dim / 2), sin(head_dim / 2);
  for (int t = 0; t < tokens; ++t) {
    cpu::RopeAngles(inv_freq, positions[t], cos.data(), sin.data());
    cpu::ApplyRope(&want[static_cast<size_t>(t) * heads * head_dim], heads, head_dim, cos.data(), sin.data());
  }
  DeviceBuffer<float> dx(x);
  DeviceBuffer<int32_t> dpositions(positions);
  DeviceBuffer<double> dinv(inv_freq);
  ASSERT_TRUE(cuda::ApplyRope(dx.get(), dpositions.get(), dinv.get(), tokens, heads, head_dim, nullptr).ok());
  ExpectClose(dx.Download(), want, "ApplyRope");
}

TEST(CudaOps, EmbeddingGatherCopiesThisRanksRowsExactlyAndZerosTheRest) {
  SKIP_WITHOUT_GPU();
  const int hidden = 130, vocab_begin = 1000, vocab_rows = 50;
  const std::vector<float> values = Random(static_cast<size_t>(vocab_rows) * hidden, 4);
  std::vector<uint16_t> table(values.size());
  for (size_t i = 0; i < values.size(); ++i) table[i] = F32ToBF16(values[i]);
  const std::vector<int32_t> ids = {1000, 999, 1049, 1050, 1025, 0};
  DeviceBuffer<uint16_t> dtable(table);
  DeviceBuffer<int32_t> dids(ids);
  DeviceBuffer<float> dout(std::vector<float>(ids.size() * hidden, -1.0f));
  ASSERT_TRUE(cuda::EmbeddingGather(dtable.get(), dids.get(), dout.get(), static_cast<int>(ids.size()), hidden,
                                    vocab_begin, vocab_rows, nullptr).ok());
  const std::vector<float> out = dout.Download();
  for (size_t t = 0; t < ids.size(); ++t) {
    const int local = ids[t] - vocab_begin;
    for (int i = 0; i < hidden; ++i) {
      const float want = local >= 0 && local < vocab_rows ? BF16ToF32(table[static_cast<size_t>(local) * hidden + i]) : 0.0f;
      ASSERT_EQ(out[t * hidden + i], want) << "token " << t << " element " << i;
    }
  }
}

std::vector<uint16_t> ToBf16(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = F32ToBF16(values[i]);
  return out;
}

std::vector<float> RoundedToBf16(const std::vector<float>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = BF16ToF32(F32ToBF16(values[i]));
  return out;
}

TEST(CudaOps, CastToBf16RoundsAsTheHostDoes) {
  SKIP_WITHOUT_GPU();
  std::vector<float> x = Random(4097, 11, 100.0f);
  x.push_back(NAN);
  x.push_back(INFINITY);
  x.push_back(-0.0f);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint16_t> dy{std::vector<uint16_t>(x.size())};
  ASSERT_TRUE(cuda::CastToBf16(dx.get(), dy.get(), x.size(), nullptr).ok());
  EXPECT_EQ(dy.Download(), ToBf16(x));
}

// The GEMM against the CPU's Linear on the same bf16-rounded inputs: both accumulate in f32 in
// different orders, so they agree to a few ulps of the sum's magnitude. The bound: 1e-5 × Σ|x·w|
// (in = 4096 terms; f32 accumulation error grows ~ sqrt(in) × 2^-24 per term in the worst case
// for random signs, far below it).
TEST(CudaOps, Bf16LinearMatchesTheCpuAndIsBatchInvariant) {
  SKIP_WITHOUT_GPU();
  auto blas = cuda::BlasContext::Create(32u << 20);
  ASSERT_TRUE(blas.ok()) << blas.status().ToString();
  cpu::ThreadPool pool(4);
  for (auto [out, in] : {std::pair{1000, 4096}, std::pair{4096, 1024}, std::pair{130, 70}}) {
    const int tokens = 37;
    const std::vector<float> x = RoundedToBf16(Random(static_cast<size_t>(tokens) * in, out, 1.0f));
    const std::vector<uint16_t> w = ToBf16(Random(static_cast<size_t>(out) * in, in, 0.05f));
    auto linear = cuda::Bf16Linear::Create(**blas, out, in, 256);
    ASSERT_TRUE(linear.ok()) << linear.status().ToString();
    DeviceBuffer<uint16_t> dw(w), dx(ToBf16(x));
    DeviceBuffer<float> dy{std::vector<float>(static_cast<size_t>(tokens) * out)};
    ASSERT_TRUE((*linear)->Run(dw.get(), dx.get(), dy.get(), tokens, nullptr).ok());
    const std::vector<float> got = dy.Download();
    std::vector<float> want(got.size());
    cpu::Linear({x.data(), w.data(), nullptr, want.data(), tokens, in, out}, &pool, cpu::LinearKernel::kPortable);
    for (int t = 0; t < tokens; ++t) {
      for (int o = 0; o < out; ++o) {
        double magnitude = 0;
        for (int i = 0; i < in; ++i) magnitude += std::fabs(x[t * in + i] * BF16ToF32(w[static_cast<size_t>(o) * in + i]));
        ASSERT_NEAR(got[t * out + o], want[t * out + o], 1e-5 * magnitude + 1e-6)
            << "[" << out << ", " << in << "] token " << t << " output " << o << " (" << (*linear)->algorithm() << ")";
      }
    }
    // Each token alone gives bitwise the row it got in the batch of 37.
    for (int t : {0, 17, 36}) {
      DeviceBuffer<uint16_t> one(ToBf16(std::vector<float>(x.begin() + t * in, x.begin() + (t + 1) * in)));
      DeviceBuffer<float> y1{std::vector<float>(out)};
      ASSERT_TRUE((*linear)->Run(dw.get(), one.get(), y1.get(), 1, nullptr).ok());
      EXPECT_EQ(y1.Download(), std::vector<float>(got.begin() + t * out, got.begin() + (t + 1) * out))
          << "token " << t << " alone vs in a batch of " << tokens;
    }
  }
}

// The decoder's algorithm rule (gemm.h): chosen for decode-sized token counts, the same on every
// choice (ranks, restarts), and valid, batch-invariant, from 1 token up to the step limit.
TEST(CudaOps, TheDecodeGemmRuleIsTheSameOnEveryChoiceAndValidUpToTheStepLimit) {
  SKIP_WITHOUT_GPU();
  auto blas = cuda::BlasContext::Create(32u << 20);
  ASSERT_TRUE(blas.ok()) << blas.status().ToString();
  const int out = 4096, in = 4096, limit = 8192;
  auto first = cuda::Bf16Linear::Create(**blas, out, in, limit);
  auto second = cuda::Bf16Linear::Create(**blas, out, in, limit);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ((*first)->algorithm(), (*second)->algorithm());
  std::printf("decode rule: %s\n", (*first)->algorithm().c_str());  // the device check's log keeps it
  const std::vector<float> x = RoundedToBf16(Random(static_cast<size_t>(limit) * in, 5, 1.0f));
  const std::vector<uint16_t> w = ToBf16(Random(static_cast<size_t>(out) * in, 6, 0.05f));
  DeviceBuffer<uint16_t> dw(w), dx(ToBf16(x));
  std::vector<float> row0;  // token 0's outputs, from a run of 1 token
  for (int tokens : {1, 32, 300, limit}) {
    DeviceBuffer<float> dy{std::vector<float>(static_cast<size_t>(tokens) * out)};
    ASSERT_TRUE((*first)->Run(dw.get(), dx.get(), dy.get(), tokens, nullptr).ok()) << tokens << " tokens";
    const std::vector<float> got = dy.Download();
    const std::vector<float> row(got.begin(), got.begin() + out);
    if (row0.empty()) row0 = row;
    EXPECT_EQ(row, row0) << "token 0 in a batch of " << tokens << " vs alone (" << (*first)->algorithm() << ")";
  }
  EXPECT_FALSE((*first)->Run(dw.get(), dx.get(), nullptr, limit + 1, nullptr).ok());
}

// The CUDA cache's [num_blocks, block_size, kv_heads, head_dim] as the CPU keeps it: head-major
// blocks, [num_blocks, kv_heads, block_size, head_dim] (cpu::KvLayerView).
std::vector<float> HeadMajorBlocks(const std::vector<float>& cache, int block_size, int kv_heads,
                                   int head_dim) {
  std::vector<float> out(cache.size());
  const size_t rows = cache.size() / head_dim;  // [num_blocks, block_size, kv_heads]
  for (size_t row = 0; row < rows; ++row) {
    const size_t kv_head = row % kv_heads, slot = row / kv_heads % block_size;
    const size_t block = row / kv_heads / block_size;
    const size_t to = (block * kv_heads + kv_head) * block_size + slot;
    std::copy_n(&cache[row * head_dim], head_dim, &out[to * head_dim]);
  }
  return out;
}

// Paged attention against cpu::AttendOneToken over the same cache (in the CPU's layout) and block
// tables: contexts from 1 position to several partitions, GQA (8 heads over 2 KV heads), a prefill
// chunk and decode tokens in one step. The partitions' softmax is combined in another order than
// the CPU's single pass: agreement to 2e-5 of the values' scale (1.0).
TEST(CudaOps, PagedAttentionMatchesTheCpuForDecodeAndPrefill) {
  SKIP_WITHOUT_GPU();
  const int heads = 8, kv_heads = 2, head_dim = 128, block_size = 16, num_blocks = 80;
  const int kv_width = kv_heads * head_dim, q_width = heads * head_dim;
  const std::vector<float> keys = Random(static_cast<size_t>(num_blocks) * block_size * kv_width, 21);
  const std::vector<float> values = Random(keys.size(), 22);
  // Three sequences: blocks scattered over the pool (reversed, interleaved).
  const std::vector<int> lengths = {1, 300, 777};
  const int width = (777 + block_size - 1) / block_size;
  std::vector<int32_t> tables(3 * width, -1);
  int next = num_blocks - 1;
  for (int s = 0; s < 3; ++s) {
    for (int b = 0; b * block_size < lengths[s]; ++b) tables[s * width + b] = next--;
  }
  // Tokens: sequence 0's only position, sequence 1's last 5 (a prefill chunk), sequence 2's last.
  std::vector<int32_t> token_sequence, positions;
  token_sequence.push_back(0), positions.push_back(0);
  for (int p = 295; p < 300; ++p) token_sequence.push_back(1), positions.push_back(p);
  token_sequence.push_back(2), positions.push_back(776);
  const int tokens = static_cast<int>(positions.size());
  const std::vector<float> q = Random(static_cast<size_t>(tokens) * q_width, 23);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  std::vector<float> want(q.size()), scores(static_cast<size_t>(cpu::kMaxHeadsPerPass) * 777);  // heads a pass × length
  const std::vector<float> cpu_keys = HeadMajorBlocks(keys, block_size, kv_heads, head_dim);
  const std::vector<float> cpu_values = HeadMajorBlocks(values, block_size, kv_heads, head_dim);
  const cpu::KvLayerView view{cpu_keys.data(), cpu_values.data(), block_size, kv_heads, head_dim};
  for (int t = 0; t < tokens; ++t) {
    cpu::AttendOneToken(&q[t * q_width], heads, view, &tables[token_sequence[t] * width], positions[t] + 1, scale,
                        &want[t * q_width], scores.data());
  }
  DeviceBuffer<float> dq(q), dkeys(keys), dvalues(values), dout{std::vector<float>(q.size())};
  DeviceBuffer<float> scratch{std::vector<float>(cuda::PagedAttentionScratchFloats(tokens, heads, head_dim, 777))};
  DeviceBuffer<int32_t> dtables(tables), dseq(token_sequence), dpos(positions);
  cuda::PagedAttentionArgs args;
  args.q = dq.get();
  args.q_stride = q_width;
  args.key_cache = dkeys.get();
  args.value_cache = dvalues.get();
  args.block_tables = dtables.get();
  args.block_table_width = width;
  args.token_sequence = dseq.get();
  args.positions = dpos.get();
  args.out = dout.get();
  args.scratch = scratch.get();
  args.scratch_floats = cuda::PagedAttentionScratchFloats(tokens, heads, head_dim, 777);
  args.tokens = tokens;
  args.heads = heads;
  args.kv_heads = kv_heads;
  args.head_dim = head_dim;
  args.block_size = block_size;
  args.max_context = 777;
  args.scale = scale;
  ASSERT_TRUE(cuda::PagedAttention(args, nullptr).ok());
  const std::vector<float> got = dout.Download();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5f) << "element " << i;

  // A scratch for 3 tokens runs the 7 in chunks of 3, 3 and 1: the same bits (a token's result
  // does not depend on its launch).
  args.scratch_floats = cuda::PagedAttentionScratchFloats(3, heads, head_dim, 777);
  ASSERT_EQ(cuda::PagedAttentionChunkTokens(args.scratch_floats, heads, head_dim, 777), 3);
  DeviceBuffer<float> chunked_out{std::vector<float>(q.size())};
  args.out = chunked_out.get();
  ASSERT_TRUE(cuda::PagedAttention(args, nullptr).ok());
  const std::vector<float> chunked = chunked_out.Download();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(chunked[i], got[i]) << "element " << i;

  // A scratch too small for one token is refused by name.
  args.scratch_floats = cuda::PagedAttentionScratchFloats(1, heads, head_dim, 777) - 1;
  const Status refused = cuda::PagedAttention(args, nullptr);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("scratch"), std::string::npos) << refused.message();
}

// The decoder's glue kernels: exact copies (KV write, row gather), the bias add (one f32 add),
// SiLU·up from the stacked projection rounded to bf16 (as the CPU's SiluMul then F32ToBF16, within
// one bf16 ulp: expf may differ from std::exp in the last f32 bit), RoPE on strided heads (as
// ApplyRope on the same heads copied out).
TEST(CudaOps, TheDecodersGlueKernelsMatchTheirHostDefinitions) {
  SKIP_WITHOUT_GPU();
  const int tokens = 5, q_width = 3 * 64, kv_width = 64, stride = q_width + 2 * kv_width, head_dim = 64;
  const std::vector<float> qkv = Random(static_cast<size_t>(tokens) * stride, 31);
  const std::vector<int32_t> slots = {9, 0, 4, 13, 2};
  DeviceBuffer<float> dqkv(qkv), keys{std::vector<float>(16 * kv_width)}, values{std::vector<float>(16 * kv_width)};
  DeviceBuffer<int32_t> dslots(slots);
  ASSERT_TRUE(cuda::WriteKv(dqkv.get(), stride, q_width, q_width + kv_width, kv_width, dslots.get(), keys.get(),
                            values.get(), tokens, nullptr).ok());
  const std::vector<float> k = keys.Download(), v = values.Download();
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < kv_width; ++i) {
      ASSERT_EQ(k[slots[t] * kv_width + i], qkv[t * stride + q_width + i]);
      ASSERT_EQ(v[slots[t] * kv_width + i], qkv[t * stride + q_width + kv_width + i]);
    }
  }
  const std::vector<int32_t> rows = {4, 0, 4};
  DeviceBuffer<int32_t> drows(rows);
  DeviceBuffer<float> gathered{std::vector<float>(rows.size() * stride)};
  ASSERT_TRUE(cuda::GatherRows(dqkv.get(), drows.get(), gathered.get(), 3, stride, nullptr).ok());
  const std::vector<float> g = gathered.Download();
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int i = 0; i < stride; ++i) ASSERT_EQ(g[r * stride + i], qkv[rows[r] * stride + i]);
  }

  const std::vector<float> bias = Random(stride, 32);
  DeviceBuffer<float> dbias(bias), biased(qkv);
  ASSERT_TRUE(cuda::AddBias(biased.get(), dbias.get(), tokens, stride, nullptr).ok());
  const std::vector<float> b = biased.Download();
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], qkv[i] + bias[i % stride]);

  const int ffn = 77;
  const std::vector<float> gate_up = Random(static_cast<size_t>(tokens) * 2 * ffn, 33, 3.0f);
  DeviceBuffer<float> dgate_up(gate_up);
  DeviceBuffer<uint16_t> act{std::vector<uint16_t>(static_cast<size_t>(tokens) * ffn)};
  ASSERT_TRUE(cuda::SiluMulRowsToBf16(dgate_up.get(), act.get(), tokens, ffn, nullptr).ok());
  const std::vector<uint16_t> a = act.Download();
  for (int t = 0; t < tokens; ++t) {
    std::vector<float> want(ffn);
    cpu::SiluMul(&gate_up[t * 2 * ffn], &gate_up[t * 2 * ffn + ffn], want.data(), ffn);
    for (int i = 0; i < ffn; ++i) {
      ASSERT_LE(std::abs(static_cast<int>(a[t * ffn + i]) - static_cast<int>(F32ToBF16(want[i]))), 1)
          << "token " << t << " element " << i;
    }
  }

  // RoPE on the k heads inside the stacked rows equals RoPE on those heads alone.
  const std::vector<int32_t> positions = {0, 3, 17, 1000, 65535};
  const std::vector<double> inv_freq = cpu::RopeInverseFrequencies({.head_dim = head_dim, .theta = 10000.0});
  DeviceBuffer<float> strided(qkv);
  std::vector<float> k_only(static_cast<size_t>(tokens) * kv_width);
  for (int t = 0; t < tokens; ++t) {
    std::copy_n(&qkv[t * stride + q_width], kv_width, &k_only[t * kv_width]);
  }
  DeviceBuffer<float> dk(k_only);
  DeviceBuffer<int32_t> dpositions(positions);
  DeviceBuffer<double> dinv(inv_freq);
  ASSERT_TRUE(cuda::ApplyRopeStrided(strided.get(), stride, q_width, dpositions.get(), dinv.get(), tokens, 1,
                                     head_dim, nullptr).ok());
  ASSERT_TRUE(cuda::ApplyRope(dk.get(), dpositions.get(), dinv.get(), tokens, 1, head_dim, nullptr).ok());
  const std::vector<float> rotated = strided.Download(), want_k = dk.Download();
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < kv_width; ++i) ASSERT_EQ(rotated[t * stride + q_width + i], want_k[t * kv_width + i]);
    for (int i = 0; i < q_width; ++i) ASSERT_EQ(rotated[t * stride + i], qkv[t * stride + i]);  // q untouched
  }
}

}  // namespace
}  // namespace tpserve

// The CUDA ops against the CPU ops (the reference), on random data of odd sizes. Labelled `gpu`:
// without a usable device every test reports SKIPPED, never Passed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/ops.h"
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

}  // namespace
}  // namespace tpserve

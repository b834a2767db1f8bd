// The engine against a naive float64 forward pass written here from the Llama equations, with
// plain loops and none of the engine's kernels. The hand-computed RoPE, llama3-scaling and GQA
// cases in tests/kernels pin down the parts a shared misreading could get wrong in both.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "model/weight_layout.h"
#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

using Matrix = std::vector<double>;  // row-major

class ReferenceLlama {
 public:
  // round_kv: each key and value element rounded to the nearest bf16 (ties to even) once computed,
  // as a bf16 KV cache stores it.
  explicit ReferenceLlama(const ModelDirectory& model, bool round_kv = false)
      : c_(model.config), round_kv_(round_kv) {
    for (const WeightSpec& spec : ExpectedWeights(c_)) {
      HostTensor t = model.checkpoint.Read(spec.name, DType::kF32).value();
      weights_[spec.name] = Matrix(t.view<float>().begin(), t.view<float>().end());
    }
  }

  // Logits [positions, vocab] for every position of `ids`.
  std::vector<Matrix> Forward(const std::vector<int32_t>& ids) {
    const int n = static_cast<int>(ids.size()), h = c_.hidden_size, d = c_.head_dim;
    std::vector<Matrix> x(n, Matrix(h));
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < h; ++i) x[t][i] = W("model.embed_tokens.weight")[ids[t] * h + i];
    }
    for (int l = 0; l < c_.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      std::vector<Matrix> q(n), k(n), v(n), attn(n, Matrix(c_.num_heads * d, 0.0));
      for (int t = 0; t < n; ++t) {
        Matrix normed = Norm(x[t], W(p + "input_layernorm.weight"));
        q[t] = MatVec(W(p + "self_attn.q_proj.weight"), normed, c_.q_size());
        k[t] = MatVec(W(p + "self_attn.k_proj.weight"), normed, c_.kv_size());
        v[t] = MatVec(W(p + "self_attn.v_proj.weight"), normed, c_.kv_size());
        if (c_.attention_bias) {
          AddTo(q[t], W(p + "self_attn.q_proj.bias"));
          AddTo(k[t], W(p + "self_attn.k_proj.bias"));
          AddTo(v[t], W(p + "self_attn.v_proj.bias"));
        }
        Rotate(q[t], c_.num_heads, t);
        Rotate(k[t], c_.num_kv_heads, t);
        if (round_kv_) {
          for (double& e : k[t]) e = RoundToBf16(e);
          for (double& e : v[t]) e = RoundToBf16(e);
        }
      }
      const int group = c_.num_heads / c_.num_kv_heads;
      for (int t = 0; t < n; ++t) {
        for (int head = 0; head < c_.num_heads; ++head) {
          const int kv = head / group;
          std::vector<double> scores(t + 1);
          double max_score = -1e300, z = 0;
          for (int s = 0; s <= t; ++s) {
            double dot = 0;
            for (int i = 0; i < d; ++i) dot += q[t][head * d + i] * k[s][kv * d + i];
            scores[s] = dot / std::sqrt(static_cast<double>(d));
            max_score = std::max(max_score, scores[s]);
          }
          for (double& s : scores) z += (s = std::exp(s - max_score));
          for (int s = 0; s <= t; ++s) {
            for (int i = 0; i < d; ++i) attn[t][head * d + i] += scores[s] / z * v[s][kv * d + i];
          }
        }
        AddTo(x[t], MatVec(W(p + "self_attn.o_proj.weight"), attn[t], h));
        Matrix normed = Norm(x[t], W(p + "post_attention_layernorm.weight"));
        Matrix gate = MatVec(W(p + "mlp.gate_proj.weight"), normed, c_.intermediate_size);
        Matrix up = MatVec(W(p + "mlp.up_proj.weight"), normed, c_.intermediate_size);
        for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
        AddTo(x[t], MatVec(W(p + "mlp.down_proj.weight"), gate, h));
      }
    }
    std::vector<Matrix> logits;
    const Matrix& head = c_.tie_word_embeddings ? W("model.embed_tokens.weight") : W("lm_head.weight");
    for (int t = 0; t < n; ++t) logits.push_back(MatVec(head, Norm(x[t], W("model.norm.weight")), c_.vocab_size));
    return logits;
  }

 private:
  const Matrix& W(const std::string& name) { return weights_.at(name); }

  static Matrix MatVec(const Matrix& w, const Matrix& x, int rows) {
    Matrix y(rows, 0.0);
    const size_t cols = x.size();
    for (int r = 0; r < rows; ++r) {
      for (size_t i = 0; i < cols; ++i) y[r] += w[r * cols + i] * x[i];
    }
    return y;
  }
  // The bf16 nearest to x: 8 significant bits, a tie to the even one (frexp gives 0.5 <= |m| < 1;
  // nearbyint rounds in the default FE_TONEAREST mode, ties to even).
  static double RoundToBf16(double x) {
    if (x == 0 || !std::isfinite(x)) return x;
    int exponent = 0;
    const double mantissa = std::frexp(x, &exponent);
    return std::ldexp(std::nearbyint(std::ldexp(mantissa, 8)), exponent - 8);
  }
  static void AddTo(Matrix& x, const Matrix& y) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  Matrix Norm(const Matrix& x, const Matrix& weight) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1 / std::sqrt(ss / x.size() + c_.rms_norm_eps);
    Matrix y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * weight[i];
    return y;
  }
  // Hugging Face's rotate_half RoPE with Llama-3.1 frequency scaling.
  void Rotate(Matrix& x, int heads, int position) const {
    const int d = c_.head_dim;
    for (int i = 0; i < d / 2; ++i) {
      double freq = std::pow(c_.rope_theta, -2.0 * i / d);
      if (c_.rope_scaling.type == RopeScaling::Type::kLlama3) {
        const auto& s = c_.rope_scaling;
        const double wavelen = 2 * std::numbers::pi / freq;
        const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
        const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
        if (wavelen > low_wavelen) {
          freq /= s.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                                (s.high_freq_factor - s.low_freq_factor);
          freq = (1 - smooth) * freq / s.factor + smooth * freq;
        }
      }
      const double c = std::cos(position * freq), sn = std::sin(position * freq);
      for (int head = 0; head < heads; ++head) {
        double& a = x[head * d + i];
        double& b = x[head * d + i + d / 2];
        const double a0 = a, b0 = b;
        a = a0 * c - b0 * sn;
        b = b0 * c + a0 * sn;
      }
    }
  }

  const ModelConfig& c_;
  bool round_kv_;
  std::map<std::string, Matrix> weights_;
};

// Every Linear kernel this CPU runs (they round differently: AMX splits activations into bf16
// hi + lo), at TP 1 and 2.
class ReferenceForward : public ::testing::TestWithParam<cpu::LinearKernel> {};

TEST_P(ReferenceForward, EngineMatchesFloat64ReferenceAtTp1AndTp2) {
  const cpu::LinearKernel kernel = GetParam();
  if (!cpu::LinearKernelAvailable(kernel)) GTEST_SKIP() << cpu::LinearKernelName(kernel) << " does not run here";
  const ModelDirectory& model = testing::TinyModel();
  const std::vector<int32_t> prompt = {128000, 9906, 11, 1917, 0, 358, 1097, 264};
  const std::vector<int32_t> forced = {1234, 56789, 42};
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), forced.begin(), forced.end());
  ReferenceLlama reference(model);
  const auto expected = reference.Forward(all);

  for (int tp : {1, 2}) {
    auto engine = testing::MakeEngine(tp, -1, 2, kernel);
    const auto rows = testing::RunForced(*engine, prompt, forced);
    for (size_t step = 0; step < rows.size(); ++step) {
      const Matrix& want = expected[prompt.size() - 1 + step];
      double worst = 0, spread = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::abs(rows[step][i] - want[i]));
        spread += want[i] * want[i];
      }
      EXPECT_GT(std::sqrt(spread / want.size()), 1.0);
      EXPECT_LT(worst, 5e-3) << cpu::LinearKernelName(kernel) << " tp " << tp << " step " << step;
    }
  }
}

// --kv-cache-dtype bf16: the engine against the reference that rounds its keys and values to bf16
// as they are computed (in float64, where the engine rounds its f32 ones: a handful of elements
// within 1e-6 of a rounding boundary may round the other way). Without the rounding the reference
// is further from the engine than with it, so the cache really holds bf16.
TEST(ReferenceForwardBf16Kv, EngineMatchesTheReferenceWithItsKeysAndValuesRoundedToBf16) {
  const ModelDirectory& model = testing::TinyModel();
  const std::vector<int32_t> prompt = {128000, 9906, 11, 1917, 0, 358, 1097, 264};
  const std::vector<int32_t> forced = {1234, 56789, 42};
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), forced.begin(), forced.end());
  const auto rounded = ReferenceLlama(model, /*round_kv=*/true).Forward(all);
  const auto exact = ReferenceLlama(model).Forward(all);
  for (int tp : {1, 2}) {
    auto engine = testing::MakeEngine(tp, -1, 2, cpu::BestLinearKernel(), cpu::KvDtype::kBf16);
    const auto rows = testing::RunForced(*engine, prompt, forced);
    double worst_rounded = 0, worst_exact = 0;
    for (size_t step = 0; step < rows.size(); ++step) {
      const size_t position = prompt.size() - 1 + step;
      for (size_t i = 0; i < rows[step].size(); ++i) {
        worst_rounded = std::max(worst_rounded, std::abs(rows[step][i] - rounded[position][i]));
        worst_exact = std::max(worst_exact, std::abs(rows[step][i] - exact[position][i]));
      }
    }
    EXPECT_LT(worst_rounded, 5e-3) << "tp " << tp;
    EXPECT_LT(worst_rounded, worst_exact / 4)
        << "tp " << tp << ": the rounded reference explains the bf16 cache";
    std::printf(
        "tp %d: worst |logit - reference| %.2e with the keys and values rounded, %.2e without\n",
        tp, worst_rounded, worst_exact);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ReferenceForward,
                         ::testing::ValuesIn(cpu::kLinearKernels),
                         [](const auto& param_info) { return cpu::LinearKernelName(param_info.param); });

}  // namespace
}  // namespace tpserve

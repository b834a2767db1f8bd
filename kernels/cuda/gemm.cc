#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.h"

namespace tpserve::cuda {
namespace {

Status BlasStatus(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(what + ": cuBLASLt status " + std::to_string(static_cast<int>(status)));
}

#define TPS_BLAS(call, what) RETURN_IF_ERROR(BlasStatus((call), (what)))

template <typename T>
T AlgoConfig(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
  return value;
}

}  // namespace

Result<std::unique_ptr<BlasContext>> BlasContext::Create(size_t workspace_bytes) {
  std::unique_ptr<BlasContext> context(new BlasContext());
  cublasLtHandle_t handle = nullptr;
  TPS_BLAS(cublasLtCreate(&handle), "cublasLtCreate");
  context->handle_ = handle;
  if (workspace_bytes > 0) {
    const cudaError_t error = cudaMalloc(&context->workspace_, workspace_bytes);
    if (error != cudaSuccess) {
      return Status(StatusCode::kResourceExhausted,
                    "cuBLASLt workspace of " + std::to_string(workspace_bytes) + " bytes: " + cudaGetErrorName(error));
    }
  }
  context->workspace_bytes_ = workspace_bytes;
  return Result<std::unique_ptr<BlasContext>>(std::move(context));
}

BlasContext::~BlasContext() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

struct Bf16Linear::Impl {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t weight = nullptr;  // column-major [in, out]: W row-major, transposed by the op
  cublasLtMatmulAlgo_t algo{};
  // Per token count: x as column-major [in, tokens] bf16 and y as column-major [out, tokens] f32.
  std::map<int, std::pair<cublasLtMatrixLayout_t, cublasLtMatrixLayout_t>> layouts;

  ~Impl() {
    for (auto& [tokens, pair] : layouts) {
      cublasLtMatrixLayoutDestroy(pair.first);
      cublasLtMatrixLayoutDestroy(pair.second);
    }
    if (weight != nullptr) cublasLtMatrixLayoutDestroy(weight);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }

  Result<std::pair<cublasLtMatrixLayout_t, cublasLtMatrixLayout_t>> Layouts(int in, int out, int tokens) {
    auto it = layouts.find(tokens);
    if (it != layouts.end()) return it->second;
    cublasLtMatrixLayout_t x = nullptr, y = nullptr;
    TPS_BLAS(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, in, tokens, in), "x layout");
    TPS_BLAS(cublasLtMatrixLayoutCreate(&y, CUDA_R_32F, out, tokens, out), "y layout");
    layouts.emplace(tokens, std::make_pair(x, y));
    return std::make_pair(x, y);
  }
};

Bf16Linear::Bf16Linear(const BlasContext& blas, int out, int in, int max_tokens)
    : blas_(blas), out_(out), in_(in), max_tokens_(max_tokens), impl_(std::make_unique<Impl>()) {}

Bf16Linear::~Bf16Linear() = default;

Result<std::unique_ptr<Bf16Linear>> Bf16Linear::Create(const BlasContext& blas, int out, int in, int max_tokens,
                                                      GemmSelection selection) {
  const bool invariant = selection != GemmSelection::kHeuristic;
  const std::string shape = "projection [" + std::to_string(out) + ", " + std::to_string(in) + "]";
  if (out < 1 || in < 1 || max_tokens < 1) return InvalidArgument(shape + ": empty shape");
  std::unique_ptr<Bf16Linear> linear(new Bf16Linear(blas, out, in, max_tokens));
  Impl& impl = *linear->impl_;
  auto handle = static_cast<cublasLtHandle_t>(blas.handle());
  TPS_BLAS(cublasLtMatmulDescCreate(&impl.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), shape + ": matmul descriptor");
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  TPS_BLAS(cublasLtMatmulDescSetAttribute(impl.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)),
           shape);
  TPS_BLAS(cublasLtMatmulDescSetAttribute(impl.desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)), shape);
  TPS_BLAS(cublasLtMatrixLayoutCreate(&impl.weight, CUDA_R_16BF, in, out, in), shape + ": weight layout");

  cublasLtMatmulPreference_t preference = nullptr;
  TPS_BLAS(cublasLtMatmulPreferenceCreate(&preference), shape);
  const uint64_t workspace = blas.workspace_bytes();
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  if (invariant) {
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction,
                                         sizeof(no_reduction));
  }
  // The token count the heuristic is asked about; an invariant pick must also run at 1 and at
  // max_tokens.
  const int asked = selection == GemmSelection::kBatchInvariant ? std::min(kGemmDecodeTokens, max_tokens) : max_tokens;
  ASSIGN_OR_RETURN(auto asked_layouts, impl.Layouts(in, out, asked));
  ASSIGN_OR_RETURN(auto large, impl.Layouts(in, out, max_tokens));
  ASSIGN_OR_RETURN(auto small, impl.Layouts(in, out, 1));
  std::vector<cublasLtMatmulHeuristicResult_t> picks(16);
  int returned = 0;
  const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(
      handle, impl.desc, impl.weight, asked_layouts.first, asked_layouts.second, asked_layouts.second, preference,
      static_cast<int>(picks.size()), picks.data(), &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  TPS_BLAS(heuristic, shape + ": no cuBLASLt algorithm");
  auto runs_at = [&](const cublasLtMatmulAlgo_t& algo, const auto& layouts) {
    cublasLtMatmulHeuristicResult_t check{};
    return cublasLtMatmulAlgoCheck(handle, impl.desc, impl.weight, layouts.first, layouts.second, layouts.second,
                                   &algo, &check) == CUBLAS_STATUS_SUCCESS &&
           check.workspaceSize <= workspace;
  };
  for (int i = 0; i < returned; ++i) {
    cublasLtMatmulAlgo_t algo = picks[i].algo;
    if (invariant) {
      if (AlgoConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) continue;
      if (AlgoConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) != CUBLASLT_REDUCTION_SCHEME_NONE) continue;
      if (!runs_at(algo, small) || !runs_at(algo, large)) continue;
    }
    impl.algo = algo;
    linear->algorithm_ = "algo " + std::to_string(AlgoConfig<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID)) + " tile " +
                         std::to_string(AlgoConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID)) + " stages " +
                         std::to_string(AlgoConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID)) + " split-k " +
                         std::to_string(AlgoConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM)) + " (chosen for " +
                         std::to_string(asked) + " tokens)";
    return Result<std::unique_ptr<Bf16Linear>>(std::move(linear));
  }
  if (selection == GemmSelection::kBatchInvariant && asked != max_tokens) {
    // No decode-sized pick runs at max_tokens too: the former rule, chosen for max_tokens.
    return Create(blas, out, in, max_tokens, GemmSelection::kBatchInvariantMaxTokens);
  }
  return FailedPrecondition(shape + ": none of cuBLASLt's " + std::to_string(returned) +
                            " algorithms runs without split-K at both 1 and " + std::to_string(max_tokens) + " tokens");
}

Status Bf16Linear::Run(const uint16_t* w, const uint16_t* x, float* y, int tokens, void* stream) {
  if (tokens == 0) return Status::Ok();
  if (tokens > max_tokens_) {
    return InvalidArgument("projection [" + std::to_string(out_) + ", " + std::to_string(in_) + "]: " +
                           std::to_string(tokens) + " tokens, chosen for at most " + std::to_string(max_tokens_));
  }
  ASSIGN_OR_RETURN(auto layouts, impl_->Layouts(in_, out_, tokens));
  const float alpha = 1.0f, beta = 0.0f;
  return BlasStatus(cublasLtMatmul(static_cast<cublasLtHandle_t>(blas_.handle()), impl_->desc, &alpha, w,
                                   impl_->weight, x, layouts.first, &beta, y, layouts.second, y, layouts.second,
                                   &impl_->algo, blas_.workspace(), blas_.workspace_bytes(),
                                   static_cast<cudaStream_t>(stream)),
                    "cublasLtMatmul [" + std::to_string(out_) + ", " + std::to_string(in_) + "] x " +
                        std::to_string(tokens));
}

}  // namespace tpserve::cuda

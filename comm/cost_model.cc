#include "comm/cost_model.h"

namespace tpserve {

Result<Collective> ParseCollective(const std::string& name) {
  if (name == "all_reduce") return Collective::kAllReduce;
  if (name == "all_gather") return Collective::kAllGather;
  if (name == "reduce_scatter") return Collective::kReduceScatter;
  if (name == "broadcast") return Collective::kBroadcast;
  return InvalidArgument("--collective '" + name + "' is not one of all_reduce, all_gather, reduce_scatter, broadcast");
}

std::string CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBroadcast: return "broadcast";
  }
  return "?";
}

double BusBandwidthFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter: return static_cast<double>(n - 1) / n;
    case Collective::kBroadcast: return 1.0;
  }
  return 1.0;
}

Result<AlphaBeta> FitAlphaBeta(const std::vector<std::pair<double, double>>& samples, double factor) {
  if (samples.size() < 2) return InvalidArgument("the α–β fit needs at least two message sizes");
  // Weighted least squares with weights 1 / t²: relative errors count equally at every size, so
  // the microsecond-scale α is not drowned by the millisecond-scale large messages.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [bytes, seconds] : samples) {
    if (seconds <= 0) return InvalidArgument("the α–β fit needs positive times");
    const double w = 1.0 / (seconds * seconds);
    const double x = bytes * factor;
    sw += w;
    sx += w * x;
    sy += w * seconds;
    sxx += w * x * x;
    sxy += w * x * seconds;
  }
  const double denominator = sw * sxx - sx * sx;
  if (denominator <= 0) return InvalidArgument("the α–β fit needs at least two different message sizes");
  const double slope = (sw * sxy - sx * sy) / denominator;  // 1 / β
  const double intercept = (sy - slope * sx) / sw;          // α
  if (slope <= 0) return FailedPrecondition("time does not grow with size: no bandwidth term to fit");
  AlphaBeta fit;
  fit.alpha_s = intercept;
  fit.beta_bytes_per_s = 1.0 / slope;
  fit.crossover_bytes = factor > 0 ? intercept * fit.beta_bytes_per_s / factor : 0;
  return fit;
}

}  // namespace tpserve

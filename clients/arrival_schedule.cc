#include "clients/arrival_schedule.h"

#include <random>

namespace tpserve {

std::vector<double> ArrivalTimes(double rate, int count, uint64_t seed, double burstiness) {
  std::vector<double> times;
  if (rate <= 0 || count <= 0) return times;
  std::mt19937_64 random(seed);
  // Gamma(k, 1 / (rate k)) has mean 1 / rate; k = 1 is the exponential distribution.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double t = 0;
  for (int i = 0; i < count; ++i) {
    times.push_back(t);
    t += gap(random);
  }
  return times;
}

}  // namespace tpserve

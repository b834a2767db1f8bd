#include "kernels/cpu/cpu_features.h"

namespace tpserve::cpu {

#if defined(__x86_64__)
bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
bool HasAvx512F() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
bool HasAvx512FBwVl() {
  static const bool has = HasAvx512F() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return has;
}
bool HasAvx512Bf16() {
  static const bool has = HasAvx512FBwVl() && __builtin_cpu_supports("avx512bf16");
  return has;
}
#else  // not x86-64: none of them
bool HasAvx2Fma() { return false; }
bool HasAvx512F() { return false; }
bool HasAvx512FBwVl() { return false; }
bool HasAvx512Bf16() { return false; }
#endif

}  // namespace tpserve::cpu

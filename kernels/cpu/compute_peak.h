// Measures the bf16 compute ceiling of this machine: VDPBF16PS (AVX-512 BF16) back to back on
// registers, no memory traffic, on every thread of a pool. Used by bench_linear, in the same run
// as what it measures, with the same threads: a Linear at many tokens is compute-bound, and its
// useful FLOPs (2 x out x in x tokens) over this ceiling say how close it runs.
#pragma once

namespace tpserve::cpu {

class ThreadPool;

// GFLOP/s of bf16 multiply-adds (a multiply and an add each count), all threads together; 0 where
// the CPU has no AVX512_BF16.
double MeasureBf16PeakGflops(ThreadPool* pool);

}  // namespace tpserve::cpu

// Measures the compute ceilings of this machine: VDPBF16PS (AVX-512 BF16) and f32 FMA back to back
// on registers, no memory traffic, on every thread of a pool. Used by bench_linear, in the same run
// as what it measures, with the same threads: a Linear at many tokens is compute-bound, and its
// useful FLOPs (2 x out x in x tokens) over this ceiling say how close it runs.
#pragma once

namespace tpserve::cpu {

class ThreadPool;

// GFLOP/s of bf16 multiply-adds (a multiply and an add each count), all threads together; 0 where
// the CPU has no AVX512_BF16.
double MeasureBf16PeakGflops(ThreadPool* pool);

// GFLOP/s of f32 fused multiply-adds (AVX-512, else AVX2; 0 without either). With the bf16 rate it
// gives the f32-grade ceiling: what a kernel that keeps f32-grade activations (the float64 bound
// of linear.h) can reach at most, max(f32 FMA, bf16 / 2), since VDPBF16PS needs the activation's
// hi and lo bf16 parts, two instructions per product, to keep them.
double MeasureF32FmaPeakGflops(ThreadPool* pool);

}  // namespace tpserve::cpu

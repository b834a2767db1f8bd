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

// GFLOP/s of VDPBF16PS (counted as above) while the same threads stream 256 MiB of weights from
// DRAM, each 64-byte line loaded once and feeding 2 x tokens instructions: a Linear with f32-grade
// activations at `tokens` tokens (each line's 32 weights times each token's hi and lo parts), with
// nothing else to do: no activations to load, no permutes, no sums to keep. The best over runs
// and over a software prefetch of every line 16 or 32 KiB ahead; the 256 MiB split among the
// threads as Linear splits a matrix (kBalancedChunkBytes). Halved, it is the f32-grade
// ceiling of a Linear whose weights come from memory at that batch: where it sits below the
// register-only rate, the machine cannot stream the weights and do the arithmetic at full speed
// at once. tokens: 4, 8, 16 or 32 (fewer give fewer than 16 instructions a pair of lines, too few
// independent sums to reach the rate); 0 for any other, or without AVX512_BF16.
double MeasureStreamedBf16Gflops(ThreadPool* pool, int tokens);

}  // namespace tpserve::cpu

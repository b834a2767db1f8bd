// What the CPU this process runs on can execute, asked once per feature set. Kernels pick their
// paths at run time (the same binary runs on AVX2 laptops, AVX-512 servers and AMX ones), and a
// path, once picked, is the same for every call (results must not depend on the call).
#pragma once

namespace tpserve::cpu {

bool HasAvx2Fma();      // AVX2 and FMA
bool HasAvx512F();      // AVX-512 Foundation
bool HasAvx512FBwVl();  // AVX-512 F, BW and VL: the AVX-512 Linear kernel's set
bool HasAvx512Bf16();   // those and AVX512_BF16 (VDPBF16PS)

}  // namespace tpserve::cpu

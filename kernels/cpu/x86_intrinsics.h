// The x86 intrinsics for the CPU kernels' AVX2 / AVX-512 / AMX code paths (each function carries its
// own target attribute; nothing here assumes the CPU has them).
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 headers as
// "maybe uninitialized" once they are inlined into a kernel; the warning is about the headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

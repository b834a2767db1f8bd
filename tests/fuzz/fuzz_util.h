// Shared by the libFuzzer targets: a property that fails is a crash (libFuzzer saves the input).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition, what)                                      \
  do {                                                                   \
    if (!(condition)) {                                                  \
      std::fprintf(stderr, "fuzz property violated: %s\n", what);       \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

# Warning flags for our own targets (not third-party code), sanitizers for everything.
add_library(tpserve_warnings INTERFACE)
target_compile_options(tpserve_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                            -Wno-missing-field-initializers>
  # GCC 12 reports false -Wrestrict positives inside libstdc++'s std::string at -O3 (GCC PR 105329).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TPSERVE_WERROR}>>:-Werror>
  # nvcc: its own warnings and the host compiler's, as errors in CI.
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${TPSERVE_WERROR}>>:-Werror=all-warnings -Xcompiler=-Werror>)

if(TPSERVE_SANITIZE)
  add_compile_options(-fsanitize=${TPSERVE_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${TPSERVE_SANITIZE})
endif()

# tpserve_quick_compile(TARGET): in a sanitizer build, TARGET's own sources compile at -O0. For code
# whose run time is nothing next to its compile time (test bodies, the command-line front ends):
# it halves their build under ASan + UBSan (server_test.cc: 39 s -> 19 s), and the sanitizers
# still see every access. The libraries they exercise stay at -O2. No effect in other builds.
function(tpserve_quick_compile target)
  if(TPSERVE_SANITIZE)
    target_compile_options(${target} PRIVATE -O0)
  endif()
endfunction()

# Fuzzing: every library carries libFuzzer's coverage instrumentation; only the fuzz targets link
# its main (tests/fuzz).
if(TPSERVE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TPSERVE_FUZZ needs clang (libFuzzer), e.g. CC=clang-16 CXX=clang++-16")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

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

# Fuzzing: every library carries libFuzzer's coverage instrumentation; only the fuzz targets link
# its main (tests/fuzz).
if(TPSERVE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TPSERVE_FUZZ needs clang (libFuzzer), e.g. CC=clang-16 CXX=clang++-16")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

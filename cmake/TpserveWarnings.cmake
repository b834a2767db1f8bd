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

# tpserve_quick_compile(TARGET): in a sanitizer build, TARGET's own sources compile at -O0. For test
# bodies whose run time is nothing next to their compile time: it halves their build under ASan +
# UBSan (server_test.cc: 42 s -> 19 s; -O1 saves nothing), and the sanitizers still see every
# access. The libraries stay at -O2, but not all of their code: a template instantiated in both
# (std::vector<char>::emplace_back, nlohmann's lexer, std::unordered_map::find) is linked once,
# and the linker keeps the copy it meets first, the -O0 one of the target's own objects. So a
# target whose process does real work must not use it: the `tpserve` binary (with it, loading a
# tokenizer took 5.9 s instead of 2.0 s, in every server a test starts) and the OPTIMIZED tests.
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

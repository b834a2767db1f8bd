# Unity builds: each target's C++ sources compile in batches of up to 16 per translation unit.
# The headers nearly every file includes (fmt/spdlog, nlohmann, CLI11, gtest, gRPC, Beast) then
# instantiate and emit their inline code once per batch instead of once per file, and that code
# generation, not parsing, is most of our compile time (clang -ftime-trace on cli/inspect_command.cc
# under ASan: 27 s of its 38 s in the backend, half of that CLI11). The CLI's 15 files took 668 s of
# CPU under ASan one by one and 78 s as one batch (issue 28). Files with their own compile
# definitions or options (the ISA-specific kernels) stay on their own, as CMake does for any source
# with such properties. The cost: editing one file recompiles its batch.
# -DCMAKE_UNITY_BUILD=OFF compiles file by file (to check that each file includes what it uses).
if(NOT DEFINED CMAKE_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
endif()
if(NOT DEFINED CMAKE_UNITY_BUILD_BATCH_SIZE)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE 16)
endif()
# gcc warns when a class has a member whose type is in an anonymous namespace, if the class is
# defined in a header: meant for headers, it misfires on a pimpl's Impl in a .cc that a unity
# batch includes (HttpServer::Impl, Tokenizer::Pipeline). clang has no such warning.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()

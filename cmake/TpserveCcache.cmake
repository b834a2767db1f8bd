# Compiles through ccache when it is installed (Debian's `ccache`; scripts/setup.sh installs it),
# so that a second build of the same sources (another CI clone, another build directory, a
# sanitizer configuration built before) takes its objects from ~/.cache/ccache. Off with
# -DTPSERVE_CCACHE=OFF; without ccache the build is unchanged.
#
# Clones live in different folders: CCACHE_BASEDIR makes the source tree's absolute paths relative
# in what ccache hashes, and CCACHE_NOHASHDIR shares objects built with debug line tables (the
# sanitizer builds) between folders. For the same reason no compile definition holds a path into
# the tree except in one small source file per target (tests/test_paths.cc,
# cli/assets.cc, kernels/cuda_module.cc): a path in a target-wide definition would
# change every command line of the target.
option(TPSERVE_CCACHE "Compile through ccache when it is installed" ON)
if(TPSERVE_CCACHE)
  find_program(TPSERVE_CCACHE_PROGRAM ccache)
  if(TPSERVE_CCACHE_PROGRAM)
    set(launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=1
                 ${TPSERVE_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${launcher})
    message(STATUS "tpserve: compiling through ${TPSERVE_CCACHE_PROGRAM}")
  endif()
endif()

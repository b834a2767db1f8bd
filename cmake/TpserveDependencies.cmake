# Third-party libraries, all from Debian 12 packages (scripts/setup.sh installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
find_package(GTest REQUIRED)
find_package(benchmark QUIET)

set(TPSERVE_HAVE_GRPC OFF)
if(NOT TPSERVE_GRPC STREQUAL "OFF")
  find_package(gRPC CONFIG QUIET)
  find_package(Protobuf QUIET)
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)  # loadgen's and the tests' HTTP client
  # The HTTP server (OpenAI API, /metrics): Boost.Beast over Asio, with OpenSSL for TLS.
  find_package(Boost 1.81 CONFIG QUIET)
  find_package(OpenSSL QUIET)
  if(gRPC_FOUND AND Protobuf_FOUND AND HTTPLIB_FOUND AND Boost_FOUND AND OpenSSL_FOUND)
    set(TPSERVE_HAVE_GRPC ON)
  elseif(TPSERVE_GRPC STREQUAL "ON")
    message(FATAL_ERROR "TPSERVE_GRPC=ON but gRPC/Protobuf/cpp-httplib/Boost 1.81/OpenSSL were not found "
                        "(apt-get install libgrpc++-dev protobuf-compiler-grpc libcpp-httplib-dev libboost1.81-dev "
                        "libssl-dev)")
  endif()
endif()

# Gloo (Debian's libgloo-dev, the library PyTorch uses for CPU collectives): collectives among CPU
# ranks in different processes (multi-process tensor parallelism). Its rendezvous authenticates
# members with OpenSSL's HMAC.
set(TPSERVE_HAVE_GLOO OFF)
find_package(Gloo CONFIG QUIET)
find_package(OpenSSL QUIET)
if(TARGET gloo AND OpenSSL_FOUND)
  set(TPSERVE_HAVE_GLOO ON)
endif()

# Open MPI (Debian's libopenmpi-dev): the peer of `bench-comm --peer mpi`, built as its own
# program (tpserve-mpi-peer) so tpserve itself never links MPI.
set(TPSERVE_HAVE_MPI OFF)
if(NOT TPSERVE_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
    set(TPSERVE_HAVE_MPI ON)
  elseif(TPSERVE_MPI STREQUAL "ON")
    message(FATAL_ERROR "TPSERVE_MPI=ON but MPI was not found (apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()

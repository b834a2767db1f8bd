// tpserve-mpi-peer: the MPI side of `tpserve bench-comm --peer mpi`. Started by mpirun with the
// same rank count; times one collective per message size exactly as bench-comm times its own
// (warm-up calls, a barrier, the timed calls, a barrier; rank 0's mean per call) on the same float
// buffers with the same element counts, checks one result, and prints one JSON object on rank 0:
//   {"library": "...", "rows": [{"size": S, "time_us": T, "wrong": W}, ...]}
//
//   mpirun -np N tpserve-mpi-peer --collective all_reduce --sizes 8,16,... --iters 20 --warmup 5
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/comm_bench_values.h"

namespace {

struct Options {
  std::string collective = "all_reduce";
  std::vector<size_t> sizes;
  int iters = 20;
  int warmup = 5;
};

bool ParseSizes(const char* text, std::vector<size_t>* sizes) {
  const char* p = text;
  while (*p != '\0') {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(p, &end, 10);
    if (end == p || (*end != ',' && *end != '\0')) return false;
    sizes->push_back(static_cast<size_t>(value));
    p = *end == ',' ? end + 1 : end;
  }
  return !sizes->empty();
}

bool Parse(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--collective") {
      o->collective = argv[i + 1];
    } else if (flag == "--sizes") {
      if (!ParseSizes(argv[i + 1], &o->sizes)) return false;
    } else if (flag == "--iters") {
      o->iters = std::atoi(argv[i + 1]);
    } else if (flag == "--warmup") {
      o->warmup = std::atoi(argv[i + 1]);
    } else {
      return false;
    }
  }
  return (argc % 2) == 1 && !o->sizes.empty() && o->iters > 0 && o->warmup >= 0 &&
         (o->collective == "all_reduce" || o->collective == "all_gather" ||
          o->collective == "reduce_scatter" || o->collective == "broadcast");
}


}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Options o;
  if (!Parse(argc, argv, &o)) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "usage: tpserve-mpi-peer --collective all_reduce|all_gather|reduce_scatter|broadcast "
                   "--sizes B1,B2,... [--iters N] [--warmup N]\n");
    }
    MPI_Finalize();
    return 2;
  }
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int library_length = 0;
  MPI_Get_library_version(library, &library_length);
  const std::string library_line(library, std::strcspn(library, ",\n"));

  std::string rows;
  for (size_t bytes : o.sizes) {
    // Element counts as bench-comm (and nccl-tests) size them: S is the total for AllGather and
    // ReduceScatter, the buffer for AllReduce and Broadcast.
    const size_t elements = bytes / sizeof(float);
    const bool split = o.collective == "all_gather" || o.collective == "reduce_scatter";
    const size_t count = split ? elements / world : elements;
    if (count == 0) continue;
    const size_t input = o.collective == "reduce_scatter" ? count * world : count;
    const size_t output = split ? count * world : count;
    std::vector<float> send(input), recv(o.collective == "reduce_scatter" ? count : output);
    for (size_t i = 0; i < input; ++i) send[i] = tpserve::CommBenchInput(rank, i);
    const int n = static_cast<int>(count);
    auto call = [&] {
      if (o.collective == "all_reduce") {
        MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      } else if (o.collective == "all_gather") {
        MPI_Allgather(send.data(), n, MPI_FLOAT, recv.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
      } else if (o.collective == "reduce_scatter") {
        MPI_Reduce_scatter_block(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      } else {
        if (rank == 0) std::memcpy(recv.data(), send.data(), count * sizeof(float));
        MPI_Bcast(recv.data(), n, MPI_FLOAT, 0, MPI_COMM_WORLD);
      }
    };
    for (int i = 0; i < o.warmup; ++i) call();
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < o.iters; ++i) call();
    MPI_Barrier(MPI_COMM_WORLD);
    const double seconds = (MPI_Wtime() - start) / o.iters;

    long long wrong = 0;
    call();
    for (size_t i = 0; i < recv.size(); ++i) {
      float want = 0;
      if (o.collective == "all_reduce" || o.collective == "reduce_scatter") {
        want = tpserve::CommBenchSum(world, o.collective == "reduce_scatter" ? rank * count + i : i);
      } else if (o.collective == "all_gather") {
        want = tpserve::CommBenchInput(static_cast<int>(i / count), i % count);
      } else {
        want = tpserve::CommBenchInput(0, i);
      }
      wrong += recv[i] != want;
    }
    long long total_wrong = 0;
    MPI_Reduce(&wrong, &total_wrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    char row[160];
    std::snprintf(row, sizeof(row), "%s{\"size\": %zu, \"time_us\": %.4f, \"wrong\": %lld}",
                  rows.empty() ? "" : ", ", output * sizeof(float), seconds * 1e6, total_wrong);
    rows += row;
  }
  if (rank == 0) {
    std::string escaped;
    for (char c : library_line) {
      if (c == '"' || c == '\\') escaped += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
    }
    std::printf("{\"library\": \"%s\", \"ranks\": %d, \"rows\": [%s]}\n", escaped.c_str(), world, rows.c_str());
  }
  MPI_Finalize();
  return 0;
}

// The in-process AllReduce at N ranks (threads): median latency per message size, algbw/busbw
// (nccl-tests' definitions: algbw = S / t, busbw = algbw * 2(n-1)/n), next to peers measured in
// the same run: a plain memcpy of the same size (local, in cache), a bare two-thread handoff (one
// round trip through a shared cache line, the floor of any synchronisation between two ranks),
// a cross-core read (one thread reading S bytes another has just written), and an exchange (both
// threads rewrite their own S bytes, which the other read last round, then read the other's): the
// data movement any in-place AllReduce between two cores repeats every call, its floor here.
//
//   bench_allreduce [--ranks 2] [--min-bytes 1024] [--max-bytes 67108864] [--iters 200] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/median.h"
#include "common/thread_affinity.h"
#include "comm/in_process_communicator.h"

namespace {

using tpserve::Median;

using Clock = std::chrono::steady_clock;

int ItersFor(size_t bytes, int iters) {
  return static_cast<int>(std::max<size_t>(5, std::min<size_t>(iters, (size_t{256} << 20) / std::max<size_t>(bytes, 1))));
}

// Median seconds per AllReduce of `bytes` at `ranks` ranks; every rank checks its result.
double TimeAllReduce(int ranks, size_t bytes, int iters, tpserve::InProcessCommunicator::Path path,
                     bool* correct) {
  const size_t count = bytes / sizeof(float);
  auto comms = tpserve::InProcessCommunicator::CreateGroup(ranks);
  std::vector<double> seconds;
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    comms[r]->set_path(path);
    threads.emplace_back([&, r] {
      tpserve::PinThisThreadToCore(r);
      std::vector<float> data(count);
      // As many untimed calls first: on a VM the other core may sleep until the ranks have been
      // busy for a while (the first size measured otherwise read up to 50 us at 1 KiB).
      for (int i = -iters; i < iters; ++i) {
        std::fill(data.begin(), data.end(), static_cast<float>(r + 1));
        const auto start = Clock::now();
        if (!comms[r]->AllReduceSum(data.data(), count).ok()) ok = false;
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        if (r == 0 && i >= 0) seconds.push_back(s);
        const float expected = ranks * (ranks + 1) / 2.0f;
        if (count > 0 && (data[0] != expected || data[count - 1] != expected)) ok = false;
      }
    });
  }
  for (auto& t : threads) t.join();
  *correct = ok;
  return Median(seconds);
}

double TimeMemcpy(size_t bytes, int iters) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::vector<double> seconds;
  for (int i = -3; i < iters; ++i) {
    const auto start = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= 0) seconds.push_back(s);
    a[i & 7] = static_cast<char>(i);
  }
  return Median(seconds);
}

// Median time for one thread to read `bytes` that another thread has just written: the data
// movement every AllReduce between two cores needs at least once, with its synchronisation.
double TimeCrossCoreRead(size_t bytes, int iters) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> buffer(count);
  alignas(64) std::atomic<int> written{-1};
  alignas(64) std::atomic<int> read{-1};
  std::vector<double> seconds;
  tpserve::PinThisThreadToCore(0);
  std::thread writer([&] {
    tpserve::PinThisThreadToCore(1);
    for (int i = 0; i < iters; ++i) {
      while (read.load(std::memory_order_acquire) != i - 1) {
      }
      std::fill(buffer.begin(), buffer.end(), static_cast<float>(i));
      written.store(i, std::memory_order_release);
    }
  });
  float sink = 0;
  for (int i = 0; i < iters; ++i) {
    while (written.load(std::memory_order_acquire) != i) {
    }
    const auto start = Clock::now();
    // An integer XOR the compiler vectorises: a float sum would be one dependent add per element
    // (~4 cycles each), a floor of FP latency rather than of data movement.
    uint32_t mix = 0;
    for (float v : buffer) mix ^= std::bit_cast<uint32_t>(v);
    sink += static_cast<float>(mix & 1);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    read.store(i, std::memory_order_release);
  }
  writer.join();
  return sink < 0 ? 0 : Median(seconds);
}

// The data movement of any in-place AllReduce between two cores, with one handoff and no
// arithmetic of note: each thread rewrites its own buffer (whose lines the other read last round,
// so each write must first take them back) and then reads the other's. Median of both threads.
double TimeExchange(size_t bytes, int iters) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> buffers[2] = {std::vector<float>(count), std::vector<float>(count)};
  alignas(64) std::atomic<int> ready[2] = {-1, -1};
  std::vector<double> seconds[2];
  std::atomic<uint32_t> sink{0};
  auto run = [&](int me) {
    tpserve::PinThisThreadToCore(me);
    const int other = 1 - me;
    for (int i = -iters; i < iters; ++i) {  // as many untimed rounds first
      // Rewrite only once the other has finished reading round i-1 (it publishes round i after).
      while (ready[other].load(std::memory_order_acquire) < i - 1) {
      }
      const auto start = Clock::now();
      std::fill(buffers[me].begin(), buffers[me].end(), static_cast<float>(i));
      ready[me].store(i, std::memory_order_release);
      while (ready[other].load(std::memory_order_acquire) < i) {
      }
      uint32_t mix = 0;
      for (float v : buffers[other]) mix ^= std::bit_cast<uint32_t>(v);
      if (i >= 0) seconds[me].push_back(std::chrono::duration<double>(Clock::now() - start).count());
      sink += mix;
    }
  };
  std::thread partner(run, 1);
  run(0);
  partner.join();
  seconds[0].insert(seconds[0].end(), seconds[1].begin(), seconds[1].end());
  return Median(seconds[0]);
}

// Median round trip of a value between two spinning threads.
double TimeHandoff(int iters) {
  alignas(64) std::atomic<int> ping{-1};
  alignas(64) std::atomic<int> pong{-1};
  tpserve::PinThisThreadToCore(0);
  std::thread partner([&] {
    tpserve::PinThisThreadToCore(1);
    for (int i = 0; i < iters; ++i) {
      while (ping.load(std::memory_order_acquire) != i) {
      }
      pong.store(i, std::memory_order_release);
    }
  });
  std::vector<double> seconds;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    ping.store(i, std::memory_order_release);
    while (pong.load(std::memory_order_acquire) != i) {
    }
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  partner.join();
  return Median(seconds);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"In-process AllReduce latency and bandwidth, next to memcpy and a two-thread handoff"};
  int ranks = 2, iters = 200;
  size_t min_bytes = 1024, max_bytes = size_t{64} << 20;
  bool json = false;
  std::string path_name = "auto";
  app.add_option("--ranks", ranks, "Ranks (threads)")->capture_default_str();
  app.add_option("--min-bytes", min_bytes, "Smallest message")->capture_default_str();
  app.add_option("--max-bytes", max_bytes, "Largest message (x4 steps)")->capture_default_str();
  app.add_option("--iters", iters, "Timed calls per size (fewer for large sizes)")->capture_default_str();
  app.add_option("--path", path_name, "AllReduce path: auto (by size), latency, bandwidth")
      ->check(CLI::IsMember({"auto", "latency", "bandwidth"}))->capture_default_str();
  app.add_flag("--json", json, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);

  using Path = tpserve::InProcessCommunicator::Path;
  const Path path = path_name == "latency" ? Path::kLatency : path_name == "bandwidth" ? Path::kBandwidth : Path::kAuto;
  const double handoff_us = TimeHandoff(20000) * 1e6;
  nlohmann::json rows = nlohmann::json::array();
  if (!json) {
    std::printf("two-thread handoff (round trip): %.2f us\n", handoff_us);
    std::printf("%12s %10s %10s %10s %12s %10s %14s %10s %12s %8s %7s\n", "size(B)", "time(us)", "algbw",
                "busbw", "memcpy(us)", "AR/memcpy", "xcore_read(us)", "AR/xcore", "exchange(us)",
                "AR/xchg", "#wrong");
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int n = ItersFor(bytes, iters);
    bool correct = false;
    const double t = TimeAllReduce(ranks, bytes, n, path, &correct);
    const double copy = TimeMemcpy(bytes, n);
    const double cross = TimeCrossCoreRead(bytes, n);
    const double exchange = TimeExchange(bytes, n);
    const double algbw = bytes / t / 1e9, busbw = algbw * 2.0 * (ranks - 1) / ranks;
    rows.push_back({{"bytes", bytes}, {"time_us", t * 1e6}, {"algbw_gb_s", algbw}, {"busbw_gb_s", busbw},
                    {"memcpy_us", copy * 1e6}, {"cross_core_read_us", cross * 1e6},
                    {"exchange_us", exchange * 1e6},
                    {"wrong", correct ? 0 : 1}});
    if (!json) {
      std::printf("%12zu %10.2f %10.2f %10.2f %12.2f %9.2fx %14.2f %9.2fx %12.2f %7.2fx %7d\n", bytes,
                  t * 1e6, algbw, busbw, copy * 1e6, t / copy, cross * 1e6, t / cross, exchange * 1e6,
                  t / exchange, correct ? 0 : 1);
    }
  }
  if (json) {
    std::printf("%s\n", nlohmann::json{{"ranks", ranks}, {"handoff_us", handoff_us}, {"rows", rows}}.dump().c_str());
  }
  return 0;
}

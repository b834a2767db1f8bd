// Pins the calling thread to one core (index modulo the cores), for benchmarks whose ranks are
// short-lived threads: left to the scheduler, two spinning ranks now and then share a core for a
// while, and a whole message size then measures time slices (~50 us) instead of the collective.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <thread>

namespace tpserve {

inline void PinThisThreadToCore(int index) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(index % cores, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

}  // namespace tpserve

// An allocator whose buffers start on a 64-byte cache line, so that a 512-bit load at a multiple of
// 64 bytes from the start never straddles two lines (such a load issues twice: the AVX-512 Linear
// kernel read its activations that way at two thirds of its aligned throughput).
#pragma once

#include <cstddef>
#include <new>

namespace tpserve {

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT(google-explicit-constructor)

  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }

  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

}  // namespace tpserve

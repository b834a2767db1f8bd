// An allocator for large, long-lived buffers (weights, KV cache): allocations of 1 MiB or more
// are rounded up to whole 2 MiB pages, aligned, and advised to use transparent huge pages (at
// most half of such a buffer is padding). Weight streaming runs ~1.5× faster
// on this class of machine with huge pages (fewer TLB misses, hardware prefetch that does not
// stop every 4 KiB): measured 24 vs 16 GB/s on the LM head of the small model.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace tpserve {

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kThreshold = size_t{1} << 20;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT(google-explicit-constructor)

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kThreshold) return static_cast<T*>(::operator new(bytes));
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p == nullptr) throw std::bad_alloc();
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
    return static_cast<T*>(p);
  }

  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kThreshold) {
      ::operator delete(p);
    } else {
      std::free(p);
    }
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
};

// `count` elements from HugePageAllocator, left uninitialized: the owner's first touch writes every
// one (a std::vector would zero them first, another pass over gigabytes).
template <typename T>
class HugePageBuffer {
 public:
  explicit HugePageBuffer(size_t count) : count_(count), data_(HugePageAllocator<T>().allocate(count)) {}
  ~HugePageBuffer() { HugePageAllocator<T>().deallocate(data_, count_); }
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  size_t size() const { return count_; }

 private:
  size_t count_;
  T* data_;
};

}  // namespace tpserve

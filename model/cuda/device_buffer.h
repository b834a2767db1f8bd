// Owned device memory of the CUDA backend module (device and pinned host buffers). Module-internal.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>

#include "common/status.h"
#include "kernels/cuda/cuda_status.h"

namespace tpserve::cuda {

// A device allocation that grows on demand (contents are not kept when it grows).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }

  // At least `bytes` of device memory; `what` names the buffer in the error. A buffer that grows
  // takes half as much again, so that slowly growing steps (longer contexts) reallocate rarely.
  Status Reserve(size_t bytes, const std::string& what) {
    if (bytes <= bytes_) return Status::Ok();
    const size_t grown = bytes_ == 0 ? bytes : std::max(bytes, bytes_ + bytes_ / 2);
    Release();
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&data_, grown), what + " (" + std::to_string(grown) + " bytes)"));
    bytes_ = grown;
    return Status::Ok();
  }
  // Allocates exactly `bytes` and copies them from the host.
  Status Upload(const void* host, size_t bytes, const std::string& what) {
    RETURN_IF_ERROR(Reserve(bytes, what));
    return CudaStatus(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), what);
  }

  template <typename T = void>
  T* get() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Release() {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory that grows on demand, for asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  Status Reserve(size_t bytes, const std::string& what) {
    if (bytes <= bytes_) return Status::Ok();
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    bytes_ = 0;
    RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&data_, bytes), what + " (" + std::to_string(bytes) + " pinned bytes)"));
    bytes_ = bytes;
    return Status::Ok();
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tpserve::cuda

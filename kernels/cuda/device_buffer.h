// Owned device memory of the CUDA backend module (device and pinned host buffers). Module-internal.
//
// Both are allocated once, at set-up, and never grow: cudaFree waits for all work on the device,
// including a peer rank's one-shot kernel that spins for this rank's next kernel (which this
// thread, stuck in cudaFree, can then never launch), and cudaMallocHost / cudaFreeHost take
// process-wide locks while peers wait in collectives. Reserve refuses to replace an allocation.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "common/status.h"
#include "kernels/cuda/cuda_status.h"

namespace tpserve::cuda {

// A device allocation made once.
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

  // At least `bytes` of device memory; `what` names the buffer in the error. Ok when the buffer
  // already holds that much; an error, not a reallocation, when it holds less.
  Status Reserve(size_t bytes, const std::string& what) {
    if (bytes <= bytes_) return Status::Ok();
    if (data_ != nullptr) {
      return FailedPrecondition(what + ": " + std::to_string(bytes) + " bytes asked of a " +
                                std::to_string(bytes_) +
                                "-byte buffer (step buffers are allocated once, at the engine's limits)");
    }
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&data_, bytes), what + " (" + std::to_string(bytes) + " bytes)"));
    bytes_ = bytes;
    return Status::Ok();
  }
  // Allocates `bytes` and copies them from the host.
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

// Page-locked host memory for asynchronous copies, allocated once.
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
    if (data_ != nullptr) {
      return FailedPrecondition(what + ": " + std::to_string(bytes) + " pinned bytes asked of a " +
                                std::to_string(bytes_) + "-byte buffer (allocated once, at the engine's limits)");
    }
    RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&data_, bytes), what + " (" + std::to_string(bytes) + " pinned bytes)"));
    bytes_ = bytes;
    return Status::Ok();
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tpserve::cuda

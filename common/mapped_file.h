// A read-only memory map of a whole file (RAII). Checkpoints are mapped, never read whole, so a
// rank touches only the pages of its own shard.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "common/status.h"

namespace tpserve {

class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Reset();

  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tpserve

// The safetensors reader on arbitrary file contents: an error naming the problem, never a crash,
// and for a file it accepts, every tensor's bytes lie inside the file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz.safetensors", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) return 0;
  auto file = tpserve::SafetensorsFile::Open(path);
  if (!file.ok()) {
    FUZZ_CHECK(!file.status().message().empty(), "an error without a message");
    return 0;
  }
  for (const tpserve::SafetensorsTensor& tensor : file->tensors()) {
    FUZZ_CHECK(tensor.file_offset <= size && tensor.byte_size <= size - tensor.file_offset, "a tensor outside the file");
    FUZZ_CHECK(file->Find(tensor.name) != nullptr, "a listed tensor that Find does not find");
  }
  return 0;
}

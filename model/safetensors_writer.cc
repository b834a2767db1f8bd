#include "model/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tpserve {

size_t TensorToWrite::byte_size() const {
  size_t count = 1;
  for (int64_t d : shape) count *= static_cast<size_t>(d);
  return count * DTypeSize(dtype);
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.byte_size()}}};
    offset += t.byte_size();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return FailedPrecondition(path + ": cannot create: " + std::strerror(errno));
  unsigned char length[8];
  uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
  std::vector<std::byte> buffer;
  for (const TensorToWrite& t : tensors) {
    buffer.assign(t.byte_size(), std::byte{0});
    t.fill(buffer);
    out.write(reinterpret_cast<const char*>(buffer.data()),
              static_cast<std::streamsize>(buffer.size()));
  }
  out.close();
  if (!out) return FailedPrecondition(path + ": write failed (disk full?)");
  return Status::Ok();
}

}  // namespace tpserve

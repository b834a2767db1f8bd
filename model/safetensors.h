// Reader for the safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}}, then one contiguous byte buffer.
//
// The file is memory-mapped; Open() validates the whole header against the file (offsets in
// bounds, sizes matching shapes, no overlaps or holes, known dtypes) so that later reads never
// need to check again.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "common/mapped_file.h"
#include "common/status.h"

namespace tpserve {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;       // as spelled in the header: "BF16", "F32", "I64", ...
  std::optional<DType> dtype;   // set when the dtype is one weights can use (F32, F16, BF16)
  std::vector<int64_t> shape;
  size_t element_count = 0;
  size_t file_offset = 0;       // absolute offset of the first byte in the file
  size_t byte_size = 0;
};

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // nullptr when the file holds no tensor of that name.
  const SafetensorsTensor* Find(std::string_view name) const;

  std::span<const std::byte> Data(const SafetensorsTensor& tensor) const {
    return file_.bytes().subspan(tensor.file_offset, tensor.byte_size);
  }

 private:
  Status ParseHeader();

  MappedFile file_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_by_name_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tpserve

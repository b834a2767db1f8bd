#include "model/safetensors.h"

#include "common/bounded_json.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace tpserve {
namespace {

constexpr size_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

// Element sizes of every dtype the safetensors format defines.
std::optional<size_t> ElementSize(std::string_view dtype) {
  static const std::unordered_map<std::string_view, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"F64", 8},  {"I64", 8}, {"U64", 8}};
  auto it = kSizes.find(dtype);
  if (it == kSizes.end()) return std::nullopt;
  return it->second;
}

uint64_t ReadLittleEndianU64(const std::byte* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(p[i]);
  return value;
}

Result<SafetensorsTensor> ParseTensorEntry(const std::string& name, const nlohmann::json& entry) {
  auto bad = [&](const std::string& why) { return DataLoss("tensor '" + name + "': " + why); };
  if (!entry.is_object()) return bad("header entry is not an object");
  SafetensorsTensor tensor;
  tensor.name = name;

  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) return bad("missing string field 'dtype'");
  tensor.dtype_name = dtype->get<std::string>();
  std::optional<size_t> element_size = ElementSize(tensor.dtype_name);
  if (!element_size) return bad("unknown dtype '" + tensor.dtype_name + "'");
  tensor.dtype = DTypeFromName(tensor.dtype_name);

  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) return bad("missing array field 'shape'");
  size_t count = 1;
  for (const auto& dim : *shape) {
    if (!dim.is_number_unsigned()) return bad("shape entries must be non-negative integers");
    uint64_t d = dim.get<uint64_t>();
    if (d != 0 && count > std::numeric_limits<size_t>::max() / d) return bad("shape overflows");
    count *= d;
    tensor.shape.push_back(static_cast<int64_t>(d));
  }
  tensor.element_count = count;

  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return bad("'data_offsets' must be [begin, end] with non-negative integers");
  }
  uint64_t begin = (*offsets)[0].get<uint64_t>();
  uint64_t end = (*offsets)[1].get<uint64_t>();
  if (end < begin) return bad("data_offsets end " + std::to_string(end) + " < begin " +
                              std::to_string(begin));
  if (count > std::numeric_limits<size_t>::max() / *element_size) return bad("size overflows");
  if (end - begin != count * *element_size) {
    return bad("data_offsets span " + std::to_string(end - begin) + " bytes but shape × " +
               tensor.dtype_name + " needs " + std::to_string(count * *element_size));
  }
  tensor.file_offset = begin;  // relative for now; made absolute once the header size is known
  tensor.byte_size = end - begin;
  return tensor;
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile file;
  ASSIGN_OR_RETURN(file.file_, MappedFile::Open(path));
  RETURN_IF_ERROR(file.ParseHeader().WithContext(path));
  return file;
}

Status SafetensorsFile::ParseHeader() {
  const auto bytes = file_.bytes();
  if (bytes.size() < 8) {
    return DataLoss("truncated: " + std::to_string(bytes.size()) +
                    " bytes, but a safetensors file starts with an 8-byte header length");
  }
  const uint64_t header_len = ReadLittleEndianU64(bytes.data());
  if (header_len > bytes.size() - 8) {
    return DataLoss("header length " + std::to_string(header_len) + " exceeds the file size (" +
                    std::to_string(bytes.size()) + " bytes): truncated or not safetensors");
  }
  if (header_len > kMaxHeaderBytes) {
    return DataLoss("header length " + std::to_string(header_len) + " is over the 100 MiB limit");
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header = ParseBoundedJson(std::string_view(header_begin, header_len));
  if (header.is_discarded()) {
    return DataLoss("header is not valid JSON or nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  if (!header.is_object()) return DataLoss("header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return DataLoss("'__metadata__' is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) return DataLoss("'__metadata__' values must be strings");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsTensor tensor, ParseTensorEntry(it.key(), it.value()));
    tensors_.push_back(std::move(tensor));
  }

  // The buffer must be covered exactly: sorted by offset, each tensor starts where the previous
  // one ended, and the last one ends at the end of the file.
  const size_t data_size = bytes.size() - 8 - header_len;
  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return std::tie(a->file_offset, a->byte_size) < std::tie(b->file_offset, b->byte_size);
  });
  size_t expected_begin = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const auto* t : by_offset) {
    if (t->file_offset < expected_begin) {
      return DataLoss("tensor '" + t->name + "' overlaps tensor '" + previous->name + "'");
    }
    if (t->file_offset > expected_begin) {
      return DataLoss("tensor '" + t->name + "' starts at " + std::to_string(t->file_offset) +
                      " leaving a hole after byte " + std::to_string(expected_begin));
    }
    if (t->file_offset + t->byte_size > data_size) {
      return DataLoss("tensor '" + t->name + "' data [" + std::to_string(t->file_offset) + ", " +
                      std::to_string(t->file_offset + t->byte_size) + ") lies beyond the " +
                      std::to_string(data_size) + "-byte data section: file truncated?");
    }
    expected_begin = t->file_offset + t->byte_size;
    previous = t;
  }
  if (expected_begin != data_size) {
    return DataLoss("data section is " + std::to_string(data_size) + " bytes but tensors cover " +
                    std::to_string(expected_begin));
  }

  for (size_t i = 0; i < tensors_.size(); ++i) {
    tensors_[i].file_offset += 8 + header_len;
    index_by_name_.emplace(tensors_[i].name, i);
  }
  return Status::Ok();
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_by_name_.find(std::string(name));
  return it == index_by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tpserve

#include "model/checkpoint.h"

#include "common/bounded_json.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "model/random_weights.h"
#include "model/weight_layout.h"

namespace tpserve {
namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// The weight_map of an index file: tensor name -> shard file name.
Result<std::map<std::string, std::string>> ReadIndex(const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json index, ReadJsonFile(path));
  if (!index.is_object()) return DataLoss(path + ": not a JSON object");
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) {
    return DataLoss(path + ": missing object field 'weight_map'");
  }
  std::map<std::string, std::string> result;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it.value().is_string()) {
      return DataLoss(path + ": weight_map['" + it.key() + "'] is not a file name");
    }
    std::string file = it.value().get<std::string>();
    if (file.find('/') != std::string::npos || file == "..") {
      return DataLoss(path + ": weight_map['" + it.key() + "'] = '" + file +
                      "' is not a file in the checkpoint directory");
    }
    result.emplace(it.key(), std::move(file));
  }
  return result;
}

}  // namespace

Result<Checkpoint> Checkpoint::Open(const std::string& dir) {
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  if (!fs::is_directory(dir)) return NotFound(dir + ": not a directory");

  const std::string index_path = (fs::path(dir) / kIndexFile).string();
  if (fs::exists(index_path)) {
    ASSIGN_OR_RETURN(auto weight_map, ReadIndex(index_path));
    std::set<std::string> shard_files;
    for (const auto& [name, file] : weight_map) shard_files.insert(file);
    for (const auto& file : shard_files) RETURN_IF_ERROR(checkpoint.AddFile(file));
    for (const auto& [name, file] : weight_map) {
      const Location* where = nullptr;
      if (auto it = checkpoint.tensors_.find(name); it != checkpoint.tensors_.end()) {
        where = &it->second;
      }
      if (where == nullptr || checkpoint.files_[where->file].path() !=
                                  (fs::path(dir) / file).string()) {
        return DataLoss(index_path + ": tensor '" + name + "' is mapped to " + file +
                        " but that file does not hold it");
      }
    }
    return checkpoint;
  }
  if (!fs::exists(fs::path(dir) / kSingleFile)) {
    return NotFound(dir + ": neither " + kSingleFile + " nor " + kIndexFile + " found");
  }
  RETURN_IF_ERROR(checkpoint.AddFile(kSingleFile));
  return checkpoint;
}

Status Checkpoint::AddFile(const std::string& file_name) {
  ASSIGN_OR_RETURN(SafetensorsFile file,
                   SafetensorsFile::Open((fs::path(dir_) / file_name).string()));
  files_.push_back(std::move(file));
  const size_t file_index = files_.size() - 1;
  for (const auto& tensor : files_.back().tensors()) {
    auto [it, inserted] = tensors_.emplace(tensor.name, Location{file_index, &tensor});
    if (!inserted) {
      return DataLoss("tensor '" + tensor.name + "' appears in both " +
                      files_[it->second.file].path() + " and " + files_.back().path());
    }
  }
  return Status::Ok();
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, location] : tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

// A synthetic checkpoint's tensors: the expected weights of a config and their generator.
// tensors[i] describes specs[i]; Location::file is that index.
struct Checkpoint::SyntheticWeights {
  std::vector<WeightSpec> specs;
  std::vector<SafetensorsTensor> tensors;
  RandomWeights random;
};

Checkpoint Checkpoint::Synthetic(const ModelConfig& config, uint64_t seed, const std::string& source) {
  auto synthetic = std::make_shared<SyntheticWeights>(
      SyntheticWeights{ExpectedWeights(config), {}, RandomWeights(config, seed)});
  for (const WeightSpec& spec : synthetic->specs) {
    SafetensorsTensor tensor{.name = spec.name, .dtype_name = "BF16", .dtype = DType::kBF16, .shape = spec.shape};
    tensor.element_count = 1;
    for (int64_t d : spec.shape) tensor.element_count *= static_cast<size_t>(d);
    tensor.byte_size = tensor.element_count * DTypeSize(DType::kBF16);
    synthetic->tensors.push_back(std::move(tensor));
  }
  Checkpoint checkpoint;
  checkpoint.dir_ = source;
  for (size_t i = 0; i < synthetic->tensors.size(); ++i) {
    checkpoint.tensors_.emplace(synthetic->tensors[i].name, Location{i, &synthetic->tensors[i]});
  }
  checkpoint.synthetic_ = std::move(synthetic);
  return checkpoint;
}

const SafetensorsTensor* Checkpoint::Find(std::string_view name) const {
  auto it = tensors_.find(std::string(name));
  return it == tensors_.end() ? nullptr : it->second.tensor;
}

Result<HostTensor> Checkpoint::Read(std::string_view name, DType to, const SliceSpec& spec) const {
  auto it = tensors_.find(std::string(name));
  if (it == tensors_.end()) return NotFound(dir_ + ": missing tensor '" + std::string(name) + "'");
  const SafetensorsTensor& tensor = *it->second.tensor;
  const std::string where = synthetic_ ? dir_ : files_[it->second.file].path();
  auto fail = [&](const std::string& why) {
    return InvalidArgument(where + ": tensor '" + tensor.name + "' " + ShapeToString(tensor.shape) + ": " + why);
  };
  if (!tensor.dtype) return fail("dtype " + tensor.dtype_name + " is not F32, F16 or BF16");

  const int rank = static_cast<int>(tensor.shape.size());
  HostTensor out;
  out.dtype = to;
  out.shape = tensor.shape;
  // View the tensor as [outer, dim_size, inner]; the slice keeps rows [begin, begin + chunk) of
  // the middle axis (rows past dim_size, when zero-padded, stay zero).
  size_t outer = 1, dim_size = 1, inner = 1, begin = 0, chunk = 1;
  if (spec.dim < 0) {
    for (int64_t d : tensor.shape) inner *= static_cast<size_t>(d);
  } else {
    if (spec.dim >= rank) return fail("cannot slice dim " + std::to_string(spec.dim));
    if (spec.num_parts < 1 || spec.part < 0 || spec.part >= spec.num_parts) {
      return fail("slice part " + std::to_string(spec.part) + " of " +
                  std::to_string(spec.num_parts) + " is out of range");
    }
    for (int d = 0; d < spec.dim; ++d) outer *= static_cast<size_t>(tensor.shape[d]);
    for (int d = spec.dim + 1; d < rank; ++d) inner *= static_cast<size_t>(tensor.shape[d]);
    dim_size = static_cast<size_t>(tensor.shape[spec.dim]);
    const size_t parts = static_cast<size_t>(spec.num_parts);
    if (dim_size % parts != 0 && !spec.zero_pad) {
      return fail("dim " + std::to_string(spec.dim) + " (size " + std::to_string(dim_size) +
                  ") does not split into " + std::to_string(parts) + " equal parts");
    }
    chunk = (dim_size + parts - 1) / parts;
    begin = chunk * static_cast<size_t>(spec.part);
    out.shape[spec.dim] = static_cast<int64_t>(chunk);
  }

  out.bytes.assign(outer * chunk * inner * DTypeSize(to), std::byte{0});
  const size_t out_size = DTypeSize(to);
  const size_t rows = begin >= dim_size ? 0 : std::min(chunk, dim_size - begin);
  if (synthetic_) {
    const WeightSpec& spec_of_tensor = synthetic_->specs[it->second.file];
    std::vector<uint16_t> made(rows * inner);  // one outer row's slice, as bf16
    for (size_t o = 0; o < outer; ++o) {
      synthetic_->random.FillBf16(spec_of_tensor, (o * dim_size + begin) * inner, made);
      ConvertElements(reinterpret_cast<const std::byte*>(made.data()), DType::kBF16,
                      out.bytes.data() + o * chunk * inner * out_size, to, made.size());
    }
    return out;
  }
  const auto source = files_[it->second.file].Data(tensor);
  const size_t in_size = DTypeSize(*tensor.dtype);
  for (size_t o = 0; o < outer; ++o) {
    const size_t src_element = (o * dim_size + begin) * inner;
    const size_t dst_element = o * chunk * inner;
    ConvertElements(source.data() + src_element * in_size, *tensor.dtype,
                    out.bytes.data() + dst_element * out_size, to, rows * inner);
  }
  return out;
}

}  // namespace tpserve

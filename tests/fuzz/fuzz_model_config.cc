// config.json and generation_config.json on arbitrary contents (the input is config.json, then,
// after a NUL byte when there is one, generation_config.json): an error naming the file and the
// field, never a crash; an accepted config satisfies the invariants the engine relies on.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/model_config.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void Write(const std::string& path, const char* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(size));
}

// The directory the two files are written into, removed when the fuzzer exits.
struct ScratchDir {
  ScratchDir() {
    char pattern[] = "/tmp/tpserve-fuzz-config-XXXXXX";
    const char* made = mkdtemp(pattern);
    path = made ? made : "";
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchDir scratch;
  if (scratch.path.empty()) std::abort();  // no temporary directory: nothing can be fuzzed
  const std::string& dir = scratch.path;
  const char* text = reinterpret_cast<const char*>(data);
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t config_size = nul ? static_cast<size_t>(nul - data) : size;
  Write(dir + "/config.json", text, config_size);
  const std::string generation = dir + "/generation_config.json";
  if (nul) {
    Write(generation, text + config_size + 1, size - config_size - 1);
  } else {
    std::filesystem::remove(generation);
  }
  auto config = tpserve::LoadModelConfig(dir);
  if (!config.ok()) {
    FUZZ_CHECK(config.status().message().find(".json") != std::string::npos, "an error that names no file");
    return 0;
  }
  const tpserve::ModelConfig& c = *config;
  FUZZ_CHECK(c.hidden_size > 0 && c.num_layers > 0 && c.num_heads > 0 && c.num_kv_heads > 0, "a non-positive size");
  FUZZ_CHECK(c.num_heads % c.num_kv_heads == 0, "heads not a multiple of KV heads");
  FUZZ_CHECK(c.vocab_size > 0 && c.head_dim > 0, "an empty vocabulary or head");
  for (int id : c.eos_token_ids) FUZZ_CHECK(id >= 0 && id < c.vocab_size, "an eos id outside the vocabulary");
  return 0;
}

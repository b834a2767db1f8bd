// Small helpers shared by tests: temporary directories, raw file writing, asset paths.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "tests/test_paths.h"

namespace tpserve::testing {

// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            ("tpserve_test_" + std::to_string(random()) + std::to_string(random()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The whole file in one read ("" when it cannot be opened). A character-by-character stream
// iterator took 13 s under ASan for the tiny model's 66 MB of weights.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::string bytes(static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0)), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

// Whether `program` is on PATH. A test that runs one of the programs scripts/setup.sh installs
// asserts this first, so a missing one fails in one line that names it and its Debian package.
inline ::testing::AssertionResult ProgramInstalled(const std::string& program, const std::string& package) {
  const std::string probe = "command -v '" + program + "' >/dev/null 2>&1";
  if (std::system(probe.c_str()) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << program << " is not installed: apt-get install " << package
                                       << " (scripts/setup.sh does)";
}

// Where scripts/fetch_assets.sh put the tokenizers and llama.cpp's vocab tests.
inline std::string AssetsDir() {
  if (const char* env = std::getenv("TPSERVE_ASSETS"); env != nullptr && *env) return env;
  return BuiltInAssetsDir();
}

// Fails the test (not skips it) when an asset is missing: CI fetches them, so absence is a bug.
inline std::string RequireAsset(const std::string& relative) {
  const std::string path = (std::filesystem::path(AssetsDir()) / relative).string();
  EXPECT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/fetch_assets.sh";
  return path;
}

}  // namespace tpserve::testing

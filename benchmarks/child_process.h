// Runs a program to completion with a changed environment, its output captured in files: how
// bench-comm's sweeps give each NCCL_ALGO / NCCL_PROTO combination a process of its own (NCCL
// reads them, and its debug settings, when it starts).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tpserve {

struct ChildOutput {
  int exit_code = 0;  // 128 + the signal when one ended it
  std::string out, err;
};

// argv[0] is the program's path. `environment`: (name, value) pairs set over this process's
// environment; an empty value removes the variable. Output goes to `stdout_path` and
// `stderr_path` and is read back.
Result<ChildOutput> RunChild(const std::vector<std::string>& argv,
                             const std::vector<std::pair<std::string, std::string>>& environment,
                             const std::string& stdout_path, const std::string& stderr_path);

// This executable's path (/proc/self/exe).
std::string SelfExecutable();

}  // namespace tpserve

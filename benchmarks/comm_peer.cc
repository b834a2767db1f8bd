#include "benchmarks/comm_peer.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace tpserve {
namespace {

namespace fs = std::filesystem;

// The peer program: where the build put it, else next to this executable (an installed copy).
std::string FindPeerProgram() {
  const fs::path built = TPSERVE_MPI_PEER_DEFAULT;
  std::error_code error;
  if (!built.empty() && fs::exists(built, error)) return built.string();
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    const fs::path beside = self.parent_path() / "tpserve-mpi-peer";
    if (fs::exists(beside, error)) return beside.string();
  }
  return "";
}

std::string FindMpirun() {
  std::error_code error;
  const fs::path configured = TPSERVE_MPIEXEC;
  if (!configured.empty() && fs::exists(configured, error)) return configured.string();
  for (const char* candidate : {"/usr/bin/mpirun", "/usr/local/bin/mpirun"}) {
    if (fs::exists(candidate, error)) return candidate;
  }
  return "";
}

}  // namespace

Result<PeerSweep> ParseMpiPeerOutput(const std::string& text) {
  // The result is the last line that starts with '{' (mpirun may print notices before or after).
  size_t start = text.rfind("\n{");
  start = start == std::string::npos ? (text.rfind('{', 0) == 0 ? 0 : std::string::npos) : start + 1;
  if (start == std::string::npos) return DataLoss("tpserve-mpi-peer printed no result line");
  const std::string line = text.substr(start, text.find('\n', start) - start);
  const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.contains("rows") || !json["rows"].is_array()) {
    return DataLoss("tpserve-mpi-peer printed an unreadable result: " + line.substr(0, 200));
  }
  PeerSweep sweep;
  sweep.name = "mpi";
  sweep.library = json.value("library", "");
  for (const auto& row : json["rows"]) {
    if (!row.contains("size") || !row.contains("time_us")) return DataLoss("tpserve-mpi-peer row without size/time_us");
    sweep.rows.push_back({row["size"].get<size_t>(), row["time_us"].get<double>(), row.value("wrong", size_t{0})});
  }
  return sweep;
}

Result<PeerSweep> RunMpiPeer(Collective collective, int ranks, const std::vector<size_t>& sizes, int iters,
                             int warmup) {
  const std::string mpirun = FindMpirun(), peer = FindPeerProgram();
  if (mpirun.empty() || peer.empty()) {
    return FailedPrecondition(std::string("--peer mpi: ") +
                              (mpirun.empty() ? "Open MPI's mpirun is not installed"
                                              : "tpserve-mpi-peer was not built") +
                              " (apt-get install openmpi-bin libopenmpi-dev, then rebuild)");
  }
  std::string size_list;
  for (size_t s : sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(s);
  // One node, launched without ssh (plm isolated); shared memory between the processes only (no
  // network transport) and launcher traffic on loopback; as root because CI runs as root; no
  // binding, as the local ranks are unbound threads too. Where the kernel forbids one process to
  // read another's memory (containers without CAP_SYS_PTRACE), shared memory's single-copy path
  // fails: the second try copies through the shared segment instead.
  const std::string launch = mpirun + " --allow-run-as-root --oversubscribe --bind-to none -np " +
                             std::to_string(ranks) + " --mca plm isolated --mca btl self,vader" +
                             " --mca oob_tcp_if_include lo";
  const std::string program = " " + peer + " --collective " + CollectiveName(collective) + " --sizes " +
                              size_list + " --iters " + std::to_string(iters) + " --warmup " +
                              std::to_string(warmup);
  std::string failure;
  for (const char* extra : {"", " --mca btl_vader_single_copy_mechanism none"}) {
    const std::string command = launch + extra + program;
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    if (pipe == nullptr) return Internal("--peer mpi: could not start " + mpirun);
    std::string output;
    std::array<char, 4096> buffer;
    size_t n = 0;
    while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
    const int status = pclose(pipe);
    if (status == 0) {
      ASSIGN_OR_RETURN(PeerSweep sweep, ParseMpiPeerOutput(output));
      sweep.command = command;
      return sweep;
    }
    failure = "`" + command + "` exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
              ": " + output.substr(output.size() > 600 ? output.size() - 600 : 0);
  }
  return Internal("--peer mpi: " + failure);
}

}  // namespace tpserve

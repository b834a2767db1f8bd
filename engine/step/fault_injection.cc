#include "engine/step/fault_injection.h"

#include <chrono>
#include <stdexcept>
#include <thread>

namespace tpserve {
namespace {

struct KindName {
  FaultKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {{FaultKind::kFail, "fail"},
                               {FaultKind::kThrow, "throw"},
                               {FaultKind::kStall, "stall"},
                               {FaultKind::kCommError, "comm-error"}};

bool ParseInt(const std::string& text, int64_t* value) {
  if (text.empty() || text.size() > 12) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  *value = std::stoll(text);
  return true;
}

}  // namespace

Result<FaultInjection> FaultInjection::Parse(const std::string& spec) {
  const std::string usage = "--debug-fault '" + spec + "': expected KIND@STEP[:RANK] with KIND one of fail, throw, "
                            "stall, comm-error (e.g. stall@3:1)";
  const size_t at = spec.find('@');
  if (at == std::string::npos) return InvalidArgument(usage);
  FaultInjection fault;
  const std::string kind = spec.substr(0, at);
  for (const KindName& k : kKinds) {
    if (kind == k.name) fault.kind = k.kind;
  }
  if (fault.kind == FaultKind::kNone) return InvalidArgument(usage);
  const std::string rest = spec.substr(at + 1);
  const size_t colon = rest.find(':');
  int64_t rank = -1;
  if (!ParseInt(rest.substr(0, colon), &fault.step)) return InvalidArgument(usage);
  if (colon != std::string::npos) {
    if (!ParseInt(rest.substr(colon + 1), &rank)) return InvalidArgument(usage);
    fault.rank = static_cast<int>(rank);
  }
  return fault;
}

std::string FaultInjection::ToString() const {
  for (const KindName& k : kKinds) {
    if (k.kind == kind) {
      return std::string(k.name) + "@" + std::to_string(step) + (rank >= 0 ? ":" + std::to_string(rank) : "");
    }
  }
  return "none";
}

void StallRelease::Wait() const {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (!released_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status InjectFault(const FaultInjection& fault, int64_t forward, int rank, const StallRelease* release) {
  if (!fault.Hits(forward, rank)) return Status::Ok();
  const std::string where = "rank " + std::to_string(rank) + ": injected fault " + fault.ToString();
  switch (fault.kind) {
    case FaultKind::kFail:
      return Internal(where);
    case FaultKind::kCommError:
      return Status(StatusCode::kUnavailable, where + " (a collective failed)");
    case FaultKind::kThrow:
      throw std::runtime_error(where);
    case FaultKind::kStall:
      if (release != nullptr) release->Wait();
      return Status(StatusCode::kDeadlineExceeded, where + " (released after the stall)");
    case FaultKind::kNone:
      break;
  }
  return Status::Ok();
}

}  // namespace tpserve

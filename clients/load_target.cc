#include "clients/load_target.h"

namespace tpserve {

void StreamTimer::Arrived(int tokens) {
  const auto now = Clock::now();
  if (!any_) {
    record_.ttft_s = std::chrono::duration<double>(now - start_).count();
    any_ = true;
  } else {
    record_.itl_s.push_back(std::chrono::duration<double>(now - last_).count());  // per message
  }
  record_.output_tokens += tokens;
  last_ = now;
}

RequestRecord StreamTimer::Finish(std::string error, std::optional<int> reported_tokens) {
  record_.e2e_s = std::chrono::duration<double>(Clock::now() - start_).count();
  record_.ok = error.empty();
  record_.error_code = std::move(error);
  if (reported_tokens) record_.output_tokens = *reported_tokens;
  // Output the server counted but never showed (text held back to the end): first seen at the end.
  if (!any_ && record_.output_tokens > 0) record_.ttft_s = record_.e2e_s;
  return std::move(record_);
}

}  // namespace tpserve

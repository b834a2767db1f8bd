#include "clients/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "common/bounded_json.h"

namespace tpserve {

Result<LengthRange> ParseLengthRange(const std::string& text, const char* flag) {
  LengthRange r;
  try {
    const size_t dash = text.find('-');
    r.low = std::stoi(text.substr(0, dash));
    r.high = dash == std::string::npos ? r.low : std::stoi(text.substr(dash + 1));
  } catch (...) {
    return InvalidArgument(std::string(flag) + ": '" + text + "' is not N or LOW-HIGH");
  }
  if (r.low < 1 || r.high < r.low) {
    return InvalidArgument(std::string(flag) + ": '" + text + "' must be N >= 1 or LOW-HIGH with LOW <= HIGH");
  }
  return r;
}

Result<std::vector<std::string>> ReadDatasetPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("--dataset " + path + ": cannot open");
  std::vector<std::string> prompts;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    auto row = ParseBoundedJson(line);
    if (row.is_discarded() || !row.is_object() || !row.contains("prompt") || !row["prompt"].is_string()) {
      return InvalidArgument("--dataset " + path + ": line " + std::to_string(line_number) +
                             " is not a JSON object with a string \"prompt\"");
    }
    prompts.push_back(row["prompt"]);
  }
  if (prompts.empty()) return InvalidArgument("--dataset " + path + ": no prompts");
  return prompts;
}

Result<Workload> Workload::FromOptions(const WorkloadOptions& options, int vocab) {
  ASSIGN_OR_RETURN(LengthRange prompt_len, ParseLengthRange(options.prompt_tokens, "--prompt-tokens"));
  ASSIGN_OR_RETURN(LengthRange output_len, ParseLengthRange(options.output_tokens, "--output-tokens"));
  Workload workload{prompt_len, output_len, {}, vocab, options.seed, options.shared_prefix_tokens,
                    options.prefix_groups, options.sampling};
  if (options.shared_prefix_tokens < 0) return InvalidArgument("--shared-prefix-tokens must be at least 0");
  const LoadSampling& sampling = workload.sampling;
  if (!(sampling.temperature >= 0) || std::isinf(sampling.temperature)) {
    return InvalidArgument("--temperature must be a finite number >= 0, got " +
                           std::to_string(sampling.temperature));
  }
  if (!(sampling.top_p > 0 && sampling.top_p <= 1)) {
    return InvalidArgument("--top-p must be in (0, 1], got " + std::to_string(sampling.top_p));
  }
  if (sampling.top_k < 0) {
    return InvalidArgument("--top-k must be at least 0, got " + std::to_string(sampling.top_k));
  }
  if (options.prefix_groups < 1) return InvalidArgument("--prefix-groups must be at least 1");
  if (options.shared_prefix_tokens > 0 && !options.dataset.empty()) {
    return InvalidArgument("--shared-prefix-tokens makes random prompts; a --dataset's prompts bring their own prefixes");
  }
  if (!options.dataset.empty()) {
    ASSIGN_OR_RETURN(workload.dataset, ReadDatasetPrompts(options.dataset));
  }
  return workload;
}

LoadRequest Workload::Make(int index) const {
  std::mt19937_64 random(seed * 1000003 + index);
  LoadRequest request;
  request.id = "loadgen-" + std::to_string(index);
  if (!dataset.empty()) {
    request.prompt_text = dataset[static_cast<size_t>(index) % dataset.size()];
  } else {
    const int n = prompt_len.Draw(random);
    // The top of the vocabulary is where special tokens live: draw below it.
    std::uniform_int_distribution<int> id(0, std::max(1, vocab * 9 / 10) - 1);
    if (shared_prefix_tokens > 0) {
      // The group's prefix: the same ids for every request of the group, from (seed, group).
      const int group = ((index % prefix_groups) + prefix_groups) % prefix_groups;
      std::mt19937_64 prefix_random(seed * 1000003 + 0x5eed0000ull + static_cast<uint64_t>(group) * 7919);
      for (int i = 0; i < shared_prefix_tokens; ++i) request.prompt_ids.push_back(id(prefix_random));
    }
    for (int i = 0; i < n; ++i) request.prompt_ids.push_back(id(random));
  }
  request.output_tokens = output_len.Draw(random);
  request.sampling = sampling;
  request.seed = random();  // after the prompt and length: drawing it changes neither
  return request;
}

}  // namespace tpserve

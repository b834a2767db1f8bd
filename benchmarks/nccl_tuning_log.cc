#include "benchmarks/nccl_tuning_log.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

namespace tpserve {
namespace {

// NCCL's indices (src/include/nccl_common.h: NCCL_ALGO_TREE 0, RING 1, COLLNET_DIRECT 2,
// COLLNET_CHAIN 3, NVLS 4, NVLS_TREE 5, PAT 6; NCCL_PROTO_LL 0, LL128 1, SIMPLE 2).
constexpr const char* kAlgorithms[] = {"Tree",     "Ring", "CollNetDirect", "CollNetChain", "NVLS",
                                       "NVLSTree", "PAT"};
constexpr const char* kProtocols[] = {"LL", "LL128", "Simple"};

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// For matching names: lower case, without underscores ("COLLNET_DIRECT" is "CollNetDirect").
std::string Folded(std::string_view text) {
  std::string out = Lower(text);
  std::erase(out, '_');
  return out;
}

template <size_t N>
std::string Canonical(std::string_view name, const char* const (&names)[N]) {
  if (!name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    const size_t index = std::stoul(std::string(name));
    return index < N ? names[index] : std::string(name);
  }
  for (const char* known : names) {
    if (Folded(known) == Folded(name)) return known;
  }
  return std::string(name);
}

// The word after `key ` in `text` (empty when absent).
std::string WordAfter(std::string_view text, std::string_view key) {
  const size_t at = text.find(key);
  if (at == std::string_view::npos) return "";
  size_t begin = at + key.size();
  while (begin < text.size() && text[begin] == ' ') ++begin;
  size_t end = begin;
  while (end < text.size() && text[end] != ' ' && text[end] != '\t') ++end;
  return std::string(text.substr(begin, end - begin));
}

}  // namespace

std::string CanonicalNcclAlgorithm(std::string_view name) {
  return Canonical(name, kAlgorithms);
}
std::string CanonicalNcclProtocol(std::string_view name) {
  return Canonical(name, kProtocols);
}

std::vector<NcclTuningChoice> ParseNcclTuningLog(std::string_view log) {
  std::vector<NcclTuningChoice> out;
  std::istringstream lines{std::string(log)};
  for (std::string line; std::getline(lines, line);) {
    const size_t arrow = line.find(" Bytes -> ");
    if (arrow == std::string::npos) continue;
    // The size: the number just before " Bytes"; the collective: the word before ": <size>".
    size_t begin = arrow;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
    if (begin == arrow) continue;
    NcclTuningChoice choice;
    choice.bytes = std::stoull(line.substr(begin, arrow - begin));
    const std::string head = line.substr(0, begin);
    const size_t info = head.find("NCCL INFO ");
    std::string name = head.substr(info == std::string::npos ? 0 : info + 10);
    name.erase(
        std::remove_if(name.begin(), name.end(), [](char c) { return c == ':' || c == ' '; }),
        name.end());
    const std::string lowered = Lower(line);
    choice.symmetric = lowered.find("[symmetric]") != std::string::npos ||
                       lowered.find("symk") != std::string::npos;
    const size_t bracket = name.find('[');
    choice.collective = name.substr(0, bracket);
    const std::string tail = line.substr(arrow + 10);
    choice.algorithm = CanonicalNcclAlgorithm(WordAfter(tail, "Algo"));
    choice.protocol = CanonicalNcclProtocol(WordAfter(tail, "proto"));
    if (choice.algorithm.empty() && !choice.symmetric) continue;
    out.push_back(std::move(choice));
  }
  return out;
}

std::vector<NcclTuningChoice> CountChoices(const std::vector<NcclTuningChoice>& lines) {
  std::vector<NcclTuningChoice> out;
  for (const NcclTuningChoice& line : lines) {
    auto same = std::find_if(out.begin(), out.end(), [&](const NcclTuningChoice& c) {
      return c.collective == line.collective && c.bytes == line.bytes &&
             c.algorithm == line.algorithm && c.protocol == line.protocol &&
             c.symmetric == line.symmetric;
    });
    if (same == out.end()) {
      out.push_back(line);
    } else {
      same->calls += line.calls;
    }
  }
  return out;
}

const NcclTuningChoice* ChoiceAt(const std::vector<NcclTuningChoice>& choices,
                                 std::string_view collective, size_t bytes) {
  std::map<std::string, int> counts;  // algorithm/protocol/symmetric -> calls
  const NcclTuningChoice* best = nullptr;
  int best_count = 0;
  for (const NcclTuningChoice& c : choices) {
    if (c.bytes != bytes || (!c.collective.empty() && Lower(c.collective) != Lower(collective)))
      continue;
    const int count = counts[c.algorithm + "/" + c.protocol + (c.symmetric ? "/sym" : "")] +=
        c.calls;
    if (count >= best_count) {
      best = &c;
      best_count = count;
    }
  }
  return best;
}

}  // namespace tpserve

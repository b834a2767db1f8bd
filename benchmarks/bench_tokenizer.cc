// Tokenizer encoding speed: MB/s of Tokenizer::Encode on a large multilingual text, next to the
// speed of its first stage alone (the PCRE2 pre-tokenizer split, the ceiling the full pipeline
// can approach), measured in the same run. Medians of several runs; the machine is shared.
//
// With --peer-hf it also runs Hugging Face's tokenizers library (Rust, via its npm binding,
// installed by `npm ci` in scripts/golden) on the same text and checks the token counts agree.
//
//   bench_tokenizer --tokenizer FILE [--corpus golden.json] [--mb 8] [--runs 5] [--peer-hf] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <optional>
#include <sstream>
#include <unistd.h>

#include "common/bounded_json.h"
#include "common/median.h"
#include "text/tokenizer/regex_splitter.h"
#include "text/tokenizer/tokenizer.h"

namespace {

using tpserve::Median;

using Clock = std::chrono::steady_clock;

// Documents of ~64 KB, each paragraphs drawn at random (seeded) from the corpus, until `bytes`.
std::vector<std::string> BuildDocuments(const std::string& corpus_path, size_t bytes) {
  std::ifstream in(corpus_path);
  nlohmann::json golden = nlohmann::json::parse(in);
  std::vector<std::string> cases;
  for (const auto& c : golden["cases"]) {
    if (!c["text"].get<std::string>().empty()) cases.push_back(c["text"]);
  }
  std::mt19937 random(1);
  std::vector<std::string> documents;
  size_t total = 0;
  while (total < bytes) {
    std::string document;
    while (document.size() < 65536) {
      document += cases[random() % cases.size()];
      document += random() % 4 == 0 ? "\n\n" : " ";
    }
    total += document.size();
    documents.push_back(std::move(document));
  }
  return documents;
}

// Runs benchmarks/tokenizer_peer_hf.mjs on the same text; its one line of JSON, or nullopt.
std::optional<nlohmann::json> RunHfPeer(const std::string& tokenizer_path,
                                        const std::vector<std::string>& documents, int runs) {
  const std::string text_path = "/tmp/tpserve_bench_tokenizer_" + std::to_string(getpid()) + ".txt";
  {
    std::ofstream out(text_path, std::ios::binary);
    for (const auto& document : documents) out << document << '\0';  // NUL-separated
  }
  const std::string command = "TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 node " + std::string(TPSERVE_SOURCE_DIR) +
                              "/benchmarks/tokenizer_peer_hf.mjs '" + tokenizer_path + "' " +
                              text_path + " " + std::to_string(runs);
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (pipe != nullptr && fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int rc = pipe != nullptr ? pclose(pipe) : -1;
  std::remove(text_path.c_str());
  auto parsed = nlohmann::json::parse(output, nullptr, false);
  if (rc != 0 || parsed.is_discarded()) {
    std::fprintf(stderr, "peer failed (%s): run `npm ci --ignore-scripts` in scripts/golden\n",
                 command.c_str());
    return std::nullopt;
  }
  return parsed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenizer encoding throughput (MB/s) against the pre-tokenizer split alone"};
  std::string tokenizer_path, corpus = std::string(TPSERVE_TEST_DATA_DIR) + "/tokenizer_golden_llama3.json";
  double megabytes = 8;
  int runs = 5;
  bool json = false;
  bool peer_hf = false;
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json")->required();
  app.add_option("--corpus", corpus, "Golden JSON whose case texts make up the text")->capture_default_str();
  app.add_option("--mb", megabytes, "Text size in MB")->capture_default_str();
  app.add_option("--runs", runs, "Timed runs (median reported)")->capture_default_str();
  app.add_flag("--json", json, "Print one JSON object");
  app.add_flag("--peer-hf", peer_hf, "Also time Hugging Face tokenizers (node) on the same text");
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::string> documents =
      BuildDocuments(corpus, static_cast<size_t>(megabytes * 1e6));
  size_t text_bytes = 0;
  for (const auto& document : documents) text_bytes += document.size();
  const double mb = text_bytes / 1e6;

  auto load_start = Clock::now();
  auto tokenizer = tpserve::Tokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  // The floor of a load: reading the file and checking it is JSON, building nothing.
  const auto floor_start = Clock::now();
  auto file_text = tpserve::ReadTextFile(tokenizer_path);
  const bool is_json = file_text.ok() && nlohmann::json::accept(*file_text);
  const double parse_floor_s = std::chrono::duration<double>(Clock::now() - floor_start).count();
  if (!is_json) {
    std::fprintf(stderr, "%s: not readable JSON\n", tokenizer_path.c_str());
    return 1;
  }

  // The pre-tokenizer regex of the tokenizer under test (first Split pattern in the file).
  const nlohmann::json root = nlohmann::json::parse(*file_text);
  std::string pattern;
  for (const auto& step : root["pre_tokenizer"].value("pretokenizers", nlohmann::json::array())) {
    if (step.value("type", "") == "Split") {
      pattern = step["pattern"]["Regex"];
      break;
    }
  }
  auto splitter = tpserve::RegexSplitter::Compile(pattern);
  if (!splitter.ok()) {
    std::fprintf(stderr, "%s\n", splitter.status().ToString().c_str());
    return 1;
  }

  size_t token_count = 0, piece_count = 0;
  std::vector<double> encode_s, split_s;
  double cold_s = 0;
  for (int run = 0; run <= runs; ++run) {
    auto start = Clock::now();
    token_count = 0;
    for (const auto& document : documents) token_count += tokenizer->Encode(document)->size();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (run == 0) cold_s = seconds;  // the first run fills the BPE cache
    else encode_s.push_back(seconds);

    std::vector<std::string_view> pieces;
    start = Clock::now();
    for (const auto& document : documents) splitter->Split(document, &pieces);
    split_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    piece_count = pieces.size();
  }
  const double encode_mbps = mb / Median(encode_s), split_mbps = mb / Median(split_s);
  nlohmann::json peer;
  if (peer_hf) {
    auto result = RunHfPeer(tokenizer_path, documents, runs);
    if (!result) return 1;
    peer = *result;
    if (peer["tokens"].get<size_t>() != token_count) {
      std::fprintf(stderr, "token counts differ: tpserve %zu, Hugging Face %zu\n", token_count,
                   peer["tokens"].get<size_t>());
      return 1;
    }
  }
  if (json) {
    nlohmann::json out = {{"text_mb", mb},           {"tokens", token_count},
                          {"encode_mb_per_s", encode_mbps}, {"encode_cold_mb_per_s", mb / cold_s},
                          {"split_only_mb_per_s", split_mbps}, {"ratio_to_split", encode_mbps / split_mbps},
                          {"tokens_per_s", token_count / Median(encode_s)}, {"load_s", load_s},
                          {"load_parse_floor_s", parse_floor_s}};
    if (!peer.is_null()) out["peer_hf"] = peer;
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("text: %.1f MB in %zu documents, %zu pre-tokens, %zu tokens (%.2f bytes/token)\n", mb,
              documents.size(), piece_count, token_count, text_bytes / static_cast<double>(token_count));
  std::printf("tokenizer load %.2f s; reading and parsing the file alone (floor) %.2f s: %.1fx the floor\n", load_s,
              parse_floor_s, load_s / parse_floor_s);
  std::printf("%-34s %10s %14s\n", "stage", "MB/s", "vs split only");
  std::printf("%-34s %10.1f %13.2fx\n", "pre-tokenizer split only (ceiling)", split_mbps, 1.0);
  std::printf("%-34s %10.1f %13.2fx\n", "encode, first run (cold cache)", mb / cold_s, (mb / cold_s) / split_mbps);
  std::printf("%-34s %10.1f %13.2fx\n", "encode, median of warm runs", encode_mbps, encode_mbps / split_mbps);
  if (!peer.is_null()) {
    const double peer_mbps = peer["encode_mb_per_s"].get<double>();
    std::printf("%-34s %10.1f %13.2fx   (tpserve / HF = %.2fx, same token count)\n",
                "HF tokenizers (Rust, peer)", peer_mbps, peer_mbps / split_mbps,
                encode_mbps / peer_mbps);
  }
  std::printf("tokens/s (warm): %.2fM\n", token_count / Median(encode_s) / 1e6);
  return 0;
}

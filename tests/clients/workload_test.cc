// loadgen's workload (clients/workload.h), which `plan simulate` replays: lengths parsed and named
// when bad, a dataset read line by line with its errors named, and request i the same whoever
// asks and in whatever order.
#include "clients/workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

TEST(Workload, LengthsAreNOrLowHighAndBadOnesAreNamed) {
  auto fixed = ParseLengthRange("128", "--prompt-tokens");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->low, 128);
  EXPECT_EQ(fixed->high, 128);
  auto range = ParseLengthRange("64-256", "--output-tokens");
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->low, 64);
  EXPECT_EQ(range->high, 256);
  EXPECT_THAT(ParseLengthRange("x", "--prompt-tokens").status().message(),
              HasSubstr("--prompt-tokens: 'x' is not N or LOW-HIGH"));
  EXPECT_THAT(ParseLengthRange("0", "--prompt-tokens").status().message(), HasSubstr("must be N >= 1"));
  EXPECT_THAT(ParseLengthRange("9-3", "--output-tokens").status().message(),
              HasSubstr("--output-tokens: '9-3' must be N >= 1 or LOW-HIGH with LOW <= HIGH"));
}

TEST(Workload, ADatasetIsReadLineByLineAndItsErrorsNamed) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("good.jsonl"), "{\"prompt\": \"a\"}\n\n{\"prompt\": \"b c\", \"extra\": 1}\n");
  auto prompts = ReadDatasetPrompts(dir.file("good.jsonl"));
  ASSERT_TRUE(prompts.ok()) << prompts.status().ToString();
  EXPECT_EQ(*prompts, (std::vector<std::string>{"a", "b c"}));
  testing::WriteFile(dir.file("bad.jsonl"), "{\"prompt\": \"a\"}\n{\"prompt\": 5}\n");
  EXPECT_THAT(ReadDatasetPrompts(dir.file("bad.jsonl")).status().message(),
              HasSubstr("bad.jsonl: line 2 is not a JSON object with a string \"prompt\""));
  testing::WriteFile(dir.file("empty.jsonl"), "\n");
  EXPECT_THAT(ReadDatasetPrompts(dir.file("empty.jsonl")).status().message(), HasSubstr("no prompts"));
  EXPECT_THAT(ReadDatasetPrompts(dir.file("missing.jsonl")).status().message(), HasSubstr("cannot open"));
}

TEST(Workload, RequestIDependsOnTheSeedAndIAlone) {
  WorkloadOptions options{.prompt_tokens = "10-50", .output_tokens = "4-8", .seed = 11};
  auto workload = Workload::FromOptions(options, 1000);
  ASSERT_TRUE(workload.ok()) << workload.status().ToString();
  std::vector<LoadRequest> forward, backward(20);
  for (int i = 0; i < 20; ++i) forward.push_back(workload->Make(i));
  for (int i = 19; i >= 0; --i) backward[i] = workload->Make(i);
  bool lengths_vary = false;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(forward[i].prompt_ids, backward[i].prompt_ids);
    EXPECT_EQ(forward[i].output_tokens, backward[i].output_tokens);
    EXPECT_GE(forward[i].prompt_ids.size(), 10u);
    EXPECT_LE(forward[i].prompt_ids.size(), 50u);
    EXPECT_GE(forward[i].output_tokens, 4);
    EXPECT_LE(forward[i].output_tokens, 8);
    for (int32_t id : forward[i].prompt_ids) EXPECT_LT(id, 900);  // below the special tokens at the top
    lengths_vary |= forward[i].prompt_ids.size() != forward[0].prompt_ids.size();
  }
  EXPECT_TRUE(lengths_vary);
  options.seed = 12;
  EXPECT_NE(Workload::FromOptions(options, 1000)->Make(0).prompt_ids, forward[0].prompt_ids);
}

TEST(Workload, SamplingIsCheckedAndEveryRequestHasItsOwnReproducibleSeed) {
  WorkloadOptions options{.prompt_tokens = "6", .output_tokens = "3", .seed = 4};
  for (const auto& [sampling, flag] : std::vector<std::pair<LoadSampling, std::string>>{
           {{.temperature = -1}, "--temperature"},
           {{.temperature = std::nanf("")}, "--temperature"},
           {{.temperature = INFINITY}, "--temperature"},
           {{.temperature = 1, .top_p = 0}, "--top-p"},
           {{.temperature = 1, .top_p = 1.5f}, "--top-p"},
           {{.temperature = 1, .top_k = -1}, "--top-k"}}) {
    options.sampling = sampling;
    const auto workload = Workload::FromOptions(options, 1000);
    ASSERT_FALSE(workload.ok()) << flag;
    EXPECT_THAT(workload.status().message(), HasSubstr(flag));
  }
  options.sampling = {.temperature = 0.7f, .top_p = 0.95f, .top_k = 20};
  auto workload = Workload::FromOptions(options, 1000);
  ASSERT_TRUE(workload.ok()) << workload.status().ToString();
  const LoadRequest first = workload->Make(0), second = workload->Make(1);
  EXPECT_EQ(first.sampling.temperature, 0.7f);
  EXPECT_EQ(first.sampling.top_p, 0.95f);
  EXPECT_EQ(first.sampling.top_k, 20);
  EXPECT_NE(first.seed, second.seed);
  EXPECT_EQ(workload->Make(0).seed, first.seed);
  // The seed is drawn after the prompt and the length: greedy and sampled runs send the same ones.
  options.sampling = {};
  const LoadRequest greedy = Workload::FromOptions(options, 1000)->Make(0);
  EXPECT_EQ(greedy.prompt_ids, first.prompt_ids);
  EXPECT_EQ(greedy.output_tokens, first.output_tokens);
}

TEST(Workload, SharedPrefixesAreTheSameWithinAGroupAndTheRestIsEachRequestsOwn) {
  WorkloadOptions options{.prompt_tokens = "8", .output_tokens = "4", .shared_prefix_tokens = 30,
                          .prefix_groups = 3, .seed = 5};
  auto workload = Workload::FromOptions(options, 50000);
  ASSERT_TRUE(workload.ok()) << workload.status().ToString();
  auto prefix = [](const LoadRequest& r) { return std::vector<int32_t>(r.prompt_ids.begin(), r.prompt_ids.begin() + 30); };
  auto own = [](const LoadRequest& r) { return std::vector<int32_t>(r.prompt_ids.begin() + 30, r.prompt_ids.end()); };
  std::vector<LoadRequest> requests;
  for (int i = 0; i < 9; ++i) requests.push_back(workload->Make(i));
  for (int i = 0; i < 9; ++i) {
    ASSERT_EQ(requests[i].prompt_ids.size(), 38u);  // the prefix, then --prompt-tokens of its own
    EXPECT_EQ(prefix(requests[i]), prefix(requests[i % 3])) << "request " << i << " is in group " << i % 3;
    for (int j = 0; j < i; ++j) {
      if (i % 3 != j % 3) EXPECT_NE(prefix(requests[i]), prefix(requests[j]));
      EXPECT_NE(own(requests[i]), own(requests[j]));
    }
  }
  options.dataset = "prompts.jsonl";
  auto refused = Workload::FromOptions(options, 50000);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--shared-prefix-tokens"), std::string::npos);
}

}  // namespace
}  // namespace tpserve

#include "comm/allreduce_choice.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

AllReduceTable Table(int tp, std::vector<AllReduceTableRow> rows) {
  return AllReduceTable{
      .tp = tp, .device = "test GPU", .nccl = "nccl test", .rows = std::move(rows)};
}

TEST(AllReduceChoice, ModesParseAndAnythingElseNamesTheFlag) {
  EXPECT_EQ(ParseAllReduceMode("nccl").value(), AllReduceMode::kNccl);
  EXPECT_EQ(ParseAllReduceMode("oneshot").value(), AllReduceMode::kOneShot);
  EXPECT_EQ(ParseAllReduceMode("auto").value(), AllReduceMode::kAuto);
  auto bad = ParseAllReduceMode("one-shot");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--allreduce 'one-shot'"));
}

TEST(AllReduceChoice, TheLimitIsTheLastSizeBeforeNcclFirstWins) {
  // One-shot wins up to 64 KiB, loses at 256 KiB, and a noisy win at 1 MiB does not count.
  const AllReduceTable table = Table(
      8, {{4096, 12.0, 5.0}, {65536, 14.0, 8.0}, {262144, 20.0, 21.0}, {1048576, 40.0, 39.0}});
  EXPECT_EQ(OneShotLimitBytes(table), 65536u);
  EXPECT_EQ(OneShotLimitBytes(Table(8, {{4096, 5.0, 6.0}})), 0u);  // NCCL wins from the start
  EXPECT_EQ(OneShotLimitBytes(Table(8, {{4096, 5.0, 5.0}})), 0u);  // a tie keeps NCCL
  EXPECT_EQ(OneShotLimitBytes(Table(8, {})), 0u);
}

TEST(AllReduceChoice, NcclAndOneshotNeedNoTable) {
  auto nccl = DecideAllReduce(AllReduceMode::kNccl, "", 8);
  ASSERT_TRUE(nccl.ok());
  EXPECT_EQ(nccl->oneshot_max_bytes, 0u);
  auto oneshot = DecideAllReduce(AllReduceMode::kOneShot, "", 8);
  ASSERT_TRUE(oneshot.ok());
  EXPECT_EQ(oneshot->oneshot_max_bytes, kOneShotCapacityBytes);
  // 64 KiB decode messages fit: batch 512 × hidden 8192 × f32.
  EXPECT_GE(kOneShotCapacityBytes, size_t{512} * 8192 * 4);
  auto single = DecideAllReduce(AllReduceMode::kOneShot, "", 1);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->oneshot_max_bytes, 0u) << "TP=1 has no AllReduce";
}

TEST(AllReduceChoice, AutoReadsTheRowOfItsTpAndStaysOnNcclWithoutOne) {
  testing::TempDir dir;
  const std::string path = dir.file("allreduce.json");
  ASSERT_TRUE(WriteAllReduceTable(path, Table(4, {{8192, 10.0, 4.0}, {32768, 11.0, 12.0}})).ok());
  ASSERT_TRUE(WriteAllReduceTable(path, Table(8, {{8192, 15.0, 6.0}, {32768, 16.0, 7.0}})).ok());
  // A second measurement at TP=4 replaces the first and keeps TP=8's.
  ASSERT_TRUE(WriteAllReduceTable(
                  path, Table(4, {{8192, 10.0, 4.0}, {32768, 11.0, 5.0}, {131072, 13.0, 14.0}}))
                  .ok());
  auto tables = ReadAllReduceTables(path);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_EQ(tables->size(), 2u);

  auto four = DecideAllReduce(AllReduceMode::kAuto, path, 4);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->oneshot_max_bytes, 32768u);
  auto eight = DecideAllReduce(AllReduceMode::kAuto, path, 8);
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->oneshot_max_bytes, 32768u);
  auto two = DecideAllReduce(AllReduceMode::kAuto, path, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->oneshot_max_bytes, 0u);
  EXPECT_THAT(two->reason, HasSubstr("no table for TP=2"));
  auto none = DecideAllReduce(AllReduceMode::kAuto, "", 8);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->oneshot_max_bytes, 0u);
}

TEST(AllReduceChoice, ABadTableNamesTheFileAndTheField) {
  testing::TempDir dir;
  const std::string path = dir.file("bad.json");
  testing::WriteFile(
      path, R"({"allreduce_tables": [{"tp": 8, "rows": [{"bytes": 4096, "nccl_us": "fast"}]}]})");
  auto bad = DecideAllReduce(AllReduceMode::kAuto, path, 8);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path));
  EXPECT_THAT(bad.status().message(), HasSubstr("allreduce_tables[0].rows[0].nccl_us"));

  testing::WriteFile(path, "{not json");
  EXPECT_THAT(ReadAllReduceTables(path).status().message(), HasSubstr("not valid JSON"));
  testing::WriteFile(path, R"({"tables": []})");
  EXPECT_THAT(ReadAllReduceTables(path).status().message(), HasSubstr("allreduce_tables"));
  EXPECT_EQ(ReadAllReduceTables(dir.file("missing.json")).status().code(), StatusCode::kNotFound);
  // A broken file is not overwritten: the other TPs' rows would be lost.
  EXPECT_FALSE(WriteAllReduceTable(path, Table(8, {})).ok());
}

}  // namespace
}  // namespace tpserve

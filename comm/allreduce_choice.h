// `--allreduce nccl|oneshot|auto`: which AllReduce the CUDA backend runs for each message, decided
// on the host before the group is made (the CUDA module only sees the resulting byte limit).
//
//   nccl     NCCL for every AllReduce (the default).
//   oneshot  the one-shot kernel (comm/cuda/oneshot_communicator.h) for every message up to
//            kOneShotCapacityBytes, fused with the residual add and RMSNorm; NCCL above.
//   auto     one-shot up to the size where it stops beating NCCL at this TP in a table that
//            `bench-comm --backend oneshot --allreduce-table FILE` measured on this machine; NCCL
//            for everything while no table says otherwise.
//
// The table file: {"allreduce_tables": [{"tp": 8, "device": "...", "nccl": "...",
//   "rows": [{"bytes": 65536, "nccl_us": 14.1, "oneshot_us": 6.2}, ...]}, ...]}, one entry per TP.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpserve {

enum class AllReduceMode { kNccl, kOneShot, kAuto };

// "nccl", "oneshot" or "auto"; anything else is an error naming --allreduce.
Result<AllReduceMode> ParseAllReduceMode(std::string_view text);

// The one-shot buffer per rank with --allreduce oneshot: every decode message up to batch 512 at
// hidden 8192 in f32; prefill steps above it go to NCCL.
inline constexpr size_t kOneShotCapacityBytes = size_t{16} << 20;

struct AllReduceTableRow {
  size_t bytes = 0;  // message size per rank
  double nccl_us = 0, oneshot_us = 0;
};

struct AllReduceTable {
  int tp = 0;
  std::string device;                   // the GPU it was measured on
  std::string nccl;                     // NCCL's version and settings
  std::vector<AllReduceTableRow> rows;  // ascending bytes
};

// The largest measured size up to which one-shot was faster at every measured size (0: NCCL
// always wins, or no rows).
size_t OneShotLimitBytes(const AllReduceTable& table);

// Every table in `path`; errors name the file and the field.
Result<std::vector<AllReduceTable>> ReadAllReduceTables(const std::string& path);

// Writes `table` into `path`, replacing the entry for its TP and keeping the others.
Status WriteAllReduceTable(const std::string& path, const AllReduceTable& table);

struct AllReduceDecision {
  size_t oneshot_max_bytes = 0;  // AllReduces up to this size run one-shot; 0: none
  std::string reason;            // one line for the log
};

// What `mode` means for a group of `tp` ranks (`table_path` read only for auto; empty: no table).
Result<AllReduceDecision> DecideAllReduce(AllReduceMode mode, const std::string& table_path,
                                          int tp);

}  // namespace tpserve

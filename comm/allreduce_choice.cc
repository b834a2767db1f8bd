#include "comm/allreduce_choice.h"

#include "common/bounded_json.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tpserve {
namespace {

using nlohmann::json;

Result<AllReduceTable> TableFromJson(const json& entry, const std::string& where) {
  if (!entry.is_object()) return InvalidArgument(where + ": not an object");
  AllReduceTable table;
  const auto tp = entry.find("tp");
  if (tp == entry.end() || !tp->is_number_integer() || tp->get<int>() < 1) {
    return InvalidArgument(where + ".tp: a positive integer is required");
  }
  table.tp = tp->get<int>();
  if (entry.contains("device") && entry["device"].is_string())
    table.device = entry["device"].get<std::string>();
  if (entry.contains("nccl") && entry["nccl"].is_string())
    table.nccl = entry["nccl"].get<std::string>();
  const auto rows = entry.find("rows");
  if (rows == entry.end() || !rows->is_array())
    return InvalidArgument(where + ".rows: an array is required");
  for (size_t i = 0; i < rows->size(); ++i) {
    const json& row = (*rows)[i];
    const std::string at = where + ".rows[" + std::to_string(i) + "]";
    for (const char* field : {"bytes", "nccl_us", "oneshot_us"}) {
      if (!row.is_object() || !row.contains(field) || !row[field].is_number() ||
          row[field].get<double>() < 0) {
        return InvalidArgument(at + "." + field + ": a non-negative number is required");
      }
    }
    table.rows.push_back({.bytes = row["bytes"].get<size_t>(),
                          .nccl_us = row["nccl_us"].get<double>(),
                          .oneshot_us = row["oneshot_us"].get<double>()});
  }
  std::sort(table.rows.begin(), table.rows.end(),
            [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
  return table;
}

json TableToJson(const AllReduceTable& table) {
  json rows = json::array();
  for (const AllReduceTableRow& row : table.rows) {
    rows.push_back(
        {{"bytes", row.bytes}, {"nccl_us", row.nccl_us}, {"oneshot_us", row.oneshot_us}});
  }
  return {{"tp", table.tp},
          {"device", table.device},
          {"nccl", table.nccl},
          {"oneshot_max_bytes", OneShotLimitBytes(table)},
          {"rows", rows}};
}

}  // namespace

Result<AllReduceMode> ParseAllReduceMode(std::string_view text) {
  if (text == "nccl") return AllReduceMode::kNccl;
  if (text == "oneshot") return AllReduceMode::kOneShot;
  if (text == "auto") return AllReduceMode::kAuto;
  return InvalidArgument("--allreduce '" + std::string(text) + "': one of nccl, oneshot, auto");
}

size_t OneShotLimitBytes(const AllReduceTable& table) {
  size_t limit = 0;
  for (const AllReduceTableRow& row : table.rows) {
    if (row.oneshot_us >= row.nccl_us) break;
    limit = row.bytes;
  }
  return limit;
}

Result<std::vector<AllReduceTable>> ReadAllReduceTables(const std::string& path) {
  ASSIGN_OR_RETURN(const json doc, ReadJsonFile(path));
  if (!doc.is_object() || !doc.contains("allreduce_tables") ||
      !doc["allreduce_tables"].is_array()) {
    return InvalidArgument(
        path + ": allreduce_tables: an array is required (bench-comm --allreduce-table writes it)");
  }
  std::vector<AllReduceTable> tables;
  const json& entries = doc["allreduce_tables"];
  for (size_t i = 0; i < entries.size(); ++i) {
    ASSIGN_OR_RETURN(AllReduceTable table, TableFromJson(entries[i], path + ": allreduce_tables[" +
                                                                         std::to_string(i) + "]"));
    tables.push_back(std::move(table));
  }
  return tables;
}

Status WriteAllReduceTable(const std::string& path, const AllReduceTable& table) {
  json entries = json::array();
  if (std::filesystem::exists(path)) {
    Result<std::vector<AllReduceTable>> existing = ReadAllReduceTables(path);
    RETURN_IF_ERROR(existing.status());
    for (const AllReduceTable& other : existing.value()) {
      if (other.tp != table.tp) entries.push_back(TableToJson(other));
    }
  }
  entries.push_back(TableToJson(table));
  std::ofstream out(path, std::ios::trunc);
  out << json{{"allreduce_tables", entries}}.dump(2) << "\n";
  if (!out) return FailedPrecondition(path + ": cannot write the AllReduce table");
  return Status::Ok();
}

Result<AllReduceDecision> DecideAllReduce(AllReduceMode mode, const std::string& table_path,
                                          int tp) {
  AllReduceDecision decision;
  if (tp < 2) {
    decision.reason = "TP=1: no AllReduce";
    return decision;
  }
  switch (mode) {
    case AllReduceMode::kNccl:
      decision.reason = "--allreduce nccl: NCCL for every AllReduce";
      return decision;
    case AllReduceMode::kOneShot:
      decision.oneshot_max_bytes = kOneShotCapacityBytes;
      decision.reason = "--allreduce oneshot: one-shot up to " +
                        std::to_string(kOneShotCapacityBytes >> 20) + " MiB per rank, NCCL above";
      return decision;
    case AllReduceMode::kAuto:
      break;
  }
  if (table_path.empty()) {
    decision.reason =
        "--allreduce auto without --allreduce-table: NCCL for every AllReduce (measure one with "
        "bench-comm --backend oneshot --allreduce-table FILE)";
    return decision;
  }
  ASSIGN_OR_RETURN(std::vector<AllReduceTable> tables, ReadAllReduceTables(table_path));
  for (const AllReduceTable& table : tables) {
    if (table.tp != tp) continue;
    decision.oneshot_max_bytes = OneShotLimitBytes(table);
    decision.reason = "--allreduce auto: " + table_path + " (TP=" + std::to_string(tp) + ", " +
                      table.device + ") says one-shot up to " +
                      std::to_string(decision.oneshot_max_bytes) + " bytes, NCCL above";
    return decision;
  }
  decision.reason = "--allreduce auto: " + table_path +
                    " has no table for TP=" + std::to_string(tp) + ": NCCL for every AllReduce";
  return decision;
}

}  // namespace tpserve

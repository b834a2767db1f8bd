#include "planner/hardware_profile.h"

#include "common/bounded_json.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "planner/json_fields.h"
#include "planner/profiles_data.h"

namespace tpserve::planner {
namespace {

using nlohmann::json;

Result<LinkHw> ParseLinkHw(const std::string& name, const Fields& where) {
  if (name == "nvlink") return LinkHw::kNvlink;
  if (name == "pci") return LinkHw::kPci;
  if (name == "memory") return LinkHw::kMemory;
  return where.Error("hw", "'" + name + "' is not one of: nvlink, pci, memory");
}

const char* LinkHwName(LinkHw hw) {
  switch (hw) {
    case LinkHw::kNvlink: return "nvlink";
    case LinkHw::kPci: return "pci";
    case LinkHw::kNet: return "net";
    case LinkHw::kMemory: return "memory";
  }
  return "?";
}

Result<CollectiveFit> ParseFit(const json& value, const std::string& source, size_t index) {
  if (!value.is_object()) return InvalidArgument(source + ": collectives[" + std::to_string(index) + "] must be an object");
  Fields f(value, source, "collectives[" + std::to_string(index) + "]");
  CollectiveFit fit;
  RETURN_IF_ERROR(f.Text("collective", &fit.collective));
  if (fit.collective != "all_reduce" && fit.collective != "all_gather") {
    return f.Error("collective", "'" + fit.collective + "' is not one of: all_reduce, all_gather");
  }
  RETURN_IF_ERROR(f.Integer("ranks", &fit.ranks, 2, 1 << 16));
  RETURN_IF_ERROR(f.Number("min_bytes", &fit.min_bytes, 0, 1e15));
  RETURN_IF_ERROR(f.Number("max_bytes", &fit.max_bytes, fit.min_bytes, 1e15));
  RETURN_IF_ERROR(f.Number("alpha_us", &fit.alpha_us, 0, 1e9));
  RETURN_IF_ERROR(f.Number("beta_gb_s", &fit.beta_gb_s, 1e-9, 1e9));
  RETURN_IF_ERROR(f.Text("algorithm", &fit.algorithm, false));
  RETURN_IF_ERROR(f.Text("protocol", &fit.protocol, false));
  RETURN_IF_ERROR(f.Text("source", &fit.source, false));
  return fit;
}

}  // namespace

Result<HardwareProfile> ParseHardwareProfile(const json& value, const std::string& source) {
  if (!value.is_object()) return InvalidArgument(source + ": a hardware profile is a JSON object");
  const Fields top(value, source, "");
  HardwareProfile p;
  RETURN_IF_ERROR(top.Text("name", &p.name));
  RETURN_IF_ERROR(top.Text("description", &p.description, false));

  ASSIGN_OR_RETURN(Fields device, top.Object("device"));
  RETURN_IF_ERROR(device.Text("kind", &p.device_kind));
  if (p.device_kind != "gpu" && p.device_kind != "cpu") return device.Error("kind", "must be gpu or cpu");
  if (p.device_kind == "gpu") RETURN_IF_ERROR(device.Integer("compute_capability", &p.compute_capability, 50, 200));
  RETURN_IF_ERROR(device.Number("memory_gb", &p.memory_gb, 1e-3, 1e6));
  RETURN_IF_ERROR(device.Number("memory_bandwidth_gb_s", &p.memory_bandwidth_gb_s, 1e-3, 1e6));
  RETURN_IF_ERROR(device.Number("bf16_tflops", &p.bf16_tflops, 1e-6, 1e6));
  RETURN_IF_ERROR(device.Number("fp8_tflops", &p.fp8_tflops, 0, 1e6, false));
  p.shared_memory_bandwidth = p.device_kind == "cpu";
  RETURN_IF_ERROR(device.Flag("shared_memory_bandwidth", &p.shared_memory_bandwidth));
  p.compute_overlaps_memory = p.device_kind == "gpu";
  RETURN_IF_ERROR(device.Flag("compute_overlaps_memory", &p.compute_overlaps_memory));

  ASSIGN_OR_RETURN(Fields efficiency, top.Object("efficiency", false));
  RETURN_IF_ERROR(efficiency.Number("memory", &p.memory_efficiency, 1e-3, 1.5, false));
  RETURN_IF_ERROR(efficiency.Number("compute", &p.compute_efficiency, 1e-3, 1.5, false));
  RETURN_IF_ERROR(efficiency.Number("attention", &p.attention_efficiency, 1e-4, 1.5, false));
  RETURN_IF_ERROR(efficiency.Number("compute_half_rows", &p.compute_half_rows, 0, 1e6, false));
  RETURN_IF_ERROR(efficiency.Number("attention_compute", &p.attention_compute_efficiency, 0, 1.5, false));
  p.attention_query_tile = p.device_kind == "gpu" ? 128 : 1;
  RETURN_IF_ERROR(device.Integer("attention_query_tile", &p.attention_query_tile, 1, 1 << 16, false));

  ASSIGN_OR_RETURN(Fields overheads, top.Object("overheads"));
  RETURN_IF_ERROR(overheads.Number("kernel_launch_us", &p.kernel_launch_us, 0, 1e6));
  RETURN_IF_ERROR(overheads.Integer("kernels_per_layer", &p.kernels_per_layer, 0, 1000));
  RETURN_IF_ERROR(overheads.Number("step_host_us", &p.step_host_us, 0, 1e9));
  RETURN_IF_ERROR(overheads.Number("layer_us", &p.layer_us, 0, 1e6, false));
  RETURN_IF_ERROR(overheads.Number("layer_host_us", &p.layer_host_us, 0, 1e6, false));

  ASSIGN_OR_RETURN(Fields fabric, top.Object("fabric"));
  RETURN_IF_ERROR(fabric.Integer("gpus_per_node", &p.gpus_per_node, 1, 1 << 16));
  ASSIGN_OR_RETURN(Fields intra, fabric.Object("intra_node"));
  std::string hw;
  RETURN_IF_ERROR(intra.Text("hw", &hw));
  ASSIGN_OR_RETURN(p.intra_node.hw, ParseLinkHw(hw, intra));
  RETURN_IF_ERROR(intra.Integer("links", &p.intra_node.links, 1, 1024));
  RETURN_IF_ERROR(intra.Number("link_gb_s", &p.intra_node.link_gb_s, 1e-6, 1e6));
  RETURN_IF_ERROR(intra.Integer("channels", &p.intra_node.channels, 1, 1024));
  RETURN_IF_ERROR(intra.Flag("nvls", &p.intra_node.nvls));
  RETURN_IF_ERROR(intra.Integer("sockets", &p.intra_node.sockets, 1, 64, false));
  if (p.gpus_per_node % p.intra_node.sockets != 0) {
    return intra.Error("sockets", "must divide fabric.gpus_per_node (" + std::to_string(p.gpus_per_node) +
                                      ") evenly: the GPUs split evenly over the sockets");
  }
  RETURN_IF_ERROR(intra.Number("socket_link_gb_s", &p.intra_node.socket_link_gb_s, 0, 1e6, false));
  RETURN_IF_ERROR(intra.Number("socket_hop_us", &p.intra_node.socket_hop_us, 0, 1e6, false));
  if (fabric.Has("inter_node")) {
    ASSIGN_OR_RETURN(Fields inter, fabric.Object("inter_node"));
    InterNodeFabric net;
    RETURN_IF_ERROR(inter.Number("bandwidth_gb_s", &net.bandwidth_gb_s, 1e-6, 1e6));
    RETURN_IF_ERROR(inter.Number("latency_us", &net.latency_us, 0, 1e6, false));
    p.inter_node = net;
  }
  if (top.Has("collectives")) {
    const json& fits = value["collectives"];
    if (!fits.is_array()) return top.Error("collectives", "must be an array");
    for (size_t i = 0; i < fits.size(); ++i) {
      ASSIGN_OR_RETURN(CollectiveFit fit, ParseFit(fits[i], source, i));
      p.collective_fits.push_back(std::move(fit));
    }
  }
  if (top.Has("sources")) {
    const json& sources = value["sources"];
    if (!sources.is_object()) return top.Error("sources", "must be an object of strings");
    for (const auto& [key, text] : sources.items()) {
      if (!text.is_string()) return top.Error("sources." + key, "must be a string");
      p.sources[key] = text.get<std::string>();
    }
  }
  return p;
}

json HardwareProfileJson(const HardwareProfile& p) {
  json device = {{"kind", p.device_kind}, {"memory_gb", p.memory_gb}, {"memory_bandwidth_gb_s", p.memory_bandwidth_gb_s},
                 {"bf16_tflops", p.bf16_tflops}, {"fp8_tflops", p.fp8_tflops},
                 {"shared_memory_bandwidth", p.shared_memory_bandwidth},
                 {"compute_overlaps_memory", p.compute_overlaps_memory},
                 {"attention_query_tile", p.attention_query_tile}};
  if (p.device_kind == "gpu") device["compute_capability"] = p.compute_capability;
  json fabric = {{"gpus_per_node", p.gpus_per_node},
                 {"intra_node",
                  {{"hw", LinkHwName(p.intra_node.hw)}, {"links", p.intra_node.links},
                   {"link_gb_s", p.intra_node.link_gb_s}, {"channels", p.intra_node.channels},
                   {"nvls", p.intra_node.nvls}, {"sockets", p.intra_node.sockets},
                   {"socket_link_gb_s", p.intra_node.socket_link_gb_s}, {"socket_hop_us", p.intra_node.socket_hop_us}}}};
  if (p.inter_node) {
    fabric["inter_node"] = {{"hw", "net"}, {"bandwidth_gb_s", p.inter_node->bandwidth_gb_s},
                            {"latency_us", p.inter_node->latency_us}};
  }
  json fits = json::array();
  for (const CollectiveFit& f : p.collective_fits) {
    fits.push_back({{"collective", f.collective}, {"ranks", f.ranks}, {"min_bytes", f.min_bytes},
                    {"max_bytes", f.max_bytes}, {"alpha_us", f.alpha_us}, {"beta_gb_s", f.beta_gb_s},
                    {"source", f.source}});
    if (!f.algorithm.empty()) fits.back()["algorithm"] = f.algorithm;
    if (!f.protocol.empty()) fits.back()["protocol"] = f.protocol;
  }
  return {{"name", p.name},
          {"description", p.description},
          {"device", device},
          {"efficiency",
           {{"memory", p.memory_efficiency}, {"compute", p.compute_efficiency},
            {"attention", p.attention_efficiency}, {"compute_half_rows", p.compute_half_rows},
            {"attention_compute", p.attention_compute_efficiency}}},
          {"overheads",
           {{"kernel_launch_us", p.kernel_launch_us}, {"kernels_per_layer", p.kernels_per_layer},
            {"step_host_us", p.step_host_us}, {"layer_us", p.layer_us}, {"layer_host_us", p.layer_host_us}}},
          {"fabric", fabric},
          {"collectives", fits},
          {"sources", p.sources}};
}

std::vector<std::string> HardwareProfileNames() {
  std::vector<std::string> names;
  for (const auto& [name, text] : kHardwareProfiles) names.emplace_back(name);
  return names;
}

Result<HardwareProfile> LoadHardwareProfile(const std::string& name_or_path) {
  for (const auto& [name, text] : kHardwareProfiles) {
    if (name_or_path == name) {
      const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
      return ParseHardwareProfile(value, std::string(name) + ".json");
    }
  }
  if (!std::filesystem::is_regular_file(name_or_path)) {
    std::string names;
    for (const std::string& n : HardwareProfileNames()) names += (names.empty() ? "" : ", ") + n;
    return NotFound("--hardware '" + name_or_path + "' is neither a profile file nor a preset (" + names + ")");
  }
  ASSIGN_OR_RETURN(const json value, ReadJsonFile(name_or_path));
  return ParseHardwareProfile(value, name_or_path);
}

}  // namespace tpserve::planner

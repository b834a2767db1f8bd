#include "server/grpc_call_counts.h"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>

#include <nlohmann/json.hpp>

#include <algorithm>

namespace tpserve {
namespace {

// Adds no interceptor: it only counts the call gRPC is about to hand to a handler.
class CountingFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(GrpcCallCounts* counts) : counts_(counts) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    counts_->CountHandled(info->method() ? info->method() : "");
    return nullptr;
  }

 private:
  GrpcCallCounts* counts_;
};

uint64_t JsonCount(const nlohmann::json& data, const char* key) {
  // channelz's JSON writes int64 fields as strings and leaves out zeros.
  if (!data.contains(key)) return 0;
  const nlohmann::json& v = data[key];
  return v.is_string() ? std::stoull(v.get<std::string>()) : v.get<uint64_t>();
}

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> GrpcCallCounts::MakeInterceptorFactory() {
  return std::make_unique<CountingFactory>(this);
}

GrpcCallCounts::GrpcCallCounts(std::vector<std::string> known_methods)
    : known_methods_(std::move(known_methods)) {}

void GrpcCallCounts::CountHandled(const std::string& method) {
  const bool known = std::find(known_methods_.begin(), known_methods_.end(), method) != known_methods_.end();
  std::lock_guard<std::mutex> lock(mutex_);
  ++handled_[known ? method : "other"];
}

std::map<std::string, uint64_t> GrpcCallCounts::handled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return handled_;
}

TransportCallCounts ReadTransportCallCounts() {
  TransportCallCounts counts;
  char* text = grpc_channelz_get_servers(0);
  if (text == nullptr) return counts;
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  gpr_free(text);
  if (!json.is_object() || !json.contains("server")) return counts;
  for (const nlohmann::json& server : json["server"]) {
    if (!server.contains("data")) continue;
    const nlohmann::json& data = server["data"];
    counts.started += JsonCount(data, "callsStarted");
    counts.succeeded += JsonCount(data, "callsSucceeded");
    counts.failed += JsonCount(data, "callsFailed");
  }
  return counts;
}

std::string GrpcCallCounts::RenderPrometheus() const {
  const TransportCallCounts transport = ReadTransportCallCounts();
  std::string out =
      "# HELP tpserve_grpc_server_calls_total gRPC calls seen by the transport (all methods; includes calls "
      "refused by gRPC or cancelled before any handler ran).\n"
      "# TYPE tpserve_grpc_server_calls_total counter\n";
  out += "tpserve_grpc_server_calls_total{outcome=\"started\"} " + std::to_string(transport.started) + "\n";
  out += "tpserve_grpc_server_calls_total{outcome=\"succeeded\"} " + std::to_string(transport.succeeded) + "\n";
  out += "tpserve_grpc_server_calls_total{outcome=\"failed\"} " + std::to_string(transport.failed) + "\n";
  out +=
      "# HELP tpserve_grpc_server_handled_total gRPC calls that reached a handler, by method.\n"
      "# TYPE tpserve_grpc_server_handled_total counter\n";
  for (const auto& [method, n] : handled()) {
    out += "tpserve_grpc_server_handled_total{method=\"" + method + "\"} " + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace tpserve

#include "server/metrics_http.h"

#include <httplib.h>

namespace tpserve {

MetricsHttpServer::MetricsHttpServer(std::function<std::string()> render)
    : render_(std::move(render)), server_(std::make_unique<httplib::Server>()) {
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(render_(), "text/plain; version=0.0.4");
  });
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

Result<int> MetricsHttpServer::Start(const std::string& host, int port) {
  const int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    return FailedPrecondition("--metrics-port: cannot listen on " + host + ":" + std::to_string(port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void MetricsHttpServer::Stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace tpserve

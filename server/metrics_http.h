// Serves GET /metrics (Prometheus text format) over HTTP with cpp-httplib, on its own thread.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}

namespace tpserve {

class MetricsHttpServer {
 public:
  explicit MetricsHttpServer(const ServerMetrics* metrics);
  ~MetricsHttpServer();

  // Binds host:port (port 0 picks a free one) and starts serving; returns the bound port.
  Result<int> Start(const std::string& host, int port);
  void Stop();

 private:
  const ServerMetrics* metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace tpserve

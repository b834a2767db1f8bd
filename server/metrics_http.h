// Serves GET /metrics (Prometheus text format) over HTTP with cpp-httplib, on its own thread.
// The page is what `render` returns at the time of the request.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace httplib {
class Server;
}

namespace tpserve {

class MetricsHttpServer {
 public:
  explicit MetricsHttpServer(std::function<std::string()> render);
  ~MetricsHttpServer();

  // Binds host:port (port 0 picks a free one) and starts serving; returns the bound port.
  Result<int> Start(const std::string& host, int port);
  void Stop();

 private:
  std::function<std::string()> render_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace tpserve

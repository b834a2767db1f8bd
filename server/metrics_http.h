// Serves GET /metrics (Prometheus text format) on HttpServer's event loop. The page is what
// `render` returns at the time of the request. Any other request is refused from its head (its
// body is never read), and slow or idle scrapers hold no thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "server/http/http_server.h"

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
  std::unique_ptr<HttpServer> server_;
};

}  // namespace tpserve

#include "server/metrics_http.h"

namespace tpserve {
namespace {

HttpResponse PlainText(int status, std::string body, std::string content_type = "text/plain; charset=utf-8") {
  HttpResponse response;
  response.status = status;
  response.content_type = std::move(content_type);
  response.body = std::move(body);
  return response;
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(std::function<std::string()> render) : render_(std::move(render)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

Result<int> MetricsHttpServer::Start(const std::string& host, int port) {
  HttpServerOptions options{.name = "--metrics-port",
                            .host = host,
                            .port = port,
                            .threads = 1,
                            .max_connections = 1024,
                            .read_timeout_s = 5,  // a scrape's request is a few hundred bytes
                            .max_header_bytes = 8 << 10,
                            .max_body_bytes = 0};  // a scrape has no body
  HttpHandlers handlers{
      .admit = [](const HttpRequest& head) -> std::optional<HttpResponse> {
        if (head.method == "GET" && head.path == "/metrics") return std::nullopt;
        return PlainText(404, "no such endpoint: " + head.method + " " + head.path + " (only GET /metrics)\n");
      },
      .handle = [this](HttpRequest&) { return PlainText(200, render_(), "text/plain; version=0.0.4"); },
      .error = [](int status, const std::string& what) { return PlainText(status, what + "\n"); }};
  server_ = std::make_unique<HttpServer>(std::move(options), std::move(handlers));
  auto bound = server_->Start();
  if (!bound.ok()) return FailedPrecondition(bound.status().message());
  return bound;
}

void MetricsHttpServer::Stop() {
  if (server_) server_->Stop();
}

}  // namespace tpserve

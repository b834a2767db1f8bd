// An HTTP/1.1 server for tpserve's HTTP ports (the OpenAI-compatible API and /metrics), on
// Boost.Beast over Asio: a few event-loop threads serve every connection, so a slow or idle client
// costs a socket and a small buffer, never a thread. Limits hold as bytes arrive, whatever the
// framing: the head (request line and headers) within max_header_bytes, the body within
// max_body_bytes whether it comes with a Content-Length or chunked, the whole request within
// read_timeout_s. The application sees a request's head before its body is read (admit), so a
// refusal (no API key, unknown path, too large) never reads the body. Framing that RFC 9112 calls
// ambiguous (Transfer-Encoding with Content-Length, two Content-Lengths, a transfer coding other
// than chunked) is answered 400/501 and the connection closed; request bodies are never
// decompressed. Pipelined requests are answered in order.
//
// Beast's headers stay in http_server.cc: this header is all its users compile.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tpserve {

struct HttpServerOptions {
  std::string name = "http";  // in log lines and errors: "--http-port", "--metrics-port"
  std::string host = "127.0.0.1";
  int port = 0;                        // 0: pick a free one
  int threads = 2;                     // event-loop threads (not connections)
  int max_connections = 8192;          // more are closed as they are accepted
  int read_timeout_s = 10;             // a request's head and body must arrive whole within this
  int write_timeout_s = 10;            // each write to the client must finish within this
  int keepalive_timeout_s = 5;         // an idle connection waits this long for its next request
  size_t max_header_bytes = 16 << 10;  // request line + headers; more gets 431
  size_t max_body_bytes = 1 << 20;     // more gets 413, however it is framed
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files; TLS when tls_cert is set
};

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;  // as sent
  std::string body;                                          // empty while being admitted

  // The first header with this name (case-insensitive), or "".
  std::string Header(std::string_view name) const;
};

// A response body written as it is produced (chunked): the server asks Next() for bytes whenever it
// may write, and the producer calls Wake() (from any thread) when it has more.
class HttpBodyStream {
 public:
  struct Piece {
    std::string bytes;  // may be empty
    bool last = false;  // nothing follows
  };
  virtual ~HttpBodyStream() = default;
  // On the connection's event-loop thread, never while a write is in flight.
  virtual Piece Next() = 0;
  // The client went away, a write failed or the server stopped before the last piece.
  virtual void Abandoned() = 0;

  // The server's: what Wake() calls.
  void SetWake(std::function<void()> wake);
  // The producer's, from any thread: Next() has something new.
  void Wake();

 private:
  std::mutex mutex_;
  std::function<void()> wake_;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;                        // a whole response ...
  std::shared_ptr<HttpBodyStream> stream;  // ... or a streamed one (body ignored)
};

struct HttpHandlers {
  // The request's head, before its body is read: a response to refuse it (the body is not read),
  // or nullopt to read the body and handle it.
  std::function<std::optional<HttpResponse>(const HttpRequest& head)> admit;
  std::function<HttpResponse(HttpRequest& request)> handle;
  // The response for a refusal of the server's own: malformed or ambiguous framing (400), a head
  // too large (431), a body too large (413), an unsupported coding (415, 501), an exception (500).
  std::function<HttpResponse(int status, const std::string& what)> error;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandlers handlers);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts the event-loop threads; returns the port.
  Result<int> Start();
  // Requests admitted and not yet answered: their bodies being read, or `handle` running.
  int requests_in_progress() const;
  // Closes every connection (streams are Abandoned) and joins the threads: it waits for a `handle`
  // in progress, which nothing interrupts.
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpserve

#include "server/http/http_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <thread>

namespace tpserve {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;
using TlsStream = net::ssl::stream<tcp::socket>;

// How long a connection that is being closed keeps reading (and dropping) what its client still
// sends, so that the close does not reset the connection before the client reads the response;
// and how many bytes it drops at most.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 4 << 20;

// Wake-ups come from engine threads; they post to the event loop only while it exists.
struct LoopGuard {
  std::mutex mutex;
  bool alive = true;
};

struct ServerState {
  HttpServerOptions options;
  HttpHandlers handlers;
  std::shared_ptr<LoopGuard> guard = std::make_shared<LoopGuard>();
  std::atomic<int> connections{0};
  std::atomic<int> requests_in_progress{0};  // admitted, not yet answered
};

std::string ToString(boost::beast::string_view s) {
  return std::string(s.data(), s.size());
}

bool IsEndOfConnection(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::operation_aborted || ec == net::error::bad_descriptor ||
         ec == net::ssl::error::stream_truncated;
}

std::string Chunk(std::string_view bytes, bool last) {
  std::string out;
  if (!bytes.empty()) out = fmt::format("{:x}\r\n{}\r\n", bytes.size(), bytes);
  if (last) out += "0\r\n\r\n";
  return out;
}

// One connection: reads a request's head, asks the application to admit it, reads its body,
// writes the response (whole or streamed), and goes on to the next request while the client keeps
// the connection alive. Every handler runs on the connection's strand.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, std::shared_ptr<ServerState> state)
      : stream_(std::move(stream)), deadline_(stream_.get_executor()), state_(std::move(state)) {
    ++state_->connections;
  }
  ~Session() {
    if (source_) source_->Abandoned();
    SetInProgress(false);
    --state_->connections;
  }

  void Start() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      SetDeadline(std::chrono::seconds(options().read_timeout_s));
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = this->shared_from_this()](error_code ec) {
                                if (ec) return self->Close();
                                self->ReadHead();
                              });
    } else {
      ReadHead();
    }
  }

 private:
  const HttpServerOptions& options() const { return state_->options; }
  const HttpHandlers& handlers() const { return state_->handlers; }

  tcp::socket& Socket() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  // The first request of a connection must arrive within the read timeout; later ones within the
  // keep-alive timeout.
  void ReadHead() {
    if (closed_) return;
    next_request_ = false;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(options().max_header_bytes));
    parser_->body_limit(options().max_body_bytes);
    SetDeadline(std::chrono::seconds(served_ == 0 ? options().read_timeout_s
                                                  : options().keepalive_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](error_code ec, size_t) { self->OnHead(ec); });
  }

  void OnHead(error_code ec) {
    if (closed_) return;
    if (ec) {
      if (IsEndOfConnection(ec)) return Close();
      if (ec == http::error::header_limit) {
        return Refuse(
            431, fmt::format("request head: larger than {} bytes", options().max_header_bytes));
      }
      if (ec == http::error::body_limit) return RefuseTooLarge();
      return Refuse(400, "request: " + ec.message());
    }
    auto& head = parser_->get();
    request_ = HttpRequest{.method = std::string(head.method_string()),
                           .path = ToString(head.target().substr(0, head.target().find('?'))),
                           .headers = {},
                           .body = {}};
    for (const auto& field : head)
      request_.headers.emplace_back(ToString(field.name_string()), ToString(field.value()));
    keep_alive_ = head.keep_alive();
    if (const auto coding = head[http::field::transfer_encoding];
        !coding.empty() && !boost::beast::iequals(coding, "chunked")) {
      return Refuse(501,
                    "Transfer-Encoding: only chunked is supported, got '" + ToString(coding) + "'");
    }
    if (const auto coding = head[http::field::content_encoding];
        !coding.empty() && !boost::beast::iequals(coding, "identity")) {
      return Refuse(
          415, "Content-Encoding: request bodies are not decompressed; send the body uncompressed");
    }
    if (parser_->content_length().value_or(0) > options().max_body_bytes) return RefuseTooLarge();
    const bool has_body = !parser_->is_done();
    std::optional<HttpResponse> refusal;
    try {
      refusal = handlers().admit(request_);
    } catch (const std::exception& e) {
      spdlog::error("{}: admitting {} {}: {}", options().name, request_.method, request_.path,
                    e.what());
      refusal = handlers().error(500, "internal error");
    }
    if (refusal) {
      if (has_body) keep_alive_ = false;  // its body stays unread
      return Respond(std::move(*refusal));
    }
    SetInProgress(true);
    if (!has_body) return Handle();
    if (boost::beast::iequals(head[http::field::expect], "100-continue")) {
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(out_),
                       [self = this->shared_from_this()](error_code write_error, size_t) {
                         if (write_error || self->closed_) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    SetDeadline(std::chrono::seconds(options().read_timeout_s));
    http::async_read(
        stream_, buffer_, *parser_, [self = this->shared_from_this()](error_code ec, size_t) {
          if (self->closed_) return;
          if (ec == http::error::body_limit) return self->RefuseTooLarge();
          if (ec)
            return IsEndOfConnection(ec) ? self->Close()
                                         : self->Refuse(400, "request body: " + ec.message());
          self->request_.body = std::move(self->parser_->get().body());
          self->Handle();
        });
  }

  void Handle() {
    ClearDeadline();
    HttpResponse response;
    try {
      response = handlers().handle(request_);
    } catch (const std::exception& e) {
      spdlog::error("{}: {} {}: {}", options().name, request_.method, request_.path, e.what());
      response = handlers().error(500, "internal error");
    }
    Respond(std::move(response));
  }

  void RefuseTooLarge() {
    Refuse(413, fmt::format("body: larger than this server accepts ({} bytes)",
                            options().max_body_bytes));
  }

  // A refusal of the server's own; the connection closes after it (the framing cannot be trusted).
  void Refuse(int status, const std::string& what) {
    keep_alive_ = false;
    Respond(handlers().error(status, what));
  }

  void Respond(HttpResponse response) {
    SetInProgress(false);
    ++served_;
    if (response.stream) return StartStream(std::move(response));
    auto message = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(response.status), 11);
    if (!response.content_type.empty())
      message->set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message->set(name, value);
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive_);
    message->prepare_payload();
    SetDeadline(std::chrono::seconds(options().write_timeout_s));
    http::async_write(stream_, *message,
                      [self = this->shared_from_this(), message](error_code ec, size_t) {
                        self->ClearDeadline();
                        if (ec || self->closed_) return self->Close();
                        if (!self->keep_alive_) return self->CloseAfterResponse();
                        self->ReadHead();
                      });
  }

  void StartStream(HttpResponse response) {
    source_ = std::move(response.stream);
    std::string head =
        fmt::format("HTTP/1.1 {} {}\r\n", response.status,
                    ToString(http::obsolete_reason(static_cast<http::status>(response.status))));
    if (!response.content_type.empty()) head += "Content-Type: " + response.content_type + "\r\n";
    for (const auto& [name, value] : response.headers) head += name + ": " + value + "\r\n";
    head += keep_alive_ ? "Transfer-Encoding: chunked\r\n\r\n"
                        : "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    source_->SetWake(
        [guard = state_->guard, weak = this->weak_from_this(), executor = stream_.get_executor()] {
          std::lock_guard<std::mutex> lock(guard->mutex);
          if (!guard->alive) return;
          net::post(executor, [weak] {
            if (auto self = weak.lock()) self->Pump();
          });
        });
    Write(std::move(head), /*last=*/false);
    WatchForClose();
  }

  // Writes what the stream has, unless a write is in flight (its completion pumps again).
  void Pump() {
    if (closed_ || !source_ || writing_) return;
    HttpBodyStream::Piece piece = source_->Next();
    if (piece.bytes.empty() && !piece.last) return;
    Write(Chunk(piece.bytes, piece.last), piece.last);
  }

  void Write(std::string bytes, bool last) {
    writing_ = true;
    out_ = std::move(bytes);
    SetDeadline(std::chrono::seconds(options().write_timeout_s));
    net::async_write(stream_, net::buffer(out_),
                     [self = this->shared_from_this(), last](error_code ec, size_t) {
                       self->writing_ = false;
                       self->ClearDeadline();
                       if (ec || self->closed_) return self->Close();
                       if (!last) return self->Pump();
                       self->source_.reset();  // finished, not abandoned
                       if (!self->keep_alive_) return self->CloseAfterResponse();
                       self->next_request_ = true;
                       if (!self->watching_) return self->ReadHead();
                       // The watching read may wait for bytes that never come while the next
                       // request is already buffered: cancel it, and its completion starts the next
                       // request.
                       error_code ignored;
                       self->Socket().cancel(ignored);
                     });
  }

  // While a response streams, a read notices a client that goes away (and keeps what a pipelining
  // client sends next); its completion after the response starts the next request.
  void WatchForClose() {
    if (closed_ || buffer_.size() >= options().max_header_bytes) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = this->shared_from_this()](error_code ec, size_t n) {
                              self->watching_ = false;
                              if (self->closed_) return;
                              if (ec == net::error::operation_aborted && self->next_request_)
                                return self->ReadHead();
                              if (ec) return self->Close();
                              self->buffer_.commit(n);
                              if (self->source_) return self->WatchForClose();
                              if (self->next_request_) return self->ReadHead();
                              self->Drain();  // closing after the response
                            });
  }

  // Ends the connection after a response whose request said close, or whose body was not read:
  // stop sending, then drop what the client still sends for a moment before closing.
  void CloseAfterResponse() {
    error_code ignored;
    Socket().shutdown(tcp::socket::shutdown_send, ignored);
    SetDeadline(kLingerTime);
    if (!watching_) Drain();  // else the watching read drains when it completes
  }

  void Drain() {
    Socket().async_read_some(net::buffer(drain_),
                             [self = this->shared_from_this()](error_code ec, size_t n) {
                               self->drained_ += n;
                               if (ec || self->closed_ || self->drained_ > kLingerBytes)
                                 return self->Close();
                               self->Drain();
                             });
  }

  void SetDeadline(std::chrono::steady_clock::duration after) {
    deadline_.expires_after(after);
    deadline_.async_wait([weak = this->weak_from_this()](error_code ec) {
      auto self = weak.lock();
      // A handler already queued when the deadline moved sees an expiry still to come.
      if (ec || !self || self->deadline_.expiry() > std::chrono::steady_clock::now()) return;
      self->Close();
    });
  }
  void ClearDeadline() { deadline_.expires_at(std::chrono::steady_clock::time_point::max()); }

  // From admission until the response begins (serve's drain waits for such requests).
  void SetInProgress(bool in_progress) {
    if (in_progress == in_progress_) return;
    in_progress_ = in_progress;
    state_->requests_in_progress += in_progress ? 1 : -1;
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    SetInProgress(false);
    if (source_) {
      source_->Abandoned();
      source_.reset();
    }
    error_code ignored;
    Socket().shutdown(tcp::socket::shutdown_both, ignored);
    Socket().close(ignored);
    deadline_.cancel();
  }

  Stream stream_;
  net::steady_timer deadline_;
  std::shared_ptr<ServerState> state_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  std::shared_ptr<HttpBodyStream> source_;  // the response being streamed
  std::string out_;                         // the bytes being written
  std::array<char, 16384> drain_{};
  size_t drained_ = 0;
  int64_t served_ = 0;
  bool keep_alive_ = true;
  bool closed_ = false;
  bool writing_ = false;
  bool watching_ = false;
  bool next_request_ = false;
  bool in_progress_ = false;
};

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return boost::beast::iequals(a, b);
}

}  // namespace

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (EqualsIgnoringCase(key, name)) return value;
  }
  return std::string();
}

void HttpBodyStream::SetWake(std::function<void()> wake) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_ = std::move(wake);
  }
  Wake();  // for what arrived before the server was listening
}

void HttpBodyStream::Wake() {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake = wake_;
  }
  if (wake) wake();
}

struct HttpServer::Impl {
  std::shared_ptr<ServerState> state = std::make_shared<ServerState>();
  std::unique_ptr<net::io_context> io;
  std::optional<net::ssl::context> tls;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_retry;
  std::vector<std::thread> threads;

  Status SetUpTls() {
    const HttpServerOptions& o = state->options;
    try {
      tls.emplace(net::ssl::context::tls_server);
      tls->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                       net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                       net::ssl::context::no_tlsv1_1);
      tls->use_certificate_chain_file(o.tls_cert);
      tls->use_private_key_file(o.tls_key, net::ssl::context::pem);
      if (!o.tls_client_ca.empty()) {
        tls->load_verify_file(o.tls_client_ca);
        tls->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
      }
    } catch (const boost::system::system_error& e) {
      return InvalidArgument(
          o.name + ": cannot set up TLS with --tls-cert/--tls-key/--tls-client-ca: " + e.what());
    }
    return Status::Ok();
  }

  void Accept() {
    acceptor->async_accept(net::make_strand(*io), [this](error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
      if (ec) {  // out of descriptors, say: try again shortly rather than spin
        spdlog::warn("{}: accepting a connection: {}", state->options.name, ec.message());
        accept_retry->expires_after(std::chrono::milliseconds(100));
        accept_retry->async_wait([this](error_code wait_error) {
          if (!wait_error) Accept();
        });
        return;
      }
      if (state->connections.load() >= state->options.max_connections) {
        error_code ignored;
        socket.close(ignored);
      } else {
        error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        if (tls) {
          std::make_shared<Session<TlsStream>>(TlsStream(std::move(socket), *tls), state)->Start();
        } else {
          std::make_shared<Session<tcp::socket>>(std::move(socket), state)->Start();
        }
      }
      Accept();
    });
  }
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandlers handlers)
    : impl_(std::make_unique<Impl>()) {
  impl_->state->options = std::move(options);
  impl_->state->handlers = std::move(handlers);
}

HttpServer::~HttpServer() {
  Stop();
}

Result<int> HttpServer::Start() {
  const HttpServerOptions& o = impl_->state->options;
  impl_->io = std::make_unique<net::io_context>(std::max(1, o.threads));
  if (!o.tls_cert.empty()) RETURN_IF_ERROR(impl_->SetUpTls());
  const std::string where = fmt::format("{}: cannot listen on {}:{}", o.name, o.host, o.port);
  error_code ec;
  tcp::resolver resolver(*impl_->io);
  const auto endpoints =
      resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty())
    return Status(StatusCode::kUnavailable, where + " (" + ec.message() + ")");
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl_->acceptor.emplace(*impl_->io);
  impl_->accept_retry.emplace(*impl_->io);
  tcp::acceptor& acceptor = *impl_->acceptor;
  if (acceptor.open(endpoint.protocol(), ec); !ec)
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status(StatusCode::kUnavailable, where + " (" + ec.message() + ")");
  const int port = acceptor.local_endpoint().port();
  impl_->Accept();
  for (int i = 0; i < std::max(1, o.threads); ++i) {
    impl_->threads.emplace_back([io = impl_->io.get()] {
      auto work = net::make_work_guard(*io);
      io->run();
    });
  }
  return port;
}

int HttpServer::requests_in_progress() const {
  return impl_->state->requests_in_progress.load();
}

void HttpServer::Stop() {
  if (!impl_->io) return;
  {
    std::lock_guard<std::mutex> lock(impl_->state->guard->mutex);
    impl_->state->guard->alive = false;
  }
  impl_->io->stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
  impl_->accept_retry.reset();
  impl_->acceptor.reset();
  impl_->io.reset();  // destroys the connections' pending handlers, and so the connections
}

}  // namespace tpserve

#include "comm/rendezvous_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <gloo/common/error.h>

namespace tpserve {
namespace {

constexpr uint8_t kSet = 1, kGet = 2;
constexpr uint8_t kOk = 0, kTimedOut = 1;
constexpr uint32_t kMaxFrame = 64u << 20;  // no rendezvous value comes near this

bool SendAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t sent = ::send(fd, p, size, MSG_NOSIGNAL);
    if (sent <= 0) {
      if (sent < 0 && errno == EINTR) continue;
      return false;
    }
    p += sent;
    size -= static_cast<size_t>(sent);
  }
  return true;
}

bool ReceiveAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = ::recv(fd, p, size, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return false;
    }
    p += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

bool ReceiveBytes(int fd, std::vector<char>* out) {
  uint32_t size = 0;
  if (!ReceiveAll(fd, &size, sizeof(size)) || size > kMaxFrame) return false;
  out->resize(size);
  return size == 0 || ReceiveAll(fd, out->data(), size);
}

bool SendBytes(int fd, const void* data, uint32_t size) {
  return SendAll(fd, &size, sizeof(size)) && (size == 0 || SendAll(fd, data, size));
}

// Retrying a connect to a local port nobody listens on can end in TCP's simultaneous open with
// itself (the kernel picked the same port as the source): a connection to nobody.
bool ConnectedToItself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_length = sizeof(local), peer_length = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0) {
    return false;
  }
  return local_length == peer_length && std::memcmp(&local, &peer, local_length) == 0;
}

Result<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const int error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (error != 0) return InvalidArgument("rendezvous address " + host + ": " + ::gai_strerror(error));
  return result;
}

}  // namespace

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(const std::string& host, int port) {
  ASSIGN_OR_RETURN(addrinfo * addresses, Resolve(host, port, true));
  std::unique_ptr<RendezvousServer> server(new RendezvousServer());
  std::string error = "no address";
  for (addrinfo* a = addresses; a != nullptr && server->listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      server->listen_fd_ = fd;
      sockaddr_storage bound{};
      socklen_t length = sizeof(bound);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
      server->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                       : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(addresses);
  if (server->listen_fd_ < 0) {
    return Status(StatusCode::kUnavailable, "rendezvous: cannot listen on " + host + ":" + std::to_string(port) + ": " + error);
  }
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

RendezvousServer::~RendezvousServer() {
  stop_ = true;
  changed_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : connection_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& thread : connections_) thread.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void RendezvousServer::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(mutex_);
    connection_fds_.push_back(fd);
    connections_.emplace_back([this, fd] { Serve(fd); });
  }
}

void RendezvousServer::Serve(int fd) {
  while (!stop_) {
    uint8_t op = 0;
    uint32_t timeout_ms = 0;
    std::vector<char> key, value;
    if (!ReceiveAll(fd, &op, 1) || !ReceiveAll(fd, &timeout_ms, 4) || !ReceiveBytes(fd, &key)) break;
    const std::string name(key.begin(), key.end());
    if (op == kSet) {
      if (!ReceiveBytes(fd, &value)) break;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        values_[name] = std::move(value);
      }
      changed_.notify_all();
      if (!SendAll(fd, &kOk, 1)) break;
    } else if (op == kGet) {
      std::unique_lock<std::mutex> lock(mutex_);
      const bool found = changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                           [&] { return stop_ || values_.count(name) > 0; });
      if (!found || stop_) {
        lock.unlock();
        if (!SendAll(fd, &kTimedOut, 1)) break;
        continue;
      }
      value = values_[name];
      lock.unlock();
      if (!SendAll(fd, &kOk, 1) || !SendBytes(fd, value.data(), static_cast<uint32_t>(value.size()))) break;
    } else {
      break;  // not our protocol: drop the connection
    }
  }
  ::close(fd);
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase(connection_fds_, fd);
}

Result<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(const std::string& host, int port,
                                                                    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string error;
  while (true) {
    ASSIGN_OR_RETURN(addrinfo * addresses, Resolve(host, port, false));
    for (addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 && !ConnectedToItself(fd)) {
        ::freeaddrinfo(addresses);
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return std::unique_ptr<RendezvousClient>(new RendezvousClient(fd, timeout));
      }
      error = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(addresses);
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status(StatusCode::kDeadlineExceeded, "rendezvous: no leader at " + host + ":" + std::to_string(port) +
                                                       " within " + std::to_string(timeout.count()) + " ms (" + error + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

RendezvousClient::~RendezvousClient() { ::close(fd_); }

Result<std::vector<char>> RendezvousClient::Request(uint8_t op, const std::string& key, const std::vector<char>& value,
                                                     std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t timeout_ms = static_cast<uint32_t>(std::min<int64_t>(timeout.count(), UINT32_MAX));
  bool ok = SendAll(fd_, &op, 1) && SendAll(fd_, &timeout_ms, 4) &&
            SendBytes(fd_, key.data(), static_cast<uint32_t>(key.size()));
  if (ok && op == kSet) ok = SendBytes(fd_, value.data(), static_cast<uint32_t>(value.size()));
  uint8_t status = 0;
  if (!ok || !ReceiveAll(fd_, &status, 1)) {
    return Status(StatusCode::kUnavailable, "rendezvous: the leader closed the connection");
  }
  if (status == kTimedOut) {
    return Status(StatusCode::kDeadlineExceeded,
                  "rendezvous: '" + key + "' did not appear within " + std::to_string(timeout.count()) + " ms");
  }
  std::vector<char> reply;
  if (op == kGet && !ReceiveBytes(fd_, &reply)) {
    return Status(StatusCode::kUnavailable, "rendezvous: the leader closed the connection");
  }
  return reply;
}

Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  return Request(kSet, key, std::vector<char>(value.begin(), value.end()), timeout_).status();
}

Result<std::string> RendezvousClient::Get(const std::string& key, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::vector<char> value, Request(kGet, key, {}, timeout));
  return std::string(value.begin(), value.end());
}

void RendezvousClient::set(const std::string& key, const std::vector<char>& data) {
  auto reply = Request(kSet, key, data, timeout_);
  if (!reply.ok()) throw gloo::IoException(reply.status().message());
}

std::vector<char> RendezvousClient::get(const std::string& key) {
  auto reply = Request(kGet, key, {}, timeout_);
  if (!reply.ok()) throw gloo::IoException(reply.status().message());
  return *reply;
}

void RendezvousClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RendezvousClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  for (const std::string& key : keys) {
    auto reply = Request(kGet, key, {}, timeout);
    if (!reply.ok()) throw gloo::IoException(reply.status().message());
  }
}

}  // namespace tpserve

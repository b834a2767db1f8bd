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
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>

namespace tpserve {
namespace {

constexpr uint8_t kSet = 1, kGet = 2;
constexpr uint8_t kOk = 0, kTimedOut = 1, kRefused = 2;
constexpr uint32_t kMaxFrame = 64u << 20;  // the most any frame may claim, before the store's own limits
constexpr size_t kMaxReason = 1024;
constexpr std::array<char, 8> kMagic = {'T', 'P', 'S', 'R', 'D', 'V', '0', '1'};
constexpr size_t kNonceBytes = 32, kMacBytes = 32;
constexpr std::string_view kMacContext = "tpserve-rendezvous-v1";

using Mac = std::array<unsigned char, kMacBytes>;

// HMAC-SHA256(secret, context || nonce || member).
Mac MemberMac(const std::string& secret, const unsigned char* nonce, uint32_t member) {
  std::string message(kMacContext);
  message.append(reinterpret_cast<const char*>(nonce), kNonceBytes);
  message.append(reinterpret_cast<const char*>(&member), sizeof(member));
  Mac mac{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), mac.data(), &length);
  return mac;
}

void SetReceiveTimeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{.tv_sec = static_cast<time_t>(timeout.count() / 1000),
             .tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

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

bool ReceiveBytes(int fd, std::vector<char>* out, size_t limit = kMaxFrame) {
  uint32_t size = 0;
  if (!ReceiveAll(fd, &size, sizeof(size)) || size > limit) return false;
  out->resize(size);
  return size == 0 || ReceiveAll(fd, out->data(), size);
}

bool SendBytes(int fd, const void* data, uint32_t size) {
  return SendAll(fd, &size, sizeof(size)) && (size == 0 || SendAll(fd, data, size));
}

bool SendRefusal(int fd, const std::string& reason) {
  return SendAll(fd, &kRefused, 1) && SendBytes(fd, reason.data(), static_cast<uint32_t>(reason.size()));
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

int RendezvousKeyOwner(const std::string& key, int members) {
  const size_t slash = key.rfind('/');
  std::string last = slash == std::string::npos ? key : key.substr(slash + 1);
  constexpr std::string_view kGlooRank = "rank_";  // Gloo's own keys: "<prefix>/rank_<r>" and "<prefix>/<r>"
  if (last.compare(0, kGlooRank.size(), kGlooRank) == 0) last.erase(0, kGlooRank.size());
  if (last.empty() || last.size() > 9 || last.find_first_not_of("0123456789") != std::string::npos) return 0;
  const int member = std::stoi(last);
  return member < members ? member : 0;
}

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(const std::string& host, int port, int members,
                                                                  std::string secret, RendezvousLimits limits) {
  ASSIGN_OR_RETURN(addrinfo * addresses, Resolve(host, port, true));
  std::unique_ptr<RendezvousServer> server(new RendezvousServer());
  server->members_ = members;
  server->secret_ = std::move(secret);
  server->limits_ = limits;
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
  accepting_ = false;
  changed_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& c : connections_) ::shutdown(c->fd, SHUT_RDWR);
  }
  for (const auto& c : connections_) c->thread.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void RendezvousServer::StopAccepting() { accepting_ = false; }

int RendezvousServer::connections() {
  std::lock_guard<std::mutex> lock(mutex_);
  int live = 0;
  for (const auto& c : connections_) live += c->done ? 0 : 1;
  return live;
}

int RendezvousServer::connected_members() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(connected_members_.size());
}

void RendezvousServer::ReapFinished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->done) {
        finished.push_back(std::move(*it));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& c : finished) c->thread.join();
}

void RendezvousServer::AcceptLoop() {
  // Each member holds one connection; a few more may be authenticating (a member that restarts).
  const size_t max_connections = static_cast<size_t>(members_) + 4;
  while (!stop_ && accepting_) {
    ReapFinished();
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    if (connections_.size() >= max_connections) {
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    Connection* c = connection.get();
    connections_.push_back(std::move(connection));
    c->thread = std::thread([this, c] { Serve(c); });
  }
  // The group has formed (or the server is stopping): nobody else may connect.
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

int RendezvousServer::Authenticate(int fd) {
  std::array<unsigned char, kNonceBytes> nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) return -1;
  SetReceiveTimeout(fd, limits_.handshake_timeout);
  uint32_t member = 0;
  Mac mac{};
  if (!SendAll(fd, kMagic.data(), kMagic.size()) || !SendAll(fd, nonce.data(), nonce.size()) ||
      !ReceiveAll(fd, &member, sizeof(member)) || !ReceiveAll(fd, mac.data(), mac.size())) {
    return -1;
  }
  SetReceiveTimeout(fd, std::chrono::milliseconds(0));  // members wait on requests as long as the group lives
  const Mac want = MemberMac(secret_, nonce.data(), member);
  if (CRYPTO_memcmp(want.data(), mac.data(), mac.size()) != 0) {
    SendRefusal(fd, "wrong group secret (--group-secret-file / TPSERVE_GROUP_SECRET differ)");
    return -1;
  }
  if (member >= static_cast<uint32_t>(members_)) {
    SendRefusal(fd, "member " + std::to_string(member) + " is outside the group of " + std::to_string(members_));
    return -1;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!connected_members_.insert(static_cast<int>(member)).second) {
      SendRefusal(fd, "member " + std::to_string(member) + " is already connected (two processes with one --node-rank?)");
      return -1;
    }
  }
  if (!SendAll(fd, &kOk, 1)) return -1;
  return static_cast<int>(member);
}

void RendezvousServer::Serve(Connection* connection) {
  const int fd = connection->fd;
  const int member = Authenticate(fd);
  while (member >= 0 && !stop_) {
    uint8_t op = 0;
    uint32_t timeout_ms = 0;
    std::vector<char> key, value;
    if (!ReceiveAll(fd, &op, 1) || !ReceiveAll(fd, &timeout_ms, 4) || !ReceiveBytes(fd, &key, limits_.max_key_bytes)) {
      break;
    }
    const std::string name(key.begin(), key.end());
    if (op == kSet) {
      if (!ReceiveBytes(fd, &value, limits_.max_value_bytes)) break;
      std::string refusal;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto existing = values_.find(name);
        const size_t replaced = existing == values_.end() ? 0 : name.size() + existing->second.size();
        if (const int owner = RendezvousKeyOwner(name, members_); owner != member) {
          refusal = "member " + std::to_string(member) + " may not write '" + name + "' (member " +
                    std::to_string(owner) + "'s key)";
        } else if (stored_bytes_ - replaced + name.size() + value.size() > limits_.max_store_bytes) {
          refusal = "the store is full (" + std::to_string(limits_.max_store_bytes) + " bytes)";
        } else {
          stored_bytes_ = stored_bytes_ - replaced + name.size() + value.size();
          values_[name] = std::move(value);
        }
      }
      if (!refusal.empty()) {
        if (!SendRefusal(fd, refusal)) break;
        continue;
      }
      changed_.notify_all();
      if (!SendAll(fd, &kOk, 1)) break;
    } else if (op == kGet) {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return stop_ || values_.count(name) > 0; });
      const auto found = values_.find(name);
      if (found == values_.end()) {
        lock.unlock();
        // A server going away closes the connection (the member says so), rather than claim a timeout.
        if (stop_ || !SendAll(fd, &kTimedOut, 1)) break;
        continue;
      }
      value = found->second;
      lock.unlock();
      if (!SendAll(fd, &kOk, 1) || !SendBytes(fd, value.data(), static_cast<uint32_t>(value.size()))) break;
    } else {
      break;  // not our protocol: drop the connection
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  std::lock_guard<std::mutex> lock(mutex_);
  if (member >= 0) connected_members_.erase(member);
  ::close(fd);
  connection->fd = -1;
  connection->done = true;
}

namespace {

// The member's half of the handshake on a connected socket: Ok, or why the leader refused it.
Status ProveMembership(int fd, int member, const std::string& secret, std::chrono::milliseconds timeout) {
  SetReceiveTimeout(fd, timeout);
  std::array<char, kMagic.size()> magic{};
  std::array<unsigned char, kNonceBytes> nonce{};
  if (!ReceiveAll(fd, magic.data(), magic.size()) || magic != kMagic || !ReceiveAll(fd, nonce.data(), nonce.size())) {
    return Status(StatusCode::kUnavailable, "rendezvous: the leader's port does not speak tpserve's rendezvous");
  }
  const uint32_t index = static_cast<uint32_t>(member);
  const Mac mac = MemberMac(secret, nonce.data(), index);
  uint8_t status = kRefused;
  if (!SendAll(fd, &index, sizeof(index)) || !SendAll(fd, mac.data(), mac.size()) || !ReceiveAll(fd, &status, 1)) {
    return Status(StatusCode::kUnavailable, "rendezvous: the leader closed the connection during the handshake");
  }
  SetReceiveTimeout(fd, std::chrono::milliseconds(0));
  if (status == kOk) return Status::Ok();
  std::vector<char> reason;
  ReceiveBytes(fd, &reason, kMaxReason);
  return Status(StatusCode::kUnauthenticated, "rendezvous: the leader refused member " + std::to_string(member) +
                                                  ": " + std::string(reason.begin(), reason.end()));
}

}  // namespace

Result<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(const std::string& host, int port, int member,
                                                                    const std::string& secret,
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
        if (Status proved = ProveMembership(fd, member, secret, timeout); !proved.ok()) {
          ::close(fd);
          return proved;
        }
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
  if (status == kRefused) {
    std::vector<char> reason;
    if (!ReceiveBytes(fd_, &reason, kMaxReason)) {
      return Status(StatusCode::kUnavailable, "rendezvous: the leader closed the connection");
    }
    return Status(StatusCode::kUnauthenticated, "rendezvous: " + std::string(reason.begin(), reason.end()));
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

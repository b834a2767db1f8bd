// The rendezvous of a multi-process group: a small key-value store that the leader serves over
// TCP and every member (the leader too) reads and writes — Gloo's connection addresses, and each
// member's model/flag fingerprint. It is only the meeting point; collectives run on Gloo.
// Every wait has a timeout, so a member that never comes is an error, not a hang.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "common/status.h"

namespace tpserve {

// The leader's side: listens on host:port (port 0 picks a free one) until destroyed.
class RendezvousServer {
 public:
  static Result<std::unique_ptr<RendezvousServer>> Start(const std::string& host, int port);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }

 private:
  RendezvousServer() = default;
  void AcceptLoop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
  std::vector<std::thread> connections_;
  std::vector<int> connection_fds_;
};

// A member's side, as the Store Gloo's rendezvous takes. Connects (retrying until `timeout`, the
// leader may start later); set/get/wait throw gloo::IoException on failure or timeout, as Gloo's
// own stores do.
class RendezvousClient : public gloo::rendezvous::Store {
 public:
  static Result<std::unique_ptr<RendezvousClient>> Connect(const std::string& host, int port,
                                                           std::chrono::milliseconds timeout);
  ~RendezvousClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // The same without exceptions, for tpserve's own use.
  Status Set(const std::string& key, const std::string& value);
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout);

 private:
  RendezvousClient(int fd, std::chrono::milliseconds timeout) : fd_(fd), timeout_(timeout) {}
  Result<std::vector<char>> Request(uint8_t op, const std::string& key, const std::vector<char>& value,
                                    std::chrono::milliseconds timeout);

  int fd_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;  // one request at a time on the connection
};

}  // namespace tpserve

// The rendezvous of a multi-process group: a small key-value store that the leader serves over
// TCP and every member (the leader too) reads and writes — Gloo's connection addresses, and each
// member's model/flag fingerprint. It is only the meeting point; collectives run on Gloo.
// Every wait has a timeout, so a member that never comes is an error, not a hang.
//
// The port is reachable by whoever can reach the leader, so it trusts no one by default:
// - a connection must first prove it is a member: the server sends a fresh nonce, the client
//   answers with its member index and HMAC-SHA256(group secret, nonce, index); a wrong answer,
//   an index outside the group or a second connection for a connected member is refused;
// - a member writes only its own keys: a key whose last '/'-part is a member index (or "rank_" and
//   one, as Gloo writes) belongs to that member, every other key to the leader;
// - keys, values and the whole store are bounded, connections are capped and each one's thread is
//   reaped when it ends, and a connection that does not authenticate in time is closed;
// - once the group has formed the leader stops accepting connections.
// An empty secret still runs the handshake (the HMAC key is then empty), so it stops strangers only
// as far as the group's flags are secret: docs/DEPLOY.md says to give one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "common/status.h"

namespace tpserve {

struct RendezvousLimits {
  size_t max_key_bytes = 256;
  size_t max_value_bytes = 1 << 20;
  size_t max_store_bytes = 16 << 20;  // keys and values together
  std::chrono::milliseconds handshake_timeout{5000};
};

// The leader's side: listens on host:port (port 0 picks a free one) until destroyed.
class RendezvousServer {
 public:
  static Result<std::unique_ptr<RendezvousServer>> Start(const std::string& host, int port, int members,
                                                         std::string secret, RendezvousLimits limits = {});
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }
  // The group has formed: close the listening socket (the members' connections stay).
  void StopAccepting();
  // Connections being served now (for tests).
  int connections();
  // Members authenticated and still connected (the leader's own client included): a member whose
  // process ended has closed its connection.
  int connected_members();

 private:
  struct Connection {
    int fd = -1;
    int member = -1;  // once authenticated
    std::atomic<bool> done{false};
    std::thread thread;
  };

  RendezvousServer() = default;
  void AcceptLoop();
  void Serve(Connection* connection);
  // The handshake; the member index, or -1 (the connection is then closed).
  int Authenticate(int fd);
  void ReapFinished();

  int listen_fd_ = -1;
  int port_ = 0;
  int members_ = 1;
  std::string secret_;
  RendezvousLimits limits_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> accepting_{true};
  std::thread acceptor_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
  size_t stored_bytes_ = 0;
  std::set<int> connected_members_;
  std::list<std::unique_ptr<Connection>> connections_;
};

// A member's side, as the Store Gloo's rendezvous takes. Connects (retrying until `timeout`, the
// leader may start later) and authenticates as `member`; set/get/wait throw gloo::IoException on
// failure or timeout, as Gloo's own stores do.
class RendezvousClient : public gloo::rendezvous::Store {
 public:
  static Result<std::unique_ptr<RendezvousClient>> Connect(const std::string& host, int port, int member,
                                                           const std::string& secret,
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

// The member that may write `key` in a group of `members`: the number after the key's last '/'
// (or after "rank_" there, as Gloo names its keys) when it is a member index, else the leader (0).
int RendezvousKeyOwner(const std::string& key, int members);

}  // namespace tpserve

// Collectives among CPU ranks in different processes (or on different nodes), on Gloo (Debian's
// libgloo, the library PyTorch uses for CPU collectives) over TCP. AllReduce is an AllGather
// followed by a local sum in rank order, so it keeps comm/communicator.h's contract and gives
// bitwise the in-process communicator's result: "2 processes at TP=2" equals "TP=2 in one process".
#pragma once

#include <chrono>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/rendezvous_store.h"

namespace gloo {
class Context;
}

namespace tpserve {

struct GlooOptions {
  std::string bind_address = "127.0.0.1";  // this rank's address, reachable by its peers
  std::string prefix = "tp";                // keys in the store (one group per prefix)
  std::chrono::milliseconds timeout{30000}; // every collective (and connecting, unless connect_timeout)
  std::optional<std::chrono::milliseconds> connect_timeout;  // meeting the peers, when it differs
};

class GlooCommunicator final : public Communicator {
 public:
  // Meets the other `world_size - 1` ranks through `store` and connects to each (full mesh);
  // returns on no rank before every rank is connected.
  static Result<std::unique_ptr<GlooCommunicator>> Connect(gloo::rendezvous::Store& store, int rank, int world_size,
                                                           const GlooOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  Status AllReduceSum(float* data, size_t count) override;
  Status AllGather(const float* input, float* output, size_t count) override;
  Status ReduceScatterSum(const float* input, float* output, size_t count) override;
  Status Broadcast(float* data, size_t count, int root) override;
  Status Barrier() override;
  // `timeout`: this call's, when shorter than the communicator's.
  Status Barrier(std::chrono::milliseconds timeout);

  // Bytes, for the leader's step plans: `data` holds `size` bytes on root; every rank gets them,
  // in one message while they fit the current frame (4 KiB, grown to fit the largest so far).
  // `timeout`: this call's, when shorter than the communicator's.
  Status BroadcastBytes(std::vector<uint8_t>* data, int root,
                        std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

 private:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int world_size, std::chrono::milliseconds timeout);
  // `count` elements from root to every rank, within min(timeout, the communicator's).
  template <typename T>
  Status BroadcastRaw(T* data, size_t count, int root, std::chrono::milliseconds timeout);

  std::shared_ptr<gloo::Context> context_;
  int rank_, world_size_;
  std::chrono::milliseconds timeout_;
  std::vector<float> gathered_;  // [world_size * count] scratch of AllReduce / ReduceScatter
  size_t frame_bytes_ = 4096;    // BroadcastBytes' message: grows, alike on every rank
  std::vector<uint8_t> frame_;   // [frame_bytes_]
};

}  // namespace tpserve

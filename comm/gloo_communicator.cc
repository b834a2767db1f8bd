#include "comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <bit>

#include "comm/rank_order_sum.h"
#include <cstring>

namespace tpserve {
namespace {

// Gloo reports failures (a peer gone, a timeout) by throwing; tpserve returns a Status.
template <typename Fn>
Status Guard(const char* what, int rank, Fn&& fn) {
  try {
    fn();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable, "rank " + std::to_string(rank) + " " + what + " over Gloo: " + e.what());
  }
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int world_size,
                                   std::chrono::milliseconds timeout)
    : context_(std::move(context)), rank_(rank), world_size_(world_size), timeout_(timeout) {}

GlooCommunicator::~GlooCommunicator() = default;

Result<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Connect(gloo::rendezvous::Store& store, int rank,
                                                                    int world_size, const GlooOptions& options) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgument("Gloo rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  }
  std::shared_ptr<gloo::rendezvous::Context> context;
  RETURN_IF_ERROR(Guard("connect", rank, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.bind_address;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::PrefixStore prefixed(options.prefix, store);
    context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
    const std::chrono::milliseconds connect_timeout = options.connect_timeout.value_or(options.timeout);
    context->setTimeout(connect_timeout);
    context->connectFullMesh(prefixed, device);
    // connectFullMesh returns on the connecting side of a pair once the kernel has queued the
    // connection in the peer's listen backlog, before the peer has even read this rank's address:
    // a rank that left at once would close the pair under a peer still connecting ("Connection
    // closed by peer"). The barrier holds every rank until every rank is connected.
    gloo::BarrierOptions barrier(context);
    barrier.setTimeout(connect_timeout);
    gloo::barrier(barrier);
    context->setTimeout(options.timeout);
  }));
  return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(context, rank, world_size, options.timeout));
}

Status GlooCommunicator::AllGather(const float* input, float* output, size_t count) {
  return Guard("AllGather", rank_, [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(const_cast<float*>(input), count);
    opts.setOutput(output, count * world_size_);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

Status GlooCommunicator::AllReduceSum(float* data, size_t count) {
  if (world_size_ == 1) return Status::Ok();
  gathered_.resize(count * world_size_);
  RETURN_IF_ERROR(AllGather(data, gathered_.data(), count));
  SumChunksInRankOrder(gathered_.data(), world_size_, count, count, data);
  return Status::Ok();
}

Status GlooCommunicator::ReduceScatterSum(const float* input, float* output, size_t count) {
  const size_t per_rank = count * world_size_;
  std::vector<float> all(per_rank * world_size_);  // every rank's whole input
  RETURN_IF_ERROR(AllGather(input, all.data(), per_rank));
  SumChunksInRankOrder(all.data() + static_cast<size_t>(rank_) * count, world_size_, per_rank, count, output);
  return Status::Ok();
}

template <typename T>
Status GlooCommunicator::BroadcastRaw(T* data, size_t count, int root, std::chrono::milliseconds timeout) {
  return Guard("Broadcast", rank_, [&] {
    gloo::BroadcastOptions opts(context_);
    if (rank_ == root) opts.setInput(data, count);
    opts.setOutput(data, count);
    opts.setRoot(root);
    opts.setTimeout(std::min(timeout, timeout_));
    gloo::broadcast(opts);
  });
}

Status GlooCommunicator::Broadcast(float* data, size_t count, int root) {
  return BroadcastRaw(data, count, root, timeout_);
}

Status GlooCommunicator::BroadcastBytes(std::vector<uint8_t>* data, int root, std::chrono::milliseconds timeout) {
  // One message in the common case: the frame [u64 size][payload...] of frame_bytes_, a size every
  // rank knows. A payload that does not fit sends its tail in a second message, and every rank
  // grows the frame alike, so the next one fits.
  constexpr size_t kHeader = sizeof(uint64_t);
  frame_.resize(frame_bytes_);
  uint64_t size = data->size();
  if (rank_ == root) {
    std::memcpy(frame_.data(), &size, kHeader);
    if (size > 0) std::memcpy(frame_.data() + kHeader, data->data(), std::min<size_t>(size, frame_bytes_ - kHeader));
  }
  RETURN_IF_ERROR(BroadcastRaw(frame_.data(), frame_bytes_, root, timeout));
  std::memcpy(&size, frame_.data(), kHeader);
  const size_t head = std::min<size_t>(size, frame_bytes_ - kHeader);
  if (rank_ != root) {
    data->resize(size);
    if (head > 0) std::memcpy(data->data(), frame_.data() + kHeader, head);  // data() may be null when empty
  }
  if (size > head) {
    RETURN_IF_ERROR(BroadcastRaw(data->data() + head, size - head, root, timeout));
    frame_bytes_ = std::bit_ceil(size + kHeader);
  }
  return Status::Ok();
}

Status GlooCommunicator::Barrier() { return Barrier(timeout_); }

Status GlooCommunicator::Barrier(std::chrono::milliseconds timeout) {
  return Guard("Barrier", rank_, [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(std::min(timeout, timeout_));
    gloo::barrier(opts);
  });
}

}  // namespace tpserve

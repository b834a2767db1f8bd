#include <cuda_runtime.h>
#include <nccl.h>

#include "comm/cuda/nccl_communicator.h"

#include <atomic>
#include <cstring>
#include <memory>


namespace tpserve::cuda {
namespace {

Status NcclStatus(ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return Status::Ok();
  const StatusCode code = result == ncclInvalidArgument || result == ncclInvalidUsage ? StatusCode::kInvalidArgument
                                                                                      : StatusCode::kUnavailable;
  return Status(code, what + ": NCCL " + ncclGetErrorString(result));
}

ncclDataType_t NcclType(DeviceDtype dtype) { return dtype == DeviceDtype::kF32 ? ncclFloat32 : ncclBfloat16; }

// Shared by the ranks of one process: a rank that aborts its communicator tells its in-process
// peers, which abort theirs at their next AsyncError (on their own threads). Peers in other
// processes see NCCL's error or their collective timeout.
struct LocalGroup {
  std::atomic<int> aborted_by{-1};
};

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world_size, std::shared_ptr<LocalGroup> local)
      : comm_(comm), rank_(rank), world_size_(world_size), local_(std::move(local)) {}
  ~NcclCommunicator() override {
    if (aborted_) return;
    // Destroying flushes against the peers; after a peer aborted, abort instead.
    if (local_->aborted_by.load() >= 0) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string name() const override { return "nccl " + NcclVersion(); }

  Status AllReduceSum(void* data, size_t count, DeviceDtype dtype, void* stream) override {
    RETURN_IF_ERROR(Usable());
    return NcclStatus(ncclAllReduce(data, data, count, NcclType(dtype), ncclSum, comm_,
                                    static_cast<cudaStream_t>(stream)),
                      "rank " + std::to_string(rank_) + " ncclAllReduce");
  }
  Status AllGather(const void* input, void* output, size_t count, DeviceDtype dtype, void* stream) override {
    RETURN_IF_ERROR(Usable());
    return NcclStatus(ncclAllGather(input, output, count, NcclType(dtype), comm_, static_cast<cudaStream_t>(stream)),
                      "rank " + std::to_string(rank_) + " ncclAllGather");
  }
  Status AsyncError() override {
    RETURN_IF_ERROR(Usable());
    ncclResult_t async = ncclSuccess;
    RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError"));
    return NcclStatus(async, "rank " + std::to_string(rank_) + " NCCL asynchronous error");
  }
  // Unavailable once this rank or an in-process peer aborted (an aborted communicator is freed:
  // no call may reach NCCL with it).
  Status Usable() const {
    if (aborted_) return Status(StatusCode::kUnavailable, "rank " + std::to_string(rank_) + ": NCCL communicator aborted");
    if (const int by = local_->aborted_by.load(); by >= 0) {
      return Status(StatusCode::kUnavailable,
                    "rank " + std::to_string(rank_) + ": rank " + std::to_string(by) + " aborted the NCCL group");
    }
    return Status::Ok();
  }

  void Abort() override {
    if (aborted_) return;
    aborted_ = true;
    int none = -1;
    local_->aborted_by.compare_exchange_strong(none, rank_);
    ncclCommAbort(comm_);
  }

 private:
  ncclComm_t comm_;
  int rank_, world_size_;
  std::shared_ptr<LocalGroup> local_;
  bool aborted_ = false;
};

}  // namespace

std::string NcclVersion() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "unknown";
  return std::to_string(version / 10000) + "." + std::to_string(version % 10000 / 100) + "." +
         std::to_string(version % 100);
}

Result<std::vector<std::unique_ptr<DeviceCommunicator>>> CreateNcclGroup(const std::vector<int>& devices) {
  std::vector<ncclComm_t> comms(devices.size());
  RETURN_IF_ERROR(NcclStatus(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()),
                             "ncclCommInitAll over " + std::to_string(devices.size()) + " GPUs"));
  std::vector<std::unique_ptr<DeviceCommunicator>> group;
  auto local = std::make_shared<LocalGroup>();
  for (size_t r = 0; r < comms.size(); ++r) {
    group.push_back(
        std::make_unique<NcclCommunicator>(comms[r], static_cast<int>(r), static_cast<int>(comms.size()), local));
  }
  return group;
}

Result<std::vector<std::unique_ptr<DeviceCommunicator>>> JoinNcclGroup(const std::vector<int>& devices, int first_rank,
                                                                       int world, const std::string& unique_id) {
  if (unique_id.size() != sizeof(ncclUniqueId)) {
    return InvalidArgument("an ncclUniqueId of " + std::to_string(unique_id.size()) + " bytes, expected " +
                           std::to_string(sizeof(ncclUniqueId)));
  }
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));
  std::vector<ncclComm_t> comms(devices.size());
  // Several ranks of one process join inside one group call, or each would wait for the others.
  RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  for (size_t i = 0; i < devices.size(); ++i) {
    const cudaError_t set = cudaSetDevice(devices[i]);
    if (set != cudaSuccess) {
      (void)ncclGroupEnd();
      return Status(StatusCode::kFailedPrecondition, std::string("cudaSetDevice: ") + cudaGetErrorString(set));
    }
    const ncclResult_t joined = ncclCommInitRank(&comms[i], world, id, first_rank + static_cast<int>(i));
    if (joined != ncclSuccess) {
      (void)ncclGroupEnd();
      return NcclStatus(joined, "ncclCommInitRank rank " + std::to_string(first_rank + i));
    }
  }
  RETURN_IF_ERROR(NcclStatus(ncclGroupEnd(), "ncclCommInitRank of ranks " + std::to_string(first_rank) + ".." +
                                                 std::to_string(first_rank + devices.size() - 1) + " of " +
                                                 std::to_string(world)));
  std::vector<std::unique_ptr<DeviceCommunicator>> group;
  auto local = std::make_shared<LocalGroup>();
  for (size_t i = 0; i < comms.size(); ++i) {
    group.push_back(std::make_unique<NcclCommunicator>(comms[i], first_rank + static_cast<int>(i), world, local));
  }
  return group;
}

Result<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

}  // namespace tpserve::cuda

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
  ncclComm_t comm() const { return comm_; }

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

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
class NcclSymmetricWindows final : public SymmetricWindows {
 public:
  NcclSymmetricWindows(std::vector<ncclComm_t> comms, std::vector<int> devices, int buffers_per_rank)
      : comms_(std::move(comms)), devices_(std::move(devices)), per_rank_(buffers_per_rank),
        buffers_(comms_.size() * per_rank_, nullptr), windows_(comms_.size() * per_rank_, nullptr) {}
  ~NcclSymmetricWindows() override {
    for (int index = 0; index < per_rank_; ++index) {
      if (windows_[index] == nullptr) continue;  // registered all ranks of an index, or none
      ncclGroupStart();
      for (size_t rank = 0; rank < comms_.size(); ++rank) ncclCommWindowDeregister(comms_[rank], windows_[At(rank, index)]);
      ncclGroupEnd();
    }
    for (size_t rank = 0; rank < comms_.size(); ++rank) {
      cudaSetDevice(devices_[rank]);
      for (int index = 0; index < per_rank_; ++index) {
        if (buffers_[At(rank, index)] != nullptr) ncclMemFree(buffers_[At(rank, index)]);
      }
    }
  }
  float* buffer(int rank, int index) const override { return static_cast<float*>(buffers_[At(rank, index)]); }

  Status Register(size_t bytes) {
    for (size_t rank = 0; rank < comms_.size(); ++rank) {
      if (cudaSetDevice(devices_[rank]) != cudaSuccess) return Internal("cudaSetDevice " + std::to_string(devices_[rank]));
      for (int index = 0; index < per_rank_; ++index) {
        RETURN_IF_ERROR(NcclStatus(ncclMemAlloc(&buffers_[At(rank, index)], bytes),
                                   "rank " + std::to_string(rank) + " ncclMemAlloc(" + std::to_string(bytes) + ")"));
      }
    }
    for (int index = 0; index < per_rank_; ++index) {
      std::vector<ncclWindow_t> windows(comms_.size(), nullptr);
      RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
      for (size_t rank = 0; rank < comms_.size(); ++rank) {
        const ncclResult_t registered = ncclCommWindowRegister(comms_[rank], buffers_[At(rank, index)], bytes,
                                                               &windows[rank], NCCL_WIN_COLL_SYMMETRIC);
        if (registered != ncclSuccess) {
          ncclGroupEnd();
          return NcclStatus(registered, "rank " + std::to_string(rank) + " ncclCommWindowRegister");
        }
      }
      RETURN_IF_ERROR(NcclStatus(ncclGroupEnd(), "ncclCommWindowRegister (group)"));
      for (size_t rank = 0; rank < comms_.size(); ++rank) windows_[At(rank, index)] = windows[rank];
    }
    return Status::Ok();
  }

 private:
  size_t At(size_t rank, int index) const { return rank * per_rank_ + index; }

  std::vector<ncclComm_t> comms_;
  std::vector<int> devices_;
  int per_rank_;
  std::vector<void*> buffers_;
  std::vector<ncclWindow_t> windows_;
};
#endif

}  // namespace

Result<std::unique_ptr<SymmetricWindows>> RegisterSymmetricWindows(const std::vector<DeviceCommunicator*>& comms,
                                                                   const std::vector<int>& devices, size_t bytes,
                                                                   int buffers_per_rank) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  std::vector<ncclComm_t> handles;
  for (DeviceCommunicator* comm : comms) {
    auto* nccl = dynamic_cast<NcclCommunicator*>(comm);
    if (nccl == nullptr) return InvalidArgument("symmetric windows need NCCL communicators, not " + comm->name());
    handles.push_back(nccl->comm());
  }
  auto windows = std::make_unique<NcclSymmetricWindows>(std::move(handles), devices, buffers_per_rank);
  RETURN_IF_ERROR(windows->Register(bytes));
  return std::unique_ptr<SymmetricWindows>(std::move(windows));
#else
  (void)comms, (void)devices, (void)bytes, (void)buffers_per_rank;
  return Unimplemented("symmetric windows need NCCL 2.27 or later; this build has " + NcclVersion());
#endif
}

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

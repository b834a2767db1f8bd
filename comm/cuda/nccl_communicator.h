// NCCL communicators for the ranks of one process, one GPU each (ncclCommInitAll): the
// DeviceCommunicator the CUDA backend uses whenever every rank has its own GPU. Module-internal.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/device_communicator.h"

namespace tpserve::cuda {

// "2.28.3", from ncclGetVersion.
std::string NcclVersion();

// One communicator per entry of `devices` (CUDA device ordinals, all different), rank r on devices[r].
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> CreateNcclGroup(const std::vector<int>& devices);

}  // namespace tpserve::cuda

// libnccl.so.2 opened at run time (dlopen): the functions the collectives call, so that memplan's binaries start
// where NCCL is not installed and need no NCCL beside them in the GPU machine's carry (internal to nccl_*.cpp).
#pragma once

#include <nccl.h>

#include <string>

namespace memplan::runtime::cuda {

struct NcclLibrary {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  std::string loaded_from;  // the file dlopen was given
  std::string error;        // why it did not load (empty when it did)
};

// The library, loaded once per process (thread-safe); `error` is set when it did not load.
const NcclLibrary& nccl_library() noexcept;
// The library, or ErrorKind::unsupported saying why not and how to point at it.
const NcclLibrary& require_nccl();
// Throws ErrorKind::runtime naming `what` when an NCCL call failed.
void check(ncclResult_t r, const std::string& what);

}  // namespace memplan::runtime::cuda

// NCCL collectives for data-parallel training, one process per GPU: the communicator, its stream beside the CUDA
// backend's compute stream, and the rendezvous through a file holding rank 0's ncclUniqueId. Built when nccl.h is
// found (MEMPLAN_HAVE_NCCL); libnccl.so.2 is opened at run time (docs/multi-gpu-run.md).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "runtime_allocator/collectives/collectives.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"

namespace memplan::runtime::cuda {

// True when libnccl.so.2 (or MEMPLAN_NCCL_LIBRARY, a path) loads and has the functions used here; never throws.
bool nccl_available() noexcept;
// The loaded library's version code (e.g. 22803 for 2.28.3); ErrorKind::unsupported when it does not load (the
// message says where it was looked for and how to point at it).
int nccl_version();

// An ncclUniqueId's 128 bytes.
struct NcclId {
  std::array<char, 128> bytes{};
};
// A fresh id (ncclGetUniqueId): what rank 0 makes.
NcclId make_nccl_id();
// The rendezvous of a job's ranks: rank 0 makes an id and writes it to `path` (a temporary renamed over it); the
// other ranks wait up to `timeout_seconds` for the file. The file must not be left from an earlier job (rank 0 of
// a job that initialized removes it: remove_nccl_id_file). ErrorKind::io when it cannot be written or does not
// appear in time, ErrorKind::usage for a rank outside [0, world).
NcclId exchange_nccl_id(const std::string& path, int rank, int world, double timeout_seconds = 300.0);
void remove_nccl_id_file(const std::string& path) noexcept;

// One rank's communicator on the device of `backend` (which it must outlive), with its own non-blocking stream.
// The constructor is collective: it returns once every rank of the job has joined (ncclCommInitRank).
// all_reduce_mean is ncclAllReduce with ncclAvg, in place; reduce_scatter_mean ncclReduceScatter with ncclAvg;
// all_gather ncclAllGather. Dtypes: float32, float64, bf16, f16, int32, int64 (all_gather: any).
class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(CudaBackend& backend, int rank, int world_size, const NcclId& id);
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  std::string name() const override { return "nccl"; }
  int rank() const noexcept override;
  int world_size() const noexcept override;
  void queue_waits(Backend::Event e) override;
  void record(Backend::Event e) override;
  void all_reduce_mean(std::byte* data, std::uint64_t count, analysis::DType dtype) override;
  void reduce_scatter_mean(const std::byte* send, std::byte* recv, std::uint64_t count, analysis::DType dtype) override;
  void all_gather(const std::byte* send, std::byte* recv, std::uint64_t count, analysis::DType dtype) override;
  void synchronize() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memplan::runtime::cuda

// NCCL collectives on a communication stream of their own, ordered against the CUDA backend's compute stream by its
// events; the rank-0 id handed to the other ranks through a file.
#include "runtime_allocator/collectives/nccl_collectives.hpp"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "runtime_allocator/cuda/cuda_context.hpp"
#include "runtime_allocator/collectives/nccl_library.hpp"

namespace memplan::runtime::cuda {

namespace {

ncclDataType_t nccl_type(analysis::DType d, const char* what) {
  switch (d) {
    case analysis::DType::f32:
      return ncclFloat32;
    case analysis::DType::f64:
      return ncclFloat64;
    case analysis::DType::f16:
      return ncclFloat16;
    case analysis::DType::bf16:
      return ncclBfloat16;
    case analysis::DType::i32:
      return ncclInt32;
    case analysis::DType::i64:
      return ncclInt64;
    default:
      fail(ErrorKind::unsupported, std::string("NCCL ") + what + " of dtype " + analysis::dtype_name(d) +
                                       " (float32, float64, f16, bf16, int32 and int64 only)");
  }
}

}  // namespace

bool nccl_available() noexcept { return nccl_library().error.empty(); }

int nccl_version() {
  int v = 0;
  check(require_nccl().get_version(&v), "ncclGetVersion");
  return v;
}

NcclId make_nccl_id() {
  ncclUniqueId id;
  check(require_nccl().get_unique_id(&id), "ncclGetUniqueId");
  NcclId out;
  static_assert(sizeof(id.internal) == sizeof(out.bytes));
  std::memcpy(out.bytes.data(), id.internal, sizeof(id.internal));
  return out;
}

NcclId exchange_nccl_id(const std::string& path, int rank, int world, double timeout_seconds) {
  if (rank < 0 || rank >= world)
    fail(ErrorKind::usage, "rank " + std::to_string(rank) + " outside a world of " + std::to_string(world));
  NcclId id;
  if (rank == 0) {
    id = make_nccl_id();
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(id.bytes.data(), static_cast<std::streamsize>(id.bytes.size()));
      if (!f) fail(ErrorKind::io, "cannot write the NCCL id to '" + tmp + "'");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);  // readers see the whole id or no file
    if (ec) fail(ErrorKind::io, "cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
    return id;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(id.bytes.data(), static_cast<std::streamsize>(id.bytes.size())) &&
        f.gcount() == static_cast<std::streamsize>(id.bytes.size()))
      return id;
    if (std::chrono::steady_clock::now() > until)
      fail(ErrorKind::io, "rank " + std::to_string(rank) + ": no NCCL id in '" + path + "' after " +
                              std::to_string(timeout_seconds) + " s (is rank 0 running, with the same --nccl-id-file?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void remove_nccl_id_file(const std::string& path) noexcept {
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

struct NcclCollectives::Impl {
  CudaBackend& backend;
  int rank = 0, world = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  Impl(CudaBackend& b, int r, int w) : backend(b), rank(r), world(w) {}
};

NcclCollectives::NcclCollectives(CudaBackend& backend, int rank, int world_size, const NcclId& id)
    : impl_(std::make_unique<Impl>(backend, rank, world_size)) {
  if (rank < 0 || rank >= world_size)
    fail(ErrorKind::usage, "rank " + std::to_string(rank) + " outside a world of " + std::to_string(world_size));
  const NcclLibrary& nccl = require_nccl();
  check(cudaSetDevice(backend.device()), "cudaSetDevice");
  // Higher priority than the compute stream: a gradient's all-reduce is not queued behind the rest of the backward.
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  check(cudaStreamCreateWithPriority(&impl_->stream, cudaStreamNonBlocking, greatest), "creating the NCCL stream");
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.bytes.data(), sizeof(uid.internal));
  const ncclResult_t r = nccl.comm_init_rank(&impl_->comm, world_size, uid, rank);
  if (r != ncclSuccess) {
    (void)cudaStreamDestroy(impl_->stream);
    check(r, "ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(world_size) + ")");
  }
}

NcclCollectives::~NcclCollectives() {
  if (impl_->comm) {
    (void)cudaStreamSynchronize(impl_->stream);
    (void)nccl_library().comm_destroy(impl_->comm);
  }
  if (impl_->stream) (void)cudaStreamDestroy(impl_->stream);
}

int NcclCollectives::rank() const noexcept { return impl_->rank; }
int NcclCollectives::world_size() const noexcept { return impl_->world; }

void NcclCollectives::queue_waits(Backend::Event e) {
  check(cudaStreamWaitEvent(impl_->stream, static_cast<cudaEvent_t>(impl_->backend.native_event(e)), 0), "NCCL stream wait");
}

void NcclCollectives::record(Backend::Event e) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(impl_->backend.native_event(e)), impl_->stream),
        "cudaEventRecord on the NCCL stream");
}

void NcclCollectives::all_reduce_mean(std::byte* data, std::uint64_t count, analysis::DType dtype) {
  const ncclDataType_t t = nccl_type(dtype, "all-reduce");
  if (count == 0) return;
  check(require_nccl().all_reduce(data, data, count, t, ncclAvg, impl_->comm, impl_->stream),
        "ncclAllReduce of " + std::to_string(count) + " elements");
}

void NcclCollectives::reduce_scatter_mean(const std::byte* send, std::byte* recv, std::uint64_t count, analysis::DType dtype) {
  const ncclDataType_t t = nccl_type(dtype, "reduce-scatter");
  if (count == 0) return;
  check(require_nccl().reduce_scatter(send, recv, count, t, ncclAvg, impl_->comm, impl_->stream),
        "ncclReduceScatter of " + std::to_string(count) + " elements per rank");
}

void NcclCollectives::all_gather(const std::byte* send, std::byte* recv, std::uint64_t count, analysis::DType dtype) {
  // Any dtype moves as bytes.
  const std::uint64_t bytes = checked_mul(count, analysis::dtype_bits(dtype) / 8, "all-gather bytes");
  if (bytes == 0) return;
  check(require_nccl().all_gather(send, recv, bytes, ncclUint8, impl_->comm, impl_->stream),
        "ncclAllGather of " + std::to_string(bytes) + " bytes per rank");
}

void NcclCollectives::synchronize() {
  check(cudaStreamSynchronize(impl_->stream), "synchronizing the NCCL stream");
  ncclResult_t async = ncclSuccess;
  check(require_nccl().comm_get_async_error(impl_->comm, &async), "ncclCommGetAsyncError");
  check(async, "an NCCL collective (asynchronous error)");
}

}  // namespace memplan::runtime::cuda

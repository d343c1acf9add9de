// Collective communication across the ranks of a data-parallel run: the interface the executor reduces weight
// gradients through (NCCL on GPUs: runtime_allocator/collectives/nccl_collectives.hpp), and N ranks as threads of one
// process on host memory (the CPU tests' stand-in).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "analysis/graph.hpp"
#include "runtime_allocator/backend.hpp"

namespace memplan::runtime {

// One rank's end of a communicator. Collectives run on the communicator's own queue, in call order, beside the
// backend's compute queue: `queue_waits` orders the queue after an event recorded on the compute queue
// (Backend::record_on_compute) and `record` records an event on it that the compute queue waits for
// (Backend::compute_waits). Where the backend has no queues (the host) a collective completes before it returns.
// Every rank must issue the same collectives in the same order (the same plan on every rank does). Buffers live in
// the backend's memory. Errors: ErrorKind::runtime from the library, ErrorKind::unsupported for a dtype it cannot
// reduce.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual std::string name() const = 0;
  virtual int rank() const noexcept = 0;
  virtual int world_size() const noexcept = 0;
  virtual void queue_waits(Backend::Event e) = 0;
  virtual void record(Backend::Event e) = 0;
  // In place: `count` elements of `dtype` at `data` become their mean over the ranks.
  virtual void all_reduce_mean(std::byte* data, std::uint64_t count, analysis::DType dtype) = 0;
  // ZeRO-2: `send` holds world_size() chunks of `count` elements; rank r receives the mean over the ranks of
  // chunk r into `recv` (`count` elements).
  virtual void reduce_scatter_mean(const std::byte* send, std::byte* recv, std::uint64_t count, analysis::DType dtype) = 0;
  // ZeRO: `recv` (world_size() chunks of `count` elements) receives every rank's `send`, in rank order.
  virtual void all_gather(const std::byte* send, std::byte* recv, std::uint64_t count, analysis::DType dtype) = 0;
  // Waits for everything queued so far.
  virtual void synchronize() = 0;
};

// N ranks as threads of one process, each with its own host backend: collectives meet at a barrier and compute on
// host memory, in rank order (deterministic). World size 1 is the single-process stand-in (every collective the
// identity). The group outlives its members; a member may be used by one thread at a time.
class LocalGroup {
 public:
  explicit LocalGroup(int world_size);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;
  // Rank `rank`'s end (ErrorKind::usage outside [0, world_size)).
  std::unique_ptr<Collectives> member(int rank);
  // Wakes every rank waiting in a collective, and fails every later one, with ErrorKind::runtime: a rank that
  // failed calls it so the others do not wait for it forever.
  void abort() noexcept;
  int world_size() const noexcept;
  struct State;  // shared by the group and its members (collectives.cpp)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace memplan::runtime

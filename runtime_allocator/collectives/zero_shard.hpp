// ZeRO-1/2 in a data-parallel run (DeepSpeed's stages 1 and 2, FSDP's SHARD_GRAD_OP; Rajbhandari et al., "ZeRO",
// SC'20): each gradient bucket is reduce-scattered, every rank runs the optimizer update on its shard of each weight
// with the optimizer state of that shard only, and the updated shards are all-gathered so that every rank holds the
// whole weights for the next step.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "analysis/graph.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/collectives/collectives.hpp"
#include "runtime_allocator/collectives/grad_sync.hpp"

namespace memplan::runtime {

// The optimizer state a ZeRO run keeps as shards instead of whole (the executor gives these tensors no memory): for
// each op reading one of `gradients`, every input it rewrites in place (OpInfo::rewrites) of role optimizer_state, with
// no producer, one element per gradient element and read by that op only, and the tensor that rewrites it.
std::vector<bool> zero_sharded_state(const analysis::Graph& g, const std::vector<analysis::TensorId>& gradients);

// What a rank holds and moves (ExecStats::zero).
struct ZeroStats {
  int stage = 0;                            // 0: not a ZeRO run
  std::uint64_t state_bytes = 0;            // the rank's shards of the sharded optimizer state
  std::uint64_t state_unsharded_bytes = 0;  // that state whole, as a run without ZeRO holds it
  std::uint64_t owned_elements = 0;         // weight elements this rank updates: its chunks and every bucket's tail
  std::uint64_t weight_elements = 0;        // elements of the weights updated on shards
  std::uint64_t gather_buffer_bytes = 0;    // the buffer the updated shards are all-gathered through
  std::size_t sharded_updates = 0;          // optimizer ops run on shards
  std::size_t all_gather_calls = 0;         // per run
};

// The executor's ZeRO hooks over its gradient buckets (GradientSync with `shard`). Every op that reads a reduced
// gradient must be an in-place optimizer update (OpKind::optimizer, every output rewriting an input, alias-safe):
// each of its operands is one element per gradient element (bound to the rank's element range) or a scalar (bound
// whole), which the optimizers memplan builds (SGD, momentum, Adam, AdamW; fp16 loss scaling's found_inf) are. The
// update runs as a copy of the op over shard-shaped tensors (a graph of its own, prepared on the backend's kernels),
// once per element range of the rank: its chunk of the bucket and the tail. Errors: ErrorKind::unsupported naming
// the op or tensor otherwise.
class ZeroOptimizer {
 public:
  ZeroOptimizer(const analysis::Graph& g, const std::vector<GradBucket>& buckets, const std::vector<std::byte*>& addr,
                const std::vector<bool>& sharded_state, Backend& backend, Collectives& coll, int stage);
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;
  // Whether op o runs on shards (even on none: a rank owning no element of a small weight skips its update).
  bool replaces(analysis::OpId o) const noexcept { return o < replaced_.size() && replaced_[o]; }
  // Op o's update over the rank's element ranges (the executor has ordered it after its gradient's reduction).
  void run(analysis::OpId o);
  // After the schedule: each bucket's updated chunk of the weights is copied into the gather buffer, all-gathered
  // there, and the other ranks' chunks copied back into the weights; bucket after bucket on the compute queue.
  void gather_weights();
  bool holds(analysis::TensorId t) const noexcept { return state_at_.count(t) != 0; }
  // A sharded state tensor (or the tensor rewriting it): this rank's elements in order, as a 1-D tensor.
  analysis::TensorData read(analysis::TensorId t) const;
  const ZeroStats& stats() const noexcept { return stats_; }

 private:
  struct Range {
    std::uint64_t lo = 0, hi = 0;  // elements of the gradient
  };
  struct Call {
    analysis::OpId op = analysis::kNoOp;  // in shard_graph_
    std::vector<std::byte*> in, out;
  };
  struct Span {  // one weight's elements in its gradient's bucket
    std::byte* weight = nullptr;
    std::uint64_t first = 0, count = 0;  // bucket elements
  };
  struct Gather {
    std::vector<Span> spans;
    std::uint64_t chunk = 0, elem = 0;
    analysis::DType dtype = analysis::DType::undefined;
    Backend::Event ready = 0, done = 0;
  };
  struct StateShard {
    std::uint64_t offset = 0, elements = 0;  // in state_
    analysis::DType dtype = analysis::DType::undefined;
  };
  struct Sharded {  // an op to run on shards: its gradient's bucket and the rank's ranges of the gradient
    analysis::OpId op = analysis::kNoOp;
    std::size_t bucket = 0;
    std::uint64_t first = 0;     // the gradient's first element in its bucket
    std::uint64_t elements = 0;  // the gradient's
    std::vector<Range> ranges;
  };
  std::vector<Sharded> find_sharded(const std::vector<GradBucket>& buckets, const std::vector<std::byte*>& addr,
                                    const std::vector<bool>& sharded_state);
  void place_state(const std::vector<Sharded>& ops, const std::vector<bool>& sharded_state);
  void build_calls(const Sharded& s, const std::vector<std::byte*>& addr, const std::vector<bool>& sharded_state);
  analysis::TensorId shard_tensor(analysis::TensorId t, std::vector<std::int64_t> dims);

  const analysis::Graph& g_;
  Backend& backend_;
  Collectives& coll_;
  analysis::Graph shard_graph_;
  std::vector<std::vector<Call>> calls_;  // per op of g_
  std::vector<bool> replaced_;            // per op of g_
  std::vector<Gather> gathers_;           // per bucket
  std::map<analysis::TensorId, StateShard> state_at_;
  DeviceBuffer state_, staging_;
  ZeroStats stats_;
};

}  // namespace memplan::runtime

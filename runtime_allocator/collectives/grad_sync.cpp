// Gradient buckets on a schedule, and the hooks that enqueue their all-reduces (reduce-scatters under ZeRO) and order the compute queue after them.
#include "runtime_allocator/collectives/grad_sync.hpp"

#include <algorithm>
#include <string>

namespace memplan::runtime {

using analysis::kNoOp;
using analysis::TensorId;

namespace {

struct Range {
  TensorId t = analysis::kNoTensor;
  std::byte* lo = nullptr;
  std::uint64_t bytes = 0;
  std::size_t produced = 0;     // step of its producer
  std::size_t first_touch = 0;  // first later step touching its bytes (schedule size: none)
};

}  // namespace

std::vector<GradBucket> gradient_buckets(const analysis::Graph& g, const std::vector<analysis::OpId>& schedule,
                                         const std::vector<std::byte*>& addr, const std::vector<TensorId>& gradients,
                                         std::uint64_t bucket_bytes, const TouchesFn& touches) {
  std::vector<std::size_t> step_of(g.ops.size(), schedule.size());
  for (std::size_t s = 0; s < schedule.size(); ++s) step_of[schedule[s]] = s;
  std::vector<TensorId> unique = gradients;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  std::vector<Range> ranges;
  for (TensorId t : unique) {
    if (t >= g.tensors.size())
      fail(ErrorKind::plan_mismatch, "gradient " + std::to_string(t) + " is no tensor of '" + g.name + "'");
    const auto& x = g.tensors[t];
    if (x.producer == kNoOp || step_of[x.producer] == schedule.size() || !addr[t])
      fail(ErrorKind::plan_mismatch,
           "gradient '" + x.name + "' has no producer on the schedule or no memory: it cannot be reduced");
    Range r{t, addr[t], x.bytes(), step_of[x.producer], schedule.size()};
    for (std::size_t s = r.produced + 1; s < schedule.size(); ++s)
      if (touches(s, r.lo, r.lo + r.bytes)) {
        r.first_touch = s;
        break;
      }
    ranges.push_back(r);
  }
  // Two gradients sharing bytes would be reduced twice (the mean of a mean is not the mean of the ranks' sums).
  std::vector<const Range*> by_addr;
  for (const auto& r : ranges) by_addr.push_back(&r);
  std::sort(by_addr.begin(), by_addr.end(),
            [](const Range* a, const Range* b) { return a->lo < b->lo || (a->lo == b->lo && a->t < b->t); });
  for (std::size_t k = 1; k < by_addr.size(); ++k)
    if (by_addr[k - 1]->lo + by_addr[k - 1]->bytes > by_addr[k]->lo)
      fail(ErrorKind::plan_mismatch, "gradients '" + g.tensors[by_addr[k - 1]->t].name + "' and '" +
                                         g.tensors[by_addr[k]->t].name + "' share bytes: each would be reduced twice");
  std::stable_sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.produced < b.produced || (a.produced == b.produced && a.lo < b.lo);
  });
  std::vector<GradBucket> buckets;
  for (const Range& r : ranges) {
    const analysis::DType dt = g.tensors[r.t].dtype;
    if (!buckets.empty()) {
      GradBucket& b = buckets.back();
      const bool above = b.data + b.bytes == r.lo, below = r.lo + r.bytes == b.data;
      // Joining moves the bucket's reduction to this producer: no member may be touched before then.
      if (b.dtype == dt && (above || below) && b.bytes + r.bytes <= bucket_bytes && r.produced < b.wait_step) {
        b.gradients.push_back(r.t);
        if (below) b.data = r.lo;
        b.bytes += r.bytes;
        b.after_step = r.produced;
        b.wait_step = std::min(b.wait_step, r.first_touch);
        continue;
      }
    }
    buckets.push_back(GradBucket{{r.t}, r.lo, r.bytes, dt, r.produced, r.first_touch, 0, 0});
  }
  return buckets;
}

BucketShard bucket_shard(std::uint64_t count, int world) {
  const auto w = static_cast<std::uint64_t>(std::max(world, 1));
  return {count / w, count % w};
}

GradientSync::GradientSync(std::vector<GradBucket> buckets, std::size_t steps, Backend& backend, Collectives& collectives,
                           bool shard)
    : buckets_(std::move(buckets)), backend_(backend), coll_(collectives), shard_(shard), enqueue_at_(steps), wait_at_(steps) {
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    GradBucket& b = buckets_[k];
    const std::uint64_t elem = analysis::dtype_bits(b.dtype) / 8;
    if (elem == 0 || b.bytes % elem != 0 || b.after_step >= steps || b.wait_step <= b.after_step)
      fail(ErrorKind::plan_mismatch, "a gradient bucket of " + std::to_string(b.bytes) + " bytes of " +
                                         analysis::dtype_name(b.dtype) +
                                         " cannot be reduced (no whole number of elements, or not after its producer)");
    b.ready = backend.create_event();
    b.done = backend.create_event();
    enqueue_at_[b.after_step].push_back(k);
    // No op touches the bucket again in this run: the run's end waits for it (the next run's ops reuse its bytes).
    (b.wait_step < steps ? wait_at_[b.wait_step] : wait_at_end_).push_back(k);
  }
}

void GradientSync::before(std::size_t step) {
  if (step < wait_at_.size())
    for (std::size_t k : wait_at_[step]) backend_.compute_waits(buckets_[k].done);
}

void GradientSync::after(std::size_t step) {
  if (step >= enqueue_at_.size()) return;
  for (std::size_t k : enqueue_at_[step]) {
    const GradBucket& b = buckets_[k];
    backend_.record_on_compute(b.ready);
    coll_.queue_waits(b.ready);
    const std::uint64_t elem = analysis::dtype_bits(b.dtype) / 8, count = b.bytes / elem;
    if (!shard_) {
      coll_.all_reduce_mean(b.data, count, b.dtype);
    } else {
      // In place, as NCCL allows it: rank r's mean lands in its own chunk of the bucket.
      const BucketShard s = bucket_shard(count, coll_.world_size());
      const auto rank = static_cast<std::uint64_t>(coll_.rank());
      if (s.chunk) coll_.reduce_scatter_mean(b.data, b.data + rank * s.chunk * elem, s.chunk, b.dtype);
      if (s.tail) coll_.all_reduce_mean(b.data + (count - s.tail) * elem, s.tail, b.dtype);
    }
    coll_.record(b.done);
  }
}

void GradientSync::finish() {
  for (std::size_t k : wait_at_end_) backend_.compute_waits(buckets_[k].done);
}

}  // namespace memplan::runtime

// PyTorch's DDP, ZeroRedundancyOptimizer and FSDP2 on each rank, from the eager model's timeline (data_parallel_eager.hpp).
#include "planner/pytorch/data_parallel_eager.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "analysis/error.hpp"
#include "analysis/ops.hpp"
#include "planner/parallel/parallel.hpp"
#include "planner/pytorch/eager_run.hpp"

namespace memplan::planner {

using analysis::OpId;
using analysis::Phase;
using analysis::TensorId;

namespace {

constexpr std::uint64_t kBlock = 512;                // the caching allocator's rounding
constexpr std::uint64_t kFirstBucket = 1ull << 20;   // torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
constexpr std::uint64_t kBucketCap = 25ull << 20;    // DDP's bucket_cap_mb default

// One trained weight: its bytes on the single GPU and as the layout holds it.
struct Param {
  TensorId weight = analysis::kNoTensor;
  std::uint64_t weight_bytes = 0, grad_bytes = 0, numel = 0;
  std::uint64_t shard_bytes = 0;    // fsdp2: the padded dim-0 shard (fp32)
  std::uint64_t unsharded_bytes = 0;  // fsdp2: the all-gathered weight (or gradient) in the policy's dtype
  std::uint32_t grad_step = 0;
  bool has_grad_step = false;
};

// Signed additions over step intervals, summed once.
struct Timeline {
  std::vector<std::int64_t> delta;
  explicit Timeline(std::size_t steps) : delta(steps + 1, 0) {}
  void add(std::uint32_t first, std::uint32_t last, std::int64_t bytes) {
    if (first > last || first >= delta.size() - 1) return;
    delta[first] += bytes;
    delta[std::min<std::size_t>(last, delta.size() - 2) + 1] -= bytes;
  }
  // The most of resident + live[s] + the additions at one step.
  std::uint64_t peak(const EagerPeak& e) const {
    std::int64_t run = 0, worst = 0;
    for (std::size_t s = 0; s < e.live.size(); ++s) {
      run += delta[s];
      worst = std::max(worst, static_cast<std::int64_t>(e.resident_bytes + e.live[s]) + run);
    }
    return static_cast<std::uint64_t>(std::max<std::int64_t>(worst, 0));
  }
};

std::vector<Param> trained_params(const PytorchEagerRun& run, const std::vector<std::uint32_t>& step_of, int world,
                                  bool low_precision) {
  const analysis::Graph& g = run.planned.graph;
  std::vector<Param> out;
  for (const auto& [w, grad] : run.step.training.param_grads) {
    const analysis::Tensor& t = g.tensors.at(w);
    Param p;
    p.weight = w;
    p.weight_bytes = align_up(t.bytes(), kBlock);
    p.grad_bytes = align_up(g.tensors.at(grad).bytes(), kBlock);
    const std::uint64_t elem = std::max<std::uint64_t>(analysis::dtype_bits(t.dtype) / 8, 1);
    p.numel = t.bytes() / elem;
    const std::vector<std::int64_t> shape = t.shape();
    const std::uint64_t dim0 = shape.empty() ? 1 : static_cast<std::uint64_t>(std::max<std::int64_t>(shape[0], 1));
    const std::uint64_t rows = (dim0 + static_cast<std::uint64_t>(world) - 1) / static_cast<std::uint64_t>(world);
    p.shard_bytes = align_up(rows * (p.numel / dim0) * elem, kBlock);
    p.unsharded_bytes = low_precision ? align_up(p.numel * 2, kBlock) : p.weight_bytes;
    if (const OpId prod = g.tensors.at(grad).producer; prod != analysis::kNoOp) {
      p.grad_step = step_of[prod];
      p.has_grad_step = true;
    }
    out.push_back(p);
  }
  return out;
}

std::uint64_t sum_of(const std::vector<Param>& ps, std::uint64_t Param::*field) {
  std::uint64_t s = 0;
  for (const Param& p : ps) s = checked_add(s, p.*field, "data-parallel prediction");
  return s;
}

// The update ops of optimizer.step() in order, and the weight each updates (its first input).
std::vector<OpId> update_ops(const analysis::Graph& g, const Plan& plan) {
  std::vector<OpId> out;
  for (OpId o : plan.schedule)
    if (g.ops[o].phase == Phase::optimizer && !g.ops[o].inputs.empty()) out.push_back(o);
  return out;
}

void group_roles(PytorchDataParallel& out, const std::vector<PytorchRankPeak>& per_rank) {
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, std::size_t> seen;
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    const auto key = std::make_tuple(per_rank[r].step_peak_bytes, per_rank[r].peak_bytes, per_rank[r].model_state_bytes);
    auto [it, fresh] = seen.emplace(key, out.roles.size());
    if (fresh) {
      out.roles.push_back(per_rank[r]);
      out.roles.back().ranks.clear();
    }
    out.roles[it->second].ranks.push_back(static_cast<int>(r));
  }
}

// One role for every rank (the layouts that allocate alike on each).
void every_rank(PytorchDataParallel& out, PytorchRankPeak p) {
  p.ranks.resize(static_cast<std::size_t>(out.world_size));
  std::iota(p.ranks.begin(), p.ranks.end(), 0);
  out.roles.push_back(std::move(p));
}

PytorchRankPeak rank_peak(const Timeline& t, const EagerPeak& e, std::uint64_t workspace, std::uint64_t rebuild,
                          std::uint64_t model_state, int rank) {
  PytorchRankPeak p;
  p.ranks = {rank};
  p.step_peak_bytes = checked_add(t.peak(e), workspace, "data-parallel prediction");
  p.peak_bytes = checked_add(p.step_peak_bytes, rebuild, "data-parallel prediction");
  p.model_state_bytes = model_state;
  return p;
}

void predict_zero1(PytorchDataParallel& out, const PytorchEagerRun& run, const std::vector<Param>& params,
                   const StepRequest& req, std::uint64_t workspace, std::uint64_t state) {
  const analysis::Graph& g = run.planned.graph;
  const Plan& plan = run.planned.plan;
  std::vector<std::uint64_t> numel;
  for (const Param& p : params) numel.push_back(p.numel);
  const std::vector<int> owner = zero_redundancy_partition(numel, out.world_size);
  std::map<TensorId, int> owner_of;
  for (std::size_t i = 0; i < params.size(); ++i) owner_of[params[i].weight] = owner[i];
  const std::vector<OpId> updates = update_ops(g, plan);
  const std::uint64_t temp_all = optimizer_step_temporaries(g, updates, req.training.optimizer_impl, plan.alignment);
  std::uint32_t first_update = 0;
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s)
    if (!updates.empty() && plan.schedule[s] == updates.front()) first_update = s;
  const std::uint64_t weights = sum_of(params, &Param::weight_bytes);
  std::vector<PytorchRankPeak> per_rank;
  for (int r = 0; r < out.world_size; ++r) {
    std::vector<OpId> mine;
    std::uint64_t mine_bytes = 0;
    for (OpId o : updates)
      if (auto it = owner_of.find(g.ops[o].inputs[0]); it != owner_of.end() && it->second == r) mine.push_back(o);
    for (std::size_t i = 0; i < params.size(); ++i)
      if (owner[i] == r) mine_bytes += params[i].weight_bytes;
    // AdamW's and SGD's state is per parameter, in proportion to its bytes
    const std::uint64_t state_r = weights ? static_cast<std::uint64_t>(static_cast<long double>(state) * mine_bytes / weights) : 0;
    Timeline t(plan.schedule.size());
    t.add(0, static_cast<std::uint32_t>(plan.schedule.size() - 1),
          static_cast<std::int64_t>(out.bucket_bytes) - static_cast<std::int64_t>(state - state_r));
    const std::uint64_t temp_r = optimizer_step_temporaries(g, mine, req.training.optimizer_impl, plan.alignment);
    if (!updates.empty()) t.add(first_update, first_update, static_cast<std::int64_t>(temp_r) - static_cast<std::int64_t>(temp_all));
    per_rank.push_back(rank_peak(t, run.peak, workspace, out.bucket_bytes, weights + state_r + out.bucket_bytes, r));
  }
  group_roles(out, per_rank);
}

// Steps at which a unit's weights are read or its gradients made, per phase.
struct UnitSpan {
  std::uint32_t fwd_first = UINT32_MAX, fwd_last = 0, bwd_first = UINT32_MAX, bwd_last = 0;
  bool root = false;
  std::vector<std::size_t> params;
};

std::vector<UnitSpan> unit_spans(const PytorchEagerRun& run, const std::vector<std::uint32_t>& step_of) {
  const analysis::Graph& g = run.planned.graph;
  const auto& pg = run.step.training.param_grads;
  std::vector<UnitSpan> out;
  for (const ParameterUnit& u : parameter_units(run.step.training)) {
    UnitSpan s;
    s.params = u.params;
    s.root = !u.block;  // weights outside blocks: the root's
    for (std::size_t k : u.params) {
      for (OpId o : g.tensors[pg[k].first].consumers) {
        const std::uint32_t st = step_of[o];
        if (g.ops[o].phase == Phase::forward) s.fwd_first = std::min(s.fwd_first, st), s.fwd_last = std::max(s.fwd_last, st);
        if (g.ops[o].phase == Phase::backward) s.bwd_first = std::min(s.bwd_first, st), s.bwd_last = std::max(s.bwd_last, st);
      }
      if (const OpId p = g.tensors[pg[k].second].producer; p != analysis::kNoOp)
        s.bwd_first = std::min(s.bwd_first, step_of[p]), s.bwd_last = std::max(s.bwd_last, step_of[p]);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::int64_t signed_bytes(std::uint64_t b) { return static_cast<std::int64_t>(b); }

void predict_fsdp2(PytorchDataParallel& out, const PytorchEagerRun& run, const std::vector<Param>& params,
                   std::uint64_t workspace, std::uint64_t state, const std::vector<std::uint32_t>& step_of) {
  const std::uint32_t last = static_cast<std::uint32_t>(run.planned.plan.schedule.size() - 1);
  const std::uint64_t weights = sum_of(params, &Param::weight_bytes), shards = sum_of(params, &Param::shard_bytes);
  const std::uint64_t state_shard = weights ? static_cast<std::uint64_t>(static_cast<long double>(state) * shards / weights) : 0;
  Timeline t(last + 1);
  t.add(0, last, signed_bytes(shards + state_shard) - signed_bytes(weights + state));
  const std::vector<UnitSpan> units = unit_spans(run, step_of);
  std::size_t blocks = 0;
  const UnitSpan* next_in_backward = nullptr;  // the block whose backward runs after this one's (prefetched)
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    const UnitSpan& u = *it;
    std::uint64_t unsharded = 0, full_fp32 = 0, grad_shards = 0;
    for (std::size_t k : u.params) {
      const Param& p = params[k];
      unsharded += p.unsharded_bytes;
      full_fp32 += p.shard_bytes * static_cast<std::uint64_t>(out.world_size);
      grad_shards += p.shard_bytes;
      if (!p.has_grad_step) continue;
      t.add(p.grad_step, last, -signed_bytes(p.grad_bytes));                      // the single GPU's gradient
      if (u.bwd_first != UINT32_MAX) t.add(p.grad_step, u.bwd_last, signed_bytes(p.unsharded_bytes));  // unsharded
    }
    if (u.fwd_first == UINT32_MAX && u.bwd_first == UINT32_MAX) continue;
    if (u.bwd_first != UINT32_MAX) {
      t.add(u.bwd_last, u.bwd_last, signed_bytes(full_fp32));  // the reduce-scatter's fp32 input
      t.add(u.bwd_last, last, signed_bytes(grad_shards));      // the sharded gradients, to the end of the step
    }
    const std::uint32_t bwd_last = u.bwd_first != UINT32_MAX ? u.bwd_last : u.fwd_last;
    if (u.root || !out.reshard_after_forward) {
      t.add(u.fwd_first == UINT32_MAX ? u.bwd_first : u.fwd_first, bwd_last, signed_bytes(unsharded));
      continue;
    }
    ++blocks;
    if (u.fwd_first != UINT32_MAX) t.add(u.fwd_first, u.fwd_last, signed_bytes(unsharded));
    if (u.bwd_first != UINT32_MAX) {
      // gathered again for the backward, from when the block after it (in forward order) starts its own
      const std::uint32_t from = next_in_backward ? std::min(next_in_backward->bwd_first, u.bwd_first) : u.bwd_first;
      t.add(from, u.bwd_last, signed_bytes(unsharded));
      next_in_backward = &u;
    }
  }
  if (blocks == 0 && out.reshard_after_forward)
    out.doubts.push_back("no repeated blocks found (weights named like 'layers.3.' or 'h.3.'): the model is one FSDP2 unit");
  every_rank(out, rank_peak(t, run.peak, workspace, 0, shards + state_shard, 0));
}

}  // namespace

const char* pytorch_layout_name(PytorchLayout l) noexcept {
  switch (l) {
    case PytorchLayout::ddp: return "DDP";
    case PytorchLayout::zero1: return "DDP + ZeroRedundancyOptimizer";
    case PytorchLayout::fsdp2: return "FSDP2";
  }
  return "?";
}

std::uint64_t ddp_bucket_bytes(const std::vector<std::uint64_t>& bytes, std::uint64_t first_cap, std::uint64_t cap) {
  std::uint64_t total = 0, open = 0;
  bool first = true;
  for (auto it = bytes.rbegin(); it != bytes.rend(); ++it) {
    open += *it;
    if (open >= (first ? first_cap : cap)) {
      total = checked_add(total, align_up(open, kBlock), "DDP buckets");
      open = 0;
      first = false;
    }
  }
  return open ? checked_add(total, align_up(open, kBlock), "DDP buckets") : total;
}

std::vector<int> zero_redundancy_partition(const std::vector<std::uint64_t>& numel, int world) {
  std::vector<std::size_t> order(numel.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return numel[a] > numel[b]; });
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(std::max(world, 1)), 0);
  std::vector<int> owner(numel.size(), 0);
  for (std::size_t i : order) {
    const auto r = static_cast<std::size_t>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
    owner[i] = static_cast<int>(r);
    sizes[r] += numel[i];
  }
  return owner;
}

PytorchDataParallel predict_pytorch_data_parallel(const analysis::Graph& shaped_forward, const StepRequest& req,
                                                  const PytorchEager& eager, int world_size, int zero) {
  if (world_size < 1) throw Error(ErrorKind::usage, "the PyTorch data-parallel prediction needs at least one GPU");
  PytorchDataParallel out;
  out.world_size = world_size;
  out.layout = zero == 0 ? PytorchLayout::ddp : zero == 1 ? PytorchLayout::zero1 : PytorchLayout::fsdp2;
  out.reshard_after_forward = zero != 2;
  const PytorchEagerRun run = run_pytorch_eager(shaped_forward, req, eager, true);
  const Plan& plan = run.planned.plan;
  if (plan.schedule.empty()) throw Error(ErrorKind::invalid_graph, "the training step has no ops");
  std::vector<std::uint32_t> step_of(run.planned.graph.ops.size(), 0);
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s) step_of[plan.schedule[s]] = s;
  const bool low = req.training.precision != analysis::Precision::fp32;
  const std::vector<Param> params = trained_params(run, step_of, world_size, low && out.layout == PytorchLayout::fsdp2);
  const std::uint64_t state = run.planned.optimizer_state_bytes;
  const std::uint64_t weights = sum_of(params, &Param::weight_bytes);
  if (out.layout == PytorchLayout::fsdp2) {
    if (low) out.doubts.push_back("FSDP2's bf16 policy runs every op in bf16; the activations are predicted on autocast's op lists");
    predict_fsdp2(out, run, params, eager.workspace_bytes, state, step_of);
    return out;
  }
  std::vector<std::uint64_t> grads;
  for (const Param& p : params) grads.push_back(p.grad_bytes);
  out.bucket_bytes = ddp_bucket_bytes(grads, kFirstBucket, kBucketCap);
  out.doubts.push_back("the run's peak holds DDP's rebuilt buckets beside the old ones, which the first step's NCCL work "
                       "objects keep until the watchdog thread releases them: a rank released early peaks lower by the "
                       "bucket bytes");
  if (out.layout == PytorchLayout::zero1) {
    predict_zero1(out, run, params, req, eager.workspace_bytes, state);
    return out;
  }
  Timeline t(plan.schedule.size());
  t.add(0, static_cast<std::uint32_t>(plan.schedule.size() - 1), signed_bytes(out.bucket_bytes));
  every_rank(out, rank_peak(t, run.peak, eager.workspace_bytes, out.bucket_bytes, weights + state + out.bucket_bytes, 0));
  return out;
}

}  // namespace memplan::planner

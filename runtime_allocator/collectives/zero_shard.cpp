// ZeRO-1/2: optimizer updates run on the rank's element ranges of each reduce-scattered bucket, with sharded optimizer
// state, and the updated weight chunks all-gathered after the schedule.
#include "runtime_allocator/collectives/zero_shard.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "analysis/ops.hpp"

namespace memplan::runtime {

using analysis::kNoOp;
using analysis::kNoTensor;
using analysis::OpId;
using analysis::TensorId;

namespace {

std::string op_label(const analysis::Op& op) { return "op '" + op.name + "' (" + op.type + ")"; }

std::uint64_t elem_bytes(analysis::DType d) { return analysis::dtype_bits(d) / 8; }

// The gradient among op's inputs that is reduced across ranks (kNoTensor: none); ErrorKind::unsupported for two.
TensorId reduced_input(const analysis::Op& op, const std::set<TensorId>& reduced) {
  TensorId found = kNoTensor;
  for (TensorId t : op.inputs) {
    if (t == kNoTensor || !reduced.count(t) || t == found) continue;
    if (found != kNoTensor) fail(ErrorKind::unsupported, "ZeRO: " + op_label(op) + " reads two reduced gradients");
    found = t;
  }
  return found;
}

// An in-place optimizer update, every output rewriting an input; ErrorKind::unsupported otherwise.
const analysis::OpInfo& require_update(const analysis::Op& op, const analysis::Graph& g, TensorId grad) {
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  if (!info || info->kind != analysis::OpKind::optimizer)
    fail(ErrorKind::unsupported, "ZeRO runs only optimizer updates on shards, but " + op_label(op) + " reads the reduced gradient '" +
                                     g.tensors[grad].name + "' (an optimizer is needed: sgd, momentum, adam or adamw)");
  for (std::size_t k = 0; k < op.outputs.size(); ++k)
    if (op.outputs[k] != kNoTensor && info->rewritten_input(k) < 0)
      fail(ErrorKind::unsupported, "ZeRO: " + op_label(op) + " writes output " + std::to_string(k) +
                                       " into new memory, not in place: it cannot run on a shard");
  return *info;
}

}  // namespace

std::vector<bool> zero_sharded_state(const analysis::Graph& g, const std::vector<TensorId>& gradients) {
  const std::set<TensorId> reduced(gradients.begin(), gradients.end());
  std::vector<bool> sharded(g.tensors.size(), false);
  for (const auto& op : g.ops) {
    const TensorId grad = reduced_input(op, reduced);
    if (grad == kNoTensor) continue;
    const analysis::OpInfo& info = require_update(op, g, grad);
    for (std::size_t k = 0; k < op.outputs.size(); ++k) {
      const int j = info.rewritten_input(k);
      const TensorId t = j < 0 ? kNoTensor : op.input(static_cast<std::size_t>(j));
      if (t == kNoTensor || op.outputs[k] == kNoTensor) continue;
      const auto& x = g.tensors[t];
      if (x.role == analysis::TensorRole::optimizer_state && x.producer == kNoOp && x.consumers.size() == 1 &&
          !x.is_graph_output && x.element_count() == g.tensors[grad].element_count())
        sharded[t] = sharded[op.outputs[k]] = true;
    }
  }
  return sharded;
}

ZeroOptimizer::ZeroOptimizer(const analysis::Graph& g, const std::vector<GradBucket>& buckets, const std::vector<std::byte*>& addr,
                             const std::vector<bool>& sharded_state, Backend& backend, Collectives& coll, int stage)
    : g_(g), backend_(backend), coll_(coll), calls_(g.ops.size()), replaced_(g.ops.size(), false), gathers_(buckets.size()) {
  if (stage < 1 || stage > 2)
    fail(ErrorKind::unsupported, "ZeRO stage " + std::to_string(stage) +
                                     ": the executor runs stages 1 and 2 (stage 3's per-use parameter gathering is planned, not run)");
  stats_.stage = stage;
  shard_graph_.name = g.name + "/zero-shards";
  const std::vector<Sharded> ops = find_sharded(buckets, addr, sharded_state);
  place_state(ops, sharded_state);
  for (const Sharded& s : ops) build_calls(s, addr, sharded_state);
  KernelSet& k = backend.kernels();
  for (const auto& op : shard_graph_.ops) {
    const std::string why = k.unsupported_reason(shard_graph_, op);
    if (!why.empty()) fail(ErrorKind::unsupported, "backend '" + backend.name() + "' cannot run " + op_label(op) + ": " + why);
    if (!k.alias_safe(op)) fail(ErrorKind::unsupported, "ZeRO: " + op_label(op) + " is not safe in place on this backend");
  }
  k.prepare(shard_graph_);
  std::uint64_t staging = 0;
  for (Gather& ga : gathers_) {
    if (ga.spans.empty() || ga.chunk == 0) continue;
    staging = std::max(staging, checked_mul(ga.chunk * ga.elem, static_cast<std::uint64_t>(coll.world_size()), "ZeRO gather buffer"));
    ga.ready = backend.create_event();
    ga.done = backend.create_event();
    ++stats_.all_gather_calls;
  }
  if (staging) staging_ = DeviceBuffer(backend, staging, backend.buffer_alignment());
  stats_.gather_buffer_bytes = staging;
}

// Every op reading a reduced gradient, with the rank's element ranges of that gradient: where it meets the rank's
// chunk of its bucket, and the bucket's tail.
std::vector<ZeroOptimizer::Sharded> ZeroOptimizer::find_sharded(const std::vector<GradBucket>& buckets, const std::vector<std::byte*>& addr,
                                                                const std::vector<bool>& sharded_state) {
  std::set<TensorId> reduced;
  for (const auto& b : buckets) reduced.insert(b.gradients.begin(), b.gradients.end());
  for (TensorId t : reduced)
    if (g_.tensors[t].is_graph_output || g_.tensors[t].consumers.empty())
      fail(ErrorKind::unsupported, "ZeRO: the reduced gradient '" + g_.tensors[t].name +
                                       "' is a result of the step, not read by an optimizer update (an optimizer is needed: sgd, momentum, "
                                       "adam or adamw): only its rank's chunk would be reduced");
  const auto world = static_cast<std::uint64_t>(coll_.world_size()), rank = static_cast<std::uint64_t>(coll_.rank());
  std::vector<Sharded> out;
  for (OpId o = 0; o < g_.ops.size(); ++o) {
    const auto& op = g_.ops[o];
    const TensorId grad = reduced_input(op, reduced);
    if (grad == kNoTensor) continue;
    const analysis::OpInfo& info = require_update(op, g_, grad);
    std::size_t bi = 0;
    while (std::find(buckets[bi].gradients.begin(), buckets[bi].gradients.end(), grad) == buckets[bi].gradients.end()) ++bi;
    const GradBucket& b = buckets[bi];
    const std::uint64_t elem = elem_bytes(b.dtype), n = g_.tensors[grad].element_count();
    const BucketShard sh = bucket_shard(b.bytes / elem, coll_.world_size());
    Sharded s{o, bi, static_cast<std::uint64_t>(addr[grad] - b.data) / elem, n, {}};
    for (const Range r : {Range{rank * sh.chunk, (rank + 1) * sh.chunk}, Range{world * sh.chunk, world * sh.chunk + sh.tail}}) {
      const std::uint64_t lo = std::max(r.lo, s.first), hi = std::min(r.hi, s.first + n);
      if (lo < hi) s.ranges.push_back({lo - s.first, hi - s.first});
    }
    // The weights it rewrites (every rewritten input but the sharded state) are gathered after the step.
    Gather& ga = gathers_[bi];
    ga.chunk = sh.chunk;
    for (std::size_t k = 0; k < op.outputs.size(); ++k) {
      const int j = info.rewritten_input(k);
      const TensorId w = j < 0 ? kNoTensor : op.input(static_cast<std::size_t>(j));
      if (w == kNoTensor || sharded_state[w]) continue;
      const auto& x = g_.tensors[w];
      if (x.element_count() != n || x.dtype != b.dtype || !addr[w])
        fail(ErrorKind::unsupported, "ZeRO: " + op_label(op) + " rewrites '" + x.name + "', which is not one " + analysis::dtype_name(b.dtype) +
                                         " element per element of its gradient '" + g_.tensors[grad].name + "': it cannot be gathered");
      ga.spans.push_back({addr[w], s.first, n});
      ga.elem = elem;
      ga.dtype = b.dtype;
      stats_.weight_elements += n;
    }
    for (const Range r : s.ranges) stats_.owned_elements += r.hi - r.lo;
    ++stats_.sharded_updates;
    replaced_[o] = true;
    out.push_back(std::move(s));
  }
  return out;
}

// One block per sharded state tensor holding the rank's ranges back to back, zero (or the tensor's given values).
void ZeroOptimizer::place_state(const std::vector<Sharded>& ops, const std::vector<bool>& sharded_state) {
  const std::uint64_t align = backend_.buffer_alignment();
  std::uint64_t end = 0;
  std::vector<std::pair<TensorId, const Sharded*>> order;
  for (const Sharded& s : ops) {
    std::uint64_t owned = 0;
    for (const Range r : s.ranges) owned += r.hi - r.lo;
    for (TensorId t : g_.ops[s.op].inputs) {
      if (t == kNoTensor || !sharded_state[t] || state_at_.count(t)) continue;
      const auto& x = g_.tensors[t];
      state_at_[t] = {end, owned, x.dtype};
      end = checked_add(end, align_up(checked_mul(owned, elem_bytes(x.dtype), "ZeRO state"), align), "ZeRO state");
      stats_.state_unsharded_bytes += x.bytes();
      order.emplace_back(t, &s);
    }
  }
  stats_.state_bytes = end;
  if (!end) return;
  state_ = DeviceBuffer(backend_, end, align);
  std::vector<std::byte> init(end);
  for (const auto& [t, s] : order) {
    const auto& x = g_.tensors[t];
    if (!x.data || x.data->bytes.size() != x.bytes()) continue;  // zero: PyTorch's state before the first step
    const std::uint64_t eb = elem_bytes(x.dtype);
    std::uint64_t at = state_at_[t].offset;
    for (const Range r : s->ranges) {
      std::memcpy(init.data() + at, x.data->bytes.data() + r.lo * eb, (r.hi - r.lo) * eb);
      at += (r.hi - r.lo) * eb;
    }
  }
  backend_.copy_to_device(state_.data(), init.data(), init.size());
  // The tensors rewriting the state are the same shards.
  for (const Sharded& s : ops) {
    const auto& op = g_.ops[s.op];
    const analysis::OpInfo& info = *analysis::op_registry().find(op);
    for (std::size_t k = 0; k < op.outputs.size(); ++k) {
      const int j = info.rewritten_input(k);
      const TensorId t = j < 0 ? kNoTensor : op.input(static_cast<std::size_t>(j));
      if (t != kNoTensor && state_at_.count(t) && op.outputs[k] != kNoTensor) state_at_[op.outputs[k]] = state_at_[t];
    }
  }
}

TensorId ZeroOptimizer::shard_tensor(TensorId t, std::vector<std::int64_t> dims) {
  analysis::Tensor x;
  x.name = g_.tensors[t].name + "/shard" + std::to_string(shard_graph_.tensors.size());
  x.dtype = g_.tensors[t].dtype;
  for (auto d : dims) x.dims.push_back(analysis::Dim::of(d));
  x.rank_known = true;
  x.role = g_.tensors[t].role;
  return shard_graph_.add_tensor(std::move(x));
}

// Per element range: a copy of the op over tensors of the range's length (scalars whole), bound to the range's
// elements of the weight and gradient and to the rank's state shard; each output takes the bytes it rewrites.
void ZeroOptimizer::build_calls(const Sharded& s, const std::vector<std::byte*>& addr, const std::vector<bool>& sharded_state) {
  const auto& op = g_.ops[s.op];
  const analysis::OpInfo& info = *analysis::op_registry().find(op);
  const std::uint64_t n = s.elements;
  std::uint64_t done = 0;  // elements of the earlier ranges: where this range lies in a state shard
  for (std::size_t k = 0; k < s.ranges.size(); ++k) {
    const Range r = s.ranges[k];
    const std::uint64_t len = r.hi - r.lo;
    analysis::Op copy;
    copy.name = op.name + "/zero" + std::to_string(k);
    copy.type = op.type;
    copy.domain = op.domain;
    copy.attrs = op.attrs;
    copy.phase = op.phase;
    Call c;
    for (TensorId t : op.inputs) {
      if (t == kNoTensor) {
        copy.inputs.push_back(kNoTensor);
        c.in.push_back(nullptr);
        continue;
      }
      const auto& x = g_.tensors[t];
      const std::uint64_t eb = elem_bytes(x.dtype);
      std::byte* at = nullptr;
      if (sharded_state[t]) {
        at = state_.data() + state_at_.at(t).offset + done * eb;
      } else if (x.element_count() == n && addr[t]) {
        at = addr[t] + r.lo * eb;
      } else if (x.element_count() == 1 && addr[t]) {
        copy.inputs.push_back(shard_tensor(t, x.shape()));
        c.in.push_back(addr[t]);
        continue;
      } else {
        fail(ErrorKind::unsupported, "ZeRO: input '" + x.name + "' of " + op_label(op) +
                                         " is neither one element per weight element nor a scalar: the update cannot run on a shard");
      }
      copy.inputs.push_back(shard_tensor(t, {static_cast<std::int64_t>(len)}));
      c.in.push_back(at);
    }
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
      if (op.outputs[o] == kNoTensor) {
        copy.outputs.push_back(kNoTensor);
        c.out.push_back(nullptr);
        continue;
      }
      const auto j = static_cast<std::size_t>(info.rewritten_input(o));
      copy.outputs.push_back(shard_tensor(op.outputs[o], shard_graph_.tensors[copy.inputs.at(j)].shape()));
      c.out.push_back(c.in.at(j));
    }
    c.op = shard_graph_.add_op(std::move(copy));
    calls_[s.op].push_back(std::move(c));
    done += len;
  }
}

void ZeroOptimizer::run(OpId o) {
  std::vector<TensorRef> in, out;
  for (const Call& c : calls_.at(o)) {
    const auto& op = shard_graph_.ops[c.op];
    in.clear();
    out.clear();
    auto ref = [&](TensorId t, std::byte* at) {
      if (t == kNoTensor) return TensorRef{};
      const auto& x = shard_graph_.tensors[t];
      return TensorRef{at, x.dtype, x.shape(), x.bytes()};
    };
    for (std::size_t k = 0; k < op.inputs.size(); ++k) in.push_back(ref(op.inputs[k], c.in[k]));
    for (std::size_t k = 0; k < op.outputs.size(); ++k) out.push_back(ref(op.outputs[k], c.out[k]));
    backend_.kernels().run(OpCall{op, c.op, in, out, nullptr, 0});
  }
}

void ZeroOptimizer::gather_weights() {
  const auto world = static_cast<std::uint64_t>(coll_.world_size()), rank = static_cast<std::uint64_t>(coll_.rank());
  for (const Gather& ga : gathers_) {
    if (ga.spans.empty() || ga.chunk == 0) continue;
    const std::uint64_t mine_lo = rank * ga.chunk, mine_hi = mine_lo + ga.chunk, end = world * ga.chunk;
    // Copies bucket elements [lo, hi) of every span between the weights and the gather buffer.
    auto copy = [&](std::uint64_t lo, std::uint64_t hi, bool in) {
      for (const Span& sp : ga.spans) {
        const std::uint64_t a = std::max(lo, sp.first), b = std::min(hi, sp.first + sp.count);
        if (a >= b) continue;
        std::byte* w = sp.weight + (a - sp.first) * ga.elem;
        std::byte* buf = staging_.data() + a * ga.elem;
        if (in) backend_.copy_on_device(buf, w, (b - a) * ga.elem);
        else backend_.copy_on_device(w, buf, (b - a) * ga.elem);
      }
    };
    copy(mine_lo, mine_hi, true);
    backend_.record_on_compute(ga.ready);
    coll_.queue_waits(ga.ready);
    coll_.all_gather(staging_.data() + mine_lo * ga.elem, staging_.data(), ga.chunk, ga.dtype);
    coll_.record(ga.done);
    backend_.compute_waits(ga.done);
    copy(0, mine_lo, false);
    copy(mine_hi, end, false);
  }
}

analysis::TensorData ZeroOptimizer::read(TensorId t) const {
  const auto it = state_at_.find(t);
  if (it == state_at_.end()) fail(ErrorKind::usage, "tensor " + std::to_string(t) + " is no sharded optimizer state");
  analysis::TensorData d;
  d.dtype = it->second.dtype;
  d.dims = {static_cast<std::int64_t>(it->second.elements)};
  d.bytes.resize(it->second.elements * elem_bytes(d.dtype));
  backend_.copy_to_host(d.bytes.data(), state_.data() + it->second.offset, d.bytes.size());
  return d;
}

}  // namespace memplan::runtime

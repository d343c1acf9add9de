// Pipeline parallelism: balanced stage cuts along the forward order, a stage's own graph, microbatches in flight.
#include <algorithm>
#include <limits>
#include <set>

#include "analysis/liveness.hpp"
#include "analysis/ops.hpp"
#include "planner/parallel/parallel.hpp"

namespace memplan::planner {

using analysis::Tensor;
using analysis::TensorRole;

const char* pipeline_schedule_name(PipelineSchedule s) noexcept { return s == PipelineSchedule::gpipe ? "gpipe" : "1f1b"; }

int in_flight_microbatches(PipelineSchedule s, int pp, int stage, int microbatches) noexcept {
  // GPipe runs every microbatch's forward before the first backward; 1F1B (PipeDream-Flush, Megatron) lets
  // stage i start backward after pp - i forwards, so it holds at most that many microbatches' activations.
  if (s == PipelineSchedule::gpipe) return microbatches;
  return std::min(pp - stage, microbatches);
}

namespace {

// Per tensor produced by a forward op: the position after its producer and the last position reading it
// (ops.size() for graph outputs). It crosses every cut in (produced, last].
struct Span {
  std::size_t produced = 0, last = 0;
};

std::vector<Span> spans(const analysis::Graph& g) {
  std::vector<Span> s(g.tensors.size());
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    const Tensor& x = g.tensors[t];
    // A graph input (the batch) enters at the first stage: a later stage that reads it receives it.
    if (x.producer == analysis::kNoOp && x.role != TensorRole::input) continue;
    s[t].produced = x.producer == analysis::kNoOp ? 0 : x.producer + 1;
    s[t].last = s[t].produced;
    for (OpId c : x.consumers) s[t].last = std::max<std::size_t>(s[t].last, c + 1);
    if (x.is_graph_output) s[t].last = g.ops.size() + 1;
  }
  return s;
}

// Per cut position k (between op k-1 and op k): how many tensors cross it, how many of them are float activations made
// by an op, and their bytes. A cut at k sends what was made before k and is read at or after k.
struct Crossings {
  std::vector<std::size_t> count, floats;
  std::vector<std::uint64_t> bytes;
};
Crossings crossings(const analysis::Graph& g) {
  const std::size_t n = g.ops.size();
  std::vector<std::int64_t> count_diff(n + 2, 0), float_diff(n + 2, 0);
  std::vector<std::uint64_t> bytes_in(n + 2, 0), bytes_out(n + 2, 0);
  const std::vector<Span> sp = spans(g);
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    if (g.tensors[t].data || sp[t].last <= sp[t].produced) continue;
    const std::size_t a = sp[t].produced, b = std::min(sp[t].last, n + 1);
    ++count_diff[a];
    --count_diff[b];
    if (g.tensors[t].producer != analysis::kNoOp && analysis::dtype_is_float(g.tensors[t].dtype)) {
      ++float_diff[a];
      --float_diff[b];
    }
    bytes_in[a] = checked_add(bytes_in[a], g.tensors[t].bytes(), "pipeline boundary bytes");
    bytes_out[b] = checked_add(bytes_out[b], g.tensors[t].bytes(), "pipeline boundary bytes");
  }
  Crossings x{std::vector<std::size_t>(n + 1, 0), std::vector<std::size_t>(n + 1, 0), std::vector<std::uint64_t>(n + 1, 0)};
  std::int64_t c_run = 0, f_run = 0;
  std::uint64_t b_run = 0;
  for (std::size_t k = 0; k <= n; ++k) {
    c_run += count_diff[k];
    f_run += float_diff[k];
    b_run = b_run + bytes_in[k] - bytes_out[k];
    x.count[k] = static_cast<std::size_t>(c_run);
    x.floats[k] = static_cast<std::size_t>(f_run);
    x.bytes[k] = b_run;
  }
  return x;
}

// The layer boundaries: the positions crossed by the fewest tensors, a float activation among them (a stage whose
// outputs are all integers, token ids or indices, has no gradient to receive from the next, so such a point is no
// layer boundary). ErrorKind::usage where they make fewer segments than `stages`.
std::vector<std::size_t> layer_boundaries(const Crossings& x, std::size_t n, int stages) {
  std::size_t fewest = std::numeric_limits<std::size_t>::max();
  for (std::size_t k = 1; k < n; ++k)
    if (x.count[k] > 0 && x.floats[k] > 0) fewest = std::min(fewest, x.count[k]);
  std::vector<std::size_t> cand;
  for (std::size_t k = 1; k < n; ++k)
    if (x.count[k] == fewest && x.floats[k] > 0) cand.push_back(k);
  if (cand.size() + 1 < static_cast<std::size_t>(stages))
    fail(ErrorKind::usage, "--pp " + std::to_string(stages) + ": the graph has " + std::to_string(cand.size() + 1) +
                               " segments between layer boundaries (points where only " + std::to_string(fewest) +
                               " activation(s), a float one among them, cross), fewer than the stages asked for");
  return cand;
}

// The P - 1 cuts among `cand` minimising the slowest stage (`prefix`: seconds of the ops before each position):
// best[j][c] = the least max stage time of j + 1 stages ending at cand[c].
std::vector<std::size_t> balanced_cuts(const std::vector<double>& prefix, const std::vector<std::size_t>& cand, std::size_t P) {
  const std::size_t m = cand.size(), n = prefix.size() - 1;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(P - 1, std::vector<double>(m, kInf));
  std::vector<std::vector<std::size_t>> from(P - 1, std::vector<std::size_t>(m, 0));
  for (std::size_t c = 0; c < m; ++c) best[0][c] = prefix[cand[c]];
  for (std::size_t j = 1; j + 1 < P; ++j)
    for (std::size_t c = j; c < m; ++c)
      for (std::size_t b = j - 1; b < c; ++b) {
        const double v = std::max(best[j - 1][b], prefix[cand[c]] - prefix[cand[b]]);
        if (v < best[j][c]) best[j][c] = v, from[j][c] = b;
      }
  double least = kInf;
  std::size_t end = 0;
  for (std::size_t c = P - 2; c < m; ++c) {
    const double v = std::max(best[P - 2][c], prefix[n] - prefix[cand[c]]);
    if (v < least) least = v, end = c;
  }
  std::vector<std::size_t> cuts(P - 1);
  for (std::size_t j = P - 1; j-- > 0;) {
    cuts[j] = cand[end];
    if (j > 0) end = from[j][end];
  }
  return cuts;
}

}  // namespace

std::vector<PipelineStage> pipeline_cuts(const analysis::Graph& g, int stages, const analysis::DeviceProfile& p) {
  const std::size_t n = g.ops.size();
  if (stages <= 1) {
    PipelineStage s{0, n, 0.0, 0};
    for (OpId o = 0; o < n; ++o) s.forward_seconds += analysis::op_seconds(g, o, p);
    return {s};
  }
  const Crossings x = crossings(g);
  const std::vector<std::size_t> cand = layer_boundaries(x, n, stages);
  std::vector<double> prefix(n + 1, 0.0);
  for (OpId o = 0; o < n; ++o) prefix[o + 1] = prefix[o] + analysis::op_seconds(g, o, p);
  const auto P = static_cast<std::size_t>(stages);
  const std::vector<std::size_t> cuts = balanced_cuts(prefix, cand, P);
  std::vector<PipelineStage> out;
  std::size_t first = 0;
  for (std::size_t j = 0; j < P; ++j) {
    const std::size_t e = j + 1 < P ? cuts[j] : n;
    out.push_back({first, e, prefix[e] - prefix[first], e < n ? x.bytes[e] : 0});
    first = e;
  }
  return out;
}

namespace {

// A stage's outputs: the graph's own made in it (last stage), else what later stages read, the largest float first:
// its gradient is what the next stage sends back (seeded there).
std::vector<TensorId> stage_outputs(const analysis::Graph& g, const PipelineStage& s, bool last) {
  std::vector<TensorId> outs;
  if (last) {
    for (TensorId t : g.outputs)
      if (g.tensors[t].producer != analysis::kNoOp && g.tensors[t].producer >= s.first_op) outs.push_back(t);
    return outs;
  }
  for (TensorId t = 0; t < g.tensors.size(); ++t) {
    const Tensor& x = g.tensors[t];
    if (x.producer == analysis::kNoOp || x.producer < s.first_op || x.producer >= s.end_op || x.data) continue;
    if (std::any_of(x.consumers.begin(), x.consumers.end(), [&](OpId c) { return c >= s.end_op; })) outs.push_back(t);
  }
  std::stable_sort(outs.begin(), outs.end(), [&](TensorId a, TensorId b) {
    const bool fa = analysis::dtype_is_float(g.tensors[a].dtype), fb = analysis::dtype_is_float(g.tensors[b].dtype);
    if (fa != fb) return fa;
    return g.tensors[a].bytes() > g.tensors[b].bytes();
  });
  return outs;
}

}  // namespace

analysis::Graph pipeline_stage_graph(const analysis::Graph& g, const PipelineStage& s, bool last) {
  analysis::Graph out;
  out.name = g.name + "/stage" + std::to_string(s.first_op);
  out.ir_version = g.ir_version;
  out.opset = g.opset;
  std::vector<TensorId> map(g.tensors.size(), analysis::kNoTensor);
  auto take = [&](TensorId t) {
    if (t == analysis::kNoTensor) return t;
    if (map[t] != analysis::kNoTensor) return map[t];
    Tensor c = g.tensors[t];
    const bool earlier = c.producer != analysis::kNoOp && c.producer < s.first_op;
    c.producer = analysis::kNoOp;
    c.consumers.clear();
    c.is_graph_output = false;
    if (earlier && !c.data) c.role = TensorRole::input;  // received from the previous stage
    map[t] = out.add_tensor(std::move(c));
    if (out.tensors[map[t]].role == TensorRole::input) out.inputs.push_back(map[t]);
    return map[t];
  };
  for (OpId o = s.first_op; o < s.end_op; ++o) {
    analysis::Op op = g.ops[o];
    for (TensorId& t : op.inputs) t = take(t);
    for (TensorId& t : op.outputs) t = take(t);
    out.add_op(std::move(op));
  }
  const std::vector<TensorId> outs = stage_outputs(g, s, last);
  for (TensorId t : outs) {
    out.outputs.push_back(map[t]);
    out.tensors[map[t]].is_graph_output = true;
  }
  out.relink();
  return out;
}

}  // namespace memplan::planner

// Synthetic, shardable training batches: value k of the global batch is a hash of k.
#include "cli/train_feed.hpp"

#include <algorithm>
#include <limits>

#include "analysis/ops.hpp"

namespace memplan::cli {

namespace {

// The exclusive upper bound for integer tensor t (through reshapes, at most `depth` deep): the rows of a table it
// indexes (Gather), the classes of the cross-entropy it labels (CrossEntropyLoss, LinearCrossEntropy); max if none.
std::uint64_t reads_range(const analysis::Graph& g, analysis::TensorId t, int depth) {
  std::uint64_t range = std::numeric_limits<std::uint64_t>::max();
  for (analysis::OpId c : g.tensors[t].consumers) {
    const auto& op = g.ops[c];
    if (depth > 0 && op.domain.empty() && (op.type == "Reshape" || op.type == "Flatten" || op.type == "Squeeze" ||
                                           op.type == "Unsqueeze" || op.type == "Identity") && !op.inputs.empty() && op.inputs[0] == t)
      range = std::min(range, reads_range(g, op.outputs.at(0), depth - 1));
    if (op.type == analysis::memplan_ops::kLinearCrossEntropy && op.inputs.size() > 2 && op.inputs[2] == t) {
      const auto v = analysis::memplan_ops::linear_cross_entropy_classes(g.tensors[op.inputs[1]].shape(), op.attr_int("trans_b", 0));
      if (v > 0) range = std::min<std::uint64_t>(range, static_cast<std::uint64_t>(v));
    }
    if (op.type == "Gather" && op.inputs.size() > 1 && op.inputs[1] == t) {
      const auto dims = g.tensors[op.inputs[0]].shape();
      const std::int64_t axis = op.attr_int("axis", 0);
      const std::size_t a = static_cast<std::size_t>(axis < 0 ? axis + static_cast<std::int64_t>(dims.size()) : axis);
      if (a < dims.size()) range = std::min<std::uint64_t>(range, static_cast<std::uint64_t>(dims[a]));
    } else if (op.type == analysis::memplan_ops::kCrossEntropyLoss && op.inputs.size() > 1 && op.inputs[1] == t) {
      const auto dims = g.tensors[op.inputs[0]].shape();
      const std::size_t a = static_cast<std::size_t>(op.attr_int("axis", 1));
      if (a < dims.size()) range = std::min<std::uint64_t>(range, static_cast<std::uint64_t>(dims[a]));
    }
  }
  return range;
}

// reads_range, else 1000.
std::uint64_t integer_range(const analysis::Graph& g, analysis::TensorId t) {
  const std::uint64_t range = reads_range(g, t, 4);
  return range == std::numeric_limits<std::uint64_t>::max() || range == 0 ? 1000 : range;
}

}  // namespace

std::vector<analysis::TensorData> sharded_feed(const analysis::Graph& g, int rank) {
  std::vector<analysis::TensorData> feed;
  for (analysis::TensorId t : g.inputs) {
    const auto& x = g.tensors[t];
    const std::uint64_t n = x.element_count();
    const std::uint64_t first = static_cast<std::uint64_t>(rank) * n;  // this shard's first element of the global batch
    auto hash = [&](std::uint64_t i) { return ((first + i) * 2654435761u + t) % 20011; };
    std::vector<double> v(n);
    if (x.dtype == analysis::DType::f32 || x.dtype == analysis::DType::f64 || x.dtype == analysis::DType::bf16 ||
        x.dtype == analysis::DType::f16) {
      for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<double>(hash(i)) * 1e-4 - 1.0;
    } else if (x.dtype == analysis::DType::i64 || x.dtype == analysis::DType::i32) {
      const std::uint64_t range = integer_range(g, t);
      for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<double>(((first + i) * 2654435761u + t) % range);
    } else if (x.dtype == analysis::DType::boolean) {
      std::fill(v.begin(), v.end(), 1.0);
    } else {
      fail(ErrorKind::unsupported, "input '" + x.name + "': no synthetic values for dtype " + analysis::dtype_name(x.dtype));
    }
    feed.push_back(analysis::TensorData::from_double(x.dtype, x.shape(), v));
  }
  return feed;
}

std::size_t disable_dropout(analysis::Graph& g) {
  std::size_t changed = 0;
  for (const auto& op : g.ops) {
    if (op.type != "Dropout" || !op.domain.empty()) continue;
    const analysis::TensorId ratio = op.input(1);
    if (ratio == analysis::kNoTensor)
      fail(ErrorKind::unsupported, "--no-dropout: Dropout '" + op.name + "' has no ratio input (0.5)");
    auto& t = g.tensors[ratio];
    std::shared_ptr<const analysis::TensorData> value = t.data;
    analysis::Attribute* attr = nullptr;
    if (!value && t.producer != analysis::kNoOp && g.ops[t.producer].type == "Constant") {
      auto it = g.ops[t.producer].attrs.find("value");
      if (it != g.ops[t.producer].attrs.end() && it->second.kind == analysis::Attribute::Kind::tensor) {
        attr = &it->second;
        value = attr->t;
      }
    }
    if (!value) fail(ErrorKind::unsupported, "--no-dropout: the ratio of Dropout '" + op.name + "' is computed, not a constant");
    auto zero = std::make_shared<analysis::TensorData>(
        analysis::TensorData::from_double(value->dtype, value->dims, std::vector<double>(value->as_double().size(), 0.0)));
    if (attr)
      attr->t = zero;
    else
      t.data = zero;
    ++changed;
  }
  return changed;
}

}  // namespace memplan::cli

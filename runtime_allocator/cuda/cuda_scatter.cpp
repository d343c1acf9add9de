// The CUDA executor's GatherND (batch_dims), ScatterND and ScatterElements (every reduction); kernels in
// kernels_scatter.cu.
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/kernels_scatter.hpp"

namespace memplan::runtime::cuda {

using analysis::DType;
using analysis::Op;
using analysis::TensorId;

namespace {

bool index_dtype(const ExecState& s, const Op& op, TensorId idx) {
  const DType it = s.tensor(idx).dtype;
  if (it != DType::i64 && it != DType::i32) unsupported(op, "indices must be int64 or int32");
  return it == DType::i64;
}

ScatterReduction reduction_of(const Op& op) {
  ScatterReduction r{};
  if (!parse_scatter_reduction(op.attr_string("reduction", "none"), r))
    unsupported(op, "reduction '" + op.attr_string("reduction", "") + "'");
  return r;
}

// The arithmetic type of a reducing scatter (any dtype scatters without a reduction: its bits are stored).
ScatterDType scatter_dtype(const Op& op, DType d, ScatterReduction r) {
  switch (d) {
    case DType::f32:
      return ScatterDType::f32;
    case DType::f64:
      return ScatterDType::f64;
    case DType::i32:
      return ScatterDType::i32;
    case DType::i64:
      return ScatterDType::i64;
    default:
      if (r != ScatterReduction::none)
        unsupported(op,
                    std::string("a reducing scatter of dtype ") + analysis::dtype_name(d) + " (float32, float64, int32, int64)");
      return ScatterDType::f32;
  }
}

// The tuples of `indices` (last axis k) into `data` after `batch` batch axes.
IndexTuples tuples_of(const ExecState& s, const Op& op, TensorId data, TensorId indices, std::size_t batch) {
  const auto d = s.dims(data), id = s.dims(indices);
  if (id.empty() || batch >= id.size()) unsupported(op, "indices of rank above batch_dims expected");
  const auto k = static_cast<std::size_t>(id.back());
  if (batch + k > d.size()) unsupported(op, "index tuples longer than data's rank");
  if (k > static_cast<std::size_t>(kMaxRank)) unsupported(op, "index tuples longer than 8");
  const auto st = contiguous_strides(d);
  IndexTuples t;
  t.k = static_cast<int>(k);
  t.elem_bytes = elem_bytes(s, data);
  t.idx64 = index_dtype(s, op, indices);
  t.tuples = dims_product(id, 0, id.size() - 1);
  t.slice = dims_product(d, batch + k);
  t.per_batch = dims_product(id, batch, id.size() - 1);
  t.batch_stride = batch ? st[batch - 1] : 0;
  if (t.per_batch == 0) t.per_batch = 1;
  for (std::size_t j = 0; j < k; ++j) {
    t.dims[j] = d[batch + j];
    t.strides[j] = st[batch + j];
  }
  return t;
}

void copy_data(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), y = op.outputs.at(0);
  if (s.ptr[x] != s.ptr[y])
    check(cudaMemcpyAsync(s.ptr[y], s.ptr[x], s.tensor(y).bytes(), cudaMemcpyDeviceToDevice, s.ctx.stream()),
          "copy for op '" + op.name + "'");
}

}  // namespace

std::string scatter_reason(const analysis::Graph& g, const Op& op) {
  if (op.attr_string("reduction", "none") == "none") return {};
  const DType d = g.tensors[op.inputs.at(0)].dtype;
  if (d == DType::f32 || d == DType::f64 || d == DType::i32 || d == DType::i64) return {};
  return std::string("a reducing scatter of dtype ") + analysis::dtype_name(d);
}

void run_gather_nd(ExecState& s, const Op& op) {
  const auto b = static_cast<std::size_t>(op.attr_int("batch_dims", 0));
  gather_nd(tuples_of(s, op, op.inputs.at(0), op.inputs.at(1), b), s.ptr[op.inputs[0]], s.ptr[op.inputs[1]],
            s.ptr[op.outputs.at(0)], s.ctx.stream());
}

void run_scatter_nd(ExecState& s, const Op& op) {
  const ScatterReduction r = reduction_of(op);
  const IndexTuples t = tuples_of(s, op, op.inputs.at(0), op.inputs.at(1), 0);
  const ScatterDType dt = scatter_dtype(op, s.tensor(op.inputs[0]).dtype, r);
  copy_data(s, op);
  scatter_nd(t, r, dt, s.ptr[op.inputs.at(2)], s.ptr[op.inputs[1]], s.ptr[op.outputs[0]], s.ctx.stream());
}

void run_scatter_elements(ExecState& s, const Op& op) {
  const TensorId x = op.inputs.at(0), idx = op.inputs.at(1), u = op.inputs.at(2);
  const auto d = s.dims(x), ud = s.dims(u);
  if (d.size() > static_cast<std::size_t>(kMaxRank)) unsupported(op, "rank above 8");
  if (ud.size() != d.size() || s.dims(idx) != ud) unsupported(op, "indices and updates of data's rank and one shape expected");
  const ScatterReduction r = reduction_of(op);
  ScatterElementsShape e;
  e.rank = static_cast<int>(d.size());
  e.axis = static_cast<int>(norm_axis(op.attr_int("axis", 0), d.size(), op));
  e.elem_bytes = elem_bytes(s, x);
  e.idx64 = index_dtype(s, op, idx);
  e.axis_dim = d[static_cast<std::size_t>(e.axis)];
  const auto st = contiguous_strides(d);
  for (std::size_t k = 0; k < d.size(); ++k) {
    e.u_dims[k] = ud[k];
    e.y_strides[k] = st[k];
  }
  const ScatterDType dt = scatter_dtype(op, s.tensor(x).dtype, r);
  copy_data(s, op);
  scatter_elements(e, r, dt, s.ptr[u], s.ptr[idx], s.ptr[op.outputs[0]], s.ctx.stream());
}

}  // namespace memplan::runtime::cuda

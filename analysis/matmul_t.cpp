// memplan::MatMulT's geometry from its operands' shapes: the one reading every stage shares.
#include "analysis/matmul_t.hpp"

#include <algorithm>

#include "analysis/error.hpp"
#include "analysis/shape_rules.hpp"

namespace memplan::analysis {

using shape_detail::shape_str;

std::int64_t MatMulTGeometry::batch_count() const {
  std::int64_t p = 1;
  for (auto d : batch) p *= d;
  return p;
}

std::vector<std::int64_t> MatMulTGeometry::full_output() const {
  std::vector<std::int64_t> y = batch;
  y.push_back(m);
  y.push_back(n);
  return y;
}

MatMulTGeometry matmul_t_geometry(bool trans_a, bool trans_b, const std::vector<std::int64_t>& a,
                                  const std::vector<std::int64_t>& b, const std::string& where) {
  if (a.size() < 2 || b.size() < 2)
    fail(ErrorKind::shape, where + ": MatMulT needs operands of rank >= 2, got " + shape_str(a) + " and " + shape_str(b));
  MatMulTGeometry geo;
  geo.trans_a = trans_a;
  geo.trans_b = trans_b;
  const std::int64_t a0 = a[a.size() - 2], a1 = a.back(), b0 = b[b.size() - 2], b1 = b.back();
  geo.m = trans_a ? a1 : a0;
  geo.k = trans_a ? a0 : a1;
  geo.n = trans_b ? b0 : b1;
  if ((trans_b ? b1 : b0) != geo.k)
    fail(ErrorKind::shape, where + ": MatMulT inner dimensions differ: " + shape_str(a) + (trans_a ? "^T" : "") + " times " +
                               shape_str(b) + (trans_b ? "^T" : ""));
  geo.a_batch.assign(a.begin(), a.end() - 2);
  geo.b_batch.assign(b.begin(), b.end() - 2);
  const std::size_t r = std::max(geo.a_batch.size(), geo.b_batch.size());
  geo.batch.assign(r, 1);
  for (std::size_t k = 0; k < r; ++k) {
    const std::size_t back = r - 1 - k;
    const std::int64_t da = back < geo.a_batch.size() ? geo.a_batch[geo.a_batch.size() - 1 - back] : 1;
    const std::int64_t db = back < geo.b_batch.size() ? geo.b_batch[geo.b_batch.size() - 1 - back] : 1;
    if (da != db && da != 1 && db != 1)
      fail(ErrorKind::shape, where + ": MatMulT batch dims do not broadcast: " + shape_str(a) + " and " + shape_str(b));
    geo.batch[k] = da == 1 ? db : da;
  }
  return geo;
}

MatMulTGeometry matmul_t_geometry(const Graph& g, const Op& op) {
  const std::string where = "op '" + op.name + "' (" + op.type + ")";
  if (op.input(0) == kNoTensor || op.input(1) == kNoTensor) fail(ErrorKind::invalid_graph, where + ": MatMulT needs two inputs");
  return matmul_t_geometry(op.attr_int("trans_a", 0) != 0, op.attr_int("trans_b", 0) != 0, g.tensors.at(op.inputs[0]).shape(),
                           g.tensors.at(op.inputs[1]).shape(), where);
}

std::vector<std::int64_t> matmul_t_output_batch(const MatMulTGeometry& geo, const std::vector<std::int64_t>& y,
                                                const std::string& where) {
  const std::size_t r = geo.batch.size();
  if (y.size() < 2 || y[y.size() - 2] != geo.m || y.back() != geo.n || y.size() - 2 > r)
    fail(ErrorKind::shape, where + ": MatMulT output " + shape_str(y) + " is not a sum down of " + shape_str(geo.full_output()));
  std::vector<std::int64_t> ob(r, 1);
  std::copy(y.begin(), y.end() - 2, ob.begin() + static_cast<std::ptrdiff_t>(r - (y.size() - 2)));
  for (std::size_t k = 0; k < r; ++k)
    if (ob[k] != 1 && ob[k] != geo.batch[k])
      fail(ErrorKind::shape, where + ": MatMulT output " + shape_str(y) + " is not a sum down of " + shape_str(geo.full_output()));
  return ob;
}

}  // namespace memplan::analysis

// What a shape rule sees of its op (OpContext) and the broadcasting helpers every family shares.
#include <algorithm>

#include "analysis/shape_rules.hpp"
#include "analysis/tensor_index.hpp"

namespace memplan::analysis::shape_detail {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t k = 0; k < s.size(); ++k) out += (k ? "," : "") + std::to_string(s[k]);
  return out + "]";
}

std::string OpContext::where() const { return "op '" + op_.name + "' (" + op_.type + ")"; }

void OpContext::fail_shape(const std::string& what) const { fail(ErrorKind::shape, where() + ": " + what); }

void OpContext::require_index_dtype(std::size_t i) const {
  if (!has_input(i)) return;
  const DType d = in_dtype(i);
  if (d != DType::i32 && d != DType::i64 && d != DType::undefined)
    fail_shape(std::string("indices '") + input(i).name + "' are " + dtype_name(d) + ", not int32 or int64");
}

void OpContext::require_same_dtype(std::size_t a, std::size_t b) const {
  if (!has_input(a) || !has_input(b)) return;
  const DType da = in_dtype(a), db = in_dtype(b);
  if (da != db && da != DType::undefined && db != DType::undefined)
    fail_shape(std::string("inputs '") + input(a).name + "' (" + dtype_name(da) + ") and '" + input(b).name + "' (" + dtype_name(db) +
               ") must have the same dtype");
}

const Tensor& OpContext::input(std::size_t i) const {
  if (!has_input(i)) fail_shape("required input " + std::to_string(i) + " is missing");
  return g_.tensors[op_.inputs[i]];
}

Shape OpContext::in_shape(std::size_t i) const { return input(i).shape(); }

const TensorData* OpContext::in_value(std::size_t i) const {
  return has_input(i) ? values_[op_.inputs[i]].get() : nullptr;
}

std::optional<std::vector<std::int64_t>> OpContext::maybe_ints(std::size_t i) const {
  const TensorData* v = in_value(i);
  if (!v) return std::nullopt;
  return v->as_int64();
}

std::vector<std::int64_t> OpContext::in_ints(std::size_t i, const char* what) const {
  auto v = maybe_ints(i);
  if (!v)
    fail_shape(std::string("cannot derive the output shape: ") + what + " (input '" + input(i).name +
               "') is computed at run time, not a constant");
  return *v;
}

void OpContext::set_output(std::size_t i, DType dtype, const Shape& shape) {
  if (!has_output(i)) return;
  Tensor& t = g_.tensors[op_.outputs[i]];
  for (auto d : shape)
    if (d < 0) fail_shape("output '" + t.name + "' would have a negative dim: " + shape_str(shape));
  t.dtype = dtype;
  t.rank_known = true;
  t.dims.clear();
  for (auto d : shape) t.dims.push_back(Dim::of(d));
}

Shape OpContext::out_shape(std::size_t i) const { return g_.tensors[op_.outputs.at(i)].shape(); }
DType OpContext::out_dtype(std::size_t i) const { return g_.tensors[op_.outputs.at(i)].dtype; }

std::size_t OpContext::axis(std::int64_t a, std::size_t rank, const char* what) const {
  const auto r = static_cast<std::int64_t>(rank);
  if (a < -r || a >= r)
    fail_shape(std::string(what) + " " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return static_cast<std::size_t>(a < 0 ? a + r : a);
}

std::int64_t OpContext::add(std::int64_t a, std::int64_t b) const {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail(ErrorKind::overflow, where() + ": dim arithmetic overflows");
  return r;
}

std::int64_t OpContext::mul(std::int64_t a, std::int64_t b) const {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(ErrorKind::overflow, where() + ": dim arithmetic overflows");
  return r;
}

std::int64_t OpContext::product(const Shape& s, std::size_t from, std::size_t to) const {
  std::int64_t p = 1;
  for (std::size_t k = from; k < std::min(to, s.size()); ++k) p = mul(p, s[k]);
  return p;
}

Shape broadcast(const OpContext& c, const Shape& a, const Shape& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t k = 0; k < rank; ++k) {
    const std::int64_t x = k + a.size() >= rank ? a[k + a.size() - rank] : 1;
    const std::int64_t y = k + b.size() >= rank ? b[k + b.size() - rank] : 1;
    if (x != y && x != 1 && y != 1)
      c.fail_shape("cannot broadcast " + shape_str(a) + " with " + shape_str(b));
    out[k] = x == 1 ? y : x;
  }
  return out;
}

// Unsigned views of the shared index helpers (analysis/tensor_index.hpp): folding indexes bytes with them.
std::vector<std::uint64_t> strides_of(const Shape& s) {
  const auto st = contiguous_strides(s);
  return {st.begin(), st.end()};
}

std::vector<std::uint64_t> broadcast_strides(const Shape& s, std::size_t rank) {
  const auto st = analysis::broadcast_strides(s, Shape(rank, 1));
  return {st.begin(), st.end()};
}

}  // namespace memplan::analysis::shape_detail

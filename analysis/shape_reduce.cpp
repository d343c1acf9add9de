// Shape rules of reducing ops: Reduce*, ArgMax/ArgMin, TopK and Einsum.
#include <algorithm>
#include <map>

#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {

namespace {

Shape reduced_shape(const OpContext& c, const std::vector<std::size_t>& axes, bool keepdims) {
  const Shape in = c.in_shape(0);
  Shape out;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), k);
    if (reduced && keepdims) out.push_back(1);
    else if (!reduced) out.push_back(in[k]);
  }
  return out;
}

void reduce_op(OpContext& c) {
  bool keepdims = true;
  const auto axes = reduce_axes(c, keepdims);
  c.set_output(0, c.in_dtype(0), reduced_shape(c, axes, keepdims));
}

void arg_op(OpContext& c) {
  const std::size_t axis = c.axis(c.op().attr_int("axis", 0), c.in_rank(0), "axis");
  c.set_output(0, DType::i64, reduced_shape(c, {axis}, c.op().attr_int("keepdims", 1) != 0));
}

void topk_op(OpContext& c) {
  Shape out = c.in_shape(0);
  const std::size_t axis = c.axis(c.op().attr_int("axis", -1), out.size(), "axis");
  std::int64_t k = c.op().attr_int("k", -1);
  if (c.has_input(1)) {
    const Shape ks = c.in_ints(1, "K");
    if (ks.size() != 1) c.fail_shape("K must hold one value, got " + shape_str(ks));
    k = ks[0];
  }
  if (k < 0 || k > out[axis]) c.fail_shape("K " + std::to_string(k) + " is outside 0.." + std::to_string(out[axis]));
  out[axis] = k;
  c.set_output(0, c.in_dtype(0), out);
  c.set_output(1, DType::i64, out);
}

// Einsum: letters name dims; "..." stands for broadcast leading dims. Without "->" the output is the
// ellipsis then the letters used once, in alphabetical order (numpy's implicit mode).
void einsum_op(OpContext& c) {
  std::string eq;
  for (char ch : c.op().attr_string("equation", "")) if (ch != ' ') eq += ch;
  const auto arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char ch : lhs) {
    if (ch == ',') terms.emplace_back();
    else terms.back().push_back(ch);
  }
  if (terms.size() != c.num_inputs()) c.fail_shape("equation '" + eq + "' does not match the inputs");
  std::map<char, std::int64_t> dim;
  std::map<char, int> uses;
  Shape ellipsis;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const Shape s = c.in_shape(i);
    const auto dots = terms[i].find("...");
    std::string letters = terms[i];
    if (dots != std::string::npos) letters.erase(dots, 3);
    if (letters.size() > s.size() || (dots == std::string::npos && letters.size() != s.size()))
      c.fail_shape("term '" + terms[i] + "' does not match input shape " + shape_str(s));
    const std::size_t ell_rank = s.size() - letters.size(), ell_at = dots == std::string::npos ? letters.size() : dots;
    ellipsis = broadcast(c, ellipsis, Shape(s.begin() + static_cast<std::ptrdiff_t>(ell_at),
                                            s.begin() + static_cast<std::ptrdiff_t>(ell_at + ell_rank)));
    for (std::size_t k = 0; k < letters.size(); ++k) {
      const std::int64_t d = s[k < ell_at ? k : k + ell_rank];
      auto [it, fresh] = dim.emplace(letters[k], d);
      if (!fresh && it->second != d && d != 1 && it->second != 1)
        c.fail_shape(std::string("label '") + letters[k] + "' has dims " + std::to_string(it->second) + " and " + std::to_string(d));
      it->second = std::max(it->second, d);
      ++uses[letters[k]];
    }
  }
  Shape out;
  if (arrow == std::string::npos) {
    out = ellipsis;
    for (const auto& [ch, n] : uses) if (n == 1) out.push_back(dim[ch]);
  } else {
    const std::string rhs = eq.substr(arrow + 2);
    for (std::size_t k = 0; k < rhs.size(); ++k) {
      if (rhs.compare(k, 3, "...") == 0) {
        out.insert(out.end(), ellipsis.begin(), ellipsis.end());
        k += 2;
      } else if (dim.count(rhs[k])) {
        out.push_back(dim[rhs[k]]);
      } else {
        c.fail_shape(std::string("output label '") + rhs[k] + "' is not in any input");
      }
    }
  }
  c.set_output(0, c.in_dtype(0), out);
}

}  // namespace

std::vector<std::size_t> reduce_axes(const OpContext& c, bool& keepdims) {
  keepdims = c.op().attr_int("keepdims", 1) != 0;
  Shape axes;
  if (c.op().attr("axes")) axes = c.op().attr_ints("axes");
  else if (c.has_input(1)) axes = c.in_ints(1, "axes");
  const std::size_t rank = c.in_rank(0);
  std::vector<std::size_t> out;
  if (axes.empty()) {
    if (c.op().attr_int("noop_with_empty_axes", 0) != 0) return out;
    for (std::size_t k = 0; k < rank; ++k) out.push_back(k);
    return out;
  }
  for (auto a : axes) out.push_back(c.axis(a, rank, "axis"));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void add_reduce_rules(RuleTable& t) {
  for (const char* name : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    t[name].shape = &reduce_op;
  for (const char* name : {"ArgMax", "ArgMin"}) t[name].shape = &arg_op;
  t["TopK"].shape = &topk_op;
  t["Einsum"].shape = &einsum_op;
}

}  // namespace memplan::analysis::shape_detail

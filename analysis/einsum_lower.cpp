// Einsum as Transpose / Reshape / Unsqueeze / MatMul / Squeeze chains (see einsum_lower.hpp).
#include "analysis/einsum_lower.hpp"

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memplan::analysis {
namespace {

using Letters = std::string;  // one char per axis

bool has(const Letters& s, char c) { return s.find(c) != std::string::npos; }

// Emits the chain's ops into g: each step reads the previous value and writes a new tensor (the Einsum's output
// for the last one, set by finish).
class Chain {
 public:
  Chain(Graph& g, const Op& op, std::int64_t opset) : g_(g), op_(op), opset_(opset) {}

  // A step of type `type` over `in` (axes as attribute or input by opset; perm as attribute): the new value.
  TensorId step(const std::string& type, std::vector<TensorId> in, const std::vector<std::int64_t>& axes = {},
                std::map<std::string, Attribute> attrs = {}) {
    if (type == "Transpose") {
      attrs["perm"] = Attribute{.kind = Attribute::Kind::ints, .ints = axes};
    } else if (type == "Reshape") {
      in.push_back(constant(axes, "/einsum_shape"));
    } else if (type == "Unsqueeze" || type == "Squeeze" || type == "ReduceSum") {
      if (opset_ < 13)
        attrs["axes"] = Attribute{.kind = Attribute::Kind::ints, .ints = axes};
      else
        in.push_back(constant(axes, "/einsum_axes"));
    }
    Op o;
    o.name = unique_op(op_.name + "/" + type);
    o.type = type;
    o.inputs = std::move(in);
    o.attrs = std::move(attrs);
    pending_.push_back(std::move(o));
    return kPending - static_cast<TensorId>(pending_.size() - 1);
  }

  // Adds the steps to g, the last one writing the Einsum's output (an Identity when there is no step).
  void finish(TensorId result) {
    if (pending_.empty() || result != kPending - static_cast<TensorId>(pending_.size() - 1)) step("Identity", {result});
    std::vector<TensorId> made(pending_.size(), kNoTensor);
    for (std::size_t k = 0; k < pending_.size(); ++k) {
      Op o = std::move(pending_[k]);
      for (auto& t : o.inputs)
        if (t <= kPending && t > kPending - static_cast<TensorId>(pending_.size())) t = made[kPending - t];
      if (k + 1 == pending_.size()) {
        made[k] = op_.outputs.at(0);
      } else {
        Tensor t;
        t.name = unique(op_.name + "/einsum");
        made[k] = g_.add_tensor(std::move(t));
      }
      o.outputs = {made[k]};
      g_.add_op(std::move(o));
    }
  }

 private:
  static constexpr TensorId kPending = kNoTensor - 1;  // pending values count down from here
  std::string unique(const std::string& base) {
    std::string n = base;
    for (int k = 1; g_.find(n) != kNoTensor; ++k) n = base + "#" + std::to_string(k);
    return n;
  }
  std::string unique_op(const std::string& base) { return base + "#" + std::to_string(pending_.size()); }
  // An int64 vector constant (axes, a Reshape's target).
  TensorId constant(const std::vector<std::int64_t>& values, const std::string& suffix) {
    Tensor c;
    c.name = unique(op_.name + suffix);
    c.dtype = DType::i64;
    c.rank_known = true;
    c.dims.push_back(Dim::of(static_cast<std::int64_t>(values.size())));
    c.role = TensorRole::weight;
    c.data = std::make_shared<TensorData>(TensorData::from_int64(DType::i64, {static_cast<std::int64_t>(values.size())}, values));
    return g_.add_tensor(std::move(c));
  }

  Graph& g_;
  const Op& op_;
  std::int64_t opset_;
  std::vector<Op> pending_;
};

// The axes of `from` in the order of `to` (every letter of `to` in `from`).
std::vector<std::int64_t> perm_to(const Letters& from, const Letters& to) {
  std::vector<std::int64_t> p;
  for (char c : to) p.push_back(static_cast<std::int64_t>(from.find(c)));
  return p;
}

bool identity(const std::vector<std::int64_t>& p) {
  for (std::size_t k = 0; k < p.size(); ++k)
    if (p[k] != static_cast<std::int64_t>(k)) return false;
  return true;
}

// x (letters `have`) transposed to `want` (the same letters).
TensorId arrange(Chain& ch, TensorId x, const Letters& have, const Letters& want) {
  const auto p = perm_to(have, want);
  return identity(p) ? x : ch.step("Transpose", {x}, p);
}

// x (letters `have`) summed over the letters not in `keep`; `have` becomes what remains.
TensorId sum_out(Chain& ch, TensorId x, Letters& have, const Letters& keep) {
  std::vector<std::int64_t> axes;
  Letters rest;
  for (std::size_t k = 0; k < have.size(); ++k) {
    if (has(keep, have[k]))
      rest += have[k];
    else
      axes.push_back(static_cast<std::int64_t>(k));
  }
  if (axes.empty()) return x;
  have = rest;
  return ch.step("ReduceSum", {x}, axes, {{"keepdims", Attribute{.kind = Attribute::Kind::i, .i = 0}}});
}

// x with letters `have` (a subsequence of `want`, in its order) given size-1 axes for the letters of `want` it lacks;
// with `leading` false, none for the batch axes before its first letter (a MatMul operand, rank 2 at least: its
// batch axes broadcast from the right, as torch.matmul's).
TensorId widen(Chain& ch, TensorId x, const Letters& have, Letters want, bool leading = true) {
  if (!leading)
    while (want.size() > 2 && !has(have, want.front())) want.erase(want.begin());
  std::vector<std::int64_t> axes;
  for (std::size_t k = 0; k < want.size(); ++k)
    if (!has(have, want[k])) axes.push_back(static_cast<std::int64_t>(k));
  return axes.empty() ? x : ch.step("Unsqueeze", {x}, axes);
}

// The letters of `want` that `have` holds, in `want`'s order.
Letters only(const Letters& want, const Letters& have) {
  Letters r;
  for (char c : want)
    if (has(have, c)) r += c;
  return r;
}

// An equation without ellipses: each operand's letters and the output's, every letter an axis once.
struct Equation {
  std::vector<Letters> ins;
  Letters out;
};

bool distinct_letters(const Letters& s) {
  for (std::size_t k = 0; k < s.size(); ++k)
    if (!std::isalpha(static_cast<unsigned char>(s[k])) || s.find(s[k], k + 1) != std::string::npos) return false;
  return true;
}

// The letters of an operand list "ab,bc".
std::vector<Letters> operand_letters(const std::string& lhs) {
  std::vector<Letters> ins;
  for (std::size_t at = 0;;) {
    const auto comma = lhs.find(',', at);
    ins.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) return ins;
    at = comma + 1;
  }
}

// The op's equation, nullopt where it is not one lower_einsum lowers (ellipses, more than two operands, letters
// repeated within an operand, output letters no operand has). Without "->" the output is the letters seen once,
// alphabetically.
std::optional<Equation> parse_equation(const Op& op) {
  std::string eq;
  for (char c : op.attr_string("equation", ""))
    if (c != ' ') eq += c;
  if (eq.find('.') != std::string::npos || op.inputs.empty() || op.inputs.size() > 2 || op.outputs.size() != 1)
    return std::nullopt;
  const auto arrow = eq.find("->");
  Equation e{operand_letters(eq.substr(0, arrow)), {}};
  if (e.ins.size() != op.inputs.size() || !std::all_of(e.ins.begin(), e.ins.end(), distinct_letters)) return std::nullopt;
  if (arrow != std::string::npos) {
    e.out = eq.substr(arrow + 2);
  } else {
    const std::string all = e.ins.size() == 2 ? e.ins[0] + e.ins[1] : e.ins[0];
    for (char c : all)
      if (std::count(all.begin(), all.end(), c) == 1) e.out += c;
    std::sort(e.out.begin(), e.out.end());
  }
  if (!distinct_letters(e.out)) return std::nullopt;
  for (char c : e.out)
    if (!std::any_of(e.ins.begin(), e.ins.end(), [&](const Letters& s) { return has(s, c); })) return std::nullopt;
  return e;
}

// The letters of a two-operand product by role: in both and the output (batch), in one and the output (free), in
// both but not the output (contracted).
struct Roles {
  Letters batch, free_a, free_b, contracted;
};
Roles roles(const Letters& a, const Letters& b, const Letters& out) {
  Roles r;
  for (char c : out) (has(a, c) && has(b, c) ? r.batch : has(a, c) ? r.free_a : r.free_b) += c;
  for (char c : a)
    if (has(b, c) && !has(out, c)) r.contracted += c;
  return r;
}

// The placeholder letter of several contracted letters merged into one axis (placeholders are added after the
// letters are classified, so they cannot clash).
constexpr char kMergedContraction = '\4';

// x (letters `have`) with the contracted letters moved last and merged into one axis by a Reshape (0 keeps each
// other axis, -1 takes the rest), as torch.einsum reshapes its operands for one bmm: the product over the contraction
// is never materialized. `have` becomes the other letters and kMergedContraction.
TensorId merge_contracted(Chain& ch, TensorId x, Letters& have, const Letters& contracted) {
  Letters kept;
  for (char c : have)
    if (!has(contracted, c)) kept += c;
  x = arrange(ch, x, have, kept + contracted);
  std::vector<std::int64_t> shape(kept.size(), 0);
  shape.push_back(-1);
  have = kept + kMergedContraction;
  return ch.step("Reshape", {x}, shape);
}

// A batched MatMul: [batch, a's other free letters, b's other free letters, m, k] x [..., k, n], absent m, k or n as
// size-1 axes (placeholder characters cannot clash: they are added after the letters are classified), squeezed after.
// Returns the result with its letters in `prod`.
TensorId batched_matmul(Chain& ch, TensorId x, TensorId y, const Letters& a, const Letters& b, const Roles& r, Letters& prod) {
  const char m = r.free_a.empty() ? '\1' : r.free_a.back(), n = r.free_b.empty() ? '\2' : r.free_b.back(),
             k = r.contracted.empty() ? '\3' : r.contracted[0];
  const Letters rest_a = r.free_a.empty() ? "" : r.free_a.substr(0, r.free_a.size() - 1),
                rest_b = r.free_b.empty() ? "" : r.free_b.substr(0, r.free_b.size() - 1);
  const Letters lhs_full = r.batch + rest_a + rest_b + m + k, rhs_full = r.batch + rest_a + rest_b + k + n;
  x = widen(ch, arrange(ch, x, a, only(lhs_full, a)), only(lhs_full, a), lhs_full, false);
  y = widen(ch, arrange(ch, y, b, only(rhs_full, b)), only(rhs_full, b), rhs_full, false);
  TensorId p = ch.step("MatMul", {x, y});
  prod = r.batch + rest_a + rest_b + m + n;
  std::vector<std::int64_t> units;
  for (std::size_t i = 0; i < prod.size(); ++i)
    if (prod[i] == '\1' || prod[i] == '\2') units.push_back(static_cast<std::int64_t>(i));
  if (units.empty()) return p;
  prod.erase(std::remove_if(prod.begin(), prod.end(), [](char c) { return c == '\1' || c == '\2'; }), prod.end());
  return ch.step("Squeeze", {p}, units);
}

}  // namespace

bool lower_einsum(Graph& g, const Op& op, std::int64_t opset) {
  const std::optional<Equation> eq = parse_equation(op);
  if (!eq) return false;
  const Letters& out = eq->out;
  Chain ch(g, op, opset);
  if (eq->ins.size() == 1) {
    Letters a = eq->ins[0];
    const TensorId x = sum_out(ch, op.inputs[0], a, out);
    ch.finish(arrange(ch, x, a, out));
    return true;
  }
  Letters a = eq->ins[0], b = eq->ins[1];
  // Letters of one operand only that the output drops are summed first.
  TensorId x = sum_out(ch, op.inputs[0], a, out + b), y = sum_out(ch, op.inputs[1], b, out + a);
  Roles r = roles(a, b, out);
  if (r.contracted.size() > 1) {
    x = merge_contracted(ch, x, a, r.contracted);
    y = merge_contracted(ch, y, b, r.contracted);
    r.contracted = Letters(1, kMergedContraction);
  }
  Letters prod;
  const TensorId p = batched_matmul(ch, x, y, a, b, r, prod);
  ch.finish(arrange(ch, p, prod, out));
  return true;
}

}  // namespace memplan::analysis

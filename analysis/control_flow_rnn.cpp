// ONNX LSTM, GRU and RNN made ordinary ops: the recurrence unrolled over the sequence once its length is known.
//
// Per direction: one MatMul projects every time step's input at once (X W^T + the input-side bias), split into
// steps; each step adds H_{t-1} R^T and applies the gates with the op's activations (ONNX's equations, gate order
// iofc for LSTM and zrh for GRU, linear_before_reset both ways, peepholes, clip, every activation the spec
// names). Y stacks the steps' H along time, Y_h and Y_c hold the last. A zero (or absent) initial state starts the
// recurrence without its matmul. Training, fusion, both runtimes and the planner see the ops they already know.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "analysis/control_flow.hpp"
#include "analysis/control_flow_splice.hpp"

namespace memplan::analysis::control_flow {

namespace {

Attribute int_attr(std::int64_t v) { return Attribute{.kind = Attribute::Kind::i, .i = v}; }
Attribute ints_attr(std::vector<std::int64_t> v) { return Attribute{.kind = Attribute::Kind::ints, .ints = std::move(v)}; }
Attribute float_attr(double v) { return Attribute{.kind = Attribute::Kind::f, .f = v}; }

[[noreturn]] void refuse(const Op& op, const std::string& why) { fail(ErrorKind::unsupported, op_where(op) + ": " + why); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// An activation of the op's list with the alpha and beta it consumed (ONNX's defaults where the list ran out).
struct Activation {
  std::string name;  // lower case
  double alpha = 0.0, beta = 0.0;
};

bool takes_alpha(const std::string& f) {
  return f == "leakyrelu" || f == "thresholdedrelu" || f == "scaledtanh" || f == "hardsigmoid" || f == "elu" || f == "affine";
}
bool takes_beta(const std::string& f) { return f == "scaledtanh" || f == "hardsigmoid" || f == "affine"; }

double default_alpha(const std::string& f) {
  if (f == "leakyrelu") return 0.01;
  if (f == "hardsigmoid") return 0.2;
  return 1.0;
}
double default_beta(const std::string& f) { return f == "hardsigmoid" ? 0.5 : (f == "affine" ? 0.0 : 1.0); }

// The op's activations, `per` a direction (f, g, h for LSTM; f, g for GRU; f for RNN), for `dirs` directions.
std::vector<Activation> activations(const Op& op, const std::vector<std::string>& defaults, std::size_t dirs) {
  std::vector<std::string> names;
  if (const Attribute* a = op.attr("activations"); a && !a->strings.empty()) names = a->strings;
  if (names.empty())
    for (std::size_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  if (names.size() == defaults.size() && dirs == 2) names.insert(names.end(), names.begin(), names.end());
  if (names.size() != defaults.size() * dirs)
    fail(ErrorKind::invalid_graph, op_where(op) + ": has " + std::to_string(names.size()) + " activations, " +
                                       std::to_string(defaults.size() * dirs) + " expected");
  std::vector<double> alphas, betas;
  if (const Attribute* a = op.attr("activation_alpha")) alphas = a->floats;
  if (const Attribute* a = op.attr("activation_beta")) betas = a->floats;
  std::size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (const auto& n : names) {
    Activation act{lower(n), 0.0, 0.0};
    act.alpha = takes_alpha(act.name) && ai < alphas.size() ? alphas[ai++] : default_alpha(act.name);
    act.beta = takes_beta(act.name) && bi < betas.size() ? betas[bi++] : default_beta(act.name);
    static const char* known[] = {"sigmoid", "tanh",     "relu",       "leakyrelu", "thresholdedrelu", "hardsigmoid",
                                  "elu",     "softsign", "softplus",   "scaledtanh", "affine"};
    if (std::find(std::begin(known), std::end(known), act.name) == std::end(known))
      refuse(op, "activation '" + n + "' is not one of ONNX's recurrent activations");
    out.push_back(act);
  }
  return out;
}

// Builds the replacement of one recurrent op through a Rewrite: tensor and op names under the op's own.
class Unroller {
 public:
  Unroller(const Reached& r, Rewrite& rw)
      : r_(r), rw_(rw), op_(r.base.ops[r.o]), old_(r.base.opset > 0 && r.base.opset < 13) {
    const TensorId x = op_.input(0);
    if (x == kNoTensor) fail(ErrorKind::invalid_graph, op_where(op_) + ": has no input X");
    dtype_ = r.shaped.tensors[x].dtype;
  }

  TensorId tensor(const std::string& suffix) { return rw_.add_tensor(op_.name + "/" + suffix); }
  TensorId scalar(const std::string& suffix, double v) {
    return rw_.add_constant(op_.name + "/" + suffix, TensorData::from_double(dtype_, {}, {v}));
  }
  TensorId ints(const std::string& suffix, std::vector<std::int64_t> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return rw_.add_constant(op_.name + "/" + suffix, TensorData::from_int64(DType::i64, {n}, v));
  }
  TensorId op1(const std::string& type, std::vector<TensorId> in, const std::string& out,
               std::map<std::string, Attribute> attrs = {}) {
    const TensorId y = tensor(out);
    rw_.add_op(type, std::move(in), {y}, std::move(attrs), out);
    return y;
  }

  TensorId squeeze(TensorId x, std::int64_t axis, const std::string& out) {
    if (old_) return op1("Squeeze", {x}, out, {{"axes", ints_attr({axis})}});
    return op1("Squeeze", {x, ints(out + "/axes", {axis})}, out);
  }
  TensorId unsqueeze(TensorId x, std::vector<std::int64_t> axes, const std::string& out) {
    if (old_) return op1("Unsqueeze", {x}, out, {{"axes", ints_attr(std::move(axes))}});
    return op1("Unsqueeze", {x, ints(out + "/axes", std::move(axes))}, out);
  }
  // `x` cut into `sizes` along `axis`.
  std::vector<TensorId> split(TensorId x, std::int64_t axis, const std::vector<std::int64_t>& sizes, const std::string& out) {
    std::vector<TensorId> ys;
    for (std::size_t k = 0; k < sizes.size(); ++k) ys.push_back(tensor(out + std::to_string(k)));
    std::map<std::string, Attribute> attrs{{"axis", int_attr(axis)}};
    std::vector<TensorId> in{x};
    if (old_) attrs["split"] = ints_attr(sizes);
    else in.push_back(ints(out + "/split", sizes));
    rw_.add_op("Split", std::move(in), ys, std::move(attrs), out);
    return ys;
  }
  // The `n` slices of `x` along `axis`, that axis removed (one Squeeze when n is 1).
  std::vector<TensorId> unstack(TensorId x, std::int64_t axis, std::int64_t n, const std::string& out) {
    if (n == 1) return {squeeze(x, axis, out + "0")};
    const auto parts = split(x, axis, std::vector<std::int64_t>(static_cast<std::size_t>(n), 1), out + "/part");
    std::vector<TensorId> ys;
    for (std::size_t k = 0; k < parts.size(); ++k) ys.push_back(squeeze(parts[k], axis, out + std::to_string(k)));
    return ys;
  }
  // Op `type` writing the existing tensor `target`.
  void into(const std::string& type, std::vector<TensorId> in, TensorId target, std::map<std::string, Attribute> attrs = {}) {
    rw_.add_op(type, std::move(in), {target}, std::move(attrs), rw_.graph().tensors[target].name + "/" + type);
  }
  // `parts` concatenated along `axis` into `target` (an Identity for one part).
  TensorId join(std::vector<TensorId> parts, std::int64_t axis, TensorId target) {
    if (parts.size() == 1) into("Identity", std::move(parts), target);
    else into("Concat", std::move(parts), target, {{"axis", int_attr(axis)}});
    return target;
  }
  TensorId binary(const std::string& type, TensorId a, TensorId b, const std::string& out) { return op1(type, {a, b}, out); }
  // a + b where b may be absent.
  TensorId add(TensorId a, TensorId b, const std::string& out) { return b == kNoTensor ? a : binary("Add", a, b, out); }

  TensorId clip(TensorId x, const std::string& out) {
    const Attribute* c = op_.attr("clip");
    if (!c) return x;
    const double t = c->kind == Attribute::Kind::f ? c->f : static_cast<double>(c->i);
    if (old_ && r_.base.opset < 11) return op1("Clip", {x}, out, {{"min", float_attr(-t)}, {"max", float_attr(t)}});
    return op1("Clip", {x, scalar(out + "/min", -t), scalar(out + "/max", t)}, out);
  }

  TensorId activate(const Activation& a, TensorId x, const std::string& out) {
    const std::string& f = a.name;
    if (f == "sigmoid") return op1("Sigmoid", {x}, out);
    if (f == "tanh") return op1("Tanh", {x}, out);
    if (f == "relu") return op1("Relu", {x}, out);
    if (f == "softsign") return op1("Softsign", {x}, out);
    if (f == "softplus") return op1("Softplus", {x}, out);
    if (f == "leakyrelu") return op1("LeakyRelu", {x}, out, {{"alpha", float_attr(a.alpha)}});
    if (f == "thresholdedrelu") return op1("ThresholdedRelu", {x}, out, {{"alpha", float_attr(a.alpha)}});
    if (f == "elu") return op1("Elu", {x}, out, {{"alpha", float_attr(a.alpha)}});
    if (f == "hardsigmoid") return op1("HardSigmoid", {x}, out, {{"alpha", float_attr(a.alpha)}, {"beta", float_attr(a.beta)}});
    if (f == "scaledtanh") {
      const TensorId in = binary("Mul", x, scalar(out + "/beta", a.beta), out + "/scaled");
      return binary("Mul", op1("Tanh", {in}, out + "/tanh"), scalar(out + "/alpha", a.alpha), out);
    }
    return binary("Add", binary("Mul", x, scalar(out + "/alpha", a.alpha), out + "/scaled"), scalar(out + "/beta", a.beta), out);
  }

 private:
  const Reached& r_;
  Rewrite& rw_;
  const Op& op_;
  bool old_;
  DType dtype_ = DType::undefined;
};

enum class Cell { lstm, gru, rnn };

struct Dims {
  std::int64_t seq = 0, batch = 0, hidden = 0, dirs = 1, gates = 1;
  bool batch_major = false;  // layout 1: X [batch, seq, input], states [batch, dirs, hidden]
};

// A state input that is absent or known to be all zeros starts the recurrence without it.
bool zero_or_absent(const Reached& r, TensorId t) {
  if (t == kNoTensor) return true;
  const auto& v = r.values[t];
  if (!v) return false;
  const auto xs = v->as_double();
  return std::all_of(xs.begin(), xs.end(), [](double d) { return d == 0.0; });
}

// Input `slot`'s shape must be `want` (when the input is given); ErrorKind::shape naming the input otherwise.
void check_shape(const Reached& r, const Op& op, std::size_t slot, const char* what, const std::vector<std::int64_t>& want) {
  const TensorId t = op.input(slot);
  if (t == kNoTensor) return;
  const Tensor& x = r.shaped.tensors[t];
  if (x.shape_known() && x.shape() == want) return;
  std::string dims;
  for (auto d : want) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  std::string got = "an unknown shape";
  if (x.shape_known()) {
    got.clear();
    for (auto d : x.shape()) got += (got.empty() ? "" : ", ") + std::to_string(d);
    got = "[" + got + "]";
  }
  fail(ErrorKind::shape, op_where(op) + ": " + what + " '" + x.name + "' is " + got + ", [" + dims + "] expected");
}

Dims dims_of(const Reached& r, const Op& op, Cell cell) {
  Dims d;
  d.gates = cell == Cell::lstm ? 4 : (cell == Cell::gru ? 3 : 1);
  const std::int64_t layout = op.attr_int("layout", 0);
  if (layout != 0 && layout != 1) fail(ErrorKind::invalid_graph, op_where(op) + ": layout " + std::to_string(layout) + " is not 0 or 1");
  d.batch_major = layout == 1;
  const std::string dir = op.attr_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    fail(ErrorKind::invalid_graph, op_where(op) + ": direction '" + dir + "' is not forward, reverse or bidirectional");
  d.dirs = dir == "bidirectional" ? 2 : 1;
  const Tensor& x = r.shaped.tensors[op.input(0)];
  if (!x.shape_known() || x.dims.size() != 3)
    fail(ErrorKind::shape, op_where(op) + ": input X '" + x.name + "' needs a known 3-d shape to unroll the recurrence");
  const auto s = x.shape();
  d.seq = d.batch_major ? s[1] : s[0];
  d.batch = d.batch_major ? s[0] : s[1];
  if (d.seq == 0) refuse(op, "its input X '" + x.name + "' has no time steps");
  if (op.input(1) == kNoTensor || op.input(2) == kNoTensor) fail(ErrorKind::invalid_graph, op_where(op) + ": needs inputs W and R");
  const Tensor& wt = r.shaped.tensors[op.input(1)];
  if (const Attribute* a = op.attr("hidden_size")) {
    d.hidden = a->i;
    if (d.hidden <= 0) fail(ErrorKind::invalid_graph, op_where(op) + ": hidden_size " + std::to_string(d.hidden) + " is not positive");
  } else if (wt.shape_known() && wt.dims.size() == 3 && wt.shape()[1] > 0 && wt.shape()[1] % d.gates == 0) {
    d.hidden = wt.shape()[1] / d.gates;
  } else {
    fail(ErrorKind::invalid_graph, op_where(op) + ": hidden_size is not given and W's shape does not tell it");
  }
  const std::int64_t gh = d.gates * d.hidden, h = d.hidden;
  check_shape(r, op, 1, "W", {d.dirs, gh, s[2]});
  check_shape(r, op, 2, "R", {d.dirs, gh, h});
  check_shape(r, op, 3, "B", {d.dirs, 2 * gh});
  check_shape(r, op, 4, "sequence_lens", {d.batch});
  const std::vector<std::int64_t> state = d.batch_major ? std::vector<std::int64_t>{d.batch, d.dirs, h} : std::vector<std::int64_t>{d.dirs, d.batch, h};
  check_shape(r, op, 5, "initial_h", state);
  if (cell == Cell::lstm) {
    check_shape(r, op, 6, "initial_c", state);
    check_shape(r, op, 7, "P", {d.dirs, 3 * h});
  }
  const std::uint64_t ops = static_cast<std::uint64_t>(d.seq) * static_cast<std::uint64_t>(d.dirs) * 24u;
  if (ops > kMaxUnrolledOps)
    refuse(op, std::to_string(d.seq) + " time steps would unroll into about " + std::to_string(ops) + " ops, over the limit of " +
                   std::to_string(kMaxUnrolledOps));
  return d;
}

void check_supported(const Reached& r, const Op& op, const Dims& d) {
  const TensorId lens = op.input(4);
  if (lens != kNoTensor) {
    const auto& v = r.values[lens];
    const bool full = v && [&] {
      const auto xs = v->as_int64();
      return std::all_of(xs.begin(), xs.end(), [&](std::int64_t n) { return n == d.seq; });
    }();
    if (!full)
      refuse(op, "sequence_lens '" + r.base.tensors[lens].name + "' is not known to be the full length " + std::to_string(d.seq) +
                     " for every sequence; memplan unrolls recurrent ops over the whole sequence");
  }
  if (op.attr_int("input_forget", 0) != 0) refuse(op, "input_forget (coupled input and forget gates) is not supported");
}

// One direction's weights, biases and initial state, ready for its steps.
struct Direction {
  TensorId rt = kNoTensor;           // R^T [hidden, gates * hidden] (GRU without linear_before_reset: the z, r rows)
  TensorId rh_t = kNoTensor;         // GRU without linear_before_reset: Rh^T [hidden, hidden]
  TensorId recurrent_bias = kNoTensor;  // added to H R^T (GRU; the z, r part without linear_before_reset)
  TensorId rh_bias = kNoTensor;      // GRU without linear_before_reset: Rbh
  std::vector<TensorId> peephole;    // LSTM: p_i, p_o, p_f
  std::vector<TensorId> steps;       // X W^T + input bias at each time step, [batch, gates * hidden]
  TensorId h = kNoTensor, c = kNoTensor;
  std::vector<Activation> acts;
};

class RecurrentUnroll {
 public:
  RecurrentUnroll(const Reached& r, Rewrite& rw, Cell cell)
      : r_(r), u_(r, rw), op_(r.base.ops[r.o]), cell_(cell), d_(dims_of(r, op_, cell)) {
    check_supported(r, op_, d_);
    lbr_ = cell == Cell::gru && op_.attr_int("linear_before_reset", 0) != 0;
  }

  void run() {
    const TensorId x = d_.batch_major ? u_.op1("Transpose", {op_.input(0)}, "X/time_major", {{"perm", ints_attr({1, 0, 2})}})
                                      : op_.input(0);
    const auto w = u_.unstack(op_.input(1), 0, d_.dirs, "W");
    const auto r = u_.unstack(op_.input(2), 0, d_.dirs, "R");
    const TensorId b_in = op_.input(3);
    const auto b = b_in == kNoTensor ? std::vector<TensorId>(static_cast<std::size_t>(d_.dirs), kNoTensor) : u_.unstack(b_in, 0, d_.dirs, "B");
    const auto h0 = state(5, "initial_h");
    const auto c0 = cell_ == Cell::lstm ? state(6, "initial_c") : std::vector<TensorId>(static_cast<std::size_t>(d_.dirs), kNoTensor);
    const TensorId p_in = cell_ == Cell::lstm ? op_.input(7) : kNoTensor;
    const auto p = p_in == kNoTensor ? std::vector<TensorId>{} : u_.unstack(p_in, 0, d_.dirs, "P");
    const auto acts = activations(op_, defaults(), static_cast<std::size_t>(d_.dirs));
    const std::size_t per = defaults().size();
    std::vector<std::vector<TensorId>> rows(static_cast<std::size_t>(d_.dirs));
    std::vector<TensorId> last_h, last_c;
    for (std::int64_t k = 0; k < d_.dirs; ++k) {
      const auto ku = static_cast<std::size_t>(k);
      const std::string dn = "d" + std::to_string(k) + "/";
      Direction dir = prepare(x, w[ku], r[ku], b[ku], dn);
      if (!p.empty()) dir.peephole = u_.split(p[ku], 0, {d_.hidden, d_.hidden, d_.hidden}, dn + "P/");
      dir.h = h0[ku];
      dir.c = c0[ku];
      dir.acts.assign(acts.begin() + static_cast<std::ptrdiff_t>(per * ku), acts.begin() + static_cast<std::ptrdiff_t>(per * (ku + 1)));
      const bool reverse = k == 1 || op_.attr_string("direction", "forward") == "reverse";
      for (std::int64_t s = 0; s < d_.seq; ++s) {
        const std::int64_t t = reverse ? d_.seq - 1 - s : s;
        step(dir, dir.steps[static_cast<std::size_t>(t)], dn + "t" + std::to_string(t) + "/");
        rows[ku].push_back(dir.h);
      }
      if (reverse) std::reverse(rows[ku].begin(), rows[ku].end());
      last_h.push_back(dir.h);
      last_c.push_back(dir.c);
    }
    outputs(rows, last_h, last_c);
  }

 private:
  std::vector<std::string> defaults() const {
    if (cell_ == Cell::lstm) return {"Sigmoid", "Tanh", "Tanh"};
    if (cell_ == Cell::gru) return {"Sigmoid", "Tanh"};
    return {"Tanh"};
  }

  // The per-direction initial states of input `slot` ([dirs, batch, hidden]; [batch, dirs, hidden] in layout 1);
  // absent where the input is absent or all zeros.
  std::vector<TensorId> state(std::size_t slot, const std::string& name) {
    const TensorId t = op_.input(slot);
    if (zero_or_absent(r_, t)) return std::vector<TensorId>(static_cast<std::size_t>(d_.dirs), kNoTensor);
    return u_.unstack(t, d_.batch_major ? 1 : 0, d_.dirs, name);
  }

  Direction prepare(TensorId x, TensorId w, TensorId r, TensorId b, const std::string& dn) {
    Direction dir;
    const std::int64_t gh = d_.gates * d_.hidden, h = d_.hidden;
    const TensorId wt = u_.op1("Transpose", {w}, dn + "W^T", {{"perm", ints_attr({1, 0})}});
    TensorId xw = u_.op1("MatMul", {x, wt}, dn + "XW");
    TensorId in_bias = kNoTensor;
    if (b != kNoTensor) {
      const auto halves = u_.split(b, 0, {gh, gh}, dn + "B/");
      if (cell_ == Cell::gru) {
        in_bias = halves[0];
        if (lbr_) {
          dir.recurrent_bias = halves[1];
        } else {
          const auto rb = u_.split(halves[1], 0, {2 * h, h}, dn + "Rb/");
          dir.recurrent_bias = rb[0];
          dir.rh_bias = rb[1];
        }
      } else {
        in_bias = u_.binary("Add", halves[0], halves[1], dn + "bias");
      }
    }
    xw = u_.add(xw, in_bias, dn + "XW+b");
    dir.steps = u_.unstack(xw, 0, d_.seq, dn + "x");
    if (cell_ == Cell::gru && !lbr_) {
      const auto rows = u_.split(r, 0, {2 * h, h}, dn + "R/");
      dir.rt = u_.op1("Transpose", {rows[0]}, dn + "Rzr^T", {{"perm", ints_attr({1, 0})}});
      dir.rh_t = u_.op1("Transpose", {rows[1]}, dn + "Rh^T", {{"perm", ints_attr({1, 0})}});
    } else {
      dir.rt = u_.op1("Transpose", {r}, dn + "R^T", {{"perm", ints_attr({1, 0})}});
    }
    return dir;
  }

  // H_{t-1} R^T (+ the recurrent bias); the bias alone (or nothing) while the state is zero.
  TensorId recurrent(const Direction& dir, const std::string& at) {
    if (dir.h == kNoTensor) return dir.recurrent_bias;
    return u_.add(u_.op1("MatMul", {dir.h, dir.rt}, at + "HR"), dir.recurrent_bias, at + "HR+b");
  }

  void step(Direction& dir, TensorId xw, const std::string& at) {
    if (cell_ == Cell::lstm) return lstm_step(dir, xw, at);
    if (cell_ == Cell::gru) return gru_step(dir, xw, at);
    const TensorId pre = u_.clip(u_.add(xw, recurrent(dir, at), at + "pre"), at + "clipped");
    dir.h = u_.activate(dir.acts[0], pre, at + "H");
  }

  void lstm_step(Direction& dir, TensorId xw, const std::string& at) {
    const std::int64_t h = d_.hidden;
    const auto g = u_.split(u_.add(xw, recurrent(dir, at), at + "gates"), -1, {h, h, h, h}, at + "gate");  // i o f c
    TensorId i = g[0], o = g[1], f = g[2];
    const bool peep = !dir.peephole.empty() && dir.c != kNoTensor;
    if (peep) {
      i = u_.binary("Add", i, u_.binary("Mul", dir.peephole[0], dir.c, at + "Pi*C"), at + "i+peep");
      f = u_.binary("Add", f, u_.binary("Mul", dir.peephole[2], dir.c, at + "Pf*C"), at + "f+peep");
    }
    i = u_.activate(dir.acts[0], u_.clip(i, at + "i/clipped"), at + "i");
    const TensorId cc = u_.activate(dir.acts[1], u_.clip(g[3], at + "c/clipped"), at + "c~");
    TensorId c = u_.binary("Mul", i, cc, at + "i*c~");
    if (dir.c != kNoTensor) {
      f = u_.activate(dir.acts[0], u_.clip(f, at + "f/clipped"), at + "f");
      c = u_.binary("Add", u_.binary("Mul", f, dir.c, at + "f*C"), c, at + "C");
    }
    if (!dir.peephole.empty()) o = u_.binary("Add", o, u_.binary("Mul", dir.peephole[1], c, at + "Po*C"), at + "o+peep");
    o = u_.activate(dir.acts[0], u_.clip(o, at + "o/clipped"), at + "o");
    dir.c = c;
    dir.h = u_.binary("Mul", o, u_.activate(dir.acts[2], c, at + "h(C)"), at + "H");
  }

  void gru_step(Direction& dir, TensorId xw, const std::string& at) {
    const std::int64_t h = d_.hidden;
    const auto x = u_.split(xw, -1, {h, h, h}, at + "x");  // z r h
    const TensorId hr = recurrent(dir, at);
    std::vector<TensorId> hg(3, kNoTensor);
    if (hr != kNoTensor) {
      const auto parts = u_.split(hr, -1, lbr_ ? std::vector<std::int64_t>{h, h, h} : std::vector<std::int64_t>{h, h}, at + "h");
      std::copy(parts.begin(), parts.end(), hg.begin());
    }
    const TensorId z = u_.activate(dir.acts[0], u_.clip(u_.add(x[0], hg[0], at + "z/pre"), at + "z/clipped"), at + "z");
    const TensorId r = u_.activate(dir.acts[0], u_.clip(u_.add(x[1], hg[1], at + "r/pre"), at + "r/clipped"), at + "r");
    TensorId hh = kNoTensor;  // the candidate's recurrent term
    if (lbr_) {
      if (hg[2] != kNoTensor) hh = u_.binary("Mul", r, hg[2], at + "r*hh");
    } else if (dir.h != kNoTensor) {
      const TensorId rh = u_.binary("Mul", r, dir.h, at + "r*H");
      hh = u_.add(u_.op1("MatMul", {rh, dir.rh_t}, at + "rH*Rh"), dir.rh_bias, at + "rH*Rh+b");
    } else {
      hh = dir.rh_bias;
    }
    const TensorId cand = u_.activate(dir.acts[1], u_.clip(u_.add(x[2], hh, at + "h~/pre"), at + "h~/clipped"), at + "h~");
    // H = (1 - z) h~ + z H_{t-1} = h~ + z (H_{t-1} - h~); h~ - z h~ while the state is zero.
    if (dir.h == kNoTensor) {
      dir.h = u_.binary("Sub", cand, u_.binary("Mul", z, cand, at + "z*h~"), at + "H");
    } else {
      const TensorId diff = u_.binary("Sub", dir.h, cand, at + "H-h~");
      dir.h = u_.binary("Add", cand, u_.binary("Mul", z, diff, at + "z*(H-h~)"), at + "H");
    }
  }

  // Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]); Y_h, Y_c [dirs, batch, hidden] ([batch,
  // dirs, hidden]).
  void outputs(const std::vector<std::vector<TensorId>>& rows, const std::vector<TensorId>& last_h, const std::vector<TensorId>& last_c) {
    if (const TensorId y = op_.output(0); y != kNoTensor) {
      // Time-major Y is y itself unless layout 1 transposes it; one direction's rows are then y directly.
      const TensorId time_major = d_.batch_major ? u_.tensor("Y/time_major") : y;
      std::vector<TensorId> per_dir;
      for (std::size_t k = 0; k < rows.size(); ++k) {
        const std::string dn = "Y/d" + std::to_string(k);
        std::vector<TensorId> slices;
        for (std::size_t t = 0; t < rows[k].size(); ++t) slices.push_back(u_.unsqueeze(rows[k][t], {0, 1}, dn + "/t" + std::to_string(t)));
        per_dir.push_back(u_.join(std::move(slices), 0, rows.size() == 1 ? time_major : u_.tensor(dn)));
      }
      if (rows.size() > 1) u_.join(std::move(per_dir), 1, time_major);
      if (d_.batch_major) u_.into("Transpose", {time_major}, y, {{"perm", ints_attr({2, 0, 1, 3})}});
    }
    state_output(1, last_h, "Y_h");
    if (cell_ == Cell::lstm) state_output(2, last_c, "Y_c");
  }

  void state_output(std::size_t slot, const std::vector<TensorId>& last, const std::string& name) {
    const TensorId y = op_.output(slot);
    if (y == kNoTensor) return;
    const std::int64_t axis = d_.batch_major ? 1 : 0;
    std::vector<TensorId> parts;
    for (std::size_t k = 0; k < last.size(); ++k) parts.push_back(u_.unsqueeze(last[k], {axis}, name + "/d" + std::to_string(k)));
    u_.join(std::move(parts), axis, y);
  }

  const Reached& r_;
  Unroller u_;
  const Op& op_;
  Cell cell_;
  Dims d_;
  bool lbr_ = false;
};

}  // namespace

bool is_recurrent(const Op& op) {
  return (op.domain.empty() || op.domain == "ai.onnx") && (op.type == "LSTM" || op.type == "GRU" || op.type == "RNN");
}

Graph unroll_recurrent(const Reached& r) {
  const Op& op = r.base.ops[r.o];
  const Cell cell = op.type == "LSTM" ? Cell::lstm : (op.type == "GRU" ? Cell::gru : Cell::rnn);
  Rewrite rw(r.base, r.o);
  RecurrentUnroll(r, rw, cell).run();
  rw.mark_lowered_from(op.type);
  return std::move(rw).finish();
}

}  // namespace memplan::analysis::control_flow

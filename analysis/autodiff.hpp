// Internal interface between the training-graph builder (training.cpp) and the per-family backward rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/fused_expr.hpp"
#include "analysis/graph.hpp"
#include "analysis/training_options.hpp"

namespace memplan::analysis::autodiff {

using Shape = std::vector<std::int64_t>;

// The builder's state while backward ops are emitted (defined in training.cpp).
struct State;

// What one backward rule sees: the forward op, the gradients of its outputs, which inputs want a
// gradient; it emits backward ops and hands each wanted input exactly one gradient contribution.
class GradContext {
 public:
  GradContext(State& s, OpId fwd);

  const Op& fwd() const;  // a copy: stays valid while ops are emitted
  // Tensor references are invalidated by the next new tensor: copy what is needed first.
  const Graph& graph() const;
  const Tensor& tensor(TensorId t) const;
  TensorId in(std::size_t i) const { return fwd().input(i); }
  TensorId out(std::size_t i) const { return fwd().output(i); }
  Shape shape(TensorId t) const { return tensor(t).shape(); }
  std::string where() const;  // "op 'name' (Type)"
  [[noreturn]] void unsupported(const std::string& what) const;

  TensorId dy(std::size_t i = 0) const;  // accumulated gradient of output i; kNoTensor when none
  bool wants(std::size_t i) const;       // input i takes a gradient from this op

  // A new tensor of input i's dtype and shape that will be its gradient contribution.
  TensorId grad_tensor(std::size_t i);
  // A new intermediate backward tensor (role activation).
  TensorId temp(const std::string& hint, DType dtype, const Shape& shape);
  // A new int64 constant (role weight, with data) for shape and split operands.
  TensorId int_constant(const std::string& hint, const std::vector<std::int64_t>& values);

  // Emits a backward op (phase backward) named after the forward op.
  void emit(const std::string& type, const std::string& domain, std::vector<TensorId> inputs,
            std::vector<TensorId> outputs, std::map<std::string, Attribute> attrs = {});
  // Hands input i a contribution. `g` must have input i's shape.
  void give(std::size_t i, TensorId g);
  // `full` has the forward output's (broadcast) shape: sum it down to input i's shape with
  // memplan ReduceSumTo (times `scale`), or hand it over as it is when the shapes agree and scale is 1.
  void give_reduced(std::size_t i, TensorId full, double scale = 1.0);
  // A tensor to write input i's gradient into at the shape `full_shape`: grad_tensor(i) when that is
  // input i's shape (give_reduced then hands it over directly), otherwise a temp.
  TensorId full_or_grad(std::size_t i, const Shape& full_shape);

 private:
  State& s_;
  Op op_;
  int emitted_ = 0;
};

using GradFn = void (*)(GradContext&);
struct GradRule {
  GradFn fn = nullptr;
  std::uint32_t diff_inputs = 0;   // bit i: input i can take a gradient
  std::uint32_t diff_outputs = 0;  // bit i: output i carries a gradient back
  // Optional: the inputs of this op that take no gradient of their own in its configuration (a packed attention's
  // one tensor, read as Q, K and V, takes one gradient through input 0): a mask that narrows diff_inputs.
  std::uint32_t (*narrow_inputs)(const Op& op) = nullptr;
};
using GradTable = std::unordered_map<std::string, GradRule>;  // key: forward op type (default domain)

inline constexpr std::uint32_t kAll = 0xffffffffu;
void add_elementwise_grads(GradTable& t);
void add_nn_grads(GradTable& t);
void add_tensor_grads(GradTable& t);
void add_loss_grads(GradTable& t);  // MSELoss, CrossEntropyLoss, SumLoss
void add_fused_grads(GradTable& t);  // memplan::FusedAttention
void add_fused_elementwise_grads(GradTable& t);  // memplan::FusedElementwise
void add_math_grads(GradTable& t);  // activations and variadic ops by their expressions, CumSum, Tile (autodiff_math.cpp)
// The op registry (ops.cpp) owns the table built from these; look rules up with op_registry().

// Per wanted input of the op being differentiated, one memplan::FusedElementwise computing dy * d e / d input
// (gradient_expr) at the output's shape, summed down to the input's (autodiff_fused_elementwise.cpp).
void expression_grads(GradContext& c, const FusedExpr& e);

// Appends opts.loss on the first float graph output (TrainingOptions::loss says what each is: a new input
// "target" for mse, "labels" for ce); makes the loss the only graph output and returns it.
TensorId add_loss(Graph& g, const TrainingOptions& opts);
// The class axis of a rank-`rank` output, normalized (TrainingOptions::class_axis); ErrorKind::invalid_graph
// outside the rank.
std::int64_t cross_entropy_class_axis(std::size_t rank, std::optional<std::int64_t> class_axis);
// A forward op of OpKind::loss (its backward rule starts the backward pass without an incoming gradient).
bool is_loss_op(const Op& op);
// fp16 loss scaling (TrainingOptions::loss_scaling, GradScaler): appends the persistent loss scale "amp/scale"
// (float32 scalar, role optimizer_state, 65536 before the first step as GradScaler's init_scale) and returns it.
// ErrorKind::usage unless opts.precision is fp16.
TensorId add_loss_scale(Graph& g, const TrainingOptions& opts);
// The incoming gradient of `loss`. When `loss` is not made by a loss op (--loss none on a scalar output), appends
// the backward op that seeds it with ones, times `scale` when given (memplan SumLossGrad), and returns that gradient.
// Else the loss op's rule starts the backward pass: returns `scale` (its dloss input, the loss gradient seed times the
// scale), kNoTensor without loss scaling.
TensorId seed_loss_gradient(Graph& g, TensorId loss, TensorId scale = kNoTensor);
// Appends the optimizer's ops and state after the backward ops; sets the graph outputs.
void add_optimizer(Graph& g, const TrainingOptions& opts, TrainingGraph& tg);

// `base`, or `base#k` for the first k that no tensor of `g` is named yet.
std::string unique_name(const Graph& g, const std::string& base);
// Rewrites the forward ops so that they output what backward reads (training_forward.cpp).
void prepare_forward(Graph& g);

// The sorted, normalized axes a ReduceX op folds (attribute or constant input; all when empty); nullopt when it
// reduces nothing (noop_with_empty_axes). ErrorKind::unsupported when the axes are computed at run time.
std::optional<std::vector<std::int64_t>> reduced_axes(const GradContext& c);

// Attribute helpers.
Attribute attr_i(std::int64_t v);
Attribute attr_f(double v);
Attribute attr_ints(std::vector<std::int64_t> v);
Attribute attr_s(std::string v);

// Conv/pool geometry with auto_pad resolved to explicit pads (ONNX semantics), from input/output shapes.
std::vector<std::int64_t> explicit_pads(const Op& op, const Shape& x, const Shape& y,
                                        const std::vector<std::int64_t>& kernel);

}  // namespace memplan::analysis::autodiff

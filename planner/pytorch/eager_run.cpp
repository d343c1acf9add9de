// The step PyTorch eager runs and the PyTorch prediction made from it (eager_run.hpp, planner/step.hpp).
#include "planner/pytorch/eager_run.hpp"

#include <algorithm>
#include <vector>

#include "analysis/error.hpp"
#include "analysis/ops.hpp"

namespace memplan::planner {

namespace {

// F.linear with a bias over an input of rank 3 and more runs as one addmm on the flattened input
// (_flatten_nd_linear), and autograd's engine sums the bias's gradient (validate_outputs) after AddmmBackward has
// returned its matmul gradients; exported, it is a MatMul and an Add, whose backward reduces the bias first. A bias
// reduction (ReduceSumTo) whose gradient matmul gradients read too moves after the last of them.
void bias_sums_after_matmul_grads(analysis::Graph& g) {
  const auto& reg = analysis::op_registry();
  std::vector<analysis::OpId> order;
  std::vector<std::vector<analysis::OpId>> after(g.ops.size());  // ops moved to just after each op
  std::vector<bool> moved(g.ops.size(), false);
  for (analysis::OpId o = 0; o < g.ops.size(); ++o) {
    const analysis::Op& op = g.ops[o];
    if (op.phase != analysis::Phase::backward || op.type != analysis::memplan_ops::kReduceSumTo || op.inputs.empty()) continue;
    analysis::OpId last = analysis::kNoOp;
    for (analysis::OpId c : g.tensors[op.inputs[0]].consumers) {
      const analysis::OpInfo* info = reg.find(g.ops[c]);
      if (c > o && g.ops[c].phase == analysis::Phase::backward && info != nullptr && info->kind == analysis::OpKind::matmul)
        last = last == analysis::kNoOp ? c : std::max(last, c);
    }
    if (last == analysis::kNoOp) continue;
    bool read_before = false;  // the sum's result read before `last`: it stays
    for (analysis::TensorId t : op.outputs)
      if (t != analysis::kNoTensor)
        for (analysis::OpId c : g.tensors[t].consumers) read_before = read_before || c <= last;
    if (read_before) continue;
    after[last].push_back(o);
    moved[o] = true;
  }
  for (analysis::OpId o = 0; o < g.ops.size(); ++o) {
    if (!moved[o]) order.push_back(o);
    order.insert(order.end(), after[o].begin(), after[o].end());
  }
  if (std::is_sorted(order.begin(), order.end())) return;
  std::vector<analysis::Op> ops;
  ops.reserve(order.size());
  for (analysis::OpId o : order) ops.push_back(std::move(g.ops[o]));
  g.ops = std::move(ops);
  g.relink();
}

}  // namespace

PytorchEagerRun run_pytorch_eager(const analysis::Graph& shaped_forward, const StepRequest& req, const PytorchEager& eager,
                                  bool timeline) {
  StepRequest r = req;
  r.pytorch.reset();
  r.plan.strategy = "none";  // PyTorch keeps every saved tensor
  r.plan.budget_bytes.reset();
  r.plan.schedule.kind = ScheduleKind::file;  // PyTorch eager runs the program's order
  r.fuse = FuseOptions::pytorch_eager(eager.sdpa, eager.sdpa_form_only);
  // Under autocast SDPA reads 16-bit operands (flash takes grouped-query heads); pytorch_sdpa_backend sees the
  // graph's fp32 ones: only fp32 steps get the math backend written out.
  if (eager.sdpa && r.training.precision != analysis::Precision::fp32) r.fuse.math_attention = false;
  // Gated activations (x * Sigmoid(x) and its kin) are counted as F.silu / F.hardswish / F.mish under autocast too:
  // their backward from the expression runs over 16-bit operands (computed in float32, stored in 16 bits).
  PytorchEagerRun run{build_training_step(shaped_forward, r), {}, {}};
  bias_sums_after_matmul_grads(run.step.training.graph);
  run.planned = plan_training(run.step.training, run.step.options);
  EagerOptions eo;
  eo.optimizer_impl = r.training.optimizer_impl;
  eo.timeline = timeline;
  eo.hold_outputs = eager.hold_outputs;
  run.peak = eager_peak(run.planned.graph, run.planned.plan, eo);
  return run;
}

namespace {

// Whether the step runs a GEMM through cuBLAS: a thread's first one allocates the library's workspace (convolutions
// run through cuDNN, which takes its workspace per call: cudnn_conv.hpp).
bool runs_cublas(const analysis::Graph& g) {
  for (const analysis::Op& op : g.ops) {
    const bool onnx = op.domain.empty() || op.domain == "ai.onnx";
    if (onnx && (op.type == "MatMul" || op.type == "Gemm" || op.type == "Einsum" || op.type == "Attention" ||
                 op.type == "MatMulInteger"))  // recurrent ops are unrolled into MatMuls by shape inference
      return true;
    if (op.domain == analysis::kMemplanDomain && (op.type == analysis::memplan_ops::kMatMulT || op.type == analysis::memplan_ops::kFusedAttention ||
                                                  op.type == analysis::memplan_ops::kLinearCrossEntropy))
      return true;
  }
  return false;
}

}  // namespace

PytorchPrediction predict_pytorch(const analysis::Graph& shaped_forward, const StepRequest& req, const PytorchEager& given) {
  PytorchPrediction p;
  PytorchEager eager = given;
  if (!runs_cublas(shaped_forward)) eager.workspace_bytes = 0;
  p.peak_bytes = checked_add(run_pytorch_eager(shaped_forward, req, eager).peak.peak_bytes, eager.workspace_bytes, "PyTorch peak");
  p.workspace_bytes = eager.workspace_bytes;
  p.sdpa = eager.sdpa;
  p.sdpa_form_only = eager.sdpa_form_only;
  p.hold_outputs = eager.hold_outputs;
  p.doubts = pytorch_eager_doubts(shaped_forward, eager.sdpa, eager.sdpa_form_only);
  if (req.training.loss == analysis::Loss::ce && !req.training.chunked_loss) {
    StepRequest chunked = req;
    chunked.training.chunked_loss = true;
    try {
      p.chunked_loss_peak_bytes = checked_add(run_pytorch_eager(shaped_forward, chunked, eager).peak.peak_bytes, eager.workspace_bytes,
                                              "PyTorch peak");
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::usage) throw;  // an output no head makes: no what-if
    }
  }
  return p;
}

}  // namespace memplan::planner

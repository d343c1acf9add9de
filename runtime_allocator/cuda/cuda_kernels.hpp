// The CUDA KernelSet (internal): the CUDA op implementations behind the runtime's KernelSet interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"

namespace memplan::runtime::cuda {

// Why the CUDA kernels cannot run op of g as shaped there (the table's dtype and rank constraints and reasons, or the
// generated elementwise path's dtypes); empty when they can. Needs no device.
std::string cuda_unsupported_reason(const analysis::Graph& g, const analysis::Op& op);

// Keeps one ExecState per prepared graph; `run` points its per-tensor pointers at the OpCall's
// references and its op's workspace at the OpCall's scratch region (or, with side_workspace, at one
// workspace beside the arena sized for every convolution's first-ranked algorithm) before the op runs.
class CudaKernels final : public KernelSet {
 public:
  CudaKernels(Context& ctx, bool side_workspace) : ctx_(ctx), side_workspace_(side_workspace) {}
  std::string unsupported_reason(const analysis::Graph& g, const analysis::Op& op) const override;
  bool alias_safe(const analysis::Op& op) const override;
  bool uses_plan_scratch() const override { return !side_workspace_; }
  void prepare(const analysis::Graph& g) override;
  void run(const OpCall& call) override;

  FusedKernelCache& fused() noexcept { return fused_; }
  // The workspace cuDNN's first-ranked algorithm wants for op `id` of g (a convolution; 0 for other ops).
  std::uint64_t preferred_workspace(const analysis::Graph& g, analysis::OpId id);
  std::uint64_t workspace_bytes() const noexcept { return workspace_.size(); }

 private:
  ExecState* state_of(const analysis::Op& op) const;
  Context& ctx_;
  bool side_workspace_ = false;
  FusedKernelCache fused_;
  Buffer workspace_;
  std::vector<std::unique_ptr<ExecState>> states_;  // one per prepared graph
};

}  // namespace memplan::runtime::cuda

// The CUDA KernelSet (internal): the CUDA op implementations behind the runtime's KernelSet interface.
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/cuda/cuda_state.hpp"
#include "runtime_allocator/cuda/host_fallback.hpp"

namespace memplan::runtime::cuda {

// Why the CUDA kernels cannot run op of g as shaped there (the table's dtype and rank constraints and reasons, or the
// generated elementwise path's dtypes); empty when they can. Needs no device.
std::string cuda_unsupported_reason(const analysis::Graph& g, const analysis::Op& op);

// Keeps one ExecState per prepared graph; `run` points its per-tensor pointers at the OpCall's
// references and its op's workspace at the OpCall's scratch region (or, with side_workspace, at one
// workspace beside the arena sized for every convolution's first-ranked algorithm) before the op runs.
class CudaKernels final : public KernelSet {
 public:
  CudaKernels(Context& ctx, bool side_workspace, bool host_fallback = false);
  ~CudaKernels() override;
  std::string unsupported_reason(const analysis::Graph& g, const analysis::Op& op) const override;
  bool alias_safe(const analysis::Op& op) const override;
  bool uses_plan_scratch() const override { return !side_workspace_; }
  void prepare(const analysis::Graph& g) override;
  void run(const OpCall& call) override;

  FusedKernelCache& fused() noexcept { return fused_; }
  // The workspace cuDNN's first-ranked algorithm wants for op `id` of g (a convolution; 0 for other ops).
  std::uint64_t preferred_workspace(const analysis::Graph& g, analysis::OpId id);
  std::uint64_t workspace_bytes() const noexcept { return workspace_.size(); }
  // The ops run on the host so far, in the order first met.
  const std::vector<HostFallback>& host_fallbacks() const noexcept { return fallbacks_; }

 private:
  ExecState* state_of(const analysis::Op& op) const;
  bool falls_back(const analysis::Graph& g, const analysis::Op& op, std::string* why = nullptr) const;
  void fall_back(const analysis::Op& op, const std::string& why);
  void run_on_host(const OpCall& call);
  Context& ctx_;
  bool side_workspace_ = false;
  FusedKernelCache fused_;
  Buffer workspace_;
  std::vector<std::unique_ptr<ExecState>> states_;  // one per prepared graph
  std::unique_ptr<KernelSet> host_;                  // the CPU kernels, with host_fallback
  std::unordered_set<const analysis::Op*> on_host_;  // ops of the prepared graphs that run there
  std::vector<HostFallback> fallbacks_;
};

}  // namespace memplan::runtime::cuda

// Where memplan's model of PyTorch eager (pytorch_peak_bytes) guesses: forms in an export that PyTorch may have run
// as one kernel or as several, which the export alone does not tell apart.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::planner {

struct EagerDoubt {
  std::string kind;    // "attention" | "python_attention" | "rms_norm" | "activation"
  std::size_t count = 0;
  std::string detail;  // what was assumed, in a sentence
};

// The doubts of the prediction for a shaped forward graph: softmax attention the SDPA matcher did not recognise
// (counted as matmul, softmax, matmul: right for eager attention, too high where the model called SDPA), attention
// it recognised but not in SDPA's exported form (AttentionMatch::sdpa_form: counted op by op as well), RMSNorm
// written as arithmetic (counted op by op: too high where the model called F.rms_norm) and SiLU, HardSwish and
// Mish written as their definitions (counted op by op: too high where the model called F.silu, F.hardswish or
// F.mish, which the TorchScript exporter writes out the same way). `sdpa`: the prediction assumes SDPA (with
// `sdpa_form_only`, where the export has SDPA's form).
std::vector<EagerDoubt> pytorch_eager_doubts(const analysis::Graph& shaped_forward, bool sdpa, bool sdpa_form_only = true);

}  // namespace memplan::planner

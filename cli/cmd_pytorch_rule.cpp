// `memplan pytorch-rule conv` (hidden): the eager model's cuDNN convolution rule (planner/pytorch/cudnn_conv.hpp)
// on given operands, one JSON object a line in and out, so that tests hold it to memplan_torch's Python rule.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "analysis/error.hpp"
#include "cli/common.hpp"
#include "cli/registry.hpp"
#include "planner/pytorch/cudnn_conv.hpp"

namespace memplan::cli {
namespace {

using nlohmann::json;
using planner::ConvPass;
using planner::MemoryFormat;

const char* format_name(MemoryFormat f) { return f == MemoryFormat::channels_last ? "channels_last" : "contiguous"; }

planner::ConvOperand operand(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_object())
    fail(ErrorKind::malformed, std::string("pytorch-rule conv: '") + key + "' (an object) is missing");
  const json& o = j[key];
  planner::ConvOperand t;
  t.shape = o.at("shape").get<std::vector<std::int64_t>>();
  t.layout =
      o.value("layout", std::string("contiguous")) == "channels_last" ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  return t;
}

// {"x": {"shape": [...], "layout": "contiguous" | "channels_last"}, "w": ..., "y": ..., "dtype": "float32" | "bfloat16" |
// "float16" (torch's names), "stride": [...], "dilation": [...], "groups": 1, "transposed": false}
planner::CudaConvolution convolution(const json& j) {
  planner::CudaConvolution c;
  c.x = operand(j, "x");
  c.w = operand(j, "w");
  c.y = operand(j, "y");
  const auto dtype = analysis::dtype_from_name(j.value("dtype", std::string("float32")));
  if (!dtype) fail(ErrorKind::malformed, "pytorch-rule conv: unknown dtype '" + j.value("dtype", std::string()) + "'");
  c.dtype = *dtype;
  c.stride = j.at("stride").get<std::vector<std::int64_t>>();
  c.dilation = j.at("dilation").get<std::vector<std::int64_t>>();
  c.groups = j.value("groups", std::int64_t{1});
  c.transposed = j.value("transposed", false);
  return c;
}

json conv_facts(const planner::CudaConvolution& c) {
  const MemoryFormat f = planner::conv_memory_format(c.x, c.w);
  return {{"memory_format", format_name(f)},
          {"cudnn", planner::conv_runs_cudnn(c)},
          {"workspace",
           {{"forward", planner::cudnn_conv_workspace_bytes(c, ConvPass::forward)},
            {"backward_data", planner::cudnn_conv_workspace_bytes(c, ConvPass::backward_data)},
            {"backward_filter", planner::cudnn_conv_workspace_bytes(c, ConvPass::backward_filter)}}},
          {"copies",
           {{"x", planner::conv_operand_copy_bytes(c.x, c.dtype, f)},
            {"w", planner::conv_operand_copy_bytes(c.w, c.dtype, f)},
            {"y", planner::conv_operand_copy_bytes(c.y, c.dtype, f)}}}};
}

int run_conv_rule() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    planner::CudaConvolution c;
    try {
      c = convolution(json::parse(line));
    } catch (const json::exception& e) {
      fail(ErrorKind::malformed, std::string("pytorch-rule conv: not a convolution's JSON: ") + e.what());
    }
    std::cout << json_text(conv_facts(c)) << "\n";
  }
  return 0;
}

void add_pytorch_rule(CLI::App& app, std::function<int()>& action) {
  CLI::App* cmd = app.add_subcommand("pytorch-rule", "the eager model's device rules on given operands (for tests)");
  cmd->group("");  // hidden: a test hook, not a user's command
  cmd->require_subcommand(1);
  CLI::App* conv =
      cmd->add_subcommand("conv", "cuDNN convolution: memory format, backend, workspaces, copies; JSON lines on stdin");
  conv->callback([&action] { action = [] { return run_conv_rule(); }; });
}

[[maybe_unused]] const int registered = register_command(90, &add_pytorch_rule);

}  // namespace
}  // namespace memplan::cli

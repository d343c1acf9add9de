// Default-domain opsets outside the importer's range, converted with libonnx's own version converter.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

namespace memplan::analysis {

// The most nodes a model needing conversion may have (docs/errors.md, "Limits of size"). libonnx 1.12's IR
// checks each value name it makes against every node (onnx::Graph::isNameUnique), so its converter is quadratic
// in nodes: 10,000 take about 2 s, 20,000 about 10 s, 100,000 minutes. Beyond it the model is refused at once.
inline constexpr int kMaxConvertedNodes = 10000;

// The opset in [kMinOpset, kMaxOpset] nearest to `opset`: the one a model of `opset` is converted to.
std::int64_t nearest_supported_opset(std::int64_t opset);

// Converts `model` (default-domain opset `from`, outside the supported range) to `to` with libonnx's version
// converter (onnx::version_conversion::ConvertVersion). The model must already have passed memplan's own
// structural checks (every read produced once, no subgraphs): the converter trusts its input. Before it runs,
// every default-domain node is checked against its ONNX schema at `from` (the op exists, input, output and
// attribute counts and types): the converter's adapters index inputs and attributes without checking.
// Errors (ErrorKind::unsupported, message prefixed with `origin`): more than kMaxConvertedNodes nodes, an opset below 1, beyond what libonnx knows,
// an op with no schema at `from`, a node its schema refuses, or a step the converter has no adapter for
// (node, op type and both opsets named).
onnx::ModelProto convert_opset(const onnx::ModelProto& model, std::int64_t from, std::int64_t to, const std::string& origin);

}  // namespace memplan::analysis

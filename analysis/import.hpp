// Reading models into a Graph: ONNX files and memplan's own JSON graph format (docs/graph-format.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// The default-domain opsets the importers accept (ONNX's opset_import, the JSON graph's "opset").
inline constexpr std::int64_t kMinOpset = 7;
inline constexpr std::int64_t kMaxOpset = 23;

struct ImportOptions {
  // Keep the bytes of inline initializers (the executor needs them; planning does not). Small
  // integer constants (<= 4096 elements) are always kept: shape folding reads them.
  bool keep_weight_data = false;
};

// ONNX (opset 13..18 and beyond, IR <= 10). External data is never opened: only dims and dtype are read.
// Constant nodes become weight tensors with their value. Errors: io, malformed, unsupported, invalid_graph.
Graph import_onnx(const std::string& path, const ImportOptions& opts = {});
Graph import_onnx_bytes(const std::string& bytes, const std::string& origin, const ImportOptions& opts = {});

// memplan JSON graph format, version 1.
Graph import_json(const nlohmann::json& doc, const std::string& origin = "<json>");
Graph import_json_file(const std::string& path);
nlohmann::json export_json(const Graph& g, bool include_data = false);

// Chooses the importer by content: JSON when the file starts with '{', ONNX otherwise.
Graph import_model(const std::string& path, const ImportOptions& opts = {});

}  // namespace memplan::analysis

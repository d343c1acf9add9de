// ONNX opset conversion through libonnx's version converter, with the checks its adapters assume done first.
#include "analysis/onnx_opset.hpp"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include "analysis/error.hpp"
#include "analysis/import.hpp"

namespace memplan::analysis {

namespace {

bool default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

std::string node_label(const onnx::NodeProto& node, int index) {
  return "node '" + (node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name()) + "' (" +
         node.op_type() + ")";
}

// The converter's assertion text without its source location ("file.h:66: adapt: Assertion `false` failed: ").
std::string converter_reason(const std::string& what) {
  const std::string marker = "failed: ";
  const auto at = what.rfind(marker);
  std::string reason = at == std::string::npos ? what : what.substr(at + marker.size());
  while (!reason.empty() && (reason.back() == ' ' || reason.back() == '\n')) reason.pop_back();
  return reason.empty() ? "no reason given" : reason;
}

// The first default-domain node whose op type the converter's message names, or -1.
int node_named_in(const onnx::ModelProto& model, const std::string& reason) {
  const auto& nodes = model.graph().node();
  auto word = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (int k = 0; k < nodes.size(); ++k) {
    const std::string& type = nodes[k].op_type();
    if (!default_domain(nodes[k].domain()) || type.empty()) continue;
    for (auto at = reason.find(type); at != std::string::npos; at = reason.find(type, at + 1)) {
      const bool starts = at == 0 || !word(reason[at - 1]);
      const bool ends = at + type.size() == reason.size() || !word(reason[at + type.size()]);
      if (starts && ends) return k;
    }
  }
  return -1;
}

// Every default-domain node has a schema at `opset` and satisfies it.
void check_nodes(const onnx::ModelProto& model, std::int64_t opset, const std::string& origin) {
  const auto& nodes = model.graph().node();
  for (int k = 0; k < nodes.size(); ++k) {
    const onnx::NodeProto& node = nodes[k];
    if (!default_domain(node.domain())) continue;
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(opset), "");
    if (!schema || schema->Deprecated())
      fail(ErrorKind::unsupported, origin + ": " + node_label(node, k) + ": ONNX opset " + std::to_string(opset) +
                                       " has no op " + node.op_type() + ", so the model cannot be converted to a supported opset");
    try {
      schema->Verify(node);
    } catch (const std::exception& e) {
      fail(ErrorKind::unsupported, origin + ": " + node_label(node, k) + " does not match its ONNX opset " +
                                       std::to_string(opset) + " schema (" + converter_reason(e.what()) + ")");
    }
  }
}

// The converter's IR import (libonnx 1.12) reads an initializer only when the graph lists it as an input too,
// as IR 3 required: an IR >= 4 model's other initializers would be "undefined". Listing them changes nothing
// for memplan's importer, which reads an input that is also an initializer as a weight.
void list_initializers_as_inputs(onnx::GraphProto& g) {
  std::unordered_set<std::string> inputs;
  for (const auto& vi : g.input()) inputs.insert(vi.name());
  for (const auto& init : g.initializer()) {
    if (!inputs.insert(init.name()).second) continue;
    onnx::ValueInfoProto* vi = g.add_input();
    vi->set_name(init.name());
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(init.data_type());
    for (auto d : init.dims()) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
}

// Before opset 7 a PRelu slope of shape [C] applied per channel (axis 1), as PyTorch's nn.PReLU(C) exports it;
// from opset 7 it broadcasts from the right like numpy, and libonnx has no adapter for the change. A slope
// initializer [C] read only by such a PRelu, whose input has a known rank r >= 3, becomes [C, 1, ..., 1]
// (r - 1 dims): the same values, the same per-channel meaning under opset 7.
void legacy_prelu_slopes(onnx::GraphProto& g) {
  std::unordered_map<std::string, int> readers, rank;
  for (const auto& node : g.node())
    for (const auto& in : node.input()) ++readers[in];
  for (const auto* list : {&g.input(), &g.value_info()})
    for (const auto& vi : *list)
      if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
        rank[vi.name()] = vi.type().tensor_type().shape().dim_size();
  for (const auto& node : g.node()) {
    if (!default_domain(node.domain()) || node.op_type() != "PRelu" || node.input_size() != 2) continue;
    const auto r = rank.find(node.input(0));
    if (r == rank.end() || r->second < 3 || readers[node.input(1)] != 1) continue;
    for (auto& init : *g.mutable_initializer()) {
      if (init.name() != node.input(1) || init.dims_size() != 1 || init.dims(0) <= 1) continue;
      for (int k = 1; k < r->second - 1; ++k) init.add_dims(1);
      for (auto& vi : *g.mutable_input())
        if (vi.name() == init.name() && vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
          for (int k = 1; k < r->second - 1; ++k) vi.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1);
    }
  }
}

// libonnx 1.12's IR export drops the dims of a tensor attribute the converter builds (Reshape 4 -> 5 turns the
// `shape` attribute into a Constant of dims [n]): such a Constant, one the model did not have, comes back rank 0 with
// n values. It is given back its one dim, so the converter's own node is not refused as malformed.
void restore_converter_constant_dims(onnx::GraphProto& g, const onnx::GraphProto& original) {
  std::unordered_set<std::string> known;
  for (const auto& node : original.node())
    for (const auto& out : node.output()) known.insert(out);
  for (auto& node : *g.mutable_node()) {
    if (!default_domain(node.domain()) || node.op_type() != "Constant" || node.output_size() != 1 || known.count(node.output(0))) continue;
    for (auto& attr : *node.mutable_attribute()) {
      if (attr.name() != "value" || !attr.has_t() || attr.t().dims_size() != 0 || !attr.t().raw_data().empty()) continue;
      onnx::TensorProto& t = *attr.mutable_t();
      const int n = t.int64_data_size() + t.int32_data_size() + t.float_data_size() + t.double_data_size();
      if (n > 1) t.add_dims(n);
    }
  }
}

}  // namespace

std::int64_t nearest_supported_opset(std::int64_t opset) { return std::clamp(opset, kMinOpset, kMaxOpset); }

onnx::ModelProto convert_opset(const onnx::ModelProto& model, std::int64_t from, std::int64_t to, const std::string& origin) {
  const std::string range = std::to_string(kMinOpset) + ".." + std::to_string(kMaxOpset);
  if (from < 1)
    fail(ErrorKind::unsupported, origin + ": default-domain opset " + std::to_string(from) +
                                     " is not an ONNX opset (they start at 1; memplan runs " + range + ")");
  const auto known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at("");
  if (from > known.second || to > known.second)
    fail(ErrorKind::unsupported, origin + ": default-domain opset " + std::to_string(from) + " is outside the supported range " +
                                     range + ", and libonnx's version converter knows opsets " + std::to_string(known.first) +
                                     ".." + std::to_string(known.second) + " only, so it cannot convert it to opset " +
                                     std::to_string(to));
  if (model.graph().node_size() > kMaxConvertedNodes)
    fail(ErrorKind::unsupported, origin + ": default-domain opset " + std::to_string(from) + " must be converted to opset " +
                                     std::to_string(to) + ", and memplan converts models of at most " +
                                     std::to_string(kMaxConvertedNodes) + " nodes (this one has " +
                                     std::to_string(model.graph().node_size()) +
                                     "; libonnx's version converter is quadratic in nodes): convert it beforehand "
                                     "with onnx.version_converter, or export it at opset " +
                                     std::to_string(kMinOpset) + " or later");
  check_nodes(model, from, origin);
  std::string reason;
  try {
    // The broadcasting adapters (Add, Mul, Gemm 6 -> 7) read their inputs' shapes: ONNX's own shape inference
    // fills value_info first (best effort: in its default mode a node it cannot infer is left without shapes).
    onnx::ModelProto shaped = model;
    list_initializers_as_inputs(*shaped.mutable_graph());
    onnx::shape_inference::InferShapes(shaped);
    if (from < 7) legacy_prelu_slopes(*shaped.mutable_graph());
    onnx::ModelProto converted = onnx::version_conversion::ConvertVersion(shaped, static_cast<int>(to));
    restore_converter_constant_dims(*converted.mutable_graph(), model.graph());
    return converted;
  } catch (const std::exception& e) {
    reason = converter_reason(e.what());
  } catch (...) {
    reason = "an unknown exception";
  }
  const int k = node_named_in(model, reason);
  const std::string who = k >= 0 ? node_label(model.graph().node(k), k) + ": " : "";
  fail(ErrorKind::unsupported, origin + ": " + who + "libonnx's version converter cannot convert the model from opset " +
                                   std::to_string(from) + " to opset " + std::to_string(to) + " (" + reason + ")");
}

}  // namespace memplan::analysis

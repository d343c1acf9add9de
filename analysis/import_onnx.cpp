// ONNX import: ModelProto -> Graph. External weight data is never opened; only dims and dtype are read.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "analysis/einsum_lower.hpp"
#include "analysis/import.hpp"
#include "analysis/names.hpp"
#include "analysis/onnx_opset.hpp"
#include "analysis/onnx_tensor.hpp"

namespace memplan::analysis {

namespace {

using onnx_tensor::checked_dims;
using onnx_tensor::tensor_data;
using onnx_tensor::to_dtype;

constexpr std::uint64_t kMaxModelFileBytes = 0x7fffffff;  // a protobuf message cannot exceed 2 GiB
constexpr std::uint64_t kKeepSmallElements = 4096;
constexpr std::int64_t kMaxIrVersion = 11;

struct Ctx {
  std::string origin;
  [[noreturn]] void bad(ErrorKind k, const std::string& msg) const { fail(k, origin + ": " + msg); }
};

// The names a subgraph may read from the graphs around it (ONNX IR: outer-scope values are visible inside).
struct Scope {
  const Scope* outer = nullptr;
  std::unordered_set<std::string> names;
  bool has(const std::string& n) const { return names.count(n) || (outer && outer->has(n)); }
};

// What reading one graph (the model's or a subgraph) needs besides its proto.
struct GraphCtx {
  std::int64_t opset = 0;
  const ImportOptions* opts = nullptr;
  const Scope* outer = nullptr;  // null for the model's graph
};

Graph graph_from_proto(const Ctx& c, const onnx::GraphProto& gp, const GraphCtx& gc);

Tensor weight_from_proto(const Ctx& c, const onnx::TensorProto& tp, const ImportOptions& opts) {
  const std::string what = "initializer '" + tp.name() + "'";
  if (tp.name().empty()) c.bad(ErrorKind::malformed, "an initializer has no name");
  Tensor t;
  t.name = tp.name();
  t.role = TensorRole::weight;
  t.dtype = to_dtype(c.origin, tp.data_type(), what);
  auto dims = checked_dims(c.origin, tp.dims(), what);
  t.rank_known = true;
  for (auto d : dims) t.dims.push_back(Dim::of(d));
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    t.external_data = true;
    for (const auto& kv : tp.external_data()) {
      if (kv.key() == "location") t.external_location = kv.value();
      else if (kv.key() == "offset" || kv.key() == "length") {
        std::uint64_t v = 0;
        try {
          std::size_t used = 0;
          v = std::stoull(kv.value(), &used);
          if (used != kv.value().size()) throw std::invalid_argument("trailing");
        } catch (const std::exception&) {
          c.bad(ErrorKind::malformed, what + ": external data " + kv.key() + " '" + kv.value() + "' is not a number");
        }
        (kv.key() == "offset" ? t.external_offset : t.external_length) = v;
      }
    }
    if (t.external_location.empty()) c.bad(ErrorKind::malformed, what + ": external data without a location");
    return t;
  }
  const std::uint64_t n = t.element_count();
  if (opts.keep_weight_data || n <= kKeepSmallElements) {
    if (t.dtype == DType::string) return t;
    t.data = std::make_shared<TensorData>(tensor_data(c.origin, tp, t.dtype, dims, what));
  }
  return t;
}

Attribute attribute_from_proto(const Ctx& c, const onnx::NodeProto& node, const onnx::AttributeProto& a, const GraphCtx& gc) {
  Attribute out;
  const std::string what = "node '" + node.name() + "' (" + node.op_type() + ") attribute '" + a.name() + "'";
  switch (a.type()) {
    case onnx::AttributeProto::INT: out.kind = Attribute::Kind::i; out.i = a.i(); break;
    case onnx::AttributeProto::FLOAT: out.kind = Attribute::Kind::f; out.f = a.f(); break;
    case onnx::AttributeProto::STRING: out.kind = Attribute::Kind::s; out.s = a.s(); break;
    case onnx::AttributeProto::INTS: out.kind = Attribute::Kind::ints; out.ints.assign(a.ints().begin(), a.ints().end()); break;
    case onnx::AttributeProto::FLOATS: out.kind = Attribute::Kind::floats; out.floats.assign(a.floats().begin(), a.floats().end()); break;
    case onnx::AttributeProto::STRINGS: out.kind = Attribute::Kind::strings; out.strings.assign(a.strings().begin(), a.strings().end()); break;
    case onnx::AttributeProto::TENSOR: {
      out.kind = Attribute::Kind::tensor;
      const auto& tp = a.t();
      if (tp.data_location() == onnx::TensorProto::EXTERNAL) c.bad(ErrorKind::unsupported, what + ": external data in an attribute");
      DType dt = to_dtype(c.origin, tp.data_type(), what);
      out.t = std::make_shared<TensorData>(tensor_data(c.origin, tp, dt, checked_dims(c.origin, tp.dims(), what), what));
      break;
    }
    case onnx::AttributeProto::GRAPH:  // If's branches, Loop's and Scan's body: expanded by shape inference
      out.kind = Attribute::Kind::graph;
      out.graph = std::make_shared<const Graph>(graph_from_proto(c, a.g(), gc));
      break;
    case onnx::AttributeProto::GRAPHS:
      c.bad(ErrorKind::unsupported, what + ": lists of subgraphs (SequenceMap's kind) are not supported");
    default:
      c.bad(ErrorKind::unsupported, what + " has an unsupported attribute type " + std::to_string(a.type()));
  }
  return out;
}

// A Constant node's value as TensorData (value, value_float(s), value_int(s)). ONNX gives it exactly one.
TensorData constant_value(const Ctx& c, const onnx::NodeProto& node, const Op& op) {
  int values = 0;
  for (const auto& [key, a] : op.attrs) values += key == "value" || key.starts_with("value_") || key == "sparse_value";
  if (values > 1)
    c.bad(ErrorKind::malformed, "Constant node '" + op.name + "' has " + std::to_string(values) + " value attributes (ONNX allows exactly one)");
  if (const Attribute* a = op.attr("value"); a && a->kind == Attribute::Kind::tensor) return *a->t;
  if (const Attribute* a = op.attr("value_float")) return TensorData::from_double(DType::f32, {}, {a->f});
  if (const Attribute* a = op.attr("value_floats")) return TensorData::from_double(DType::f32, {static_cast<std::int64_t>(a->floats.size())}, a->floats);
  if (const Attribute* a = op.attr("value_int")) return TensorData::from_int64(DType::i64, {}, {a->i});
  if (const Attribute* a = op.attr("value_ints")) return TensorData::from_int64(DType::i64, {static_cast<std::int64_t>(a->ints.size())}, a->ints);
  c.bad(ErrorKind::unsupported, "Constant node '" + node.name() + "' has no supported value attribute");
}

void add_value_info_input(const Ctx& c, Graph& g, const onnx::ValueInfoProto& vi, bool subgraph) {
  const std::string what = "graph input '" + vi.name() + "'";
  if (subgraph && (!vi.has_type() || (vi.type().has_tensor_type() && vi.type().tensor_type().elem_type() == 0))) {
    g.inputs.push_back(g.add_tensor(Tensor{.name = vi.name(), .role = TensorRole::input}));  // typed by what binds it
    return;
  }
  if (!vi.type().has_tensor_type()) c.bad(ErrorKind::unsupported, what + " is not a tensor (sequence/map/optional types are not supported)");
  const auto& tt = vi.type().tensor_type();
  Tensor t;
  t.name = vi.name();
  t.role = TensorRole::input;
  t.dtype = to_dtype(c.origin, tt.elem_type(), what);
  if (tt.has_shape()) {
    t.rank_known = true;
    int k = 0;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        if (d.dim_value() < 0) c.bad(ErrorKind::overflow, what + " has a negative dim " + std::to_string(d.dim_value()));
        t.dims.push_back(Dim::of(d.dim_value()));
      } else if (d.has_dim_param() && !d.dim_param().empty()) {
        t.dims.push_back(Dim::sym(d.dim_param()));
      } else {
        t.dims.push_back(Dim::sym(vi.name() + ":" + std::to_string(k)));  // unnamed: must be bound by name:axis
      }
      ++k;
    }
  }
  g.inputs.push_back(g.add_tensor(std::move(t)));
}


onnx::ModelProto parse_model(const Ctx& c, const std::string& bytes) {
  onnx::ModelProto model;
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(static_cast<int>(std::min<std::uint64_t>(bytes.size() + 1, 0x7fffffff)));
  in.SetRecursionLimit(64);
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    c.bad(ErrorKind::malformed, "not a valid ONNX model (protobuf parse failed: truncated, garbage or nested too deeply)");
  if (!model.has_graph() || model.ir_version() <= 0)
    c.bad(ErrorKind::malformed, "not an ONNX model (no graph or no IR version)");
  if (model.ir_version() > kMaxIrVersion)
    c.bad(ErrorKind::unsupported, "IR version " + std::to_string(model.ir_version()) + " is newer than supported (<= " + std::to_string(kMaxIrVersion) + ")");
  return model;
}

// The default-domain opset the model imports (0 when it imports none).
std::int64_t default_opset(const Ctx& c, const onnx::ModelProto& model) {
  std::int64_t opset = 0;
  int default_imports = 0;
  for (const auto& os : model.opset_import()) {
    if (!os.domain().empty() && os.domain() != "ai.onnx") continue;
    if (++default_imports > 1) c.bad(ErrorKind::malformed, "the model imports the default domain (\"\" or \"ai.onnx\") twice");
    opset = os.version();
  }
  return opset;
}

// The names graph `gp` defines (initializers, inputs, node outputs), seen by its subgraphs as their outer scope.
Scope scope_of(const onnx::GraphProto& gp, const Scope* outer) {
  Scope s{outer, {}};
  for (const auto& tp : gp.initializer()) s.names.insert(tp.name());
  for (const auto& vi : gp.input()) s.names.insert(vi.name());
  for (const auto& node : gp.node())
    for (const auto& out : node.output()) s.names.insert(out);
  return s;
}

// The tensor graph `g` reads as `name`: its own, or in a subgraph one of an enclosing scope (added as a tensor
// of role input that g.inputs does not list); kNoTensor when neither.
TensorId resolve_read(Graph& g, const std::string& name, const GraphCtx& gc) {
  TensorId t = g.find(name);
  if (t == kNoTensor && gc.outer && gc.outer->has(name)) t = g.add_tensor(Tensor{.name = name, .role = TensorRole::input});
  return t;
}

// Pass 1 of a graph: every node output gets a tensor (nodes may come in any order; order is checked later).
std::vector<Op> node_ops(const Ctx& c, const onnx::GraphProto& gp, const GraphCtx& gc, Graph& g, std::vector<bool>& is_constant) {
  const Scope inner = scope_of(gp, gc.outer);
  const GraphCtx sub{gc.opset, gc.opts, &inner};
  std::vector<Op> ops;
  ops.reserve(static_cast<std::size_t>(gp.node_size()));
  std::unordered_set<std::string> node_names;
  for (int ni = 0; ni < gp.node_size(); ++ni) {
    const auto& node = gp.node(ni);
    Op op;
    op.name = node.name().empty() ? node.op_type() + "_" + std::to_string(ni) : node.name();
    if (!node_names.insert(op.name).second) op.name += "#" + std::to_string(ni);
    op.type = node.op_type();
    op.domain = node.domain() == "ai.onnx" ? "" : node.domain();
    if (op.type.empty()) c.bad(ErrorKind::malformed, "node " + std::to_string(ni) + " has no op type");
    for (const auto& a : node.attribute()) {
      if (a.name().empty()) c.bad(ErrorKind::malformed, "node '" + op.name + "' has an attribute without a name");
      op.attrs[a.name()] = attribute_from_proto(c, node, a, sub);
    }
    // Before opset 13 Softmax, LogSoftmax and Hardmax default to axis 1 (from 13 on: -1). Spelled out, the
    // kernels read it as opset 13 does; the two agree whenever the dims after the axis are 1 (CNN classifiers).
    if (gc.opset < 13 && op.domain.empty() && (op.type == "Softmax" || op.type == "LogSoftmax" || op.type == "Hardmax") &&
        !op.attrs.count("axis"))
      op.attrs["axis"] = Attribute{.kind = Attribute::Kind::i, .i = 1};
    const bool constant = op.domain.empty() && op.type == "Constant";
    if (constant && node.output_size() != 1) c.bad(ErrorKind::malformed, "Constant node '" + op.name + "' must have one output");
    for (const auto& out : node.output()) {
      if (out.empty()) continue;
      if (g.find(out) != kNoTensor) {
        const TensorId prior = g.find(out);
        c.bad(ErrorKind::invalid_graph, "tensor '" + out + "' is produced by node '" + op.name + "' but is already " +
                                            (g.tensors[prior].role == TensorRole::activation ? "produced by another node"
                                                                                              : "a graph input or initializer"));
      }
      Tensor t;
      t.name = out;
      if (constant) {
        auto value = std::make_shared<TensorData>(constant_value(c, node, op));
        t.role = TensorRole::weight;
        t.dtype = value->dtype;
        t.rank_known = true;
        for (auto d : value->dims) t.dims.push_back(Dim::of(d));
        t.data = std::move(value);
      }
      g.add_tensor(std::move(t));
    }
    ops.push_back(std::move(op));
    is_constant.push_back(constant);
  }
  return ops;
}

// Pass 2: link inputs and outputs by name.
void link_ops(const Ctx& c, const onnx::GraphProto& gp, const GraphCtx& gc, Graph& g, std::vector<Op>& ops,
              const std::vector<bool>& is_constant) {
  for (int ni = 0; ni < gp.node_size(); ++ni) {
    if (is_constant[static_cast<std::size_t>(ni)]) continue;
    const auto& node = gp.node(ni);
    Op op = std::move(ops[static_cast<std::size_t>(ni)]);
    for (const auto& in : node.input()) {
      if (in.empty()) {
        op.inputs.push_back(kNoTensor);
        continue;
      }
      const TensorId t = resolve_read(g, in, gc);
      if (t == kNoTensor)
        c.bad(ErrorKind::invalid_graph, "node '" + op.name + "' (" + op.type + ") reads '" + in +
                                            "', which no node produces and is not a graph input or initializer");
      op.inputs.push_back(t);
    }
    for (const auto& out : node.output()) op.outputs.push_back(out.empty() ? kNoTensor : g.find(out));
    if (op.domain.empty() && op.type == "Einsum" && lower_einsum(g, op, gc.opset)) continue;  // einsum_lower.hpp
    g.add_op(std::move(op));
  }
}

// The Graph of one ONNX graph: the model's (gc.outer null) or a subgraph, whose reads of enclosing scopes
// become tensors of role input outside its `inputs`.
Graph graph_from_proto(const Ctx& c, const onnx::GraphProto& gp, const GraphCtx& gc) {
  Graph g;
  g.opset = gc.opset;
  g.name = gp.name();
  if (gp.sparse_initializer_size() > 0) c.bad(ErrorKind::unsupported, "sparse initializers are not supported");
  std::unordered_set<std::string> initializer_names;
  for (const auto& tp : gp.initializer()) {
    g.add_tensor(weight_from_proto(c, tp, *gc.opts));
    initializer_names.insert(tp.name());
  }
  for (const auto& vi : gp.input()) {
    if (initializer_names.count(vi.name())) continue;  // old exporters list weights as inputs too
    if (vi.name().empty()) c.bad(ErrorKind::malformed, "a graph input has no name");
    add_value_info_input(c, g, vi, gc.outer != nullptr);
  }
  std::vector<bool> is_constant;
  std::vector<Op> ops = node_ops(c, gp, gc, g, is_constant);
  link_ops(c, gp, gc, g, ops, is_constant);
  for (const auto& vi : gp.output()) {
    const TensorId t = resolve_read(g, vi.name(), gc);
    if (t == kNoTensor) c.bad(ErrorKind::invalid_graph, "graph output '" + vi.name() + "' is produced by no node");
    g.tensors[t].is_graph_output = true;
    g.outputs.push_back(t);
  }
  if (g.outputs.empty()) c.bad(ErrorKind::invalid_graph, "the graph " + (gc.outer ? "'" + gp.name() + "' " : std::string()) + "has no outputs");
  require_utf8_names(g, c.origin);
  g.validate();
  return g;
}

// The Graph of a parsed model whose default-domain opset is `opset` (range checked by the caller).
Graph graph_from_model(const Ctx& c, const onnx::ModelProto& model, std::int64_t opset, const ImportOptions& opts) {
  Graph g = graph_from_proto(c, model.graph(), GraphCtx{opset, &opts, nullptr});
  g.ir_version = model.ir_version();
  if (g.name.empty()) g.name = is_valid_utf8(c.origin) ? c.origin : "model";
  return g;
}

}  // namespace

Graph import_onnx_bytes(const std::string& bytes, const std::string& origin, const ImportOptions& opts) {
  const Ctx c{origin};
  const onnx::ModelProto model = parse_model(c, bytes);
  const std::int64_t opset = default_opset(c, model);
  if (opset >= kMinOpset && opset <= kMaxOpset) return graph_from_model(c, model, opset, opts);
  // memplan's own checks first (names, dangling reads, a tensor produced twice, subgraphs): the converter
  // trusts its input. Weights are not kept on this pass.
  (void)graph_from_model(c, model, opset, ImportOptions{});
  const std::int64_t target = nearest_supported_opset(opset);
  Graph g = graph_from_model(c, convert_opset(model, opset, target, origin), target, opts);
  g.converted_from_opset = opset;
  return g;
}

Graph import_onnx(const std::string& path, const ImportOptions& opts) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(ErrorKind::io, "'" + path + "' is a directory, not a model file");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail(ErrorKind::io, "cannot open '" + path + "'");
  const std::streamoff size = f.tellg();
  if (size < 0) fail(ErrorKind::io, "cannot read '" + path + "'");
  if (static_cast<std::uint64_t>(size) > kMaxModelFileBytes)
    fail(ErrorKind::malformed, path + ": file of " + std::to_string(size) + " bytes is larger than any ONNX protobuf (2 GiB)");
  std::string bytes(static_cast<std::size_t>(size), '\0');
  f.seekg(0);
  if (size > 0 && !f.read(bytes.data(), size)) fail(ErrorKind::io, "cannot read '" + path + "'");
  return import_onnx_bytes(bytes, path, opts);
}

}  // namespace memplan::analysis

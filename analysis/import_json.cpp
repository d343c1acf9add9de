// memplan's JSON graph format (docs/graph-format.md): import, export, and picking an importer by content.
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "analysis/import.hpp"
#include "analysis/json_read.hpp"
#include "analysis/names.hpp"

namespace memplan::analysis {

using nlohmann::json;

namespace {

constexpr int kGraphFormatVersion = 1;
constexpr std::uint64_t kMaxInlineElements = 1u << 24;
constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMinInt64 = std::numeric_limits<std::int64_t>::min();

struct Reader {
  std::string origin;
  [[noreturn]] void bad(ErrorKind k, const std::string& msg) const { fail(k, origin + ": " + msg); }
  const json& field(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object() || !obj.contains(key)) bad(ErrorKind::malformed, where + " has no '" + key + "'");
    return obj.at(key);
  }
  std::string str(const json& obj, const char* key, const std::string& where, std::string fallback = {}, bool required = false) const {
    if (!obj.contains(key)) {
      if (required) bad(ErrorKind::malformed, where + " has no '" + key + "'");
      return fallback;
    }
    if (!obj.at(key).is_string()) bad(ErrorKind::malformed, where + ": '" + key + "' must be a string");
    return obj.at(key).get<std::string>();
  }
};

// A constant an integer dtype cannot hold would make its conversion undefined, and a fraction would be cut:
// both are malformed instead.
void check_fits(const Reader& r, const json& x, DType dtype, const std::string& where) {
  if (dtype_is_float(dtype)) return;
  if (x.is_number_float() && std::trunc(x.get<double>()) != x.get<double>())
    r.bad(ErrorKind::malformed, where + ": value " + json_excerpt(x) + " of " + dtype_name(dtype) + " data is not an integer");
  if (dtype == DType::boolean) return;  // any integer: nonzero is true
  const bool is_signed = dtype == DType::i8 || dtype == DType::i16 || dtype == DType::i32 || dtype == DType::i64;
  const int bits = static_cast<int>(dtype_bits(dtype));
  const long double lo = is_signed ? -std::ldexp(1.0L, bits - 1) : 0.0L;
  const long double hi = std::ldexp(1.0L, is_signed ? bits - 1 : bits) - 1.0L;
  const long double v = x.is_number_unsigned() ? static_cast<long double>(x.get<std::uint64_t>())
                        : x.is_number_integer() ? static_cast<long double>(x.get<std::int64_t>())
                                                : static_cast<long double>(x.get<double>());
  if (!(v >= lo && v <= hi)) r.bad(ErrorKind::malformed, where + ": value " + json_excerpt(x) + " does not fit " + dtype_name(dtype));
}

double non_finite(const Reader& r, const std::string& s, const std::string& where) {
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  r.bad(ErrorKind::malformed, where + ": 'data' holds numbers or \"inf\", \"-inf\", \"nan\"; got \"" + s + "\"");
}

std::shared_ptr<TensorData> data_from_json(const Reader& r, const json& j, DType dtype, std::vector<std::int64_t> dims,
                                           const std::string& where) {
  if (!j.is_array()) r.bad(ErrorKind::malformed, where + ": 'data' must be an array of numbers");
  TensorData probe{dtype, dims, {}};
  const std::uint64_t n = probe.element_count();
  if (n > kMaxInlineElements) r.bad(ErrorKind::malformed, where + ": inline data too large");
  if (j.size() != n) r.bad(ErrorKind::malformed, where + ": 'data' has " + std::to_string(j.size()) + " values, shape needs " + std::to_string(n));
  if (dtype == DType::i64 || dtype == DType::u64 || dtype == DType::i32) {
    std::vector<std::int64_t> v;
    for (const auto& x : j) {
      if (!x.is_number()) r.bad(ErrorKind::malformed, where + ": 'data' must hold numbers");
      check_fits(r, x, dtype, where);
      if (!x.is_number_float()) v.push_back(x.get<std::int64_t>());
      else if (dtype == DType::u64) v.push_back(static_cast<std::int64_t>(static_cast<std::uint64_t>(x.get<double>())));
      else v.push_back(static_cast<std::int64_t>(x.get<double>()));
    }
    return std::make_shared<TensorData>(TensorData::from_int64(dtype, std::move(dims), v));
  }
  std::vector<double> v;
  for (const auto& x : j) {
    if (x.is_string() && dtype_is_float(dtype)) {  // JSON has no inf or NaN: export_json writes them as strings
      v.push_back(non_finite(r, x.get<std::string>(), where));
      continue;
    }
    if (!x.is_number()) r.bad(ErrorKind::malformed, where + ": 'data' must hold numbers");
    check_fits(r, x, dtype, where);
    v.push_back(x.get<double>());
  }
  return std::make_shared<TensorData>(TensorData::from_double(dtype, std::move(dims), v));
}

json data_to_json(const TensorData& d) {
  json arr = json::array();
  if (dtype_is_float(d.dtype)) {
    for (double v : d.as_double()) arr.push_back(std::isfinite(v) ? json(v) : json(std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"));
  } else {
    for (auto v : d.as_int64()) arr.push_back(v);
  }
  return arr;
}

// The typed form of a tensor attribute: {"tensor": {"dtype": ..., "dims": [...], "data": [...]}}.
Attribute tensor_attribute(const Reader& r, const json& val, const std::string& where) {
  Attribute a;
  a.kind = Attribute::Kind::tensor;
  auto dt = dtype_from_name(r.str(val, "dtype", where, {}, true));
  if (!dt) r.bad(ErrorKind::unsupported, where + ": unknown dtype");
  std::vector<std::int64_t> dims;
  const json& jd = r.field(val, "dims", where);
  if (!jd.is_array()) r.bad(ErrorKind::malformed, where + ": 'dims' must be an array");
  for (const auto& d : jd) dims.push_back(json_int(d, 0, kMaxInt64, r.origin + ": " + where + " dim"));
  a.t = data_from_json(r, r.field(val, "data", where), *dt, dims, where);
  return a;
}

// A list attribute of the given kind from its JSON array, every element checked.
void fill_ints(const Reader& r, const json& val, const std::string& where, Attribute& a) {
  a.kind = Attribute::Kind::ints;
  for (const auto& x : val) a.ints.push_back(json_int(x, kMinInt64, kMaxInt64, r.origin + ": " + where));
}
void fill_floats(const Reader& r, const json& val, const std::string& where, Attribute& a) {
  a.kind = Attribute::Kind::floats;
  for (const auto& x : val) {
    if (!x.is_number()) r.bad(ErrorKind::malformed, where + ": 'floats' must hold numbers");
    a.floats.push_back(x.get<double>());
  }
}
void fill_strings(const Reader& r, const json& val, const std::string& where, const std::string& not_string, Attribute& a) {
  a.kind = Attribute::Kind::strings;
  for (const auto& x : val) {
    if (!x.is_string()) r.bad(ErrorKind::malformed, where + not_string);
    a.strings.push_back(x.get<std::string>());
  }
}

// The typed form: {"ints": [...]}, {"floats": [...]}, {"strings": [...]} or {"tensor": {...}}.
Attribute typed_attribute(const Reader& r, const json& v, const std::string& where) {
  if (v.size() != 1) r.bad(ErrorKind::malformed, where + ": a typed attribute has exactly one key");
  const auto first = v.begin();  // not *v.items().begin(): that binds to a destroyed temporary proxy
  const std::string& kind = first.key();
  const json& val = first.value();
  if (kind == "tensor") return tensor_attribute(r, val, where);
  if (!val.is_array()) r.bad(ErrorKind::malformed, where + ": typed list attribute must hold an array");
  Attribute a;
  if (kind == "ints")
    fill_ints(r, val, where, a);
  else if (kind == "floats")
    fill_floats(r, val, where, a);
  else if (kind == "strings")
    fill_strings(r, val, where, ": 'strings' must hold strings", a);
  else
    r.bad(ErrorKind::malformed, where + ": unknown typed attribute '" + kind + "'");
  return a;
}

// A plain list: strings where any element is one, else floats where any is one, else ints.
Attribute list_attribute(const Reader& r, const json& v, const std::string& where) {
  bool any_float = false, any_string = false;
  for (const auto& x : v) {
    if (x.is_number_float())
      any_float = true;
    else if (x.is_string())
      any_string = true;
    else if (!x.is_number_integer())
      r.bad(ErrorKind::malformed, where + ": list attributes hold numbers or strings");
  }
  Attribute a;
  if (any_string) {
    fill_strings(r, v, where, ": mixed list", a);
  } else if (any_float) {
    a.kind = Attribute::Kind::floats;
    for (const auto& x : v) a.floats.push_back(x.get<double>());
  } else {
    fill_ints(r, v, where, a);
  }
  return a;
}

Attribute attribute_from_json(const Reader& r, const json& v, const std::string& where) {
  if (v.is_object()) return typed_attribute(r, v, where);
  if (v.is_array()) return list_attribute(r, v, where);
  Attribute a;
  if (v.is_number_integer()) {
    a.kind = Attribute::Kind::i;
    a.i = json_int(v, kMinInt64, kMaxInt64, r.origin + ": " + where);
  } else if (v.is_boolean()) {
    a.kind = Attribute::Kind::i;
    a.i = v.get<bool>() ? 1 : 0;
  } else if (v.is_number_float()) {
    a.kind = Attribute::Kind::f;
    a.f = v.get<double>();
  } else if (v.is_string()) {
    a.kind = Attribute::Kind::s;
    a.s = v.get<std::string>();
  } else {
    r.bad(ErrorKind::malformed, where + ": unsupported attribute value");
  }
  return a;
}

json attribute_to_json(const Attribute& a) {
  switch (a.kind) {
    case Attribute::Kind::i: return a.i;
    case Attribute::Kind::f: return a.f;
    case Attribute::Kind::s: return a.s;
    case Attribute::Kind::ints: return a.ints.empty() ? json{{"ints", json::array()}} : json(a.ints);
    case Attribute::Kind::floats: return json{{"floats", a.floats}};
    case Attribute::Kind::strings: return json{{"strings", a.strings}};
    case Attribute::Kind::tensor: return json{{"tensor", {{"dtype", dtype_name(a.t->dtype)}, {"dims", a.t->dims}, {"data", data_to_json(*a.t)}}}};
    case Attribute::Kind::graph: break;
  }
  return nullptr;
}

Tensor tensor_from_json(const Reader& r, const json& jt, std::size_t index) {
  const std::string where = "tensors[" + std::to_string(index) + "]";
  Tensor t;
  t.name = r.str(jt, "name", where, {}, true);
  const std::string w = "tensor '" + t.name + "'";
  auto dt = dtype_from_name(r.str(jt, "dtype", w, "float32"));
  if (!dt) r.bad(ErrorKind::unsupported, w + ": unknown dtype '" + r.str(jt, "dtype", w) + "'");
  t.dtype = *dt;  // "undefined": to be inferred
  auto role = role_from_name(r.str(jt, "role", w, "activation"));
  if (!role) r.bad(ErrorKind::malformed, w + ": unknown role '" + r.str(jt, "role", w) + "'");
  t.role = *role;
  if (jt.contains("shape")) {
    const json& s = jt.at("shape");
    if (!s.is_array()) r.bad(ErrorKind::malformed, w + ": 'shape' must be an array");
    t.rank_known = true;
    for (const auto& d : s) {
      if (d.is_number_unsigned() && d.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxInt64)) {
        r.bad(ErrorKind::overflow, w + ": dim " + json_excerpt(d) + " is beyond 2^63 - 1");
      } else if (d.is_number_integer()) {
        if (d.get<std::int64_t>() < 0) r.bad(ErrorKind::overflow, w + ": negative dim " + json_excerpt(d));
        t.dims.push_back(Dim::of(d.get<std::int64_t>()));
      } else if (d.is_string() && !d.get<std::string>().empty()) {
        t.dims.push_back(Dim::sym(d.get<std::string>()));
      } else {
        r.bad(ErrorKind::malformed, w + ": dims are non-negative integers or symbol names, got " + json_excerpt(d));
      }
    }
    if (t.shape_known()) (void)t.element_count();  // overflow check
  }
  if (jt.contains("on_host")) {
    if (!jt.at("on_host").is_boolean())
      r.bad(ErrorKind::malformed, w + ": 'on_host' must be true or false, got " + json_excerpt(jt.at("on_host")));
    t.on_host = jt.at("on_host").get<bool>();
  }
  if (jt.contains("external_location")) {
    t.external_data = true;
    t.external_location = r.str(jt, "external_location", w);
  }
  if (jt.contains("data")) {
    if (!t.shape_known() || t.dtype == DType::undefined) r.bad(ErrorKind::malformed, w + ": 'data' needs a dtype and a concrete shape");
    t.data = data_from_json(r, jt.at("data"), t.dtype, t.shape(), w);
  }
  return t;
}

// The document's format and version.
void check_format(const Reader& r, const json& doc) {
  if (!doc.is_object()) r.bad(ErrorKind::malformed, "a graph document must be a JSON object");
  if (r.str(doc, "format", "document") != "memplan.graph")
    r.bad(ErrorKind::plan_mismatch, "not a memplan graph (expected \"format\": \"memplan.graph\")");
  const json& ver = r.field(doc, "version", "document");
  if (!ver.is_number_integer() || ver.get<std::int64_t>() != kGraphFormatVersion)
    r.bad(ErrorKind::plan_mismatch, "graph format version " + json_excerpt(ver) + " is not supported (expected " +
                                        std::to_string(kGraphFormatVersion) + ")");
}

// The default-domain opset: the range the ONNX importer accepts (rules are written for these opsets), or 0: a graph
// memplan built by code, which records no opset (export_json writes it so, and it reads back the same). 17 when absent.
std::int64_t read_opset(const Reader& r, const json& doc) {
  if (!doc.contains("opset")) return 17;
  const json& o = doc.at("opset");
  if (!o.is_number_integer()) r.bad(ErrorKind::malformed, "'opset' must be an integer, got " + json_excerpt(o));
  const bool beyond = o.is_number_unsigned() && o.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxInt64);
  if (beyond || (o.get<std::int64_t>() != 0 && (o.get<std::int64_t>() < kMinOpset || o.get<std::int64_t>() > kMaxOpset)))
    r.bad(ErrorKind::unsupported, "default-domain opset " + json_excerpt(o) + " is outside the supported range " +
                                      std::to_string(kMinOpset) + ".." + std::to_string(kMaxOpset));
  return o.get<std::int64_t>();
}

// The tensors an array names ("" an absent optional tensor where `allow_empty`).
std::vector<TensorId> tensor_names(const Reader& r, const Graph& g, const json& arr, const std::string& where, bool allow_empty) {
  std::vector<TensorId> ids;
  if (!arr.is_array()) r.bad(ErrorKind::malformed, where + " must be an array of tensor names");
  for (const auto& n : arr) {
    if (!n.is_string()) r.bad(ErrorKind::malformed, where + " must hold tensor names");
    const auto s = n.get<std::string>();
    if (s.empty() && allow_empty) {
      ids.push_back(kNoTensor);
      continue;
    }
    TensorId t = g.find(s);
    if (t == kNoTensor) r.bad(ErrorKind::invalid_graph, where + " names '" + s + "', which is not in 'tensors'");
    ids.push_back(t);
  }
  return ids;
}

Op op_from_json(const Reader& r, const Graph& g, const json& jo, std::size_t i) {
  const std::string where = "ops[" + std::to_string(i) + "]";
  Op op;
  op.type = r.str(jo, "type", where, {}, true);
  op.name = r.str(jo, "name", where, op.type + "_" + std::to_string(i));
  op.domain = r.str(jo, "domain", where);
  auto phase = phase_from_name(r.str(jo, "phase", where, "forward"));
  if (!phase) r.bad(ErrorKind::malformed, where + ": unknown phase");
  op.phase = *phase;
  op.inputs = tensor_names(r, g, jo.contains("inputs") ? jo.at("inputs") : json::array(), "op '" + op.name + "' inputs", true);
  op.outputs = tensor_names(r, g, r.field(jo, "outputs", where), "op '" + op.name + "' outputs", true);
  if (jo.contains("attrs")) {
    if (!jo.at("attrs").is_object()) r.bad(ErrorKind::malformed, "op '" + op.name + "': 'attrs' must be an object");
    for (const auto& [k, v] : jo.at("attrs").items())
      op.attrs[k] = attribute_from_json(r, v, "op '" + op.name + "' attribute '" + k + "'");
  }
  return op;
}

}  // namespace

Graph import_json(const json& doc, const std::string& origin) {
  Reader r{origin};
  check_format(r, doc);
  Graph g;
  g.name = r.str(doc, "name", "document", origin);
  g.opset = read_opset(r, doc);
  const json& tensors = r.field(doc, "tensors", "document");
  const json& ops = r.field(doc, "ops", "document");
  if (!tensors.is_array() || !ops.is_array()) r.bad(ErrorKind::malformed, "'tensors' and 'ops' must be arrays");
  for (std::size_t i = 0; i < tensors.size(); ++i) g.add_tensor(tensor_from_json(r, tensors[i], i));
  for (std::size_t i = 0; i < ops.size(); ++i) g.add_op(op_from_json(r, g, ops[i], i));
  if (doc.contains("inputs"))
    g.inputs = tensor_names(r, g, doc.at("inputs"), "'inputs'", false);
  else
    for (TensorId t = 0; t < g.tensors.size(); ++t)
      if (g.tensors[t].role == TensorRole::input) g.inputs.push_back(t);
  g.outputs = tensor_names(r, g, r.field(doc, "outputs", "document"), "'outputs'", false);
  for (TensorId t : g.outputs) g.tensors[t].is_graph_output = true;
  if (g.outputs.empty()) r.bad(ErrorKind::invalid_graph, "the graph has no outputs");
  require_utf8_names(g, origin);
  g.validate();
  return g;
}

json export_json(const Graph& g, bool include_data) {
  json doc;
  doc["format"] = "memplan.graph";
  doc["version"] = kGraphFormatVersion;
  doc["name"] = g.name;
  doc["opset"] = g.opset;
  json inputs = json::array(), outputs = json::array(), tensors = json::array(), ops = json::array();
  for (TensorId t : g.inputs) inputs.push_back(g.tensors[t].name);
  for (TensorId t : g.outputs) outputs.push_back(g.tensors[t].name);
  for (const auto& t : g.tensors) {
    json jt{{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"role", role_name(t.role)}};
    if (t.rank_known) {
      json s = json::array();
      for (const auto& d : t.dims) s.push_back(d.known() ? json(d.value) : json(d.symbol.empty() ? "?" : d.symbol));
      jt["shape"] = s;
    }
    if (t.on_host) jt["on_host"] = true;
    if (t.external_data) jt["external_location"] = t.external_location;
    if (t.data && (include_data || t.data->element_count() <= 4096)) jt["data"] = data_to_json(*t.data);
    tensors.push_back(std::move(jt));
  }
  auto tname = [&](TensorId t) { return t == kNoTensor ? std::string() : g.tensors[t].name; };
  for (const auto& op : g.ops) {
    json jo{{"name", op.name}, {"type", op.type}};
    if (!op.domain.empty()) jo["domain"] = op.domain;
    if (op.phase != Phase::forward) jo["phase"] = phase_name(op.phase);
    json ins = json::array(), outs = json::array();
    for (auto t : op.inputs) ins.push_back(tname(t));
    for (auto t : op.outputs) outs.push_back(tname(t));
    jo["inputs"] = ins;
    jo["outputs"] = outs;
    if (!op.attrs.empty()) {
      json attrs = json::object();
      for (const auto& [k, a] : op.attrs) attrs[k] = attribute_to_json(a);
      jo["attrs"] = attrs;
    }
    ops.push_back(std::move(jo));
  }
  doc["inputs"] = inputs;
  doc["outputs"] = outputs;
  doc["tensors"] = tensors;
  doc["ops"] = ops;
  return doc;
}

Graph import_json_file(const std::string& path) { return import_json(read_json_file(path, "model"), path); }

Graph import_model(const std::string& path, const ImportOptions& opts) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::io, "cannot open '" + path + "'");
  char c = 0;
  while (f.get(c) && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
  }
  if (f && c == '{') return import_json_file(path);
  return import_onnx(path, opts);
}

}  // namespace memplan::analysis

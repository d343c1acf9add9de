// Graph bookkeeping: dtypes, tensor sizes, attributes, linking, validation and topological order.
#include "analysis/graph.hpp"

#include <algorithm>
#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <boost/graph/topological_sort.hpp>
#include <cmath>
#include <cstring>
#include <iterator>

#include "analysis/float16.hpp"

namespace memplan::analysis {

namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  std::uint32_t bits;
};
constexpr std::array<DTypeInfo, 23> kDTypes{{
    {DType::undefined, "undefined", 0}, {DType::f32, "float32", 32},   {DType::u8, "uint8", 8},
    {DType::i8, "int8", 8},             {DType::u16, "uint16", 16},    {DType::i16, "int16", 16},
    {DType::i32, "int32", 32},          {DType::i64, "int64", 64},     {DType::string, "string", 0},
    {DType::boolean, "bool", 8},        {DType::f16, "float16", 16},   {DType::f64, "float64", 64},
    {DType::u32, "uint32", 32},         {DType::u64, "uint64", 64},    {DType::c64, "complex64", 64},
    {DType::c128, "complex128", 128},   {DType::bf16, "bfloat16", 16}, {DType::f8e4m3fn, "float8e4m3fn", 8},
    {DType::f8e4m3fnuz, "float8e4m3fnuz", 8}, {DType::f8e5m2, "float8e5m2", 8},
    {DType::f8e5m2fnuz, "float8e5m2fnuz", 8},  {DType::u4, "uint4", 4}, {DType::i4, "int4", 4},
}};
}  // namespace

std::uint32_t dtype_bits(DType t) noexcept {
  auto i = static_cast<std::size_t>(t);
  return i < kDTypes.size() ? kDTypes[i].bits : 0;
}
const char* dtype_name(DType t) noexcept {
  auto i = static_cast<std::size_t>(t);
  return i < kDTypes.size() ? kDTypes[i].name : "invalid";
}
std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.t;
  return std::nullopt;
}
bool dtype_is_float(DType t) noexcept {
  switch (t) {
    case DType::f32: case DType::f16: case DType::f64: case DType::bf16: case DType::f8e4m3fn:
    case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz: return true;
    default: return false;
  }
}

const char* role_name(TensorRole r) noexcept {
  switch (r) {
    case TensorRole::input: return "input";
    case TensorRole::weight: return "weight";
    case TensorRole::activation: return "activation";
    case TensorRole::gradient: return "gradient";
    case TensorRole::optimizer_state: return "optimizer_state";
  }
  return "activation";
}
std::optional<TensorRole> role_from_name(std::string_view name) noexcept {
  for (auto r : {TensorRole::input, TensorRole::weight, TensorRole::activation, TensorRole::gradient,
                 TensorRole::optimizer_state})
    if (name == role_name(r)) return r;
  return std::nullopt;
}
const char* phase_name(Phase p) noexcept {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
    case Phase::recompute: return "recompute";
    case Phase::swap: return "swap";
  }
  return "forward";
}
std::optional<Phase> phase_from_name(std::string_view name) noexcept {
  for (auto p : {Phase::forward, Phase::backward, Phase::optimizer, Phase::recompute, Phase::swap})
    if (name == phase_name(p)) return p;
  return std::nullopt;
}

// ---- TensorData -------------------------------------------------------------------------------

std::uint64_t TensorData::element_count() const {
  std::uint64_t n = 1;
  for (auto d : dims) {
    if (d < 0) fail(ErrorKind::overflow, "constant tensor has a negative dim");
    n = checked_mul(n, static_cast<std::uint64_t>(d), "constant tensor");
  }
  return n;
}

namespace {
template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
// Float to integer without undefined behaviour: NaN is 0, values beyond the range clamp to it; narrower
// integer types then wrap as numpy's casts do.
std::int64_t to_int64(double v) {
  if (std::isnan(v)) return 0;
  if (v <= -0x1p63) return std::numeric_limits<std::int64_t>::min();
  if (v >= 0x1p63) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(v);
}
std::uint64_t to_uint64(double v) { return v >= 0x1p64 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(v); }
}  // namespace

std::vector<double> TensorData::as_double() const {
  const std::uint64_t n = element_count();
  const std::uint32_t bits = dtype_bits(dtype);
  if (bits == 0 || bits % 8 != 0 || dtype == DType::c64 || dtype == DType::c128)
    fail(ErrorKind::unsupported, std::string("constant of dtype ") + dtype_name(dtype) + " cannot be read as numbers");
  if (bytes.size() < n * (bits / 8)) fail(ErrorKind::malformed, "constant tensor data is shorter than its shape");
  std::vector<double> out(n);
  const std::byte* p = bytes.data();
  for (std::uint64_t k = 0; k < n; ++k) {
    switch (dtype) {
      case DType::f32: out[k] = load<float>(p + 4 * k); break;
      case DType::f64: out[k] = load<double>(p + 8 * k); break;
      case DType::f16: out[k] = half_to_float(load<std::uint16_t>(p + 2 * k)); break;
      case DType::bf16: out[k] = bf16_to_float(load<std::uint16_t>(p + 2 * k)); break;
      case DType::u8: out[k] = load<std::uint8_t>(p + k); break;
      case DType::i8: out[k] = load<std::int8_t>(p + k); break;
      case DType::boolean: out[k] = load<std::uint8_t>(p + k) != 0; break;
      case DType::u16: out[k] = load<std::uint16_t>(p + 2 * k); break;
      case DType::i16: out[k] = load<std::int16_t>(p + 2 * k); break;
      case DType::i32: out[k] = load<std::int32_t>(p + 4 * k); break;
      case DType::u32: out[k] = load<std::uint32_t>(p + 4 * k); break;
      case DType::i64: out[k] = static_cast<double>(load<std::int64_t>(p + 8 * k)); break;
      case DType::u64: out[k] = static_cast<double>(load<std::uint64_t>(p + 8 * k)); break;
      default: fail(ErrorKind::unsupported, std::string("constant of dtype ") + dtype_name(dtype) + " not readable");
    }
  }
  return out;
}

std::vector<std::int64_t> TensorData::as_int64() const {
  if (dtype == DType::i64) {
    const std::uint64_t n = element_count();
    if (bytes.size() < n * 8) fail(ErrorKind::malformed, "constant tensor data is shorter than its shape");
    std::vector<std::int64_t> out(n);
    if (n) std::memcpy(out.data(), bytes.data(), n * 8);
    return out;
  }
  if (dtype == DType::u64) {
    const std::uint64_t n = element_count();
    if (bytes.size() < n * 8) fail(ErrorKind::malformed, "constant tensor data is shorter than its shape");
    std::vector<std::int64_t> out(n);
    for (std::uint64_t k = 0; k < n; ++k) out[k] = static_cast<std::int64_t>(load<std::uint64_t>(bytes.data() + 8 * k));
    return out;
  }
  auto d = as_double();
  std::vector<std::int64_t> out(d.size());
  for (std::size_t k = 0; k < d.size(); ++k) {
    double v = d[k];
    if (std::isnan(v)) out[k] = 0;
    else if (v >= 9.2e18) out[k] = std::numeric_limits<std::int64_t>::max();
    else if (v <= -9.2e18) out[k] = std::numeric_limits<std::int64_t>::min();
    else out[k] = static_cast<std::int64_t>(v);
  }
  return out;
}

TensorData TensorData::from_int64(DType dtype, std::vector<std::int64_t> dims, const std::vector<std::int64_t>& values) {
  if (dtype == DType::i64 || dtype == DType::u64) {
    TensorData t{dtype, std::move(dims), {}};
    t.bytes.resize(values.size() * 8);
    if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), values.size() * 8);
    return t;
  }
  std::vector<double> d(values.begin(), values.end());
  return from_double(dtype, std::move(dims), d);
}

TensorData TensorData::from_double(DType dtype, std::vector<std::int64_t> dims, const std::vector<double>& values) {
  TensorData t{dtype, std::move(dims), {}};
  const std::uint32_t bits = dtype_bits(dtype);
  if (bits == 0 || bits % 8 != 0 || dtype == DType::c64 || dtype == DType::c128 || (bits == 8 && dtype_is_float(dtype)))
    fail(ErrorKind::unsupported, std::string("cannot build a constant of dtype ") + dtype_name(dtype));
  t.bytes.resize(values.size() * (bits / 8));
  std::byte* p = t.bytes.data();
  for (std::size_t k = 0; k < values.size(); ++k) {
    double v = values[k];
    switch (dtype) {
      case DType::f32: store<float>(p + 4 * k, static_cast<float>(v)); break;
      case DType::f64: store<double>(p + 8 * k, v); break;
      case DType::f16: store<std::uint16_t>(p + 2 * k, float_to_half(static_cast<float>(v))); break;
      case DType::bf16: store<std::uint16_t>(p + 2 * k, float_to_bf16(static_cast<float>(v))); break;
      case DType::u8: store<std::uint8_t>(p + k, static_cast<std::uint8_t>(to_int64(v))); break;
      case DType::i8: store<std::int8_t>(p + k, static_cast<std::int8_t>(to_int64(v))); break;
      case DType::boolean: store<std::uint8_t>(p + k, v != 0.0 ? 1 : 0); break;
      case DType::u16: store<std::uint16_t>(p + 2 * k, static_cast<std::uint16_t>(to_int64(v))); break;
      case DType::i16: store<std::int16_t>(p + 2 * k, static_cast<std::int16_t>(to_int64(v))); break;
      case DType::i32: store<std::int32_t>(p + 4 * k, static_cast<std::int32_t>(to_int64(v))); break;
      case DType::u32: store<std::uint32_t>(p + 4 * k, static_cast<std::uint32_t>(to_int64(v))); break;
      case DType::i64: store<std::int64_t>(p + 8 * k, to_int64(v)); break;
      case DType::u64: store<std::uint64_t>(p + 8 * k, v >= 0x1p63 ? to_uint64(v) : static_cast<std::uint64_t>(to_int64(v))); break;
      default: break;
    }
  }
  return t;
}

// ---- Tensor -----------------------------------------------------------------------------------

bool Tensor::shape_known() const noexcept {
  if (!rank_known) return false;
  return std::all_of(dims.begin(), dims.end(), [](const Dim& d) { return d.known(); });
}

std::vector<std::int64_t> Tensor::shape() const {
  if (!shape_known()) fail(ErrorKind::shape, "tensor '" + name + "' has no known shape");
  std::vector<std::int64_t> s;
  s.reserve(dims.size());
  for (const auto& d : dims) s.push_back(d.value);
  return s;
}

std::uint64_t Tensor::element_count() const {
  if (!shape_known()) fail(ErrorKind::shape, "tensor '" + name + "' has no known shape");
  std::uint64_t n = 1;
  for (const auto& d : dims) n = checked_mul(n, static_cast<std::uint64_t>(d.value), "tensor '" + name + "'");
  return n;
}

std::uint64_t Tensor::bytes() const {
  const std::uint64_t n = element_count();
  const std::uint32_t bits = dtype_bits(dtype);
  if (bits == 0) fail(ErrorKind::unsupported, "tensor '" + name + "' has dtype " + dtype_name(dtype) + " with no fixed size");
  const std::uint64_t total_bits = checked_mul(n, bits, "tensor '" + name + "'");
  return total_bits / 8 + (total_bits % 8 ? 1 : 0);
}

// ---- Op ---------------------------------------------------------------------------------------

const Attribute* Op::attr(std::string_view key) const {
  auto it = attrs.find(std::string(key));
  return it == attrs.end() ? nullptr : &it->second;
}
std::int64_t Op::attr_int(std::string_view key, std::int64_t fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (a->kind == Attribute::Kind::i) return a->i;
  // A float attribute stands for an integer only when it is one: 1.5 is refused, never truncated.
  if (a->kind == Attribute::Kind::f && std::trunc(a->f) == a->f && std::fabs(a->f) < 9.2e18) return static_cast<std::int64_t>(a->f);
  if (a->kind == Attribute::Kind::f)
    fail(ErrorKind::malformed, "op '" + name + "' (" + type + "): attribute '" + std::string(key) + "' is " + std::to_string(a->f) +
                                   ", not an integer");
  fail(ErrorKind::malformed, "op '" + name + "' (" + type + "): attribute '" + std::string(key) + "' is not an integer");
}
double Op::attr_float(std::string_view key, double fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (a->kind == Attribute::Kind::f) return a->f;
  if (a->kind == Attribute::Kind::i) return static_cast<double>(a->i);
  fail(ErrorKind::malformed, "op '" + name + "' (" + type + "): attribute '" + std::string(key) + "' is not a float");
}
std::string Op::attr_string(std::string_view key, std::string fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (a->kind == Attribute::Kind::s) return a->s;
  fail(ErrorKind::malformed, "op '" + name + "' (" + type + "): attribute '" + std::string(key) + "' is not a string");
}
std::vector<std::int64_t> Op::attr_ints(std::string_view key, std::vector<std::int64_t> fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (a->kind == Attribute::Kind::ints) return a->ints;
  if (a->kind == Attribute::Kind::i) return {a->i};
  fail(ErrorKind::malformed, "op '" + name + "' (" + type + "): attribute '" + std::string(key) + "' is not a list of integers");
}

// ---- Graph ------------------------------------------------------------------------------------

TensorId Graph::add_tensor(Tensor t) {
  if (t.name.empty()) fail(ErrorKind::invalid_graph, "a tensor has an empty name");
  if (index_.count(t.name)) fail(ErrorKind::invalid_graph, "duplicate tensor name '" + t.name + "'");
  if (tensors.size() >= kNoTensor - 1) fail(ErrorKind::overflow, "too many tensors");
  auto id = static_cast<TensorId>(tensors.size());
  index_.emplace(t.name, id);
  tensors.push_back(std::move(t));
  return id;
}

OpId Graph::add_op(Op op) {
  if (ops.size() >= kNoOp - 1) fail(ErrorKind::overflow, "too many ops");
  auto id = static_cast<OpId>(ops.size());
  for (TensorId t : op.inputs)
    if (t != kNoTensor && t >= tensors.size()) fail(ErrorKind::invalid_graph, "op '" + op.name + "' reads an unknown tensor id");
  for (TensorId t : op.outputs) {
    if (t == kNoTensor) continue;
    if (t >= tensors.size()) fail(ErrorKind::invalid_graph, "op '" + op.name + "' writes an unknown tensor id");
    if (tensors[t].producer != kNoOp)
      fail(ErrorKind::invalid_graph, "tensor '" + tensors[t].name + "' is produced by two ops ('" +
                                         ops[tensors[t].producer].name + "' and '" + op.name + "')");
    // Only memplan's own ops may write a weight: updated parameters and BatchNorm running statistics.
    if (tensors[t].role == TensorRole::input || (tensors[t].role == TensorRole::weight && op.domain != kMemplanDomain))
      fail(ErrorKind::invalid_graph, "op '" + op.name + "' writes '" + tensors[t].name + "', which is a graph input or weight");
    tensors[t].producer = id;
  }
  for (TensorId t : op.inputs)
    if (t != kNoTensor) tensors[t].consumers.push_back(id);
  ops.push_back(std::move(op));
  return id;
}

TensorId Graph::find(std::string_view tensor_name) const {
  auto it = index_.find(std::string(tensor_name));
  return it == index_.end() ? kNoTensor : it->second;
}

TensorId Graph::at(std::string_view tensor_name) const {
  TensorId t = find(tensor_name);
  if (t == kNoTensor) fail(ErrorKind::invalid_graph, "no tensor named '" + std::string(tensor_name) + "'");
  return t;
}

void Graph::relink() {
  index_.clear();
  for (TensorId t = 0; t < tensors.size(); ++t) {
    if (!index_.emplace(tensors[t].name, t).second)
      fail(ErrorKind::invalid_graph, "duplicate tensor name '" + tensors[t].name + "'");
    tensors[t].producer = kNoOp;
    tensors[t].consumers.clear();
  }
  for (OpId o = 0; o < ops.size(); ++o) {
    for (TensorId t : ops[o].outputs) {
      if (t == kNoTensor) continue;
      if (t >= tensors.size()) fail(ErrorKind::invalid_graph, "op '" + ops[o].name + "' writes an unknown tensor id");
      if (tensors[t].producer != kNoOp)
        fail(ErrorKind::invalid_graph, "tensor '" + tensors[t].name + "' is produced by two ops");
      tensors[t].producer = o;
    }
    for (TensorId t : ops[o].inputs) {
      if (t == kNoTensor) continue;
      if (t >= tensors.size()) fail(ErrorKind::invalid_graph, "op '" + ops[o].name + "' reads an unknown tensor id");
      tensors[t].consumers.push_back(o);
    }
  }
  for (auto& t : outputs)
    if (t < tensors.size()) tensors[t].is_graph_output = true;
}

void Graph::validate() const {
  for (TensorId t = 0; t < tensors.size(); ++t) {
    const Tensor& x = tensors[t];
    const bool fed = x.role == TensorRole::input || x.role == TensorRole::weight || x.data != nullptr ||
                     x.role == TensorRole::optimizer_state || x.role == TensorRole::gradient;  // accumulators start at zero
    if (x.producer == kNoOp && !fed && (!x.consumers.empty() || x.is_graph_output))
      fail(ErrorKind::invalid_graph, "tensor '" + x.name + "' is read" +
                                         (x.consumers.empty() ? std::string(" as a graph output")
                                                              : " by op '" + ops[x.consumers.front()].name + "'") +
                                         " but no op produces it and it is not a graph input or weight");
  }
  for (TensorId t : outputs)
    if (t >= tensors.size()) fail(ErrorKind::invalid_graph, "graph output refers to an unknown tensor");
  std::vector<TensorId> fed = inputs;
  std::sort(fed.begin(), fed.end());
  if (auto twice = std::adjacent_find(fed.begin(), fed.end()); twice != fed.end() && *twice < tensors.size())
    fail(ErrorKind::invalid_graph, "tensor '" + tensors[*twice].name + "' is listed twice as a graph input");
  // A graph input an op also writes would be overwritten while the caller's value is still expected.
  for (TensorId t : inputs)
    if (t < tensors.size() && tensors[t].producer != kNoOp)
      fail(ErrorKind::invalid_graph, "tensor '" + tensors[t].name + "' is a graph input and also the output of op '" +
                                         ops[tensors[t].producer].name + "'");
  (void)topological_order(*this);
}

std::string Graph::fingerprint() const {
  // FNV-1a over a canonical text of the structure: stable across runs and platforms.
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
  };
  for (const auto& op : ops) {
    mix(op.type);
    mix(op.domain);
    for (auto t : op.inputs) mix(t == kNoTensor ? "" : tensors[t].name);
    mix("->");
    for (auto t : op.outputs) mix(t == kNoTensor ? "" : tensors[t].name);
  }
  for (const auto& t : tensors) {
    mix(t.name);
    mix(dtype_name(t.dtype));
    mix(role_name(t.role));
    for (const auto& d : t.dims) mix(d.known() ? std::to_string(d.value) : d.symbol);
  }
  static const char* hex = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[static_cast<std::size_t>(i)] = hex[h & 0xf];
  return out;
}

bool is_topological(const Graph& g, const std::vector<OpId>& order) {
  if (order.size() != g.ops.size()) return false;
  std::vector<std::uint32_t> pos(g.ops.size(), kNoOp);
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    if (order[i] >= g.ops.size() || pos[order[i]] != kNoOp) return false;
    pos[order[i]] = i;
  }
  for (OpId o = 0; o < g.ops.size(); ++o)
    for (TensorId t : g.ops[o].inputs)
      if (t != kNoTensor && g.tensors[t].producer != kNoOp && pos[g.tensors[t].producer] >= pos[o]) return false;
  return true;
}

std::vector<OpId> topological_order(const Graph& g) {
  std::vector<OpId> file_order(g.ops.size());
  for (OpId o = 0; o < g.ops.size(); ++o) file_order[o] = o;
  if (is_topological(g, file_order)) return file_order;

  using BG = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  BG bg(g.ops.size());
  for (OpId o = 0; o < g.ops.size(); ++o)
    for (TensorId t : g.ops[o].inputs)
      if (t != kNoTensor && g.tensors[t].producer != kNoOp) boost::add_edge(g.tensors[t].producer, o, bg);
  std::vector<std::size_t> component(g.ops.size());
  const std::size_t ncomp = boost::strong_components(bg, component.data());
  if (ncomp != g.ops.size()) {
    std::vector<std::size_t> size(ncomp, 0);
    for (auto c : component) ++size[c];
    for (OpId o = 0; o < g.ops.size(); ++o)
      if (size[component[o]] > 1)
        fail(ErrorKind::invalid_graph, "the graph has a cycle through op '" + g.ops[o].name + "' (" + g.ops[o].type + ")");
  }
  for (OpId o = 0; o < g.ops.size(); ++o)
    for (TensorId t : g.ops[o].inputs)
      if (t != kNoTensor && g.tensors[t].producer == o)
        fail(ErrorKind::invalid_graph, "op '" + g.ops[o].name + "' reads its own output (a cycle)");
  std::vector<BG::vertex_descriptor> rev;
  boost::topological_sort(bg, std::back_inserter(rev));
  return std::vector<OpId>(rev.rbegin(), rev.rend());
}

}  // namespace memplan::analysis

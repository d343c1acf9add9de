// The computation graph: ops and tensors as dense ids, the one data structure every stage reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analysis/error.hpp"

namespace memplan::analysis {

using TensorId = std::uint32_t;
using OpId = std::uint32_t;
inline constexpr TensorId kNoTensor = std::numeric_limits<TensorId>::max();
inline constexpr OpId kNoOp = std::numeric_limits<OpId>::max();

// Element types, numbered as ONNX's TensorProto.DataType so that import is a range check.
enum class DType : std::uint8_t {
  undefined = 0, f32 = 1, u8 = 2, i8 = 3, u16 = 4, i16 = 5, i32 = 6, i64 = 7, string = 8, boolean = 9,
  f16 = 10, f64 = 11, u32 = 12, u64 = 13, c64 = 14, c128 = 15, bf16 = 16, f8e4m3fn = 17, f8e4m3fnuz = 18,
  f8e5m2 = 19, f8e5m2fnuz = 20, u4 = 21, i4 = 22,
};
inline constexpr int kMaxDType = 22;

// Bits per element (4 for u4/i4); 0 for undefined and string (strings have no fixed size).
std::uint32_t dtype_bits(DType t) noexcept;
const char* dtype_name(DType t) noexcept;
std::optional<DType> dtype_from_name(std::string_view name) noexcept;
bool dtype_is_float(DType t) noexcept;

enum class TensorRole : std::uint8_t { input, weight, activation, gradient, optimizer_state };
const char* role_name(TensorRole r) noexcept;
std::optional<TensorRole> role_from_name(std::string_view name) noexcept;

// Which part of a training step an op belongs to; inference graphs are all forward.
enum class Phase : std::uint8_t { forward, backward, optimizer, recompute, swap };
const char* phase_name(Phase p) noexcept;
std::optional<Phase> phase_from_name(std::string_view name) noexcept;

// One dimension as declared in a file: a concrete value (>= 0) or a symbol such as "batch".
struct Dim {
  std::int64_t value = -1;  // -1 with an empty symbol: unknown
  std::string symbol;
  bool known() const noexcept { return value >= 0; }
  static Dim of(std::int64_t v) { return Dim{v, {}}; }
  static Dim sym(std::string s) { return Dim{-1, std::move(s)}; }
  friend bool operator==(const Dim&, const Dim&) = default;
};

// Constant data of a tensor (initializers kept inline, Constant ops, folded shape values).
// Raw little-endian bytes as ONNX stores them.
struct TensorData {
  DType dtype = DType::undefined;
  std::vector<std::int64_t> dims;
  std::vector<std::byte> bytes;

  std::uint64_t element_count() const;
  // Values converted to int64 / double (integer, bool and float dtypes); throws on other dtypes.
  std::vector<std::int64_t> as_int64() const;
  std::vector<double> as_double() const;
  static TensorData from_int64(DType dtype, std::vector<std::int64_t> dims, const std::vector<std::int64_t>& values);
  static TensorData from_double(DType dtype, std::vector<std::int64_t> dims, const std::vector<double>& values);
};

struct Tensor {
  std::string name;
  DType dtype = DType::undefined;
  std::vector<Dim> dims;        // as declared or inferred; concrete after shape inference
  bool rank_known = false;      // false: not even the rank is known yet
  TensorRole role = TensorRole::activation;
  OpId producer = kNoOp;        // kNoOp for graph inputs, weights and constants
  std::vector<OpId> consumers;  // one entry per use, in op order
  bool is_graph_output = false;
  bool on_host = false;  // lives in host memory (a swapped-out copy): never in the device arena
  std::shared_ptr<const TensorData> data;  // constant value, when known (small constants, folded shapes)
  bool external_data = false;              // weight stored outside the model file (never opened)
  std::string external_location;          // as written in the file, relative to the model's folder
  std::uint64_t external_offset = 0;
  std::uint64_t external_length = 0;       // 0: to the end of the file

  // True when the rank and every dim are concrete.
  bool shape_known() const noexcept;
  std::vector<std::int64_t> shape() const;  // concrete dims; throws ErrorKind::shape if unknown
  std::uint64_t element_count() const;      // checked; throws if the shape is unknown
  std::uint64_t bytes() const;              // checked; rounds sub-byte types up
};

class Graph;

struct Attribute {
  enum class Kind : std::uint8_t { i, f, s, ints, floats, strings, tensor, graph };
  Kind kind = Kind::i;
  std::int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<std::int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::shared_ptr<const TensorData> t;
  // A subgraph (If's branches, Loop's and Scan's body): its formal inputs are its `inputs`; a tensor it reads
  // from an enclosing scope is a tensor of role input, no producer and no data that `inputs` does not list.
  std::shared_ptr<const Graph> graph;
};

// memplan's own op domain, named once.
inline constexpr std::string_view kMemplanDomain = "memplan";

struct Op {
  std::string name;
  std::string type;    // ONNX op_type, e.g. "Conv"; our own ops use domain "memplan"
  std::string domain;  // "" for the default ONNX domain
  std::vector<TensorId> inputs;   // kNoTensor for an omitted optional input
  std::vector<TensorId> outputs;  // kNoTensor for an omitted optional output
  std::map<std::string, Attribute> attrs;
  Phase phase = Phase::forward;
  // The op of the imported graph this one was lowered from where shape inference expanded one (the recurrent
  // "LSTM", "GRU", "RNN"), for the rules that follow what PyTorch runs for it (autocast); "autocast" for a Cast the
  // autocast pass inserted (autocast.hpp); else empty.
  std::string lowered_from;

  const Attribute* attr(std::string_view key) const;
  std::int64_t attr_int(std::string_view key, std::int64_t fallback) const;
  double attr_float(std::string_view key, double fallback) const;
  std::string attr_string(std::string_view key, std::string fallback) const;
  std::vector<std::int64_t> attr_ints(std::string_view key, std::vector<std::int64_t> fallback = {}) const;
  TensorId input(std::size_t i) const noexcept { return i < inputs.size() ? inputs[i] : kNoTensor; }
  TensorId output(std::size_t i) const noexcept { return i < outputs.size() ? outputs[i] : kNoTensor; }
};

class Graph {
 public:
  std::string name;
  std::int64_t ir_version = 0;
  std::int64_t opset = 0;  // default-domain opset
  std::int64_t converted_from_opset = 0;  // the file's default-domain opset when the importer converted it (else 0)
  std::vector<Tensor> tensors;
  std::vector<Op> ops;
  std::vector<TensorId> inputs;   // graph inputs fed by the user (not weights)
  std::vector<TensorId> outputs;
  // What shape inference decided that the user should know, one sentence each (an If planned with one branch).
  std::vector<std::string> notes;

  // Adds a tensor; its name must be new (ErrorKind::invalid_graph otherwise).
  TensorId add_tensor(Tensor t);
  // Adds an op and links producer/consumers. An output that already has a producer is an error.
  OpId add_op(Op op);
  // Id of the tensor with that name, or kNoTensor.
  TensorId find(std::string_view tensor_name) const;
  TensorId at(std::string_view tensor_name) const;  // throws ErrorKind::invalid_graph if absent
  // Recomputes producer/consumers from the ops and the name index from the tensors (after bulk edits).
  void relink();
  // Checks structure: names unique, one producer per tensor, every input produced or fed, no cycle.
  void validate() const;
  // Deterministic structural fingerprint (ops, tensors, dtypes, declared dims), as 16 hex digits.
  std::string fingerprint() const;

 private:
  std::unordered_map<std::string, TensorId> index_;
};

// A topological order of the ops: the file's order when it already is one, otherwise Boost.Graph's
// topological sort (ties broken by op id). A cycle is ErrorKind::invalid_graph naming an op on it.
std::vector<OpId> topological_order(const Graph& g);
bool is_topological(const Graph& g, const std::vector<OpId>& order);

}  // namespace memplan::analysis

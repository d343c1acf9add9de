// External weight data: path containment checks, bounded reads, size checks against the tensor.
#include "runtime_allocator/weights.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace memplan::runtime {

namespace fs = std::filesystem;

namespace {
fs::path model_dir(const std::string& model_path) {
  return fs::path(model_path).parent_path().empty() ? fs::path(".") : fs::path(model_path).parent_path();
}

// Where `location` leads from `dir` (symbolic links resolved; nothing is opened), and why it may not be
// read: "" when it lies inside `dir`.
std::string location_problem(const fs::path& dir, const std::string& location, fs::path& full) {
  const fs::path rel(location);
  if (location.empty() || rel.is_absolute() || rel.has_root_name()) return "is not a relative path";
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(dir, ec);
  full = fs::weakly_canonical(dir / rel, ec);
  if (ec) return "cannot be resolved: " + ec.message();
  auto r = root.begin();
  auto f = full.begin();
  for (; r != root.end() && !r->empty(); ++r, ++f)
    if (f == full.end() || *r != *f) return "escapes the model's folder " + root.string();
  return {};
}

// The file `location` names, refused when it leaves `dir`.
fs::path contained_path(const fs::path& dir, const std::string& location, const std::string& tensor) {
  fs::path full;
  const std::string problem = location_problem(dir, location, full);
  if (problem.starts_with("cannot")) fail(ErrorKind::io, "tensor '" + tensor + "': external data '" + location + "' " + problem);
  if (!problem.empty()) fail(ErrorKind::malformed, "tensor '" + tensor + "': external data location '" + location + "' " + problem);
  return full;
}
}  // namespace

std::string external_data_problem(const analysis::Tensor& t, const std::string& model_path) {
  if (!t.external_data) return {};
  fs::path full;
  return location_problem(model_dir(model_path), t.external_location, full);
}

void load_external_weights(analysis::Graph& g, const std::string& model_path) {
  const fs::path dir = model_dir(model_path);
  for (auto& t : g.tensors) {
    if (!t.external_data || t.data) continue;
    const fs::path file = contained_path(dir, t.external_location, t.name);
    std::error_code ec;
    const std::uint64_t file_size = fs::file_size(file, ec);
    if (ec) fail(ErrorKind::io, "tensor '" + t.name + "': cannot open external data '" + file.string() + "'");
    const std::uint64_t expected = t.bytes();
    const std::uint64_t length = t.external_length ? t.external_length : (file_size > t.external_offset ? file_size - t.external_offset : 0);
    if (length != expected)
      fail(ErrorKind::malformed, "tensor '" + t.name + "': external data length " + std::to_string(length) +
                                     " does not match its dtype and shape (" + std::to_string(expected) + " bytes)");
    if (t.external_offset > file_size || length > file_size - t.external_offset)
      fail(ErrorKind::io, "tensor '" + t.name + "': external data '" + file.string() + "' is truncated (" +
                              std::to_string(file_size) + " bytes, needs " + std::to_string(t.external_offset) + " + " +
                              std::to_string(length) + ")");
    auto data = std::make_shared<analysis::TensorData>();
    data->dtype = t.dtype;
    data->dims = t.shape();
    data->bytes.resize(length);
    std::ifstream in(file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(t.external_offset));
    if (!in || !in.read(reinterpret_cast<char*>(data->bytes.data()), static_cast<std::streamsize>(length)))
      fail(ErrorKind::io, "tensor '" + t.name + "': cannot read external data '" + file.string() + "'");
    t.data = std::move(data);
  }
}

void require_weight_data(const analysis::Graph& g) {
  std::vector<bool> fed(g.tensors.size(), false);
  for (auto t : g.inputs) fed[t] = true;
  for (analysis::TensorId t = 0; t < g.tensors.size(); ++t) {
    const auto& x = g.tensors[t];
    if (x.producer != analysis::kNoOp || fed[t] || x.consumers.empty()) continue;
    // Optimizer state and gradient accumulators start at zero, as in PyTorch.
    if ((x.role == analysis::TensorRole::optimizer_state || x.role == analysis::TensorRole::gradient) && !x.data) continue;
    if (!x.data)
      fail(ErrorKind::io, "tensor '" + x.name + "' (" + analysis::role_name(x.role) + ") has no data: " +
                              (x.external_data ? "its external file '" + x.external_location + "' was not loaded"
                                               : std::string("import the model with its weight data")));
    if (x.data->bytes.size() != x.bytes())
      fail(ErrorKind::malformed, "tensor '" + x.name + "' holds " + std::to_string(x.data->bytes.size()) +
                                     " bytes of data, its dtype and shape need " + std::to_string(x.bytes()));
  }
}

void synthesize_weight(const analysis::Tensor& t, std::byte* out) {
  const std::uint64_t n = t.element_count();
  std::uint64_t h = 1469598103934665603ull;
  for (char c : t.name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  if (t.dtype != analysis::DType::f32) {
    std::memset(out, 0, t.bytes());
    return;
  }
  auto* f = reinterpret_cast<float*>(out);
  for (std::uint64_t i = 0; i < n; ++i) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    f[i] = static_cast<float>(static_cast<std::int64_t>(h % 2001) - 1000) * 1e-4f;
  }
}

}  // namespace memplan::runtime

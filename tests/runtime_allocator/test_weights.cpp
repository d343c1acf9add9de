// Tests of external weight loading: bytes at offset, containment in the model's folder, truncation.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "runtime_allocator/weights.hpp"

using namespace memplan;
using namespace memplan::analysis;
namespace fs = std::filesystem;

namespace {
struct Folder {
  fs::path dir = fs::temp_directory_path() / "memplan_weights_test";
  fs::path model = dir / "models" / "m.onnx";
  Folder() {
    fs::remove_all(dir);
    fs::create_directories(dir / "models" / "sub");
    std::ofstream(dir / "models" / "sub" / "w.bin", std::ios::binary) << std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcd");
    std::ofstream(dir / "outside.bin", std::ios::binary) << std::string(64, 'x');
  }
  ~Folder() { fs::remove_all(dir); }
};

Graph graph_with(const std::string& location, std::uint64_t offset, std::uint64_t length) {
  Graph g;
  Tensor t;
  t.name = "w";
  t.dtype = DType::f32;
  t.rank_known = true;
  t.dims = {Dim::of(2), Dim::of(2)};
  t.role = TensorRole::weight;
  t.external_data = true;
  t.external_location = location;
  t.external_offset = offset;
  t.external_length = length;
  g.add_tensor(t);
  return g;
}

ErrorKind load_error(Graph g, const std::string& model) {
  try {
    runtime::load_external_weights(g, model);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::usage;
}
}  // namespace

TEST_CASE("external weights are read at their offset relative to the model's folder") {
  Folder f;
  Graph g = graph_with("sub/w.bin", 4, 16);
  runtime::load_external_weights(g, f.model.string());
  REQUIRE(g.tensors[0].data);
  const auto& b = g.tensors[0].data->bytes;
  CHECK(std::string(reinterpret_cast<const char*>(b.data()), b.size()) == "EFGHIJKLMNOPQRST");
  Graph to_end = graph_with("sub/w.bin", 24, 0);  // length 0: to the end of the file
  runtime::load_external_weights(to_end, f.model.string());
  CHECK(to_end.tensors[0].data->bytes.size() == 16);
}

TEST_CASE("locations that escape the model's folder are malformed - short files are io errors") {
  Folder f;
  CHECK(load_error(graph_with("../outside.bin", 0, 16), f.model.string()) == ErrorKind::malformed);
  CHECK(load_error(graph_with("sub/../../outside.bin", 0, 16), f.model.string()) == ErrorKind::malformed);
  CHECK(load_error(graph_with((f.dir / "outside.bin").string(), 0, 16), f.model.string()) == ErrorKind::malformed);
  fs::create_symlink(f.dir / "outside.bin", f.dir / "models" / "link.bin");
  CHECK(load_error(graph_with("link.bin", 0, 16), f.model.string()) == ErrorKind::malformed);
  CHECK(load_error(graph_with("sub/w.bin", 30, 16), f.model.string()) == ErrorKind::io);
  CHECK(load_error(graph_with("sub/missing.bin", 0, 16), f.model.string()) == ErrorKind::io);
  CHECK(load_error(graph_with("sub/w.bin", 0, 12), f.model.string()) == ErrorKind::malformed);  // not 16 bytes
}

TEST_CASE("a weight without data is reported before anything runs") {
  Graph g = graph_with("sub/w.bin", 0, 16);
  Tensor y;
  y.name = "y";
  y.dtype = DType::f32;
  y.rank_known = true;
  y.dims = {Dim::of(2), Dim::of(2)};
  TensorId yt = g.add_tensor(y);
  Op op;
  op.name = "relu";
  op.type = "Relu";
  op.inputs = {0};
  op.outputs = {yt};
  g.add_op(op);
  try {
    runtime::require_weight_data(g);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::io);
    CHECK(std::string(e.what()).find("'w'") != std::string::npos);
  }
}

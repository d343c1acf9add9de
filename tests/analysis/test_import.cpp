// Tests of the ONNX and JSON importers: real models, round trips and malformed input.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/import.hpp"

using namespace memplan;
using namespace memplan::analysis;
namespace fs = std::filesystem;

static std::string samples() { return std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/"; }

static std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

static ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  FAIL("no error was thrown");
  return ErrorKind::runtime;
}

TEST_CASE("every sample model imports with linked producers and consumers") {
  int n = 0;
  for (const auto& e : fs::directory_iterator(samples())) {
    if (e.path().extension() != ".onnx") continue;
    ++n;
    CAPTURE(e.path().string());
    Graph g = import_onnx(e.path().string());
    CHECK(!g.ops.empty());
    CHECK(!g.outputs.empty());
    CHECK(g.opset == 17);
    for (OpId o = 0; o < g.ops.size(); ++o) {
      CHECK(g.ops[o].type != "Constant");  // Constant nodes become weights with data
      for (TensorId t : g.ops[o].outputs)
        if (t != kNoTensor) CHECK(g.tensors[t].producer == o);
    }
    for (const auto& t : g.tensors)
      if (t.role == TensorRole::weight) CHECK((t.data != nullptr || t.external_data || t.element_count() > 4096));
    CHECK_NOTHROW(g.validate());
  }
  CHECK(n >= 15);
}

TEST_CASE("external weight data is referenced, never read") {
  Graph g = import_onnx(samples() + "resnet50.onnx");
  int external = 0;
  for (const auto& t : g.tensors)
    if (t.external_data) {
      ++external;
      CHECK(t.data == nullptr);
      CHECK(!t.external_location.empty());
      CHECK(t.shape_known());
    }
  CHECK(external > 50);
}

TEST_CASE("keep_weight_data keeps the bytes of inline initializers") {
  ImportOptions o;
  o.keep_weight_data = true;
  Graph g = import_onnx(samples() + "tiny_mlp.onnx", o);
  for (const auto& t : g.tensors)
    if (t.role == TensorRole::weight && !t.external_data) {
      REQUIRE(t.data != nullptr);
      CHECK(t.data->bytes.size() == t.bytes());
    }
}

TEST_CASE("truncated and garbage ONNX files are malformed, not crashes") {
  const std::string bytes = read_file(samples() + "resnet18.onnx");
  for (std::size_t cut : {std::size_t{1}, std::size_t{7}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 3}) {
    CAPTURE(cut);
    ErrorKind k = kind_of([&] { import_onnx_bytes(bytes.substr(0, cut), "cut"); });
    CHECK((k == ErrorKind::malformed || k == ErrorKind::invalid_graph));
  }
  CHECK(kind_of([] { import_onnx_bytes("", "empty"); }) == ErrorKind::malformed);
  CHECK(kind_of([] { import_onnx_bytes(std::string(1000, '\xff'), "garbage"); }) == ErrorKind::malformed);
  CHECK(kind_of([] { import_onnx("/nonexistent/model.onnx"); }) == ErrorKind::io);
}

TEST_CASE("JSON export and import round-trip a real model byte for byte") {
  Graph g = import_onnx(samples() + "tiny_gpt.onnx");
  const auto doc = export_json(g);
  Graph back = import_json(doc);
  CHECK(back.ops.size() == g.ops.size());
  CHECK(back.tensors.size() == g.tensors.size());
  CHECK(export_json(back).dump() == doc.dump());
  CHECK(back.fingerprint() == g.fingerprint());
}

TEST_CASE("JSON graphs: cycles, dangling inputs, duplicate names and bad versions are named errors") {
  auto base = [] {
    return nlohmann::json::parse(R"({"format":"memplan.graph","version":1,"name":"t",
      "tensors":[{"name":"x","dtype":"float32","shape":[2],"role":"input"},
                 {"name":"a","dtype":"float32","shape":[2]},{"name":"b","dtype":"float32","shape":[2]}],
      "ops":[{"name":"r1","type":"Relu","inputs":["x"],"outputs":["a"]},
             {"name":"r2","type":"Relu","inputs":["a"],"outputs":["b"]}],
      "outputs":["b"]})");
  };
  CHECK_NOTHROW(import_json(base()));
  auto cyc = base();
  cyc["ops"][0]["inputs"] = {"b"};
  try {
    import_json(cyc);
    FAIL("cycle accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_graph);
    CHECK(std::string(e.what()).find("cycle") != std::string::npos);
  }
  auto dangling = base();
  dangling["tensors"].push_back({{"name", "ghost"}, {"dtype", "float32"}, {"shape", {2}}});
  dangling["ops"][1]["inputs"] = {"ghost"};
  CHECK(kind_of([&] { import_json(dangling); }) == ErrorKind::invalid_graph);
  auto dup = base();
  dup["tensors"].push_back({{"name", "a"}, {"dtype", "float32"}});
  CHECK(kind_of([&] { import_json(dup); }) == ErrorKind::invalid_graph);
  auto ver = base();
  ver["version"] = 99;
  CHECK(kind_of([&] { import_json(ver); }) == ErrorKind::plan_mismatch);
  auto neg = base();
  neg["tensors"][1]["shape"] = {-4};
  CHECK(kind_of([&] { import_json(neg); }) == ErrorKind::overflow);
  auto huge = base();
  huge["tensors"][1]["shape"] = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  CHECK(kind_of([&] { import_json(huge); }) == ErrorKind::overflow);
  auto dtype = base();
  dtype["tensors"][1]["dtype"] = "float128";
  CHECK(kind_of([&] { import_json(dtype); }) == ErrorKind::unsupported);
}

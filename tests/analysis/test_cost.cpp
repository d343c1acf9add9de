// Tests of the cost model: FLOP formulas, bytes moved, roofline timing and device profile JSON.
#include <doctest/doctest.h>

#include "analysis/cost.hpp"
#include "analysis/training.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;
using memplan::analysis::testing::GraphBuilder;
using memplan::analysis::testing::ai;
using memplan::analysis::testing::aints;

namespace {

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  FAIL("no error was thrown");
  return ErrorKind::runtime;
}

OpId op_named(const Graph& g, const std::string& type, Phase phase) {
  for (OpId o = 0; o < g.ops.size(); ++o)
    if (g.ops[o].type == type && g.ops[o].phase == phase) return o;
  FAIL("no op " << type);
  return kNoOp;
}

}  // namespace

TEST_CASE("a convolution costs 2*N*Cout*Hout*Wout*Cin/g*kh*kw, and so do both of its gradients") {
  GraphBuilder b;
  auto x0 = b.input("x0", {2, 4, 8, 8});
  auto s = b.weight("s", {4, 1, 1});  // trains, so the conv's input wants a gradient too
  auto x = b.op1("Mul", {x0, s}, "x", {2, 4, 8, 8});
  auto w = b.weight("w", {6, 2, 3, 3});  // group 2: Cin/g = 2
  auto y = b.op1("Conv", {x, w}, "y", {2, 6, 8, 8}, {{"pads", aints({1, 1, 1, 1})}, {"group", ai(2)}});
  b.output(y);
  const double expected = 2.0 * 2 * 6 * 8 * 8 * 2 * 3 * 3;
  CHECK(op_cost(b.g, 1).flops == expected);
  CHECK(op_cost(b.g, 1).bytes_read == (2 * 4 * 8 * 8 + 6 * 2 * 3 * 3) * 4u);
  CHECK(op_cost(b.g, 1).bytes_written == 2 * 6 * 8 * 8 * 4u);
  TrainingGraph tg = build_training_graph(b.g, {});
  CHECK(op_cost(tg.graph, op_named(tg.graph, "ConvGradWeight", Phase::backward)).flops == expected);
  CHECK(op_cost(tg.graph, op_named(tg.graph, "ConvGradInput", Phase::backward)).flops == expected);
}

TEST_CASE("matmul and Gemm cost 2*M*N*K - the gradients of a matmul cost the same") {
  GraphBuilder b;
  auto a = b.input("a", {2, 5, 6});
  auto w = b.weight("w", {6, 7});
  auto y = b.op1("MatMul", {a, w}, "y", {2, 5, 7});
  auto w2 = b.weight("w2", {3, 7});
  auto z = b.op1("Gemm", {b.op1("Flatten", {y}, "f", {10, 7}), w2}, "z", {10, 3}, {{"transB", ai(1)}});
  b.output(z);
  CHECK(op_cost(b.g, 0).flops == 2.0 * 2 * 5 * 7 * 6);
  CHECK(op_cost(b.g, 2).flops == 2.0 * 10 * 3 * 7);
  CHECK_FALSE(op_cost(b.g, 1).launches);  // Flatten is a view
  CHECK(op_seconds(op_cost(b.g, 1), default_device_profile()) == 0.0);
  TrainingGraph tg = build_training_graph(b.g, {});
  CHECK(op_cost(tg.graph, op_named(tg.graph, "MatMulGradB", Phase::backward)).flops == 2.0 * 2 * 5 * 7 * 6);
}

TEST_CASE("a tensor read twice counts once - an embedding lookup reads only its rows") {
  GraphBuilder b;
  auto x = b.input("x", {4, 4});
  auto s = b.op1("Mul", {x, x}, "s", {4, 4});
  auto table = b.weight("table", {1000, 16});
  auto ids = b.input("ids", {3}, DType::i64);
  auto e = b.op1("Gather", {table, ids}, "e", {3, 16});
  b.output(s);
  b.output(e);
  CHECK(op_cost(b.g, 0).bytes_read == 64u);
  CHECK(op_cost(b.g, 0).flops == 16.0);
  CHECK(op_cost(b.g, 1).bytes_read == 3 * 16 * 4u + 3 * 8u);
}

TEST_CASE("op_seconds is the roofline maximum plus one launch") {
  DeviceProfile p = default_device_profile();
  p.peak_flops = 1e12;
  p.hbm_bytes_per_s = 1e11;
  p.kernel_launch_seconds = 1e-6;
  OpCost compute{1e9, 1000, 1000};
  CHECK(op_seconds(compute, p) == doctest::Approx(1e-3 + 1e-6));
  OpCost memory{10, 5'000'000'000, 5'000'000'000};
  CHECK(op_seconds(memory, p) == doctest::Approx(0.1 + 1e-6));
  const DeviceProfile d = default_device_profile();
  CHECK(host_to_device_seconds(static_cast<std::uint64_t>(2 * d.host_to_device_bytes_per_s), d) == doctest::Approx(2.0));
}

TEST_CASE("device profiles round-trip through JSON, and the sample h100 profile reads") {
  DeviceProfile p = default_device_profile();
  DeviceProfile q = device_profile_from_json(device_profile_to_json(p));
  CHECK(q.name == p.name);
  CHECK(q.peak_flops == p.peak_flops);
  CHECK(q.device_to_host_bytes_per_s == p.device_to_host_bytes_per_s);
  CHECK(q.measured == p.measured);
  DeviceProfile h = read_device_profile(std::string(MEMPLAN_SOURCE_DIR) + "/samples/device_profiles/h100.json");
  CHECK(h.hbm_bytes_per_s > 1e12);
  CHECK(h.kernel_launch_seconds >= 0.0);
}

TEST_CASE("a bad device profile is malformed, a missing file is io") {
  auto j = device_profile_to_json(default_device_profile());
  auto missing = j;
  missing.erase("hbm_bytes_per_s");
  CHECK(kind_of([&] { device_profile_from_json(missing); }) == ErrorKind::malformed);
  auto negative = j;
  negative["peak_flops"] = -1.0;
  CHECK(kind_of([&] { device_profile_from_json(negative); }) == ErrorKind::malformed);
  auto text = j;
  text["host_to_device_bytes_per_s"] = "fast";
  CHECK(kind_of([&] { device_profile_from_json(text); }) == ErrorKind::malformed);
  CHECK(kind_of([&] { device_profile_from_json(nlohmann::json::array()); }) == ErrorKind::malformed);
  CHECK(kind_of([] { read_device_profile("/nonexistent/profile.json"); }) == ErrorKind::io);
  for (const nlohmann::json& bad : {nlohmann::json(2.0), nlohmann::json{{"Conv", 0.0}}, nlohmann::json{{"Conv", "x"}}, nlohmann::json{{"Conv", -1.0}}}) {
    auto scaled = j;
    scaled["op_scale"] = bad;
    CHECK(kind_of([&] { device_profile_from_json(scaled); }) == ErrorKind::malformed);
  }
}

TEST_CASE("a profile's op_scale multiplies the roofline of ops of that type, and round-trips") {
  GraphBuilder b;
  auto x = b.input("x", {64, 64});
  auto w = b.weight("w", {64, 64});
  auto y = b.op1("MatMul", {x, w}, "y", {64, 64});
  b.output(b.op1("Relu", {y}, "z", {64, 64}));
  DeviceProfile p = default_device_profile();
  const double mm = op_seconds(op_cost(b.g, 0), p), relu = op_seconds(op_cost(b.g, 1), p);
  REQUIRE(mm > 0.0);
  p.op_scale["MatMul"] = 2.5;
  CHECK(op_seconds(b.g, 0, p) == doctest::Approx(2.5 * mm));
  CHECK(op_seconds(b.g, 1, p) == relu);  // no scale for Relu
  const DeviceProfile q = device_profile_from_json(device_profile_to_json(p));
  REQUIRE(q.op_scale.size() == 1);
  CHECK(q.op_scale.at("MatMul") == 2.5);
  const DeviceProfile s = read_device_profile(std::string(MEMPLAN_SOURCE_DIR) + "/samples/device_profiles/h100_op_scaled.json");
  CHECK(s.op_scale.count("Conv") == 1);
}

// Tests of the op registry: dense ids, lookups, every op complete, unknown ops refused where a cost is needed.
#include <doctest/doctest.h>

#include <set>

#include "analysis/autodiff.hpp"
#include "analysis/cost.hpp"
#include "analysis/ops.hpp"
#include "analysis/shape_rules.hpp"
#include "tests/analysis/test_training_fixture.hpp"

using namespace memplan;
using namespace memplan::analysis;
using memplan::analysis::testing::GraphBuilder;

TEST_CASE("op registry ids are dense, unique and sorted by domain then type") {
  const auto all = op_registry().all();
  REQUIRE(all.size() > 100);
  std::set<std::pair<std::string_view, std::string_view>> names;
  for (std::size_t k = 0; k < all.size(); ++k) {
    CHECK(all[k].id == k);
    CHECK(&op_registry().info(all[k].id) == &all[k]);
    CHECK(names.emplace(all[k].domain, all[k].type).second);
    if (k > 0) CHECK(std::pair(all[k - 1].domain, all[k - 1].type) < std::pair(all[k].domain, all[k].type));
  }
}

TEST_CASE("find() treats \"\" and \"ai.onnx\" as the default domain and knows memplan's ops") {
  const OpInfo* relu = op_registry().find("", "Relu");
  REQUIRE(relu != nullptr);
  CHECK(op_registry().find("ai.onnx", "Relu") == relu);
  CHECK(relu->kind == OpKind::elementwise);
  CHECK(relu->inplace_inputs == 1u);
  CHECK(op_registry().find("memplan", "Relu") == nullptr);
  CHECK(op_registry().find("", "NoSuchOp") == nullptr);
  CHECK(op_registry().find("com.example", "Relu") == nullptr);
  for (const char* t : {"ReluGrad", "ConvGradInput", "MSELoss", "SGDUpdate", "AdamUpdate", "ReduceSumTo", "BroadcastTo",
                        "SwapOut", "SwapIn", "FusedElementwise", "BatchNormTraining"}) {
    const OpInfo* i = op_registry().find("memplan", t);
    REQUIRE_MESSAGE(i != nullptr, t);
    CHECK(i->declared_shapes);
    CHECK(op_registry().find("", t) == nullptr);
  }
  CHECK(op_registry().find("memplan", "SwapOut")->kind == OpKind::memory);
  CHECK_FALSE(op_registry().find("", "Dropout")->deterministic);
  CHECK(op_registry().find("", "Reshape")->is_view());
  CHECK_FALSE(op_registry().find("", "Reshape")->launches);
}

TEST_CASE("every op has a FLOP formula, a shape rule or declared shapes, a summary, and consistent training facts") {
  for (const OpInfo& i : op_registry().all()) {
    INFO(i.domain, "::", i.type);
    CHECK(static_cast<bool>(i.flops));
    CHECK(!i.summary.empty());
    CHECK((i.shape != nullptr) != i.declared_shapes);
    if (i.shape) CHECK(static_cast<bool>(i.shape->shape));
    CHECK(i.declared_shapes == (i.domain == kMemplanDomain));
    CHECK((i.grad_kind == GradKind::rule) == (i.grad != nullptr));
    if (i.grad) CHECK(static_cast<bool>(i.grad->fn));
    CHECK(i.deterministic == (i.kind != OpKind::random));
    CHECK(i.launches == !i.is_view());
    CHECK((i.parameter_inputs & i.frozen_inputs) == 0u);
  }
}

TEST_CASE("op_cost of an op memplan does not know is unsupported and names the op") {
  GraphBuilder b;
  TensorId x = b.input("x", {4});
  b.op1("Frobnicate", {x}, "y", {4});
  b.g.ops[0].name = "frob";
  try {
    (void)op_cost(b.g, 0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
    CHECK(std::string(e.what()) == "op 'frob' (Frobnicate): memplan has no cost for this op");
  }
  b.g.ops[0].domain = "com.example";
  CHECK_THROWS_WITH(op_registry().at(b.g.ops[0], "backward rule"),
                    "op 'frob' (com.example::Frobnicate): memplan has no backward rule for this op");
}

TEST_CASE("a forward Identity is a free view, a backward Identity copies a gradient and launches") {
  GraphBuilder b;
  TensorId x = b.input("x", {8});
  b.op1("Identity", {x}, "y", {8});
  CHECK_FALSE(op_cost(b.g, 0).launches);
  b.g.ops[0].phase = Phase::backward;
  const OpCost c = op_cost(b.g, 0);
  CHECK(c.launches);
  CHECK(c.flops == 0.0);
  CHECK(c.bytes_read == 32u);
  CHECK(c.bytes_written == 32u);
}

TEST_CASE("in-place inputs: binary ops either input, inference BatchNorm input 0, FusedElementwise any input") {
  Op add;
  add.type = "Add";
  add.inputs = {0, 1};
  const OpInfo& a = *op_registry().find(add);
  CHECK(a.inplace_input(add, 0));
  CHECK(a.inplace_input(add, 1));
  CHECK_FALSE(a.inplace_input(add, 2));
  Op bn;
  bn.type = "BatchNormalization";
  bn.inputs = {0, 1, 2, 3, 4};
  bn.outputs = {5};
  const OpInfo& b = *op_registry().find(bn);
  CHECK(b.inplace_input(bn, 0));
  bn.attrs["training_mode"] = memplan::analysis::testing::ai(1);
  CHECK_FALSE(b.inplace_input(bn, 0));
  Op fused;
  fused.domain = "memplan";
  fused.type = "FusedElementwise";
  fused.inputs.assign(40, 0);
  const OpInfo& f = *op_registry().find(fused);
  CHECK(f.inplace_input(fused, 39));
  CHECK_FALSE(f.inplace_input(fused, 40));
}

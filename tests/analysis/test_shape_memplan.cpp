// memplan's own ops read from a JSON graph are checked against their schema before any stage uses them.
#include <doctest/doctest.h>

#include <string>

#include "analysis/import.hpp"
#include "analysis/json_read.hpp"
#include "analysis/shapes.hpp"

using namespace memplan;
using namespace memplan::analysis;
using nlohmann::json;

namespace {

json tensor(const std::string& name, json shape, const std::string& dtype = "float32", const std::string& role = "activation") {
  json t{{"name", name}, {"dtype", dtype}, {"role", role}};
  if (!shape.is_null()) t["shape"] = std::move(shape);
  return t;
}

json one_op(json tensors, json inputs, json op) {
  op["domain"] = "memplan";
  if (!op.contains("name")) op["name"] = "n";
  return json{{"format", "memplan.graph"}, {"version", 1}, {"inputs", std::move(inputs)}, {"outputs", op["outputs"]},
              {"tensors", std::move(tensors)}, {"ops", json::array({std::move(op)})}};
}

// The kind and message of shape inference on the document, or kind 0 when it is accepted.
std::pair<int, std::string> check(const json& doc) {
  try {
    (void)infer_shapes(import_json(doc, "test"), {});
  } catch (const Error& e) {
    return {static_cast<int>(e.kind()), e.what()};
  }
  return {0, ""};
}

json rms(json y_shape, const std::string& y_dtype = "float32", json inputs = {"x"}, json attrs = json::object()) {
  return one_op({tensor("x", {4, 64}, "float32", "input"), tensor("s", {64}, "float32", "weight"), tensor("y", std::move(y_shape), y_dtype)},
                {"x"}, {{"type", "RMSNormalization"}, {"inputs", std::move(inputs)}, {"outputs", {"y"}}, {"attrs", std::move(attrs)}});
}

json attention(json q, json k, json v, json o, json attrs = json::object(), json inputs = {"q", "k", "v"}) {
  return one_op({tensor("q", std::move(q), "float32", "input"), tensor("k", std::move(k), "float32", "input"),
                 tensor("v", std::move(v), "float32", "input"), tensor("o", std::move(o))},
                {"q", "k", "v"}, {{"type", "FusedAttention"}, {"inputs", std::move(inputs)}, {"outputs", {"o"}}, {"attrs", std::move(attrs)}});
}

json fused(const std::string& expr, json y_shape = {4, 8}) {
  return one_op({tensor("x", {4, 8}, "float32", "input"), tensor("y", std::move(y_shape))}, {"x"},
                {{"type", "FusedElementwise"}, {"inputs", {"x"}}, {"outputs", {"y"}}, {"attrs", {{"expr", expr}}}});
}

constexpr int kInvalid = static_cast<int>(ErrorKind::invalid_graph);

}  // namespace

TEST_CASE("a memplan op whose declared output disagrees with the shape computed from its inputs is an invalid graph") {
  CHECK(check(rms({4, 64})).first == 0);
  CHECK(check(rms(nullptr)).first == 0);  // no declared shape: the computed one is taken
  CHECK(check(rms({4, 64}, "float32", {"x", "s"})).first == 0);
  auto [kind, msg] = check(rms({4, 8}));
  CHECK(kind == kInvalid);
  CHECK(msg.find("'y' is declared float32 [4,8]") != std::string::npos);
  CHECK(msg.find("[4,64]") != std::string::npos);
  CHECK(check(rms({4, 64}, "int64")).first == kInvalid);
  CHECK(check(rms({4, 64}, "float32", json::array())).second.find("required input 0") != std::string::npos);
  CHECK(check(rms({4, 64}, "float32", {"x"}, {{"axis", 2}})).second.find("'axis'") != std::string::npos);
  CHECK(check(rms({4, 64}, "float32", {"x"}, {{"epsilon", -1.0}})).second.find("'epsilon'") != std::string::npos);
  CHECK(check(rms({4, 64}, "float32", {"x", "x"})).second.find("scale") != std::string::npos);
}

TEST_CASE("FusedAttention is refused with its operand count, ranks, heads, layout and dropout checked") {
  const json q{1, 4, 8, 16}, kv{1, 2, 8, 16};
  CHECK(check(attention(q, kv, kv, q)).first == 0);
  CHECK(check(attention(q, kv, kv, q, json::object(), {"q"})).first == kInvalid);
  CHECK(check(attention({4, 8, 16}, {4, 8, 16}, {4, 8, 16}, {4, 8, 16})).second.find("rank 3") != std::string::npos);
  CHECK(check(attention({1, 3, 8, 16}, kv, kv, {1, 3, 8, 16})).second.find("multiple") != std::string::npos);
  auto [kind, msg] = check(attention(q, kv, kv, q, {{"q_layout", "hsbd"}}));
  CHECK(kind == kInvalid);
  CHECK(msg.find("op 'n'") != std::string::npos);
  CHECK(check(attention(q, kv, kv, q, {{"dropout_ratio", 1.0}})).second.find("dropout_ratio") != std::string::npos);
  CHECK(check(attention(q, kv, kv, q, {{"causal", 7}})).first == kInvalid);
  CHECK(check(attention(q, kv, kv, {1, 4, 8, 8})).first == kInvalid);
}

TEST_CASE("fused expressions are checked at import: operand indices, node references, trailing text") {
  CHECK(check(fused("in 0;relu 0")).first == 0);
  CHECK(check(fused("in -1;relu 0")).first == kInvalid);
  CHECK(check(fused("in 3;relu 0")).second.find("operand 3") != std::string::npos);
  CHECK(check(fused("in 0;add 0 1")).first == kInvalid);
  CHECK(check(fused("in 0;relu 0 0")).first == kInvalid);
  CHECK(check(fused("in 0;frob 0")).first == kInvalid);
  CHECK(check(fused("in 0;relu 0", {4, 9})).first == kInvalid);
}

TEST_CASE("an unknown memplan op and an AllReduce that changes its tensor's shape are refused") {
  auto all_reduce = [](json y) {
    return one_op({tensor("x", {4, 64}, "float32", "input"), tensor("y", std::move(y))}, {"x"},
                  {{"type", "AllReduce"}, {"inputs", {"x"}}, {"outputs", {"y"}}});
  };
  CHECK(check(all_reduce({4, 64})).first == 0);
  CHECK(check(all_reduce({4, 32})).first == kInvalid);
  json doc = all_reduce({4, 64});
  doc["ops"][0]["type"] = "Frobnicate";
  auto [kind, msg] = check(doc);
  CHECK(kind == static_cast<int>(ErrorKind::unsupported));
  CHECK(msg.find("Frobnicate") != std::string::npos);
}

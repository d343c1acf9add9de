// Tests of arena assignment: view and in-place aliasing (and where it must not happen), options.
#include <algorithm>
#include <optional>
#include <vector>

#include <doctest/doctest.h>

#include "planner/assign.hpp"
#include "tests/planner/planner_fixtures.hpp"

using namespace memplan;
using namespace memplan::planner;
using namespace memplan::planner::testing;

TEST_CASE("a chain of views shares the root's buffer and each view names its own input") {
  GraphBuilder b;
  const TensorId x = b.input("x", 1000), a = b.act("a", 1000), v1 = b.act("v1", 1000), v2 = b.act("v2", 1000), y = b.act("y", 1000);
  b.op("Conv", {x}, {a});
  b.op("Reshape", {a}, {v1});
  b.op("Flatten", {v1}, {v2});
  b.op("Conv", {v2}, {y});
  b.output(y);
  const Plan p = plan_checked(b.g);
  CHECK(p.tensor_buffer[v1] == p.tensor_buffer[a]);
  CHECK(p.tensor_buffer[v2] == p.tensor_buffer[a]);
  CHECK(p.tensor_offset[v2] == p.tensor_offset[a]);
  CHECK(has_alias(p, v1, a, AliasKind::view));
  CHECK(has_alias(p, v2, v1, AliasKind::view));
  const Buffer& root = p.buffers[p.tensor_buffer[a]];
  CHECK(root.interval.first == 0);
  CHECK(root.interval.last == 3);  // v2 is read by the last op
  CHECK(p.buffers.size() == 2);
}

TEST_CASE("a view of a graph input or a weight takes no arena bytes") {
  GraphBuilder b;
  const TensorId x = b.input("x", 4096), w = b.weight("w", 4096), vx = b.act("vx", 4096), vw = b.act("vw", 4096), vv = b.act("vv", 4096),
                 y = b.act("y", 10);
  b.op("Reshape", {x}, {vx});
  b.op("Identity", {w}, {vw});
  b.op("Squeeze", {vw}, {vv});
  b.op("MatMul", {vx, vv}, {y});
  b.output(y);
  const Plan p = plan_checked(b.g);
  CHECK(p.tensor_offset[vx] == kNotInArena);
  CHECK(p.tensor_offset[vw] == kNotInArena);
  CHECK(p.tensor_offset[vv] == kNotInArena);
  CHECK(has_alias(p, vv, vw, AliasKind::view));
  CHECK(p.buffers.size() == 1);
  CHECK(p.arena_bytes == 256);
}

TEST_CASE("an elementwise op overwrites an input whose buffer dies at it") {
  GraphBuilder b;
  const TensorId x = b.input("x", 1000), a = b.act("a", 1000), r = b.act("r", 1000), s = b.act("s", 1000), y = b.act("y", 64);
  b.op("Conv", {x}, {a});
  const OpId relu = b.op("Relu", {a}, {r});
  b.op("Sigmoid", {r}, {s});
  b.op("Conv", {s}, {y});
  b.output(y);
  const Plan p = plan_checked(b.g, without_scratch());
  CHECK(p.tensor_buffer[r] == p.tensor_buffer[a]);
  CHECK(p.tensor_buffer[s] == p.tensor_buffer[a]);
  bool found = false;
  for (const auto& al : p.aliases) found = found || (al.tensor == r && al.source == a && al.kind == AliasKind::inplace && al.op == relu);
  CHECK(found);
  CHECK(p.aliased_lower_bound_bytes == 4096 + 256);
}

TEST_CASE("a binary op overwrites whichever input dies at it, input 1 included") {
  GraphBuilder b;
  const TensorId x = b.input("x", 500), a = b.act("a", 500), c = b.act("c", 500), s = b.act("s", 500), y = b.act("y", 500);
  b.op("Conv", {x}, {a});
  b.op("Conv", {x}, {c});
  b.op("Add", {a, c}, {s});  // a is read again below: only c may be overwritten
  b.op("Mul", {s, a}, {y});
  b.output(y);
  const Plan p = plan_checked(b.g);
  CHECK(has_alias(p, s, c, AliasKind::inplace));
  CHECK(p.tensor_buffer[s] != p.tensor_buffer[a]);
}

TEST_CASE("in-place never overwrites a graph input, a weight, a graph output or a tensor read later") {
  GraphBuilder b;
  const TensorId x = b.input("x", 256), w = b.weight("w", 256);
  const TensorId rx = b.act("rx", 256), aw = b.act("aw", 256), o = b.act("o", 256), ro = b.act("ro", 256), later = b.act("later", 256),
                 t = b.act("t", 256);
  b.op("Relu", {x}, {rx});
  b.op("Add", {w, rx}, {aw});  // rx still read by the Conv below
  b.op("Conv", {aw, rx}, {o});
  b.op("Relu", {o}, {ro});     // o is a graph output
  b.op("Tanh", {ro}, {later});
  b.op("Add", {later, ro}, {t});
  b.output(o);
  b.output(t);
  const Plan p = plan_checked(b.g);
  CHECK(p.tensor_buffer[ro] != p.tensor_buffer[o]);
  CHECK(p.tensor_buffer[aw] != p.tensor_buffer[rx]);
  CHECK(p.tensor_buffer[later] != p.tensor_buffer[ro]);  // ro is read by the last Add
  for (const auto& al : p.aliases) {
    CHECK(al.source != x);
    CHECK(al.source != w);
    CHECK(al.source != o);
  }
}

TEST_CASE("in-place waits while a view of the input is still live") {
  GraphBuilder b;
  const TensorId x = b.input("x", 300), a = b.act("a", 300), v = b.act("v", 300), r = b.act("r", 300), y = b.act("y", 300);
  b.op("Conv", {x}, {a});
  b.op("Reshape", {a}, {v});
  b.op("Relu", {a}, {r});
  b.op("Add", {r, v}, {y});
  b.output(y);
  const Plan p = plan_checked(b.g);
  CHECK(p.tensor_buffer[v] == p.tensor_buffer[a]);
  CHECK(p.tensor_buffer[r] != p.tensor_buffer[a]);
  // Both r and v (with a) die at the Add: y overwrites one of them.
  CHECK((has_alias(p, y, r, AliasKind::inplace) || has_alias(p, y, v, AliasKind::inplace)));
}

TEST_CASE("in-place needs equal bytes: Cast to a same-width type may, Cast to a narrower one and Conv may not") {
  GraphBuilder b;
  const TensorId x = b.input("x", 1000), a = b.act("a", 1000), i = b.act("i", 1000, DType::i32), h = b.act("h", 1000, DType::f16),
                 c = b.act("c", 500, DType::f16);
  b.op("Conv", {x}, {a});
  b.op("Cast", {a}, {i});
  b.op("Cast", {i}, {h});
  b.op("Conv", {h}, {c});
  b.output(c);
  const Plan p = plan_checked(b.g);
  CHECK(has_alias(p, i, a, AliasKind::inplace));
  CHECK(p.tensor_buffer[h] != p.tensor_buffer[i]);
  CHECK(p.tensor_buffer[c] != p.tensor_buffer[h]);
}

TEST_CASE("BatchNormalization is in-place in inference mode only") {
  for (bool training : {false, true}) {
    GraphBuilder b;
    const TensorId x = b.input("x", 800), a = b.act("a", 800), y = b.act("y", 800), z = b.act("z", 800);
    std::vector<TensorId> ins = {a, b.weight("s", 8), b.weight("b", 8), b.weight("m", 8), b.weight("v", 8)};
    std::vector<TensorId> outs = {y};
    if (training) outs.push_back(b.act("running_mean", 8));
    b.op("Conv", {x}, {a});
    const OpId bn = b.op("BatchNormalization", ins, outs);
    if (training) b.g.ops[bn].attrs["training_mode"].i = 1;
    b.op("Conv", {y}, {z});
    b.output(z);
    const Plan p = plan_checked(b.g);
    CHECK(has_alias(p, y, a, AliasKind::inplace) == !training);
  }
}

TEST_CASE("switching views and in-place off gives every arena tensor its own buffer") {
  GraphBuilder b;
  const TensorId x = b.input("x", 700), a = b.act("a", 700), v = b.act("v", 700), r = b.act("r", 700);
  b.op("Conv", {x}, {a});
  b.op("Reshape", {a}, {v});
  b.op("Relu", {v}, {r});
  b.output(r);
  AssignOptions o = without_scratch();
  o.views = false;
  o.inplace = false;
  const Plan off = plan_checked(b.g, o);
  CHECK(off.aliases.empty());
  CHECK(off.buffers.size() == 3);
  const Plan on = plan_checked(b.g, without_scratch());
  CHECK(on.buffers.size() == 1);
  CHECK(on.arena_bytes < off.arena_bytes);
}

TEST_CASE("offsets and sizes are multiples of the alignment - the plan records every field") {
  GraphBuilder b;
  const TensorId x = b.input("x", 10), a = b.act("a", 10), c = b.act("c", 33), y = b.act("y", 7);
  b.op("Conv", {x}, {a});
  b.op("Conv", {a}, {c});
  b.op("Add", {a, c}, {y});
  b.output(y);
  for (std::uint64_t align : {1u, 8u, 64u, 256u}) {
    AssignOptions o;
    o.alignment = align;
    const Plan p = plan_checked(b.g, o);
    CHECK(p.alignment == align);
    CHECK(p.model_fingerprint == b.g.fingerprint());
    CHECK(p.schedule.size() == 3);
    CHECK(p.tensor_offset.size() == b.g.tensors.size());
    for (const auto& buf : p.buffers) {
      CHECK(buf.offset % align == 0);
      CHECK(buf.size % align == 0);
      CHECK(buf.offset + buf.size <= p.arena_bytes);
    }
    CHECK(p.arena_bytes >= p.aliased_lower_bound_bytes);
  }
  AssignOptions zero;
  zero.alignment = 0;
  const Liveness l = analyze_liveness(b.g, topological_order(b.g), 1);
  CHECK_THROWS_AS(assign(b.g, l, zero), Error);
}

TEST_CASE("convolutions get scratch of their larger activation, capped by the limit - other ops none") {
  GraphBuilder b;
  const TensorId x = b.input("x", 1000), a = b.act("a", 3000), r = b.act("r", 3000), y = b.act("y", 500);
  const OpId c1 = b.op("Conv", {x}, {a});
  b.op("Relu", {a}, {r});
  const OpId c2 = b.op("Conv", {r}, {y});
  b.output(y);
  CHECK(scratch_request(b.g, c1, 1 << 20) == 12000);
  CHECK(scratch_request(b.g, c2, 1 << 20) == 12000);
  CHECK(scratch_request(b.g, c2, 5000) == 5000);
  CHECK(scratch_request(b.g, c2, 0) == 0);
  CHECK(scratch_request(b.g, 1, 1 << 20) == 0);
  const Plan p = plan_checked(b.g);
  REQUIRE(p.scratch.size() == 2);
  CHECK(p.scratch[0].op == c1);
  CHECK(p.scratch[1].bytes == 12032);  // aligned to 256
  // Most at the second conv: r (in place over a, 12032), y (2048) and that conv's scratch (12032).
  CHECK(p.aliased_lower_bound_bytes == 12032 + 2048 + 12032);
  CHECK(p.arena_bytes == p.aliased_lower_bound_bytes);
  // At the first conv only a (12032) lives: its scratch grows into the rest of the arena for free.
  CHECK(p.scratch[0].bytes == p.arena_bytes - 12032);
  AssignOptions capped;
  capped.workspace_limit_bytes = 13000;  // sure part 12000 -> 12032; growth up to 13000 rounded down, 12800
  const Plan q = plan_checked(b.g, capped);
  CHECK(q.arena_bytes == p.arena_bytes);
  CHECK(q.scratch[0].bytes == 12800);
  CHECK(q.scratch[1].bytes == 12032);
  const Plan none = plan_checked(b.g, without_scratch());
  CHECK(none.scratch.empty());
  CHECK(none.arena_bytes < p.arena_bytes);
}

TEST_CASE("a device's workspace query replaces the sizing rule of a convolution's scratch, up to the limit") {
  GraphBuilder b;
  const TensorId x = b.input("x", 1000), a = b.act("a", 3000), r = b.act("r", 3000), y = b.act("y", 500);
  const OpId c1 = b.op("Conv", {x}, {a});
  const OpId relu = b.op("Relu", {a}, {r});
  const OpId c2 = b.op("Conv", {r}, {y});
  b.output(y);
  std::vector<OpId> asked;
  const WorkspaceQuery query = [&](const Graph&, OpId id) -> std::optional<std::uint64_t> {
    asked.push_back(id);
    if (id == c1) return std::uint64_t{100000};  // more than the rule's 12000
    return std::nullopt;                          // no answer for c2: the rule
  };
  CHECK(scratch_request(b.g, c1, 1 << 20, query) == 100000);
  CHECK(scratch_request(b.g, c1, 50000, query) == 50000);
  CHECK(scratch_request(b.g, c2, 1 << 20, query) == 12000);
  CHECK(scratch_request(b.g, relu, 1 << 20, query) == 0);  // not a workspace op: never asked
  CHECK(std::find(asked.begin(), asked.end(), relu) == asked.end());
  AssignOptions o;
  o.workspace_query = query;
  const Plan p = plan_checked(b.g, o);
  REQUIRE(p.scratch.size() == 2);
  CHECK(p.scratch[0].op == c1);
  CHECK(p.scratch[0].bytes >= 100096);  // the asked bytes, aligned (and perhaps grown into free space)
  CHECK(p.scratch[1].bytes >= 12032);
  CHECK(p.arena_bytes >= 100096);
}

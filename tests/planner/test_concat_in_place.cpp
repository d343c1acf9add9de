// Tests of concat in place: Concat inputs planned as slices of the output, the verifier's slice checks, near misses.
#include <doctest/doctest.h>

#include "planner/concat_in_place.hpp"
#include "planner/plan_json.hpp"
#include "tests/planner/planner_fixtures.hpp"

using namespace memplan;
using namespace memplan::planner;
using namespace memplan::planner::testing;

namespace {

// A [rows, cols] f32 activation.
TensorId act2(GraphBuilder& b, const std::string& name, std::int64_t rows, std::int64_t cols) {
  const TensorId t = b.act(name, rows * cols);
  b.g.tensors[t].dims = {Dim::of(rows), Dim::of(cols)};
  return t;
}

void set_axis(GraphBuilder& b, OpId op, std::int64_t axis) {
  Attribute a;
  a.i = axis;
  b.g.ops[op].attrs["axis"] = a;
}

// A dense block: x0 -> Relu -> Conv x1; Concat(x0) -> Relu -> Conv x2 ...; block = Concat(x0, x1, x2); prefixes
// Concat(x0), Concat(x0, x1) feed the layers, as torchvision's DenseNet exports. Shapes [rows, 64*k] on axis 1.
struct DenseBlock {
  GraphBuilder b;
  TensorId x0, x1, x2, p1, p2, block, out;
  OpId cat_block;

  explicit DenseBlock(std::int64_t rows = 1, bool block_is_output = false) {
    const TensorId in = b.input("in", rows * 64);
    b.g.tensors[in].dims = {Dim::of(rows), Dim::of(64)};
    x0 = act2(b, "x0", rows, 64);
    b.op("Conv", {in}, {x0});
    p1 = act2(b, "p1", rows, 64);
    set_axis(b, b.op("Concat", {x0}, {p1}), 1);
    const TensorId r1 = act2(b, "r1", rows, 64);
    b.op("Relu", {p1}, {r1});
    x1 = act2(b, "x1", rows, 64);
    b.op("Conv", {r1}, {x1});
    p2 = act2(b, "p2", rows, 128);
    set_axis(b, b.op("Concat", {x0, x1}, {p2}), 1);
    const TensorId r2 = act2(b, "r2", rows, 128);
    b.op("Relu", {p2}, {r2});
    x2 = act2(b, "x2", rows, 64);
    b.op("Conv", {r2}, {x2});
    block = act2(b, "block", rows, 192);
    cat_block = b.op("Concat", {x0, x1, x2}, {block});
    set_axis(b, cat_block, 1);
    out = act2(b, "out", rows, 64);
    b.op("Conv", {block}, {out});
    b.output(out);
    if (block_is_output) b.output(block);
  }
};

bool is_slice_of(const Plan& p, TensorId t, TensorId whole, std::uint64_t at) {
  return p.tensor_offset[t] != kNotInArena && p.tensor_offset[t] == p.tensor_offset[whole] + at &&
         p.tensor_buffer[t] == p.tensor_buffer[whole];
}

}  // namespace

TEST_CASE("concat_input_offsets: contiguous slices on axis 0 or after unit dims, none otherwise") {
  DenseBlock d(1);
  const auto offs = concat_input_offsets(d.b.g, d.b.g.ops[d.cat_block]);
  REQUIRE(offs.has_value());
  CHECK(*offs == std::vector<std::uint64_t>{0, 256, 512});
  DenseBlock wide(2);  // [2, 64] pieces along axis 1: each input is two ranges of the output
  CHECK_FALSE(concat_input_offsets(wide.b.g, wide.b.g.ops[wide.cat_block]).has_value());
}

TEST_CASE("a DenseNet-style block: every feature is written into the block's output, the prefix Concats copy nothing") {
  DenseBlock d(1);
  const Plan with = plan_checked(d.b.g, without_scratch());
  CHECK(is_slice_of(with, d.x0, d.block, 0));
  CHECK(is_slice_of(with, d.x1, d.block, 256));
  CHECK(is_slice_of(with, d.x2, d.block, 512));
  CHECK(is_slice_of(with, d.p1, d.block, 0));  // Concat(x0): its output is x0's bytes
  CHECK(is_slice_of(with, d.p2, d.block, 0));  // Concat(x0, x1): the first two slices
  CHECK(has_alias(with, d.x1, d.block, AliasKind::slice));
  CHECK(has_alias(with, d.p2, d.block, AliasKind::slice));
  CHECK(overlapping_pairs_across_buffers(d.b.g, with) == 0);
  AssignOptions off = without_scratch();
  off.concat_in_place = false;
  const Plan without = plan_checked(d.b.g, off);
  for (const Alias& a : without.aliases) CHECK(a.kind != AliasKind::slice);
  CHECK(with.aliased_lower_bound_bytes < without.aliased_lower_bound_bytes);
  CHECK(with.arena_bytes < without.arena_bytes);

  SUBCASE("the plan survives JSON: slice offsets are rebuilt from the aliases") {
    const Plan back = plan_from_json(d.b.g, plan_to_json(d.b.g, with));
    CHECK(back.tensor_offset == with.tensor_offset);
    CHECK(verify_plan(d.b.g, back).valid);
  }
}

TEST_CASE("near misses stay unaliased: a non-contiguous axis, an input that is a graph output") {
  DenseBlock wide(2);
  const Plan pw = plan_checked(wide.b.g, without_scratch());
  for (const Alias& a : pw.aliases) CHECK(a.kind != AliasKind::slice);

  // x2 also a graph output: the block Concat keeps a copy of it, so no input of that Concat is aliased; the
  // prefix Concats still may be (their inputs are no graph outputs).
  DenseBlock out_in(1);
  out_in.b.output(out_in.x2);
  const Plan po = plan_checked(out_in.b.g, without_scratch());
  CHECK_FALSE(has_alias(po, out_in.x2, out_in.block, AliasKind::slice));
  CHECK_FALSE(has_alias(po, out_in.x0, out_in.block, AliasKind::slice));

  // The block Concat's output as a graph output is fine: its inputs live inside it to the end.
  DenseBlock block_out(1, true);
  const Plan pb = plan_checked(block_out.b.g, without_scratch());
  CHECK(is_slice_of(pb, block_out.x2, block_out.block, 512));
}

TEST_CASE("an input repeated in the Concat or made by a view is not aliased") {
  GraphBuilder b;
  const TensorId in = b.input("in", 64);
  const TensorId x = b.act("x", 64), v = b.act("v", 64), y = b.act("y", 128), z = b.act("z", 128), o = b.act("o", 1);
  b.op("Relu", {in}, {x});
  b.op("Reshape", {x}, {v});
  b.op("Concat", {x, x}, {y});
  b.op("Concat", {v, x}, {z});
  b.op("Add", {y, z}, {o});
  b.output(o);
  const Plan p = plan_checked(b.g, without_scratch());
  for (const Alias& a : p.aliases) CHECK(a.kind != AliasKind::slice);
}

TEST_CASE("the verifier rejects slice claims that do not hold") {
  DenseBlock d(1);
  Plan p = plan_checked(d.b.g, without_scratch());
  const auto rejected_for = [&](const Plan& bad, const std::string& needle) {
    const VerifyReport r = verify_plan(d.b.g, bad);
    bool named = false;
    for (const auto& s : r.problems) named = named || s.find(needle) != std::string::npos;
    INFO("problems: " << (r.problems.empty() ? std::string("none") : r.problems.front()));
    return !r.valid && named;
  };
  SUBCASE("a slice at the wrong offset") {
    for (Alias& a : p.aliases)
      if (a.kind == AliasKind::slice && a.tensor == d.x1) a.offset = 512;
    CHECK(rejected_for(p, "slice alias 'x1'"));
  }
  SUBCASE("a slice moved out of its source") {
    p.tensor_offset[d.x2] += 256;
    CHECK_FALSE(verify_plan(d.b.g, p).valid);
  }
  SUBCASE("another tensor over the group's bytes while it lives") {
    const TensorId r1 = d.b.g.ops[2].outputs[0];
    Buffer& buf = p.buffers[p.tensor_buffer[r1]];
    buf.offset = p.tensor_offset[d.block];
    for (TensorId t : buf.tensors) p.tensor_offset[t] = buf.offset;
    CHECK(rejected_for(p, "overlap"));
  }
}

// Tests of the plan verifier: valid plans pass, each kind of broken plan is caught and named.
#include <doctest/doctest.h>

#include "planner/verify.hpp"
#include "tests/planner/planner_fixtures.hpp"

using namespace memplan;
using namespace memplan::planner;
using namespace memplan::planner::testing;

namespace {

// x -> Conv a -> Reshape v -> Relu r (in place over v) -> {Conv c, Conv d} -> Concat y.
struct Sample {
  GraphBuilder b;
  TensorId x, a, v, r, c, d, y;
  OpId conv_a, reshape, relu, conv_c, conv_d;
  Plan plan;

  Sample() {
    x = b.input("x", 1000);
    a = b.act("a", 1000);
    v = b.act("v", 1000);
    r = b.act("r", 1000);
    c = b.act("c", 2000);
    d = b.act("d", 1000);
    y = b.act("y", 3000);
    conv_a = b.op("Conv", {x}, {a});
    reshape = b.op("Reshape", {a}, {v});
    relu = b.op("Relu", {v}, {r});
    conv_c = b.op("Conv", {r}, {c});
    conv_d = b.op("Conv", {r}, {d});
    b.op("Concat", {c, d}, {y});
    b.output(y);
    plan = plan_checked(b.g);
  }

  void move_buffer_of(TensorId t, std::uint64_t offset) {
    Buffer& buf = plan.buffers[plan.tensor_buffer[t]];
    buf.offset = offset;
    for (TensorId m : buf.tensors) plan.tensor_offset[m] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + buf.size);
  }

  // Whether the plan is rejected with a problem mentioning `needle`.
  bool rejected_for(const std::string& needle) const {
    const VerifyReport r = verify_plan(b.g, plan);
    bool named = false;
    for (const auto& p : r.problems) named = named || p.find(needle) != std::string::npos;
    INFO("problems: " << (r.problems.empty() ? std::string("none") : r.problems.front()));
    return !r.valid && named;
  }
};

}  // namespace

TEST_CASE("the sample plan aliases as intended and passes") {
  Sample s;
  CHECK(has_alias(s.plan, s.v, s.a, AliasKind::view));
  CHECK(has_alias(s.plan, s.r, s.v, AliasKind::inplace));
  const VerifyReport r = verify_plan(s.b.g, s.plan);
  CHECK(r.valid);
  CHECK(r.peak_bytes <= s.plan.arena_bytes);
  CHECK(r.peak_bytes > 0);
}

TEST_CASE("the verifier accepts a plan it did not make: every tensor in its own region") {
  Sample s;
  Plan p = s.plan;
  p.buffers.clear();
  p.aliases.clear();
  p.scratch.clear();
  p.packer = "by hand";
  std::fill(p.tensor_offset.begin(), p.tensor_offset.end(), kNotInArena);
  std::fill(p.tensor_buffer.begin(), p.tensor_buffer.end(), UINT32_MAX);
  std::uint64_t top = 0;
  const Liveness l = analyze_liveness(s.b.g, p.schedule, 256);
  for (TensorId t : {s.a, s.v, s.r, s.c, s.d, s.y}) {
    p.tensor_offset[t] = top;
    p.tensor_buffer[t] = static_cast<std::uint32_t>(p.buffers.size());
    p.buffers.push_back(Buffer{top, l.bytes[t], l.interval[t], {t}});
    top += l.bytes[t];
  }
  p.arena_bytes = top;
  CHECK(verify_plan(s.b.g, p).valid);
}

TEST_CASE("two buffers live at a common step placed on the same bytes are an overlap") {
  Sample s;
  s.move_buffer_of(s.c, s.plan.tensor_offset[s.r] + 256);
  CHECK(s.rejected_for("overlap"));
}

TEST_CASE("sharing bytes without an in-place claim is an overlap") {
  Sample s;
  std::erase_if(s.plan.aliases, [&](const Alias& a) { return a.kind == AliasKind::inplace; });
  CHECK(s.rejected_for("overlap"));
}

TEST_CASE("an offset off the alignment is caught") {
  Sample s;
  s.move_buffer_of(s.y, s.plan.arena_bytes + 4);
  CHECK(s.rejected_for("aligned"));
}

TEST_CASE("a tensor beyond the end of the arena is caught") {
  Sample s;
  s.plan.arena_bytes -= 256;
  CHECK(s.rejected_for("past"));
}

TEST_CASE("a tensor that needs arena bytes but has no offset is caught") {
  Sample s;
  s.plan.tensor_offset[s.d] = kNotInArena;
  CHECK(s.rejected_for("no offset"));
}

TEST_CASE("a view claim must name a view op reading the source") {
  Sample s;
  for (auto& a : s.plan.aliases)
    if (a.kind == AliasKind::view) a.op = s.relu;
  CHECK(s.rejected_for("not a view op"));
  Sample t;
  for (auto& a : t.plan.aliases)
    if (a.kind == AliasKind::view) a.source = t.x;
  CHECK(t.rejected_for("does not read the source"));
}

TEST_CASE("an in-place claim over a source used later is caught") {
  Sample s;
  s.plan.aliases.push_back(Alias{s.c, s.r, AliasKind::inplace, s.conv_c});  // r is read again by conv_d
  CHECK(s.rejected_for("still used after"));
}

TEST_CASE("an in-place claim between different offsets is caught") {
  Sample s;
  s.plan.aliases.push_back(Alias{s.d, s.r, AliasKind::inplace, s.conv_d});
  CHECK(s.rejected_for("different offsets"));
}

TEST_CASE("a schedule that is not topological or a plan for another graph is caught") {
  Sample s;
  std::swap(s.plan.schedule[0], s.plan.schedule[1]);
  CHECK(s.rejected_for("before it is made"));
  Sample t;
  t.plan.model_fingerprint = "0123456789abcdef";
  CHECK(t.rejected_for("fingerprint"));
}

TEST_CASE("require_valid throws a verification error that names the problem") {
  Sample s;
  CHECK_NOTHROW(require_valid(s.b.g, s.plan));
  s.move_buffer_of(s.c, s.plan.tensor_offset[s.r]);
  try {
    require_valid(s.b.g, s.plan);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::verification);
    CHECK(std::string(e.what()).find("overlap") != std::string::npos);
  }
}

TEST_CASE("each convolution gets a scratch region at its step that overlaps nothing live then") {
  Sample s;
  REQUIRE(s.plan.scratch.size() == 3);
  for (const auto& sc : s.plan.scratch) CHECK(s.b.g.ops[sc.op].type == "Conv");
  CHECK(verify_plan(s.b.g, s.plan).valid);
  // The scratch of conv_c (reads r, writes c) placed on r's bytes: r is live at that step.
  Plan p = s.plan;
  for (auto& sc : p.scratch)
    if (sc.op == s.conv_c) sc.offset = p.tensor_offset[s.r], sc.bytes = 256;
  const VerifyReport r = verify_plan(s.b.g, p);
  CHECK_FALSE(r.valid);
  bool named = false;
  for (const auto& m : r.problems) named = named || (m.find("scratch of op") != std::string::npos && m.find("overlap") != std::string::npos);
  INFO("problems: " << (r.problems.empty() ? std::string("none") : r.problems.front()));
  CHECK(named);
}

TEST_CASE("a scratch region past the arena, unaligned, or a second one for an op is caught") {
  {
    Sample s;
    s.plan.scratch.back().offset = s.plan.arena_bytes;
    CHECK(s.rejected_for("past the arena"));
  }
  {
    Sample s;
    s.plan.scratch.front().offset += 4;
    CHECK(s.rejected_for("not aligned"));
  }
  {
    Sample s;
    s.plan.scratch.push_back(s.plan.scratch.front());
    CHECK(s.rejected_for("two scratch regions"));
  }
}

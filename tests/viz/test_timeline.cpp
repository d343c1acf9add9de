// Tests of the memory timeline: buffer kinds, usage, geometry (no overlaps), aggregation and the SVG text.
#include <doctest/doctest.h>

#include "tests/viz/viz_fixtures.hpp"
#include "viz/timeline.hpp"

using namespace memplan;
using namespace memplan::viz;
using namespace memplan::viz::testing;

TEST_CASE("plan_usage sums the buffers live at each step and finds the first peak") {
  Graph g = random_chain(60, 6, 5000, 7);
  auto p = slot_plan(g, 8);
  auto u = plan_usage(p);
  REQUIRE(u.live_bytes.size() == p.schedule.size());
  for (std::uint32_t s = 0; s < u.live_bytes.size(); ++s) {
    std::uint64_t sum = 0;
    for (const auto& b : p.buffers)
      if (b.interval.first <= s && s <= b.interval.last) sum += b.size;
    CHECK(u.live_bytes[s] == sum);
    if (s < u.peak_step) CHECK(u.live_bytes[s] < u.peak_bytes);
    CHECK(u.live_bytes[s] <= u.peak_bytes);
  }
}

TEST_CASE("one rectangle per buffer, and buffers live at the same step never overlap on the picture") {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    Graph g = random_chain(80, 5, 40000, seed);
    auto p = slot_plan(g, 7);
    TimelinePanel panel{"t", &g, &p};
    auto lay = layout_timeline({panel});
    REQUIRE(lay.size() == 1);
    REQUIRE(lay[0].rects.size() == p.buffers.size());
    CHECK(lay[0].aggregated_buffers == 0);
    const auto& rs = lay[0].rects;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      CHECK(rs[i].y >= lay[0].arena_top - 1e-6);
      CHECK(rs[i].y + rs[i].h <= lay[0].arena_top + lay[0].arena_height + 1e-6);
      for (std::size_t j = i + 1; j < rs.size(); ++j) {
        const auto& a = p.buffers[rs[i].buffer];
        const auto& b = p.buffers[rs[j].buffer];
        if (!a.interval.overlaps(b.interval)) continue;
        const bool x_apart = rs[i].x + rs[i].w <= rs[j].x + 1e-6 || rs[j].x + rs[j].w <= rs[i].x + 1e-6;
        const bool y_apart = rs[i].y + rs[i].h <= rs[j].y + 1e-6 || rs[j].y + rs[j].h <= rs[i].y + 1e-6;
        CHECK((x_apart || y_apart));
      }
    }
  }
}

TEST_CASE("the SVG has one data-buffer rect per buffer and a live peak label naming the live peak op") {
  Graph g = random_chain(40, 4, 20000, 11);
  auto p = slot_plan(g, 6);
  const std::string svg = render_timeline_svg({TimelinePanel{"small", &g, &p, 0, 0, ""}});
  CHECK(count_of(svg, "data-buffer=\"") == p.buffers.size());
  const auto u = plan_usage(p);
  const std::string& peak_op = g.ops[p.schedule[u.peak_step]].name;
  CHECK(svg.find("id=\"live-peak-label\" data-op=\"" + peak_op + "\"") != std::string::npos);
  CHECK(svg.rfind("</svg>") != std::string::npos);
  CHECK(count_of(svg, "<title>") == p.buffers.size());
}

TEST_CASE("budget and lower bound lines appear only when given, and two panels share one byte scale") {
  Graph g1 = random_chain(50, 4, 20000, 21), g2 = random_chain(30, 3, 5000, 22);
  auto p1 = slot_plan(g1, 5), p2 = slot_plan(g2, 4);
  const std::string plain = render_timeline_svg({TimelinePanel{"a", &g1, &p1}});
  CHECK(plain.find("budget-line") == std::string::npos);
  CHECK(plain.find("lower-bound-line") == std::string::npos);
  std::vector<TimelinePanel> two{{"a", &g1, &p1, p1.arena_bytes * 2, 1000, ""}, {"b", &g2, &p2, p1.arena_bytes * 2, 0, ""}};
  const std::string both = render_timeline_svg(two);
  CHECK(count_of(both, "class=\"budget-line\"") == 4);  // arena and usage plot of each panel
  CHECK(count_of(both, "class=\"lower-bound-line\"") == 1);
  CHECK(both.find("id=\"live-peak-label-2\"") != std::string::npos);
  auto lay = layout_timeline(two);
  CHECK(lay[0].arena_y.d1 == lay[1].arena_y.d1);
  CHECK(lay[0].usage_y.d1 == lay[1].usage_y.d1);
  CHECK(lay[0].left + lay[0].width <= lay[1].left);  // side by side, not on top of each other
}

TEST_CASE("buffer kinds follow the op that made the tensor, then its role") {
  Graph g = random_chain(6, 2, 100, 5);
  const TensorId grad = add_f32(g, "dW", 10, TensorRole::gradient);
  const TensorId rec = add_f32(g, "t2_again", 10);
  const TensorId swp = add_f32(g, "t1_back", 10);
  const TensorId dead = add_f32(g, "workspace", 10);
  auto op = [&](const std::string& name, const std::string& type, Phase ph, TensorId in, TensorId out) {
    Op o;
    o.name = name;
    o.type = type;
    o.phase = ph;
    o.inputs = {in};
    o.outputs = {out};
    g.add_op(o);
  };
  op("bw", "ReluGrad", Phase::backward, g.at("t5"), grad);
  op("rc", "Relu", Phase::recompute, g.at("t1"), rec);
  op("si", "SwapIn", Phase::swap, g.at("t0"), swp);
  op("ws", "Conv", Phase::forward, g.at("t3"), dead);
  g.tensors[grad].consumers.push_back(0);  // read by someone: not scratch
  auto step = steps_of_ops(g, topological_order(g));
  auto kind = [&](TensorId t) { return classify_buffer(g, planner::Buffer{0, 256, {}, {t}}, step); };
  CHECK(kind(grad) == BufferKind::gradient);
  CHECK(kind(rec) == BufferKind::recomputed);
  CHECK(kind(swp) == BufferKind::swapped);
  CHECK(kind(dead) == BufferKind::scratch);
  CHECK(kind(g.at("t2")) == BufferKind::activation);
  const TensorId dact = add_f32(g, "dt4", 10);  // an activation gradient: role activation, made by a backward op
  op("bw2", "ReluGrad", Phase::backward, grad, dact);
  CHECK(kind(dact) == BufferKind::gradient);
  // A buffer shared by a view and its source takes the kind of the tensor made first.
  CHECK(classify_buffer(g, planner::Buffer{0, 256, {}, {g.at("t2"), rec}}, step) == BufferKind::activation);
}

TEST_CASE("100,000 buffers are aggregated into bands and the file stays a few MB") {
  Graph g = random_chain(100000, 40, 1 << 16, 99);
  auto p = slot_plan(g, 42);
  TimelineOptions opts;
  auto lay = layout_timeline({TimelinePanel{"big", &g, &p}}, opts);
  CHECK(lay[0].rects.size() <= opts.max_rects);
  CHECK(lay[0].rects.size() + lay[0].aggregated_buffers == p.buffers.size());
  CHECK(lay[0].aggregated_buffers > 0);
  CHECK(!lay[0].bands.empty());
  CHECK(lay[0].bands.size() <= opts.max_band_rects);
  const std::string svg = render_timeline_svg({TimelinePanel{"big", &g, &p}}, opts);
  CHECK(svg.size() < 6u * 1024 * 1024);
  CHECK(count_of(svg, "data-buffer=\"") == lay[0].rects.size());
  CHECK(svg.find("data-aggregated=\"" + std::to_string(lay[0].aggregated_buffers) + "\"") != std::string::npos);
  // The usage curve keeps the peak even though there are far more steps than pixels.
  const auto u = plan_usage(p);
  CHECK(svg.find("data-op=\"" + g.ops[p.schedule[u.peak_step]].name + "\"") != std::string::npos);
}

TEST_CASE("axis helpers: round byte ticks, compact numbers, XML escaping") {
  auto t = byte_ticks(3ull << 30, 5);
  REQUIRE(t.size() >= 3);
  CHECK(t.front() == 0);
  for (std::size_t i = 1; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == t[1]);
  CHECK(t.back() <= (3ull << 30));
  // Every tick reads as a round number in its own unit: 512 MiB, 1 GiB, 1.5 GiB, never 1.46 GiB.
  auto exact = [](std::uint64_t v) {  // the label, read back, is the value itself
    const std::string l = bytes_label(v);
    const std::string units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    const std::string unit = l.substr(l.find(' ') + 1);
    double scale = 1;
    for (const auto& u : units) {
      if (u == unit) break;
      scale *= 1024;
    }
    return std::stod(l) * scale == static_cast<double>(v);
  };
  for (std::uint64_t max : {2755477248ull, 3ull << 30, 700ull << 20, 123456789ull, 5000ull, 80ull << 30})
    for (int target : {3, 5, 8})
      for (auto v : byte_ticks(max, target)) {
        CAPTURE(max);
        CAPTURE(v);
        CHECK(exact(v));
      }
  CHECK(bytes_label(1536) == "1.5 KiB");
  CHECK(bytes_label(2ull << 30) == "2 GiB");
  CHECK(num(12.0) == "12");
  CHECK(num(0.126) == "0.13");
  CHECK(num(-0.001) == "0");
  CHECK(xml_escape("a<b & \"c\"") == "a&lt;b &amp; &quot;c&quot;");
  auto s = step_ticks(1234, 8);
  CHECK(s[1] == 200);
}

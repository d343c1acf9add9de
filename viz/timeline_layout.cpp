// Timeline geometry: buffer kinds, arena usage per step, and pixel rectangles (small buffers as bands).
#include <algorithm>
#include <cmath>

#include "analysis/ops.hpp"
#include "viz/timeline.hpp"

namespace memplan::viz {

using analysis::Graph;
using analysis::kNoOp;
using analysis::OpId;
using analysis::Phase;
using analysis::TensorRole;

const char* buffer_kind_name(BufferKind k) noexcept {
  static const char* names[] = {"weight", "activation", "gradient", "optimizer_state", "recomputed", "swapped", "scratch"};
  return names[static_cast<int>(k)];
}

const char* buffer_kind_label(BufferKind k) noexcept {
  static const char* labels[] = {"weight", "activation", "gradient", "optimizer state", "recomputed", "swapped in/out", "scratch"};
  return labels[static_cast<int>(k)];
}

const char* buffer_kind_colour(BufferKind k) noexcept {
  // Tableau-like hues that stay apart for the colour-blind: blue/orange carry the two big classes.
  static const char* colours[] = {"#7f7f7f", "#4e79a7", "#f28e2b", "#b07aa1", "#59a14f", "#e15759", "#bab0ac"};
  return colours[static_cast<int>(k)];
}

bool is_swap_op(const analysis::Op& op) noexcept {
  if (op.phase == Phase::swap) return true;
  const analysis::OpInfo* info = analysis::op_registry().find(op);
  return info && info->kind == analysis::OpKind::memory;
}

std::vector<std::uint32_t> steps_of_ops(const Graph& g, const std::vector<OpId>& schedule) {
  std::vector<std::uint32_t> step(g.ops.size(), kNoOp);
  for (std::uint32_t s = 0; s < schedule.size(); ++s)
    if (schedule[s] < step.size()) step[schedule[s]] = s;
  return step;
}

BufferKind classify_buffer(const Graph& g, const planner::Buffer& b, const std::vector<std::uint32_t>& step_of_op) {
  analysis::TensorId first = analysis::kNoTensor;
  std::uint32_t first_step = kNoOp;
  for (auto t : b.tensors) {
    if (t >= g.tensors.size()) continue;
    const OpId p = g.tensors[t].producer;
    const std::uint32_t s = p < step_of_op.size() ? step_of_op[p] : kNoOp;
    if (first == analysis::kNoTensor || s < first_step) first = t, first_step = s;
  }
  if (first == analysis::kNoTensor) return BufferKind::scratch;
  const auto& x = g.tensors[first];
  if (x.producer != kNoOp) {
    const auto& op = g.ops[x.producer];
    if (is_swap_op(op)) return BufferKind::swapped;
    if (op.phase == Phase::recompute) return BufferKind::recomputed;
    // The arena holds activations only; what backward ops make there are activation gradients.
    if (op.phase == Phase::backward) return BufferKind::gradient;
    if (op.phase == Phase::optimizer) return BufferKind::optimizer_state;
  }
  switch (x.role) {
    case TensorRole::weight: return BufferKind::weight;
    case TensorRole::gradient: return BufferKind::gradient;
    case TensorRole::optimizer_state: return BufferKind::optimizer_state;
    default: break;
  }
  const bool read = std::any_of(b.tensors.begin(), b.tensors.end(), [&](auto t) {
    return t < g.tensors.size() && (!g.tensors[t].consumers.empty() || g.tensors[t].is_graph_output);
  });
  return read ? BufferKind::activation : BufferKind::scratch;
}

std::vector<planner::Buffer> scratch_regions(const planner::Plan& plan) {
  std::vector<std::uint32_t> step;
  for (std::uint32_t s = 0; s < plan.schedule.size(); ++s) {
    if (plan.schedule[s] >= step.size()) step.resize(plan.schedule[s] + 1, kNoOp);
    step[plan.schedule[s]] = s;
  }
  std::vector<planner::Buffer> out;
  for (const auto& sc : plan.scratch) {
    const std::uint32_t s = sc.op < step.size() ? step[sc.op] : kNoOp;
    out.push_back(planner::Buffer{sc.offset, sc.bytes, {s, s}, {}});
  }
  return out;
}

Usage plan_usage(const planner::Plan& plan) {
  Usage u;
  const std::size_t n = plan.schedule.size();
  u.live_bytes.assign(n, 0);
  std::vector<std::uint64_t> add(n + 1, 0), sub(n + 1, 0);
  auto count = [&](const planner::Buffer& b) {
    if (b.interval.first >= n) return;
    add[b.interval.first] = checked_add(add[b.interval.first], b.size, "live bytes");
    const std::size_t end = std::min<std::size_t>(b.interval.last, n - 1) + 1;
    sub[end] = checked_add(sub[end], b.size, "live bytes");
  };
  for (const auto& b : plan.buffers) count(b);
  for (const auto& b : scratch_regions(plan)) count(b);
  std::uint64_t live = 0;
  for (std::size_t s = 0; s < n; ++s) {
    live = checked_add(live, add[s], "live bytes") - sub[s];
    u.live_bytes[s] = live;
    if (live > u.peak_bytes) u.peak_bytes = live, u.peak_step = static_cast<std::uint32_t>(s);
  }
  return u;
}

namespace {

// Rasterises aggregated buffers onto cells of cw x ch pixels, then merges each row's cells of the
// same dominant kind and coverage level into runs. Returns false when the runs exceed `max_runs`.
bool rasterise_bands(const std::vector<BufferRect>& small, const PanelLayout& p, double cw, double ch, std::size_t max_runs,
                     std::vector<BandRect>& out) {
  const auto cols = static_cast<std::size_t>(std::ceil(p.width / cw)), rows = static_cast<std::size_t>(std::ceil(p.arena_height / ch));
  if (cols == 0 || rows == 0) return true;
  std::vector<float> cover(cols * rows * kBufferKinds, 0.0f);
  for (const auto& r : small) {
    const double x0 = r.x - p.left, x1 = x0 + r.w, y0 = r.y - p.arena_top, y1 = y0 + r.h;
    const auto c0 = static_cast<std::size_t>(std::clamp(std::floor(x0 / cw), 0.0, double(cols - 1)));
    const auto c1 = static_cast<std::size_t>(std::clamp(std::ceil(x1 / cw), 1.0, double(cols)));
    const auto r0 = static_cast<std::size_t>(std::clamp(std::floor(y0 / ch), 0.0, double(rows - 1)));
    const auto r1 = static_cast<std::size_t>(std::clamp(std::ceil(y1 / ch), 1.0, double(rows)));
    for (std::size_t row = r0; row < r1; ++row) {
      const double oy = std::min(y1, (row + 1) * ch) - std::max(y0, row * ch);
      if (oy <= 0) continue;
      for (std::size_t c = c0; c < c1; ++c) {
        const double ox = std::min(x1, (c + 1) * cw) - std::max(x0, c * cw);
        if (ox > 0) cover[(row * cols + c) * kBufferKinds + static_cast<int>(r.kind)] += static_cast<float>(ox * oy);
      }
    }
  }
  out.clear();
  const double cell = cw * ch;
  for (std::size_t row = 0; row < rows; ++row) {
    BandRect run;
    int run_level = 0;
    auto flush = [&] {
      if (run_level > 0) out.push_back(run);
      run_level = 0;
    };
    for (std::size_t c = 0; c < cols; ++c) {
      const float* k = &cover[(row * cols + c) * kBufferKinds];
      const int best = static_cast<int>(std::max_element(k, k + kBufferKinds) - k);  // ties: lowest kind
      double total = 0;
      for (int i = 0; i < kBufferKinds; ++i) total += k[i];
      const int level = total < 0.02 * cell ? 0 : static_cast<int>(std::ceil(std::min(1.0, total / cell) * 4));
      if (level > 0 && level == run_level && static_cast<int>(run.kind) == best) {
        run.w += cw;
        continue;
      }
      flush();
      if (level == 0) continue;
      run = BandRect{static_cast<BufferKind>(best), p.left + c * cw, p.arena_top + row * ch, cw, ch, level / 4.0};
      run_level = level;
    }
    flush();
    if (out.size() > max_runs) return false;
  }
  return true;
}

double round_px(double v) { return std::round(v * 100.0) / 100.0; }

void layout_buffers(const TimelinePanel& in, const TimelineOptions& opts, PanelLayout& p) {
  const auto& plan = *in.plan;
  const auto step = steps_of_ops(*in.graph, plan.schedule);
  std::vector<BufferRect> all;
  const auto scratch = scratch_regions(plan);
  all.reserve(plan.buffers.size() + scratch.size());
  for (std::uint32_t i = 0; i < plan.buffers.size() + scratch.size(); ++i) {
    const bool is_scratch = i >= plan.buffers.size();
    const auto& b = is_scratch ? scratch[i - plan.buffers.size()] : plan.buffers[i];
    if (b.interval.first == kNoOp) continue;
    BufferRect r;
    r.buffer = i;
    r.kind = is_scratch ? BufferKind::scratch : classify_buffer(*in.graph, b, step);
    ++p.kind_count[static_cast<int>(r.kind)];
    // Edges rounded to the SVG's 0.01 px before widths and heights are taken, so that buffers that
    // touch in the plan touch (and do not overlap) in the file.
    r.x = round_px(p.x(b.interval.first));
    r.w = round_px(p.x(static_cast<double>(b.interval.last) + 1.0)) - r.x;
    r.y = round_px(p.arena_y(static_cast<double>(b.offset) + static_cast<double>(b.size)));
    r.h = round_px(p.arena_y(static_cast<double>(b.offset))) - r.y;
    all.push_back(r);
  }
  // Individual rectangles for every buffer of a small plan; in a large one for buffers at least a
  // pixel tall, the largest first when there are still too many.
  const bool aggregate = all.size() > opts.aggregate_above;
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 0; i < all.size(); ++i)
    if (!aggregate || all[i].h >= opts.min_rect_px) order.push_back(i);
  if (order.size() > opts.max_rects) {
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return all[a].w * all[a].h > all[b].w * all[b].h; });
    order.resize(opts.max_rects);
    std::sort(order.begin(), order.end());
  }
  std::vector<bool> drawn(all.size(), false);
  for (auto i : order) drawn[i] = true, p.rects.push_back(all[i]);
  std::vector<BufferRect> small;
  for (std::uint32_t i = 0; i < all.size(); ++i)
    if (!drawn[i]) small.push_back(all[i]);
  p.aggregated_buffers = small.size();
  if (small.empty()) return;
  for (double cell = 1.0; !rasterise_bands(small, p, cell, 2 * cell, opts.max_band_rects, p.bands); cell *= 2) {
  }
}

}  // namespace

std::vector<std::string> wrap_note(const std::string& note, std::size_t chars) {
  static const std::string sep = " \u00b7 ";
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < note.size()) {
    std::size_t next = note.find(sep, at);
    std::string part = note.substr(at, next == std::string::npos ? std::string::npos : next - at);
    at = next == std::string::npos ? note.size() : next + sep.size();
    if (!lines.empty() && lines.back().size() + sep.size() + part.size() <= chars) lines.back() += sep + part;
    else lines.push_back(std::move(part));
  }
  return lines;
}

std::vector<PanelLayout> layout_timeline(const std::vector<TimelinePanel>& panels, const TimelineOptions& opts) {
  std::vector<PanelLayout> out(panels.size());
  if (panels.empty()) return out;
  for (std::size_t k = 0; k < panels.size(); ++k) {
    if (!panels[k].graph || !panels[k].plan) fail(ErrorKind::usage, "timeline panel " + std::to_string(k) + " has no graph or plan");
    out[k].usage = plan_usage(*panels[k].plan);
  }
  // Shared byte scales: the arena axis fits every arena (and budget), the usage axis every curve and line.
  std::uint64_t arena_max = 1, usage_max = 1;
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const auto& pl = *panels[k].plan;
    std::uint64_t top = std::max(pl.arena_bytes, panels[k].budget_bytes);
    for (const auto& b : pl.buffers) top = std::max(top, b.offset + b.size);
    for (const auto& sc : pl.scratch) top = std::max(top, sc.offset + sc.bytes);
    arena_max = std::max(arena_max, top);
    usage_max = std::max({usage_max, out[k].usage.peak_bytes, panels[k].budget_bytes, panels[k].lower_bound_bytes});
  }
  const double bottom_margin = 54, gap = 34, left_margin = 74, right_margin = 18;
  const double col = opts.width / static_cast<double>(panels.size());
  // The notes wrap (never cut) at their " \u00b7 " separators; the plots start below the longest.
  const auto note_chars = static_cast<std::size_t>(std::max(20.0, std::max(40.0, col - left_margin - right_margin) / 6.6));
  std::size_t most_lines = 1;
  for (std::size_t k = 0; k < panels.size(); ++k) {
    out[k].note_lines = wrap_note(panels[k].note, note_chars);
    most_lines = std::max(most_lines, out[k].note_lines.size());
  }
  const double top_margin = 104 + 14.0 * static_cast<double>(most_lines - 1);
  const double plot_h = std::max(80.0, opts.height - top_margin - bottom_margin - gap);
  for (std::size_t k = 0; k < panels.size(); ++k) {
    auto& p = out[k];
    const auto& plan = *panels[k].plan;
    p.left = col * static_cast<double>(k) + left_margin;
    p.width = std::max(40.0, col - left_margin - right_margin);
    p.arena_top = top_margin;
    p.arena_height = std::round(plot_h * 0.62);
    p.usage_top = p.arena_top + p.arena_height + gap;
    p.usage_height = plot_h - p.arena_height;
    const double steps = std::max<double>(1.0, static_cast<double>(plan.schedule.size()));
    p.x = Scale{0, steps, p.left, p.left + p.width};
    p.arena_y = Scale{0, static_cast<double>(arena_max) * 1.03, p.arena_top + p.arena_height, p.arena_top};
    p.usage_y = Scale{0, static_cast<double>(usage_max) * 1.15, p.usage_top + p.usage_height, p.usage_top};
    const auto nsteps = static_cast<std::uint32_t>(plan.schedule.size());
    p.backward_first = p.optimizer_first = nsteps;
    for (std::uint32_t s = 0; s < nsteps; ++s) {
      const Phase ph = panels[k].graph->ops.at(plan.schedule[s]).phase;
      if (ph == Phase::backward && p.backward_first == nsteps) p.backward_first = s;
      if (ph == Phase::optimizer && p.backward_first < nsteps && p.optimizer_first == nsteps) p.optimizer_first = s;
    }
    p.training = p.backward_first < nsteps;
    layout_buffers(panels[k], opts, p);
  }
  return out;
}

}  // namespace memplan::viz

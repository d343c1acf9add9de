// Timeline rendering: writes the laid-out panels as SVG text (legend, arena plot, usage plot, axes).
#include <algorithm>
#include <sstream>

#include "planner/fused_groups.hpp"
#include "viz/elide.hpp"
#include "viz/timeline.hpp"

namespace memplan::viz {
namespace {

using analysis::Graph;

constexpr const char* kBudgetColour = "#d62728";
constexpr const char* kBoundColour = "#2ca02c";
constexpr const char* kUsageColour = "#1f4e79";
constexpr const char* kUsageFill = "#c3d3e6";  // opaque: the phase shading must not tint the area

std::string op_label(const Graph& g, analysis::OpId op) {
  if (op >= g.ops.size()) return "?";
  const std::string fused = planner::fused_label(g.ops[op]);  // "attention ×9"
  return g.ops[op].name + " (" + g.ops[op].type + (fused.empty() ? "" : ", " + fused) + ")";
}

// Buffer `i` of the plan, or past them scratch region i - buffers (`b`: its region).
std::string buffer_tooltip(const Graph& g, const planner::Plan& plan, std::uint32_t i, const planner::Buffer& b, BufferKind kind) {
  if (i >= plan.buffers.size()) {
    const auto op = plan.scratch[i - plan.buffers.size()].op;
    return "scratch \u00b7 workspace of " + op_label(g, op) + "\n" + bytes_label(b.size) + " at offset " + bytes_label(b.offset) +
           "\nstep " + std::to_string(b.interval.first);
  }
  std::string names;
  std::size_t shown = 0;
  for (auto t : b.tensors) {
    if (t >= g.tensors.size()) continue;
    if (shown == 3) {
      names += " (+" + std::to_string(b.tensors.size() - shown) + " more)";
      break;
    }
    names += (shown++ ? ", " : "") + g.tensors[t].name;  // whole: a tooltip has room
  }
  const auto t0 = b.tensors.empty() || b.tensors.front() >= g.tensors.size() ? analysis::kNoTensor : b.tensors.front();
  std::string s = "buffer " + std::to_string(i) + " \u00b7 " + buffer_kind_label(kind) + "\n" + names;
  if (t0 != analysis::kNoTensor && g.tensors[t0].producer != analysis::kNoOp) s += "\nmade by " + op_label(g, g.tensors[t0].producer);
  s += "\n" + bytes_label(b.size) + " at offset " + bytes_label(b.offset);
  s += "\nsteps " + std::to_string(b.interval.first) + "\u2013" + std::to_string(b.interval.last);
  return s;
}

std::string budget_text(const TimelinePanel& in) {
  return in.budget_label.empty() ? "budget " + bytes_label(in.budget_bytes) : in.budget_label;
}

void hline(std::ostream& o, double x0, double x1, double y, const char* colour, const char* dash, const std::string& cls) {
  o << "<line class=\"" << cls << "\" x1=\"" << num(x0) << "\" x2=\"" << num(x1) << "\" y1=\"" << num(y) << "\" y2=\"" << num(y)
    << "\" stroke=\"" << colour << "\" stroke-width=\"1.5\"" << (*dash ? " stroke-dasharray=\"" : "") << dash << (*dash ? "\"" : "")
    << "/>\n";
}

void text(std::ostream& o, double x, double y, const std::string& s, const std::string& extra = "") {
  o << "<text x=\"" << num(x) << "\" y=\"" << num(y) << "\"" << (extra.empty() ? "" : " ") << extra << ">" << xml_escape(s) << "</text>\n";
}

void phase_shading(std::ostream& o, const PanelLayout& p, double top, double h, bool labels, std::size_t nsteps) {
  if (!p.training) return;
  struct Half { std::uint32_t a, b; const char* name; const char* fill; };
  const Half halves[] = {{0, p.backward_first, "forward", "#f2f6fb"},
                         {p.backward_first, p.optimizer_first, "backward", "#fdf5ea"},
                         {p.optimizer_first, static_cast<std::uint32_t>(nsteps), "optimizer", "#f5f2f8"}};
  for (const auto& hf : halves) {
    if (hf.b <= hf.a) continue;
    const double x0 = p.x(hf.a), x1 = p.x(hf.b);
    if (!labels) {
      o << "<rect class=\"phase\" data-phase=\"" << hf.name << "\" x=\"" << num(x0) << "\" y=\"" << num(top) << "\" width=\""
        << num(x1 - x0) << "\" height=\"" << num(h) << "\" fill=\"" << hf.fill << "\"/>\n";
    } else if (x1 - x0 > 60) {  // at the bottom, where the peak label never goes  
      text(o, (x0 + x1) / 2, top + h - 6, hf.name, "class=\"halo\" text-anchor=\"middle\" fill=\"#666\" font-style=\"italic\"");
    }
  }
}

void y_axis(std::ostream& o, const PanelLayout& p, const Scale& y, double top, double h, const std::string& title) {
  const auto max = static_cast<std::uint64_t>(std::max(0.0, y.d1));
  for (auto v : byte_ticks(max, std::max(2, static_cast<int>(h / 55)))) {
    const double yy = y(static_cast<double>(v));
    o << "<line x1=\"" << num(p.left) << "\" x2=\"" << num(p.left + p.width) << "\" y1=\"" << num(yy) << "\" y2=\"" << num(yy)
      << "\" stroke=\"#000\" stroke-opacity=\"0.08\"/>\n";
    text(o, p.left - 5, yy + 4, bytes_label(v), "text-anchor=\"end\" fill=\"#444\"");
  }
  const double cy = top + h / 2, cx = p.left - 62;
  text(o, cx, cy, title, "text-anchor=\"middle\" fill=\"#444\" transform=\"rotate(-90 " + num(cx) + " " + num(cy) + ")\"");
}

void x_axis(std::ostream& o, const PanelLayout& p, std::size_t nsteps) {
  const double y0 = p.usage_top + p.usage_height;
  const auto last = nsteps ? nsteps - 1 : 0;
  for (auto s : step_ticks(last, std::max(2, static_cast<int>(p.width / 90)))) {
    const double x = p.x(static_cast<double>(s) + 0.5);
    o << "<line x1=\"" << num(x) << "\" x2=\"" << num(x) << "\" y1=\"" << num(y0) << "\" y2=\"" << num(y0 + 4) << "\" stroke=\"#444\"/>\n";
    text(o, x, y0 + 16, std::to_string(s), "text-anchor=\"middle\" fill=\"#444\"");
  }
  text(o, p.left + p.width / 2, y0 + 34, "schedule step (one op per step)", "text-anchor=\"middle\" fill=\"#444\"");
}

void arena_plot(std::ostream& o, const TimelinePanel& in, const PanelLayout& p) {
  const auto& plan = *in.plan;
  o << "<rect x=\"" << num(p.left) << "\" y=\"" << num(p.arena_top) << "\" width=\"" << num(p.width) << "\" height=\""
    << num(p.arena_height) << "\" fill=\"#fff\" stroke=\"#bbb\"/>\n";
  phase_shading(o, p, p.arena_top, p.arena_height, false, plan.schedule.size());
  y_axis(o, p, p.arena_y, p.arena_top, p.arena_height, "arena offset");
  o << "<g class=\"buffers\">\n";
  const auto scratch = scratch_regions(plan);
  for (const auto& r : p.rects) {
    const auto& b = r.buffer < plan.buffers.size() ? plan.buffers[r.buffer] : scratch[r.buffer - plan.buffers.size()];
    const bool outline = r.w > 3 && r.h > 3;
    o << "<rect class=\"buf" << (outline ? "" : " thin") << "\" data-buffer=\"" << r.buffer << "\" data-first=\"" << b.interval.first
      << "\" data-last=\"" << b.interval.last << "\" data-offset=\"" << b.offset << "\" data-size=\"" << b.size << "\" data-kind=\""
      << buffer_kind_name(r.kind) << "\" x=\"" << num(r.x) << "\" y=\"" << num(r.y) << "\" width=\"" << num(r.w)
      << "\" height=\"" << num(r.h) << "\" fill=\"" << buffer_kind_colour(r.kind) << "\"><title>"
      << xml_escape(buffer_tooltip(*in.graph, plan, r.buffer, b, r.kind)) << "</title></rect>\n";
  }
  o << "</g>\n<g class=\"bands\">\n";
  for (const auto& b : p.bands)
    o << "<rect class=\"band\" data-kind=\"" << buffer_kind_name(b.kind) << "\" x=\"" << num(b.x) << "\" y=\"" << num(b.y)
      << "\" width=\"" << num(b.w) << "\" height=\"" << num(b.h) << "\" fill=\"" << buffer_kind_colour(b.kind) << "\" fill-opacity=\""
      << num(0.3 + 0.7 * b.coverage) << "\"/>\n";
  o << "</g>\n";
  const double ya = p.arena_y(static_cast<double>(plan.arena_bytes));
  hline(o, p.left, p.left + p.width, ya, "#555", "2 3", "arena-line");
  text(o, p.left + p.width - 4, ya - 4, "arena " + bytes_label(plan.arena_bytes), "class=\"halo\" text-anchor=\"end\" fill=\"#333\"");
  if (in.budget_bytes) {
    const double yb = p.arena_y(static_cast<double>(in.budget_bytes));
    hline(o, p.left, p.left + p.width, yb, kBudgetColour, "6 4", "budget-line");
    text(o, p.left + 4, yb - 4, budget_text(in), std::string("class=\"halo\" fill=\"") + kBudgetColour + "\"");
  }
}

void usage_curve(std::ostream& o, const PanelLayout& p) {
  const auto& live = p.usage.live_bytes;
  const double base = p.usage_top + p.usage_height;
  std::vector<std::pair<double, double>> pts;
  if (static_cast<double>(live.size()) <= p.width * 2) {
    for (std::size_t s = 0; s < live.size(); ++s) {
      const double y = p.usage_y(static_cast<double>(live[s]));
      pts.push_back({p.x(static_cast<double>(s)), y});
      pts.push_back({p.x(static_cast<double>(s) + 1), y});
    }
  } else {  // one point pair per pixel column, at the column's maximum, so that no peak is lost
    const auto cols = static_cast<std::size_t>(p.width);
    std::vector<std::uint64_t> colmax(cols + 1, 0);
    for (std::size_t s = 0; s < live.size(); ++s) {
      const auto c = std::min(cols, static_cast<std::size_t>(p.x(static_cast<double>(s)) - p.left));
      colmax[c] = std::max(colmax[c], live[s]);
    }
    for (std::size_t c = 0; c < cols; ++c) {
      const double y = p.usage_y(static_cast<double>(colmax[c]));
      pts.push_back({p.left + static_cast<double>(c), y});
      pts.push_back({p.left + static_cast<double>(c) + 1, y});
    }
  }
  std::ostringstream line;
  for (const auto& [x, y] : pts) line << num(x) << "," << num(y) << " ";
  if (pts.empty()) return;
  o << "<polygon class=\"usage-area\" points=\"" << num(pts.front().first) << "," << num(base) << " " << line.str()
    << num(pts.back().first) << "," << num(base) << "\" fill=\"" << kUsageFill << "\"/>\n";
  o << "<polyline class=\"usage\" points=\"" << line.str() << "\" fill=\"none\" stroke=\"" << kUsageColour << "\" stroke-width=\"1.3\"/>\n";
}

void usage_plot(std::ostream& o, const TimelinePanel& in, const PanelLayout& p, std::size_t index) {
  const auto& plan = *in.plan;
  o << "<rect x=\"" << num(p.left) << "\" y=\"" << num(p.usage_top) << "\" width=\"" << num(p.width) << "\" height=\""
    << num(p.usage_height) << "\" fill=\"#fff\" stroke=\"#bbb\"/>\n";
  phase_shading(o, p, p.usage_top, p.usage_height, false, plan.schedule.size());
  y_axis(o, p, p.usage_y, p.usage_top, p.usage_height, "live bytes");
  usage_curve(o, p);
  phase_shading(o, p, p.usage_top, p.usage_height, true, plan.schedule.size());
  if (in.lower_bound_bytes) {
    const double y = p.usage_y(static_cast<double>(in.lower_bound_bytes));
    hline(o, p.left, p.left + p.width, y, kBoundColour, "2 3", "lower-bound-line");
    const std::string label = in.lower_bound_label.empty() ? "lower bound " + bytes_label(in.lower_bound_bytes) : in.lower_bound_label;
    text(o, p.left + p.width - 4, y + 13, label,
         std::string("class=\"halo\" text-anchor=\"end\" fill=\"") + kBoundColour + "\"");
  }
  if (in.budget_bytes) {
    const double y = p.usage_y(static_cast<double>(in.budget_bytes));
    hline(o, p.left, p.left + p.width, y, kBudgetColour, "6 4", "budget-line");
    text(o, p.left + 4, y - 4, budget_text(in), std::string("class=\"halo\" fill=\"") + kBudgetColour + "\"");
  }
  if (plan.schedule.empty()) return;
  const auto s = p.usage.peak_step;
  const auto op = plan.schedule[s];
  const double px = p.x(static_cast<double>(s) + 0.5), py = p.usage_y(static_cast<double>(p.usage.peak_bytes));
  o << "<circle class=\"live-peak\" cx=\"" << num(px) << "\" cy=\"" << num(py) << "\" r=\"4\" fill=\"" << kBudgetColour << "\"/>\n";
  // Two lines beside the marker, on the side with more room; a long op name keeps the tail that tells it
  // apart from every other op's (exporter names share their prefixes), never an ambiguous piece.
  const bool right_half = px > p.left + p.width * 0.5;
  const double room = right_half ? px - p.left - 10 : p.left + p.width - px - 10;
  const auto chars = static_cast<std::size_t>(std::max(12.0, room / 7.0));
  const std::string name = op < in.graph->ops.size() ? in.graph->ops[op].name : "";
  const std::string head = "live peak " + bytes_label(p.usage.peak_bytes) + " at step " + std::to_string(s);
  std::vector<std::string> names;
  for (const auto& x : in.graph->ops) names.push_back(x.name);
  const std::string full = op_label(*in.graph, op), rest = full.substr(name.size());
  const std::string who = full.size() <= chars ? full : TailElider(names).elide(name, chars > rest.size() + 12 ? chars - rest.size() : 12) + rest;
  const double tx = px + (right_half ? -8 : 8), ty = std::max(py - 20, p.usage_top + 14);
  o << "<text class=\"live-peak-label\" id=\"" << (index == 0 ? std::string("live-peak-label") : "live-peak-label-" + std::to_string(index + 1))
    << "\" data-op=\"" << xml_escape(name) << "\" data-step=\"" << s << "\" data-bytes=\"" << p.usage.peak_bytes << "\" x=\"" << num(tx)
    << "\" y=\"" << num(ty) << "\" text-anchor=\"" << (right_half ? "end" : "start")
    << "\" style=\"paint-order:stroke;stroke:#fff;stroke-width:3px\" fill=\"#222\"><tspan font-weight=\"bold\">" << xml_escape(head)
    << "</tspan><tspan x=\"" << num(tx) << "\" dy=\"1.25em\">" << xml_escape(who) << "</tspan></text>\n";
}

void legend(std::ostream& o, const std::vector<PanelLayout>& layouts, bool budget, bool bound) {
  double x = 16;
  const double y = 18;
  auto item = [&](const std::string& label, const std::string& swatch) {
    o << "<g class=\"legend-item\" transform=\"translate(" << num(x) << "," << num(y) << ")\">" << swatch << "<text x=\"18\" y=\"10\">"
      << xml_escape(label) << "</text></g>\n";
    x += 30 + 7.0 * static_cast<double>(label.size());
  };
  o << "<g class=\"legend\">\n";
  for (int k = 0; k < kBufferKinds; ++k) {
    std::size_t n = 0;
    for (const auto& p : layouts) n += p.kind_count[k];
    if (n == 0) continue;
    const auto kind = static_cast<BufferKind>(k);
    item(buffer_kind_label(kind), std::string("<rect width=\"13\" height=\"12\" fill=\"") + buffer_kind_colour(kind) + "\"/>");
  }
  item("live bytes", std::string("<rect y=\"3\" width=\"13\" height=\"7\" fill=\"") + kUsageFill + "\" stroke=\"" + kUsageColour + "\"/>");
  if (budget) item("budget", std::string("<line x1=\"0\" x2=\"13\" y1=\"6\" y2=\"6\" stroke=\"") + kBudgetColour + "\" stroke-width=\"2\" stroke-dasharray=\"4 2\"/>");
  if (bound) item("lower bound", std::string("<line x1=\"0\" x2=\"13\" y1=\"6\" y2=\"6\" stroke=\"") + kBoundColour + "\" stroke-width=\"2\" stroke-dasharray=\"2 2\"/>");
  item("live peak", std::string("<circle cx=\"6\" cy=\"6\" r=\"4\" fill=\"") + kBudgetColour + "\"/>");
  o << "</g>\n";
}

}  // namespace

std::string render_timeline_svg(const std::vector<TimelinePanel>& panels, const TimelineOptions& opts) {
  const auto layouts = layout_timeline(panels, opts);
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(opts.width)
    << "\" height=\"" << num(opts.height) << "\" viewBox=\"0 0 " << num(opts.width) << " " << num(opts.height)
    << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\" data-panels=\"" << panels.size() << "\">\n";
  o << "<style>.buf{stroke:#fff;stroke-width:0.6}.buf.thin{stroke:none}.buf:hover{stroke:#000;stroke-width:1.2}"
       ".halo{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}</style>\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  bool budget = false, bound = false;
  for (const auto& p : panels) budget |= p.budget_bytes > 0, bound |= p.lower_bound_bytes > 0;
  legend(o, layouts, budget, bound);
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const auto& in = panels[k];
    const auto& p = layouts[k];
    o << "<g class=\"panel\" id=\"panel-" << k + 1 << "\" data-title=\"" << xml_escape(in.title) << "\" data-buffers=\""
      << in.plan->buffers.size() << "\" data-scratch=\"" << in.plan->scratch.size() << "\" data-drawn=\"" << p.rects.size() << "\" data-aggregated=\"" << p.aggregated_buffers
      << "\" data-steps=\"" << in.plan->schedule.size() << "\" data-arena-bytes=\"" << in.plan->arena_bytes << "\" data-live-peak-step=\""
      << p.usage.peak_step << "\" data-live-peak-bytes=\"" << p.usage.peak_bytes << "\">\n";
    text(o, p.left, 56, in.title, "font-size=\"15\" font-weight=\"bold\" fill=\"#111\"");
    std::string sub = std::to_string(in.plan->buffers.size()) + " buffers, " + std::to_string(in.plan->schedule.size()) +
                      " steps, arena " + bytes_label(in.plan->arena_bytes);
    if (p.aggregated_buffers) sub += " \u00b7 " + std::to_string(p.aggregated_buffers) + " small buffers drawn as shaded bands";
    text(o, p.left, 74, sub, "fill=\"#555\"");
    for (std::size_t l = 0; l < p.note_lines.size(); ++l)
      text(o, p.left, 90 + 14.0 * static_cast<double>(l), p.note_lines[l], "class=\"note\" fill=\"#555\"");
    arena_plot(o, in, p);
    usage_plot(o, in, p, k);
    x_axis(o, p, in.plan->schedule.size());
    o << "</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace memplan::viz

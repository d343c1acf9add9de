// The memory timeline: arena buffers over schedule steps and live bytes per step, laid out and drawn as SVG.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/plan.hpp"
#include "viz/svg.hpp"

namespace memplan::viz {

// What a buffer holds, for its colour: by the op that made its first tensor when that op is a swap copy,
// a recomputation, a backward op (gradient) or an optimizer op; else by the tensor's role; an
// activation nobody reads is scratch (an op's workspace).
enum class BufferKind : std::uint8_t { weight, activation, gradient, optimizer_state, recomputed, swapped, scratch };
inline constexpr int kBufferKinds = 7;
const char* buffer_kind_name(BufferKind k) noexcept;
const char* buffer_kind_label(BufferKind k) noexcept;   // for the legend: "optimizer state"
const char* buffer_kind_colour(BufferKind k) noexcept;  // "#rrggbb"

// True for the copy ops a swap decision inserts (SwapIn / SwapOut, any domain) and ops of phase swap.
bool is_swap_op(const analysis::Op& op) noexcept;

// Step of each op in `schedule` (analysis::kNoOp where an op is not scheduled).
std::vector<std::uint32_t> steps_of_ops(const analysis::Graph& g, const std::vector<analysis::OpId>& schedule);

// Classifies a buffer by the tensor in it that is made first on the schedule (ties by id).
BufferKind classify_buffer(const analysis::Graph& g, const planner::Buffer& b, const std::vector<std::uint32_t>& step_of_op);

// The arena's occupancy per step: the sum of the sizes of the buffers whose interval covers it.
struct Usage {
  std::vector<std::uint64_t> live_bytes;  // per step of the plan's schedule
  std::uint64_t peak_bytes = 0;
  std::uint32_t peak_step = 0;  // first step at which live_bytes is largest
};
Usage plan_usage(const planner::Plan& plan);
// The plan's scratch regions as buffers without tensors, live at their op's step (first = kNoOp for an
// op the schedule lacks), in plan.scratch's order. Timeline rectangles number them after plan.buffers.
std::vector<planner::Buffer> scratch_regions(const planner::Plan& plan);

// One plan to draw. `graph` is the graph the plan was made for (the training graph for training).
struct TimelinePanel {
  std::string title;
  const analysis::Graph* graph = nullptr;
  const planner::Plan* plan = nullptr;
  std::uint64_t budget_bytes = 0;       // 0: no budget line
  std::uint64_t lower_bound_bytes = 0;  // 0: no lower bound line
  std::string note;                     // one more line under the title (e.g. persistent bytes)
  std::string budget_label;             // text by the budget lines; empty: "budget <bytes>"
  std::string lower_bound_label;        // text by the lower bound line; empty: "lower bound <bytes>"
};

struct TimelineOptions {
  double width = 1400;         // whole picture, pixels
  double height = 900;
  std::size_t aggregate_above = 2000;  // with more buffers than this, ones thinner than min_rect_px become bands
  double min_rect_px = 1.0;
  std::size_t max_rects = 8000;    // per panel: beyond this, the smallest buffers are aggregated too
  std::size_t max_band_rects = 20000;  // per panel: bands are coarsened until they fit
};

// Geometry, in pixels, of everything the timeline draws for one panel; rendering only writes it out.
struct BufferRect {
  std::uint32_t buffer = 0;  // index into plan.buffers, then past them into scratch_regions(plan)
  BufferKind kind = BufferKind::activation;
  double x = 0, y = 0, w = 0, h = 0;
};
struct BandRect {  // several aggregated buffers: one cell run, coloured by the kind covering it most
  BufferKind kind = BufferKind::activation;
  double x = 0, y = 0, w = 0, h = 0;
  double coverage = 0;  // fraction of the run's area covered by buffers, 0..1
};
struct PanelLayout {
  double left = 0, width = 0;            // the plot area's x extent
  double arena_top = 0, arena_height = 0;
  double usage_top = 0, usage_height = 0;
  Scale x;                               // step -> px (step s spans x(s) .. x(s+1))
  Scale arena_y;                         // offset bytes -> px
  Scale usage_y;                         // live bytes -> px
  std::vector<BufferRect> rects;
  std::vector<BandRect> bands;
  std::size_t aggregated_buffers = 0;
  std::array<std::size_t, kBufferKinds> kind_count{};  // buffers of each kind
  Usage usage;
  // Phase halves on the schedule: [0, backward_first) forward, then backward, optimizer from optimizer_first.
  std::uint32_t backward_first = 0, optimizer_first = 0;
  bool training = false;
  std::vector<std::string> note_lines;  // the panel's note, wrapped to its width (wrap_note)
};

// `note` in lines of at most `chars` bytes, broken at its " \u00b7 " separators; a part longer than a line
// keeps a line of its own, whole: nothing is cut.
std::vector<std::string> wrap_note(const std::string& note, std::size_t chars);

// Lays out panels side by side; all share the byte scales so that heights compare across panels.
std::vector<PanelLayout> layout_timeline(const std::vector<TimelinePanel>& panels, const TimelineOptions& opts = {});

// The whole picture as SVG text (a legend, then per panel the arena and usage plots).
std::string render_timeline_svg(const std::vector<TimelinePanel>& panels, const TimelineOptions& opts = {});

}  // namespace memplan::viz

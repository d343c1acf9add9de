// Memory-aware schedules: a topological order of the ops chosen to lower the peak of live arena bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/graph.hpp"
#include "planner/assign.hpp"

namespace memplan::planner {

enum class ScheduleKind : std::uint8_t { file, memory };
const char* schedule_kind_name(ScheduleKind k) noexcept;
std::optional<ScheduleKind> schedule_kind_from_name(std::string_view name) noexcept;

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::memory;  // the default; file: the graph's own topological order (--schedule file)
  // The searches stop at work limits, so that an order is the same on every machine; the time limits only
  // cap a slow machine. Local search (moves of one op across the peak step) evaluates at most this many
  // orders, and at most local_search_work / ops of them (each evaluation walks the order).
  double local_search_seconds = 2.0;
  std::uint32_t local_search_evaluations = 2000;
  std::uint64_t local_search_work = 20'000'000;
  // The exact dynamic program over frontiers runs on graphs of at most this many ops, and gives up
  // (keeping the heuristics' order) beyond this many frontiers, frontiers x ops work, or this long.
  std::uint32_t exact_max_ops = 400;
  std::uint32_t exact_max_states = 200'000;
  std::uint64_t exact_work = 20'000'000;
  double exact_seconds = 5.0;
};

// The peak model of one graph under assign's aliasing: values are views' roots (a view adds no bytes);
// an op allocates its outputs' values, overwrites an input in place when assign would (the input's
// value dies at that op, same bytes and type, no graph output) and holds its scratch at its step; a value
// dies after its last reader unless it is a graph output or a gradient (live to the end of the step).
// Dependencies are the data edges plus write-after-read edges: an op that rewrites storage in place (an
// optimizer update) comes after every other reader of that storage. Ops of the forward phase come before
// all others (the remat and swap planners read the forward as one block).
// peak(order) equals assign(g, analyze_liveness(g, order)).aliased_lower_bound_bytes.
class ScheduleModel {
 public:
  ScheduleModel(const Graph& g, const AssignOptions& o);

  std::size_t size() const noexcept { return preds_.size(); }
  // Live bytes at each step of `order` (a topological order of every op, ops as ids of the graph).
  std::vector<std::uint64_t> profile(const std::vector<OpId>& order) const;
  std::uint64_t peak(const std::vector<OpId>& order) const;
  bool respects_dependencies(const std::vector<OpId>& order) const;

  // The heuristics (schedule_heuristics.cpp), each a topological order; `file` breaks ties.
  std::vector<OpId> least_peak_first(const std::vector<OpId>& file) const;  // inductor's LPMF
  std::vector<OpId> breadth_first(const std::vector<OpId>& file) const;
  std::vector<OpId> depth_first(const std::vector<OpId>& file) const;
  // Moves single ops within their dependency window across the peak step while the peak (then the
  // number of steps at it) drops; at most `evaluations` orders evaluated or `seconds` spent.
  std::vector<OpId> local_search(std::vector<OpId> order, double seconds, std::uint32_t evaluations) const;
  // The least peak over every topological order by a DP over frontiers (sets of scheduled ops), or none
  // when the frontiers exceed `max_states` or the time `seconds`.
  std::optional<std::vector<OpId>> exact(const std::vector<OpId>& file, std::uint32_t max_states, double seconds,
                                        std::uint64_t max_work = UINT64_MAX) const;

  // Static facts (schedule_model.cpp), for the heuristics.
  struct OpFacts {
    std::vector<std::uint32_t> inputs;   // distinct values the op reads
    std::vector<std::uint32_t> born;     // values the op allocates
    std::vector<std::uint32_t> inplace;  // values output 0 may overwrite, in assign's order
    std::uint32_t out0 = UINT32_MAX;     // value of output 0 when it may take an input's bytes
    std::uint64_t scratch = 0;
    std::uint32_t tier = 0;              // 0: forward, 1: the rest
  };
  struct Value {
    std::uint64_t bytes = 0;
    std::uint32_t readers = 0;  // distinct ops reading it (through any view)
    bool pinned = false;        // lives to the end of the step
  };
  const OpFacts& op(OpId o) const { return ops_[o]; }
  const Value& value(std::uint32_t v) const { return values_[v]; }
  std::size_t value_count() const noexcept { return values_.size(); }
  const std::vector<OpId>& preds(OpId o) const { return preds_[o]; }
  const std::vector<OpId>& succs(OpId o) const { return succs_[o]; }
  const std::vector<OpId>& readers_of(std::uint32_t v) const { return readers_[v]; }

  // One op's effect given how many readers each value still waits for (`remaining`, before the op runs):
  // bytes during the op (above the bytes live before it) and after it.
  struct Step {
    std::uint64_t during = 0;   // allocated outputs + scratch
    std::int64_t after = 0;     // allocated outputs - freed values
    std::uint32_t inplace = UINT32_MAX;  // the value output 0 overwrites
  };
  Step step(OpId o, const std::vector<std::uint32_t>& remaining) const;

 private:
  // The construction's steps: each op's reads and the ops before it; write-after-read edges, successors and tiers.
  void link_reads(const Graph& g, const std::vector<std::uint32_t>& value_of);
  void order_ops(const Graph& g, const std::vector<OpId>& file);

  std::vector<OpFacts> ops_;
  std::vector<Value> values_;
  std::vector<std::vector<OpId>> preds_, succs_, readers_;
};

struct ScheduleResult {
  std::vector<OpId> order;
  ScheduleKind kind = ScheduleKind::file;
  std::string method = "file";         // file | least_peak_first | breadth_first | depth_first | exact, "+local"
  std::uint64_t file_peak_bytes = 0;   // ScheduleModel::peak of the file order
  std::uint64_t peak_bytes = 0;        // of `order`; never above file_peak_bytes
  bool proven_optimal = false;         // the exact DP finished: no topological order has a lower peak
  double seconds = 0.0;
};

// The file order (analysis::topological_order) for ScheduleKind::file; otherwise every heuristic, a local
// search on the best and the exact DP where affordable, keeping the least peak (the file order on ties).
ScheduleResult choose_schedule(const Graph& g, const AssignOptions& a, const ScheduleOptions& s);

}  // namespace memplan::planner

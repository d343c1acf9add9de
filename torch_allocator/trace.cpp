// Trace files: the recorded events, each block's size, stream, lifetime and planned offset, and the comparison.
#include "torch_allocator/trace.hpp"

#include <limits>
#include <type_traits>

#include "analysis/error.hpp"
#include "analysis/json_read.hpp"
#include "planner/plan.hpp"
#include "torch_allocator/caching_model.hpp"
#include "torch_allocator/step_plan.hpp"

namespace memplan::torch_allocator {

Trace make_trace(const RecordedStep& step, const StepPlan& plan, int device) {
  const CachingEstimate c = caching_allocator_estimate(step);
  return Trace{step, plan, device, c.reserved_bytes, c.max_allocated_bytes};
}

nlohmann::json trace_json(const Trace& t) {
  nlohmann::json blocks = nlohmann::json::array(), events = nlohmann::json::array();
  for (std::size_t k = 0; k < t.step.blocks.size(); ++k) {
    const RecordedBlock& b = t.step.blocks[k];
    const std::uint64_t off = k < t.plan.offsets.size() ? t.plan.offsets[k] : planner::kNotInArena;
    blocks.push_back({{"size", b.size},
                      {"bytes", b.bytes},
                      {"stream", static_cast<std::uint64_t>(b.stream)},
                      {"alloc_event", b.alloc_event},
                      {"free_event", b.free_event == kNotFreed ? nlohmann::json(nullptr) : nlohmann::json(b.free_event)},
                      {"next_free_event", b.next_free_event == kNotFreed ? nlohmann::json(nullptr) : nlohmann::json(b.next_free_event)},
                      {"offset", off == planner::kNotInArena ? nlohmann::json(nullptr) : nlohmann::json(off)}});
  }
  for (const auto& e : t.step.events) {
    events.push_back({{"kind", e.alloc ? "alloc" : "free"}, {"block", e.block}, {"bytes", e.bytes}});
    if (e.earlier_rank >= 0) events.back()["earlier_rank"] = e.earlier_rank;
  }
  return {{"format", kTraceFormat},
          {"version", kTraceVersion},
          {"device", t.device},
          {"alignment", kBlockAlignment},
          {"primary_stream", static_cast<std::uint64_t>(t.step.primary_stream)},
          {"packer", t.plan.packer},
          {"arena_bytes", t.plan.arena_bytes},
          {"periodic_bytes", t.plan.periodic_bytes},
          {"peak_live_bytes", t.plan.peak_live_bytes},
          {"caching_allocator_reserved_bytes", t.caching_reserved_bytes},
          {"caching_allocator_max_allocated_bytes", t.caching_max_allocated_bytes},
          {"events", std::move(events)},
          {"blocks", std::move(blocks)}};
}

namespace {
[[noreturn]] void bad(const std::string& what) { fail(ErrorKind::malformed, "allocation trace: " + what); }

// Integers are read exactly (a fraction, a negative size or a number past the type is refused with the field named,
// never truncated or wrapped as nlohmann's get<T>() would); strings and booleans by their type.
template <class T> T field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) bad(where + " has no '" + key + "'");
  const nlohmann::json& v = j.at(key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const std::string name = "allocation trace: " + where + "'s '" + key + "'";
    if constexpr (std::is_unsigned_v<T>) return static_cast<T>(analysis::json_uint(v, std::numeric_limits<T>::max(), name));
    else return static_cast<T>(analysis::json_int(v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), name));
  }
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    bad(where + "'s '" + key + "' has the wrong type");
  }
}

// CUDA device ordinals as PyTorch holds them (c10::DeviceIndex, an int8_t): 0..127.
constexpr std::int64_t kMaxDevice = 127;
// A block size whose rounding to 512 still fits in 64 bits (and in any arena offset).
constexpr std::uint64_t kMaxBlockSize = (std::uint64_t{1} << 63) - 512;

std::uint32_t optional_event(const nlohmann::json& b, const char* key, const std::string& where) {
  if (!b.contains(key) || b.at(key).is_null()) return kNotFreed;
  return field<std::uint32_t>(b, key, where);
}
// The file's header: format, version, alignment, device, primary stream, the plan's figures where planned, and the
// caching allocator's. Returns whether the trace is planned: a step recorded without a plan (memplan_torch.estimate_step's
// trace) is planned by memplan once it is read.
bool read_header(const nlohmann::json& j, Trace& t) {
  if (!j.is_object() || j.value("format", std::string{}) != kTraceFormat) bad("not a '" + std::string(kTraceFormat) + "' file");
  if (field<int>(j, "version", "the file") != kTraceVersion) bad("version " + j.at("version").dump() + " is not 1");
  if (field<std::uint64_t>(j, "alignment", "the file") != kBlockAlignment) bad("alignment is not 512");
  if (!j.contains("device")) bad("the file has no 'device'");
  t.device = static_cast<int>(analysis::json_int(j.at("device"), 0, kMaxDevice, "allocation trace: the file's 'device' (a CUDA device ordinal)"));
  t.step.primary_stream = static_cast<StreamId>(field<std::uint64_t>(j, "primary_stream", "the file"));
  const bool planned = j.contains("planned") ? field<bool>(j, "planned", "the file") : true;
  if (planned) {
    t.plan.packer = field<std::string>(j, "packer", "the file");
    t.plan.arena_bytes = field<std::uint64_t>(j, "arena_bytes", "the file");
    t.plan.periodic_bytes = j.contains("periodic_bytes") ? field<std::uint64_t>(j, "periodic_bytes", "the file") : 0;
    if (t.plan.periodic_bytes > t.plan.arena_bytes) bad("periodic_bytes is larger than arena_bytes");
    t.plan.peak_live_bytes = field<std::uint64_t>(j, "peak_live_bytes", "the file");
  }
  t.caching_reserved_bytes = field<std::uint64_t>(j, "caching_allocator_reserved_bytes", "the file");
  t.caching_max_allocated_bytes = field<std::uint64_t>(j, "caching_allocator_max_allocated_bytes", "the file");
  return planned;
}

// Block k: its size, bytes, stream and events, and its offset where the trace is planned.
void read_block(const nlohmann::json& b, std::size_t k, bool planned, Trace& t) {
  const std::string where = "block " + std::to_string(k);
  RecordedBlock r{field<std::uint64_t>(b, "size", where), field<std::uint64_t>(b, "bytes", where),
                  static_cast<StreamId>(field<std::uint64_t>(b, "stream", where)), field<std::uint32_t>(b, "alloc_event", where),
                  optional_event(b, "free_event", where)};
  if (r.size > kMaxBlockSize) bad(where + ": size " + std::to_string(r.size) + " is beyond 2^63 - 512 bytes");
  if (r.bytes != round_block(r.size)) bad(where + ": bytes is not its size rounded up to 512");
  if (r.free_event != kNotFreed && r.free_event <= r.alloc_event) bad(where + " is freed before it is allocated");
  t.step.blocks.push_back(r);
  const bool has_offset = b.contains("offset") && !b.at("offset").is_null();
  if (has_offset && !planned) bad(where + " has an offset in a trace that is not planned");
  const std::uint64_t off = has_offset ? field<std::uint64_t>(b, "offset", where) : planner::kNotInArena;
  if (has_offset && off < t.plan.periodic_bytes && off + r.bytes > t.plan.periodic_bytes)
    bad(where + " straddles the periodic region's end");
  t.plan.offsets.push_back(off);
}

// Event e, which must agree with the block it names (its alloc or free event, its bytes; each once). `seen_alloc` and
// `seen_free`: per block, whether its alloc and free were read.
void read_event(const nlohmann::json& j, std::size_t e, Trace& t, std::vector<bool>& seen_alloc, std::vector<bool>& seen_free) {
  const std::string where = "event " + std::to_string(e);
  const std::string kind = field<std::string>(j, "kind", where);
  if (kind != "alloc" && kind != "free") bad(where + ": kind '" + kind + "' is neither alloc nor free");
  RecordedEvent ev{kind == "alloc", field<std::int64_t>(j, "block", where), field<std::uint64_t>(j, "bytes", where)};
  if (ev.block < -1 || ev.block >= static_cast<std::int64_t>(t.step.blocks.size()) || (ev.alloc && ev.block < 0))
    bad(where + " names no block");
  if (j.contains("earlier_rank")) {
    ev.earlier_rank = field<std::int64_t>(j, "earlier_rank", where);
    if (ev.alloc || ev.block >= 0 || ev.earlier_rank < 0)
      bad(where + ": only the free of an earlier block has an earlier_rank (at least 0)");
  }
  if (ev.block >= 0) {
    const auto k = static_cast<std::size_t>(ev.block);
    const RecordedBlock& b = t.step.blocks[k];
    auto& seen = ev.alloc ? seen_alloc : seen_free;
    if (seen[k] || (ev.alloc ? b.alloc_event : b.free_event) != e || ev.bytes != b.bytes)
      bad(where + " disagrees with block " + std::to_string(k) + "'s events or bytes");
    seen[k] = true;
  }
  t.step.events.push_back(ev);
}

// What follows from the events and the plan agrees with what the blocks say: next_free_event where written, and an
// offset exactly for the blocks in the arena.
void check_blocks(const nlohmann::json& blocks, const Trace& t) {
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    const std::string where = "block " + std::to_string(k);
    if (blocks[k].contains("next_free_event") && optional_event(blocks[k], "next_free_event", where) != t.step.blocks[k].next_free_event)
      bad(where + ": next_free_event disagrees with the events' earlier_rank");
    if ((t.plan.offsets[k] != planner::kNotInArena) != t.step.in_arena(k))
      bad(where + ": only blocks of the primary stream freed within the step, and periodic blocks, have an offset");
  }
}
}  // namespace

Trace read_trace(const nlohmann::json& j) {
  Trace t;
  const bool planned = read_header(j, t);
  const auto& blocks = field<nlohmann::json>(j, "blocks", "the file");
  const auto& events = field<nlohmann::json>(j, "events", "the file");
  if (!blocks.is_array() || !events.is_array()) bad("'blocks' and 'events' must be arrays");
  if (events.size() >= kNotFreed) bad("too many events");
  for (std::size_t k = 0; k < blocks.size(); ++k) read_block(blocks[k], k, planned, t);
  std::vector<bool> seen_alloc(blocks.size(), false), seen_free(blocks.size(), false);
  for (std::size_t e = 0; e < events.size(); ++e) read_event(events[e], e, t, seen_alloc, seen_free);
  for (std::size_t k = 0; k < blocks.size(); ++k)
    if (!seen_alloc[k] || seen_free[k] != (t.step.blocks[k].free_event != kNotFreed))
      bad("block " + std::to_string(k) + "'s events are not all in the event list");
  link_carried(t.step);  // next_free_event follows from the events; a written one must agree
  if (!planned) t.plan = plan_step(t.step);
  check_blocks(blocks, t);
  return t;
}

}  // namespace memplan::torch_allocator

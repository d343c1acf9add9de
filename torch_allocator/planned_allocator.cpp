// The planned allocator: exact device allocations while recording, planned arena offsets while replaying,
// the pool for every miss.
#include "torch_allocator/planned_allocator.hpp"

#include <algorithm>
#include <cstdio>

#include "analysis/error.hpp"
#include "torch_allocator/caching_model.hpp"

namespace memplan::torch_allocator {

namespace {
std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}
}  // namespace

PlannedAllocator::PlannedAllocator(DeviceMemory& device, AllocatorOptions options)
    : device_(device), options_(options), pool_backend_(device) {
  if (options_.record_steps < 1) fail(ErrorKind::usage, "planned allocator: record_steps must be at least 1");
  if (options_.replan_after_miss_steps < 1) fail(ErrorKind::usage, "planned allocator: replan_after_miss_steps must be at least 1");
  recording_left_ = options_.record_steps;
}

PlannedAllocator::~PlannedAllocator() {
  for (auto& d : deferred_)
    for (auto e : d.events) device_.destroy_event(e);
  for (auto& a : arenas_)
    for (auto& r : a.part)
      if (r.base) device_.deallocate(r.base, r.bytes);
  for (auto& [p, b] : live_)
    if (b.where == Where::exact) device_.deallocate(p, b.bytes);
}

runtime::PoolAllocator& PlannedAllocator::pool_of(StreamId stream, std::uint64_t bytes) {
  const bool small = bytes <= options_.small_block_bytes && options_.small_chunk_bytes < options_.pool_chunk_bytes;
  auto& p = pools_[{stream, small}];
  const std::uint64_t chunk = small ? options_.small_chunk_bytes : options_.pool_chunk_bytes;
  if (!p) p = std::make_unique<runtime::PoolAllocator>(pool_backend_, runtime::PoolOptions{chunk, 0, true});
  return *p;
}

void PlannedAllocator::note_device_bytes() {
  std::uint64_t arenas = 0;
  for (const auto& a : arenas_)
    for (const auto& r : a.part) arenas += r.base ? r.bytes : 0;
  stats_.pool_bytes = pool_backend_.held_bytes();
  stats_.peak_pool_bytes = std::max(stats_.peak_pool_bytes, stats_.pool_bytes);
  stats_.persistent_bytes = exact_bytes_;
  stats_.device_bytes = arenas + stats_.pool_bytes + exact_bytes_;
  stats_.peak_device_bytes = std::max(stats_.peak_device_bytes, stats_.device_bytes);
}

// Each stream has its own pool (as PyTorch's caching allocator keeps blocks per stream): a block freed on
// its stream is reused only by later work of that stream, which the stream orders after the free.
void* PlannedAllocator::from_pool(std::uint64_t size, StreamId stream) {
  void* p = pool_of(stream, round_block(size)).allocate(round_block(size), kBlockAlignment);
  live_[p] = Live{Where::pool, round_block(size), stream};
  note_device_bytes();
  return p;
}

// A block of its own: taken from the device now, given back when freed (no cache holds freed bytes).
void* PlannedAllocator::exact(std::uint64_t size, StreamId stream) {
  const std::uint64_t bytes = round_block(size);
  void* p = device_.allocate(bytes);
  exact_bytes_ += bytes;
  live_[p] = Live{Where::exact, bytes, stream};
  note_device_bytes();
  return p;
}

void PlannedAllocator::release_pools() {
  for (auto& [s, pool] : pools_) pool->release_free_chunks();
  note_device_bytes();
}

bool PlannedAllocator::range_free(std::uint64_t offset, std::uint64_t bytes) const {
  auto it = arena_live_.lower_bound(offset);
  if (it != arena_live_.end() && it->first < offset + bytes) return false;
  return it == arena_live_.begin() || std::prev(it)->second <= offset;
}

// The recorded block the step's next allocation of `size` on `stream` is: the next in order, else (an allocation
// the recording made and this step does not, such as DDP rebuilding its buckets in the recorded step, or one of
// this step's own) the first of that size and stream a little further on; the replay goes on from there. Liveness
// stays safe whatever is matched: a planned range still held goes to the pool (range_free).
std::size_t PlannedAllocator::match_recorded(std::uint64_t size, StreamId stream) {
  const RecordedStep& rec = *planned_;
  const auto same = [&](std::size_t j) {
    return j < rec.blocks.size() && rec.blocks[j].bytes == round_block(size) && rec.blocks[j].stream == stream;
  };
  const std::size_t k = next_alloc_;
  if (same(k) || k >= rec.blocks.size()) return k;
  for (std::size_t j = k + 1; j < std::min(rec.blocks.size(), k + 1 + kResyncWindow); ++j)
    if (same(j)) {
      ++stats_.resyncs;
      return j;
    }
  return k;
}

void* PlannedAllocator::replay(std::uint64_t size, StreamId stream) {
  const std::size_t k = match_recorded(size, stream);
  next_alloc_ = k + 1;
  const RecordedStep& rec = *planned_;
  const bool matches = k < rec.blocks.size() && rec.blocks[k].bytes == round_block(size) && rec.blocks[k].stream == stream;
  if (stream != rec.primary_stream) {
    ++stats_.other_stream;
    if (!matches) ++step_misses_, ++stats_.misses;
    return from_pool(size, stream);
  }
  if (matches && rec.blocks[k].free_event == kNotFreed && !rec.periodic(k)) {  // lives past the step: the pool's
    ++stats_.carried;
    return from_pool(size, stream);
  }
  if (matches) {
    const std::uint64_t off = plan_.offsets[k], bytes = rec.blocks[k].bytes;
    if (range_free(off, bytes)) {  // a periodic block: the previous step's instance was freed by now
      ArenaMemory& a = arenas_.back();
      const int part = off < a.split ? 0 : 1;
      Region& r = a.part[part];
      if (!r.base) {  // the periodic region, taken when its first block comes
        r.base = device_.allocate(r.bytes);
        note_device_bytes();
      }
      ++r.live_blocks;
      arena_live_.emplace(off, off + bytes);
      void* p = static_cast<std::byte*>(r.base) + (part == 0 ? off : off - a.split);
      live_[p] = Live{Where::arena, bytes, stream, arenas_.size() - 1, part, off, k};
      ++stats_.hits;
      stats_.carried_in_arena += rec.periodic(k);
      return p;
    }
    ++stats_.conflicts;
  }
  ++step_misses_;
  ++stats_.misses;
  return from_pool(size, stream);
}

void* PlannedAllocator::allocate(std::uint64_t size, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (size == 0) return nullptr;
  if (!first_stream_) first_stream_ = stream;
  poll_deferred();
  if (!in_step_ && !stepped_) {  // setup before the first step (weights): lives long, its own allocation
    ++stats_.setup;
    return exact(size, stream);
  }
  if (!in_step_) {
    ++stats_.unstepped;
    return from_pool(size, stream);
  }
  void* p = nullptr;
  const std::size_t k = step_allocs_.size();  // its place among the step's allocations
  if (replaying_) {
    p = replay(size, stream);
    ++event_;
  } else {
    ++next_alloc_;
    p = exact(size, stream);
    recorder_.on_alloc(p, size, stream);
  }
  Live& l = live_.at(p);
  l.step = step_serial_;
  l.index = static_cast<std::uint32_t>(k);
  step_allocs_.push_back(p);
  return p;
}

// Each block the step leaves live gets its rank among those of its bytes: a recorded step names the
// previous step's blocks it frees by it (RecordedEvent::earlier_rank).
void PlannedAllocator::rank_carried() {
  std::map<std::uint64_t, std::int64_t> next;
  for (std::size_t i = 0; i < step_allocs_.size(); ++i) {
    auto it = live_.find(step_allocs_[i]);
    if (it == live_.end() || it->second.step != step_serial_ || it->second.index != i) continue;  // freed (or reused)
    it->second.carried_rank = next[it->second.bytes]++;
  }
  step_allocs_.clear();
}

// A retired arena gives each region back once its last block is freed (the periodic region holds the
// last step's periodic blocks until the next step frees them; the main region is usually empty at once).
void PlannedAllocator::release_arena_if_unused(std::size_t a) {
  const bool current = replaying_ && a + 1 == arenas_.size();
  if (current) return;
  for (Region& r : arenas_[a].part) {
    if (r.live_blocks != 0 || !r.base) continue;
    device_.deallocate(r.base, r.bytes);
    r = Region{};
    note_device_bytes();
  }
}

void PlannedAllocator::release_pool_block(void* p, const Live& b) {
  const StreamId primary = planned_ ? planned_->primary_stream : first_stream_.value_or(b.stream);
  if (b.stream == primary) {
    pool_of(b.stream, b.bytes).deallocate(static_cast<std::byte*>(p));
    return;
  }
  // A block of another stream may still be read there and on the arena's stream (record_stream's case):
  // it goes back to its pool once both streams have passed this point.
  Deferred d{p, b.stream, b.bytes, {device_.record_event(b.stream), device_.record_event(primary)}};
  deferred_.push_back(std::move(d));
  stats_.deferred_frees = deferred_.size();
}

void PlannedAllocator::poll_deferred() {
  auto done = [&](Deferred& d) {
    for (auto e : d.events)
      if (!device_.event_done(e)) return false;
    for (auto e : d.events) device_.destroy_event(e);
    pool_of(d.stream, d.bytes).deallocate(static_cast<std::byte*>(d.p));
    return true;
  };
  deferred_.erase(std::remove_if(deferred_.begin(), deferred_.end(), done), deferred_.end());
  stats_.deferred_frees = deferred_.size();
}

void PlannedAllocator::deallocate(void* p, StreamId /*stream*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!p) return;
  auto it = live_.find(p);
  if (it == live_.end()) fail(ErrorKind::usage, "planned allocator: free of " + hex(p) + ", which it never handed out (or freed twice)");
  const Live b = it->second;
  live_.erase(it);
  if (in_step_ && recorder_.active()) recorder_.on_free(p, b.bytes, b.step + 1 == step_serial_ ? b.carried_rank : -1);
  if (in_step_ && replaying_) ++event_;
  if (b.where == Where::exact) {  // the device waits for queued work before it reuses the bytes
    device_.deallocate(p, b.bytes);
    exact_bytes_ -= b.bytes;
    note_device_bytes();
    return;
  }
  if (b.where == Where::pool) {
    release_pool_block(p, b);
    return;
  }
  // An arena block: the plan accounted for its lifetime, so nothing returns to a free list; the range
  // becomes available to the planned blocks that reuse it.
  const bool current = replaying_ && b.arena + 1 == arenas_.size();
  if (current) {
    arena_live_.erase(b.offset);
    if (in_step_) {  // this step's free event is event_ - 1; a block of the previous step is due at next_free_event
      const RecordedBlock& r = planned_->blocks[b.block];
      const bool earlier = b.step != step_serial_;
      const bool due = earlier ? planned_->periodic(b.block) && b.step + 1 == step_serial_ && r.next_free_event >= event_ - 1
                               : r.free_event >= event_ - 1;
      stats_.late_frees += !due;
    }
  }
  --arenas_[b.arena].part[b.part].live_blocks;
  release_arena_if_unused(b.arena);
}

void PlannedAllocator::step_begin() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_step_) fail(ErrorKind::usage, "planned allocator: step_begin inside a step (step_end missing)");
  in_step_ = true;
  stepped_ = true;
  ++step_serial_;
  step_allocs_.clear();
  next_alloc_ = 0;
  event_ = 0;
  step_misses_ = 0;
  if (!replaying_) recorder_.begin();
}

void PlannedAllocator::make_plan() {
  RecordedStep rec = recorder_.finish();
  ++stats_.recorded_steps;
  if (--recording_left_ > 0) return;
  StepPlan plan = plan_step(rec);
  stats_.caching_reserved_bytes = caching_allocator_estimate(rec).reserved_bytes;
  // The step's transient blocks were given back as they were freed; what the pools hold empty goes back
  // too, and only then is the arena taken: the peak is persistent + max(recording's transient peak, arena).
  release_pools();
  ArenaMemory m;
  m.split = plan.periodic_bytes;
  m.part[0].bytes = plan.periodic_bytes;  // taken when its first block comes (replay)
  m.part[1].bytes = plan.arena_bytes - plan.periodic_bytes;
  if (m.part[1].bytes) m.part[1].base = device_.allocate(m.part[1].bytes);
  if (!arenas_.empty()) release_arena_if_unused(arenas_.size() - 1);  // the previous plan's, unless still in use
  arenas_.push_back(m);
  arena_live_.clear();
  stats_.replans += stats_.plans > 0;
  ++stats_.plans;
  stats_.arena_bytes = plan.arena_bytes;
  stats_.periodic_bytes = plan.periodic_bytes;
  stats_.periodic_blocks = 0;
  for (std::size_t k = 0; k < rec.blocks.size(); ++k) stats_.periodic_blocks += rec.periodic(k);
  stats_.planned_peak_bytes = plan.peak_live_bytes;
  stats_.packer = plan.packer;
  planned_ = std::move(rec);
  plan_ = std::move(plan);
  replaying_ = true;
  stats_.replaying = true;
  miss_steps_ = 0;
  note_device_bytes();
}

void PlannedAllocator::step_end() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_step_) fail(ErrorKind::usage, "planned allocator: step_end without step_begin");
  in_step_ = false;
  ++stats_.steps;
  rank_carried();
  poll_deferred();
  if (!replaying_) {
    make_plan();
  } else if (step_misses_ == 0) {
    miss_steps_ = 0;
  } else if (++miss_steps_ >= options_.replan_after_miss_steps) {
    // Record afresh; the arena stays until its last live block is freed (release_arena_if_unused).
    replaying_ = false;
    recording_left_ = 1;
    release_arena_if_unused(arenas_.size() - 1);
  }
  // Chunks the step's misses emptied go back at every step end: no freed bytes are held across steps.
  release_pools();
  stats_.replaying = replaying_;
}

AllocatorStats PlannedAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

const void* PlannedAllocator::arena_base() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return replaying_ && !arenas_.empty() ? arenas_.back().part[1].base : nullptr;
}

const void* PlannedAllocator::block_address(std::size_t k) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!replaying_ || arenas_.empty() || k >= plan_.offsets.size() || plan_.offsets[k] == planner::kNotInArena) return nullptr;
  const ArenaMemory& a = arenas_.back();
  const std::uint64_t off = plan_.offsets[k];
  const int part = off < a.split ? 0 : 1;
  if (!a.part[part].base) return nullptr;
  return static_cast<const std::byte*>(a.part[part].base) + (part == 0 ? off : off - a.split);
}

std::optional<std::pair<RecordedStep, StepPlan>> PlannedAllocator::planned_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!planned_) return std::nullopt;
  return std::make_pair(*planned_, plan_);
}

nlohmann::json stats_json(const AllocatorStats& s) {
  return {{"arena_bytes", s.arena_bytes},       {"pool_bytes", s.pool_bytes}, {"persistent_bytes", s.persistent_bytes},
          {"peak_pool_bytes", s.peak_pool_bytes}, {"device_bytes", s.device_bytes},
          {"peak_device_bytes", s.peak_device_bytes}, {"planned_peak_bytes", s.planned_peak_bytes},
          {"caching_reserved_bytes", s.caching_reserved_bytes}, {"hits", s.hits},
          {"misses", s.misses},                 {"conflicts", s.conflicts},
          {"late_frees", s.late_frees},         {"other_stream", s.other_stream},
          {"unstepped", s.unstepped}, {"carried", s.carried}, {"setup", s.setup},           {"replans", s.replans},
          {"resyncs", s.resyncs},
          {"carried_in_arena", s.carried_in_arena}, {"periodic_bytes", s.periodic_bytes}, {"periodic_blocks", s.periodic_blocks},
          {"plans", s.plans},                   {"steps", s.steps},
          {"recorded_steps", s.recorded_steps}, {"deferred_frees", s.deferred_frees},
          {"packer", s.packer},                 {"replaying", s.replaying}};
}

}  // namespace memplan::torch_allocator

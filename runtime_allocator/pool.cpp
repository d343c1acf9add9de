// The pool allocator: slab bins for small sizes, best-fit blocks with splitting and coalescing for the rest.
#include "runtime_allocator/pool.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace memplan::runtime {

namespace {
constexpr std::uint64_t kChunkAlignment = 4096;

std::string hex(std::uintptr_t p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}

template <class Map>
auto find_owner(Map& blocks, std::uintptr_t addr) {
  auto it = blocks.upper_bound(addr);
  if (it == blocks.begin()) return blocks.end();
  --it;
  return addr < it->first + it->second.size ? it : blocks.end();
}
}  // namespace

double PoolStats::fragmentation() const noexcept {
  return free_bytes == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free_bytes) / static_cast<double>(free_bytes);
}

PoolAllocator::PoolAllocator(Backend& backend, PoolOptions options) : backend_(backend), options_(options) {
  if (options_.chunk_bytes < kSlabBytes) options_.chunk_bytes = kSlabBytes;
  options_.chunk_bytes = align_up(options_.chunk_bytes, kChunkAlignment);
  if (!options_.grow && !reserve_chunk(options_.chunk_bytes))
    fail(ErrorKind::runtime, "pool: cannot reserve " + std::to_string(options_.chunk_bytes) + " bytes (cap " +
                                 std::to_string(options_.max_bytes) + ")");
}

PoolAllocator::~PoolAllocator() {
  for (auto& [p, n] : chunks_)
    if (p) backend_.deallocate(p, n);
}

std::uint64_t PoolAllocator::release_free_chunks() {
  std::uint64_t released = 0;
  for (auto& [base, n] : chunks_) {  // a released chunk stays in chunks_ as {nullptr, 0}: blocks name chunks by index
    if (!base) continue;
    auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(base));
    if (it == blocks_.end() || !it->second.free || it->second.small_class >= 0 || it->second.size != n) continue;
    take_free(it);
    blocks_.erase(it);
    backend_.deallocate(base, n);
    stats_.reserved_bytes -= n;
    released += n;
    base = nullptr;
    n = 0;
  }
  stats_.largest_free_bytes = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  return released;
}

std::byte* PoolAllocator::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail(ErrorKind::runtime, "pool: alignment " + std::to_string(alignment) + " is not a power of two");
  if (alignment > kChunkAlignment)
    fail(ErrorKind::runtime, "pool: alignment " + std::to_string(alignment) + " exceeds " + std::to_string(kChunkAlignment));
  bytes = std::max<std::uint64_t>(bytes, 1);
  std::byte* p = nullptr;
  std::uint64_t granted = 0;
  if (bytes <= kSmallMax && alignment <= kSmallStep) {
    const std::size_t cls = static_cast<std::size_t>((bytes - 1) / kSmallStep);
    p = allocate_small(cls);
    granted = (cls + 1) * kSmallStep;
  } else {
    granted = align_up(bytes, kGranule);
    p = reinterpret_cast<std::byte*>(allocate_large(granted, alignment));
  }
  stats_.in_use_bytes += granted;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  ++stats_.live_allocations;
  ++stats_.allocations;
  return p;
}

std::byte* PoolAllocator::allocate_small(std::size_t cls) {
  auto& list = small_free_[cls];
  if (list.empty()) {
    const std::uintptr_t slab = allocate_large(kSlabBytes, kGranule);
    Block& b = blocks_.at(slab);
    const std::uint64_t slot = (cls + 1) * kSmallStep, slots = kSlabBytes / slot;
    b.small_class = static_cast<int>(cls);
    b.live.assign((slots + 63) / 64, 0);
    list.reserve(list.size() + slots);
    for (std::uint64_t s = slots; s-- > 0;) list.push_back({reinterpret_cast<std::byte*>(slab + s * slot), &b, static_cast<std::uint32_t>(s)});
  }
  const FreeSlot f = list.back();
  list.pop_back();
  f.slab->live[f.index / 64] |= std::uint64_t{1} << (f.index % 64);
  ++f.slab->live_slots;
  return f.p;
}

std::uintptr_t PoolAllocator::allocate_large(std::uint64_t bytes, std::uint64_t alignment) {
  const std::uint64_t need = bytes + (alignment > kGranule ? alignment - kGranule : 0);
  auto fit = free_by_size_.lower_bound({need, 0});
  if (fit == free_by_size_.end()) {
    if (!reserve_chunk(need)) exhausted(bytes);
    fit = free_by_size_.lower_bound({need, 0});
  }
  const auto [total, addr] = *fit;
  free_by_size_.erase(fit);
  stats_.free_bytes -= total;
  auto it = blocks_.find(addr);
  const std::uint32_t chunk = it->second.chunk;
  const std::uintptr_t start = align_up(addr, alignment);
  if (start == addr) {  // the common case: the free block's own map node becomes the used block
    it->second.free = false;
    it->second.size = bytes;
  } else {
    it->second.size = start - addr;  // the front padding stays free
    free_by_size_.insert({it->second.size, addr});
    stats_.free_bytes += it->second.size;
    Block used;
    used.size = bytes;
    used.chunk = chunk;
    used.free = false;
    it = blocks_.emplace_hint(std::next(it), start, std::move(used));
  }
  const std::uint64_t tail = addr + total - (start + bytes);
  if (tail > 0) insert_free(start + bytes, tail, chunk, std::next(it));
  stats_.largest_free_bytes = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  return start;
}

bool PoolAllocator::reserve_chunk(std::uint64_t at_least) {
  if (!options_.grow && !chunks_.empty()) return false;
  std::uint64_t size = std::max(options_.chunk_bytes, align_up(at_least, kChunkAlignment));
  if (options_.max_bytes != 0) {
    const std::uint64_t room = options_.max_bytes > stats_.reserved_bytes ? options_.max_bytes - stats_.reserved_bytes : 0;
    size = std::min(size, room / kChunkAlignment * kChunkAlignment);
    if (size < at_least) return false;
  }
  std::byte* base = backend_.allocate(size, kChunkAlignment);
  chunks_.emplace_back(base, size);
  stats_.reserved_bytes += size;
  insert_free(reinterpret_cast<std::uintptr_t>(base), size, static_cast<std::uint32_t>(chunks_.size() - 1), blocks_.end());
  return true;
}

void PoolAllocator::insert_free(std::uintptr_t addr, std::uint64_t size, std::uint32_t chunk, BlockMap::iterator hint) {
  Block b;
  b.size = size;
  b.chunk = chunk;
  blocks_.emplace_hint(hint, addr, std::move(b));
  free_by_size_.insert({size, addr});
  stats_.free_bytes += size;
  stats_.largest_free_bytes = std::max(stats_.largest_free_bytes, size);
}

void PoolAllocator::take_free(BlockMap::iterator it) {
  free_by_size_.erase({it->second.size, it->first});
  stats_.free_bytes -= it->second.size;
}

void PoolAllocator::free_large(BlockMap::iterator it) {
  const std::uint32_t chunk = it->second.chunk;
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.chunk == chunk && next->first == it->first + it->second.size) {
    take_free(next);
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.chunk == chunk && prev->first + prev->second.size == it->first) {
      take_free(prev);
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  // The freed block's map node (or its free predecessor's) is reused: no node is allocated here.
  it->second.free = true;
  it->second.small_class = -1;
  free_by_size_.insert({it->second.size, it->first});
  stats_.free_bytes += it->second.size;
  stats_.largest_free_bytes = free_by_size_.rbegin()->first;
}

void PoolAllocator::deallocate(std::byte* p) {
  if (!p) return;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = find_owner(blocks_, addr);
  if (it == blocks_.end()) fail(ErrorKind::runtime, "pool: free of " + hex(addr) + ", which this pool never handed out");
  Block& b = it->second;
  if (b.small_class >= 0) {
    const std::uint64_t slot = static_cast<std::uint64_t>(b.small_class + 1) * kSmallStep, off = addr - it->first;
    if (off % slot != 0 || off / slot >= kSlabBytes / slot)
      fail(ErrorKind::runtime, "pool: free of " + hex(addr) + ", inside a block but not at its start");
    const std::uint64_t s = off / slot, bit = std::uint64_t{1} << (s % 64);
    if (!(b.live[s / 64] & bit)) fail(ErrorKind::runtime, "pool: double free of " + hex(addr));
    b.live[s / 64] &= ~bit;
    --b.live_slots;
    small_free_[static_cast<std::size_t>(b.small_class)].push_back({p, &b, static_cast<std::uint32_t>(s)});
    stats_.in_use_bytes -= slot;
    --stats_.live_allocations;
    return;
  }
  if (addr != it->first) fail(ErrorKind::runtime, "pool: free of " + hex(addr) + ", inside a block but not at its start");
  if (b.free) fail(ErrorKind::runtime, "pool: double free of " + hex(addr));
  stats_.in_use_bytes -= b.size;
  --stats_.live_allocations;
  free_large(it);
}

std::uint64_t PoolAllocator::block_size(const std::byte* p) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = find_owner(blocks_, addr);
  if (it != blocks_.end() && it->second.small_class >= 0) {
    const std::uint64_t slot = static_cast<std::uint64_t>(it->second.small_class + 1) * kSmallStep,
                        off = addr - it->first, s = off / slot;
    if (off % slot == 0 && s < kSlabBytes / slot && (it->second.live[s / 64] >> (s % 64) & 1)) return slot;
  } else if (it != blocks_.end() && addr == it->first && !it->second.free) {
    return it->second.size;
  }
  fail(ErrorKind::runtime, "pool: " + hex(addr) + " is not a live allocation of this pool");
}

PoolStats PoolAllocator::recount() const {
  PoolStats s;
  s.peak_in_use_bytes = stats_.peak_in_use_bytes;
  s.allocations = stats_.allocations;
  for (const auto& [p, n] : chunks_) s.reserved_bytes += n;
  for (const auto& [addr, b] : blocks_) {
    if (b.small_class >= 0) {
      s.in_use_bytes += b.live_slots * static_cast<std::uint64_t>(b.small_class + 1) * kSmallStep;
      s.live_allocations += b.live_slots;
    } else if (b.free) {
      s.free_bytes += b.size;
      s.largest_free_bytes = std::max(s.largest_free_bytes, b.size);
    } else {
      s.in_use_bytes += b.size;
      ++s.live_allocations;
    }
  }
  return s;
}

void PoolAllocator::exhausted(std::uint64_t bytes) const {
  fail(ErrorKind::runtime, "pool exhausted: cannot allocate " + std::to_string(bytes) + " bytes (in use " +
                               std::to_string(stats_.in_use_bytes) + ", reserved " + std::to_string(stats_.reserved_bytes) +
                               ", largest free block " + std::to_string(stats_.largest_free_bytes) + ", cap " +
                               (options_.max_bytes ? std::to_string(options_.max_bytes) : std::string("none")) + ")");
}

}  // namespace memplan::runtime

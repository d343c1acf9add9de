// A general pool allocator for what no plan covers: size-class bins plus best fit with split and coalesce.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "runtime_allocator/backend.hpp"

namespace memplan::runtime {

struct PoolOptions {
  std::uint64_t chunk_bytes = 64ull << 20;  // reserved from the backend at a time (larger requests: their size)
  std::uint64_t max_bytes = 0;              // cap on everything reserved; 0: no cap
  bool grow = true;                         // false: one chunk reserved up front, never more
};

struct PoolStats {
  std::uint64_t in_use_bytes = 0;       // granted blocks, rounded sizes
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t reserved_bytes = 0;     // chunks taken from the backend
  std::uint64_t free_bytes = 0;         // free large blocks (slab slots not counted)
  std::uint64_t largest_free_bytes = 0;
  std::uint64_t live_allocations = 0;
  std::uint64_t allocations = 0;        // total calls that succeeded
  // External fragmentation: 1 - largest free block / all free bytes (0 when nothing is free).
  double fragmentation() const noexcept;
};

// Small requests (<= kSmallMax bytes, alignment <= kGranule) come from per-class free lists of slots
// carved from slabs; the rest are best-fit blocks (smallest fitting size, ties by lowest address) split
// from chunks and coalesced with free neighbours when freed. Every misuse is ErrorKind::runtime:
// exhaustion, double free, a pointer the pool did not hand out, an alignment that is not a power of two.
class PoolAllocator {
 public:
  static constexpr std::uint64_t kGranule = 64;
  static constexpr std::uint64_t kSmallStep = 16;
  static constexpr std::uint64_t kSmallMax = 512;
  static constexpr std::size_t kSmallClasses = kSmallMax / kSmallStep;
  static constexpr std::uint64_t kSlabBytes = 64 * 1024;

  PoolAllocator(Backend& backend, PoolOptions options = {});
  ~PoolAllocator();
  PoolAllocator(const PoolAllocator&) = delete;
  PoolAllocator& operator=(const PoolAllocator&) = delete;

  std::byte* allocate(std::uint64_t bytes, std::uint64_t alignment = kSmallStep);
  void deallocate(std::byte* p);
  // Granted size of a live allocation (>= the request); ErrorKind::runtime for anything else.
  std::uint64_t block_size(const std::byte* p) const;
  const PoolStats& stats() const noexcept { return stats_; }
  // Gives every chunk with nothing allocated in it back to the backend (a slab, even empty, keeps its
  // chunk). Returns the bytes given back.
  std::uint64_t release_free_chunks();
  // Recounts every statistic from the block lists (a test's check on the incremental counters).
  PoolStats recount() const;

 private:
  struct Block {
    std::uint64_t size = 0;
    std::uint32_t chunk = 0;
    bool free = true;
    int small_class = -1;            // >= 0: a slab cut into slots of that class
    std::vector<std::uint64_t> live;  // slab: one bit per slot
    std::uint32_t live_slots = 0;
  };
  using BlockMap = std::map<std::uintptr_t, Block>;

  std::byte* allocate_small(std::size_t cls);
  std::uintptr_t allocate_large(std::uint64_t bytes, std::uint64_t alignment);
  bool reserve_chunk(std::uint64_t at_least);
  void insert_free(std::uintptr_t addr, std::uint64_t size, std::uint32_t chunk, BlockMap::iterator hint);
  void take_free(BlockMap::iterator it);
  void free_large(BlockMap::iterator it);
  BlockMap::const_iterator owner(std::uintptr_t addr) const;
  [[noreturn]] void exhausted(std::uint64_t bytes) const;

  Backend& backend_;
  PoolOptions options_;
  std::vector<std::pair<std::byte*, std::uint64_t>> chunks_;
  BlockMap blocks_;                                       // every large block and slab, by address
  std::set<std::pair<std::uint64_t, std::uintptr_t>> free_by_size_;
  struct FreeSlot {
    std::byte* p;
    Block* slab;  // map nodes are stable and slabs are never released
    std::uint32_t index;
  };
  std::array<std::vector<FreeSlot>, kSmallClasses> small_free_{};
  PoolStats stats_;
};

}  // namespace memplan::runtime

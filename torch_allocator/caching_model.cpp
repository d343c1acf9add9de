// A model of PyTorch's caching allocator (segments, best fit, split, merge) run over a recorded step.
#include "torch_allocator/caching_model.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <utility>

#include "analysis/error.hpp"

namespace memplan::torch_allocator {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kSmallSize = kMiB, kSmallBuffer = 2 * kMiB, kLargeBuffer = 20 * kMiB, kMinLargeAlloc = 10 * kMiB,
                        kRoundLarge = 2 * kMiB;

class CachingModel {
 public:
  std::uint64_t malloc(std::uint64_t bytes) {
    const bool small = bytes <= kSmallSize;
    auto& free = free_[small];
    auto fit = free.lower_bound({bytes, 0});
    if (fit == free.end()) {
      const std::uint64_t seg = small ? kSmallBuffer : bytes < kMinLargeAlloc ? kLargeBuffer : align_up(bytes, kRoundLarge);
      blocks_[top_] = Block{seg, segments_, true, small};
      fit = free.insert({seg, top_}).first;
      top_ += seg;
      reserved_ += seg;
      ++segments_;
    }
    const auto [have, at] = *fit;
    free.erase(fit);
    Block& b = blocks_[at];
    b.free = false;
    if (small ? have - bytes >= kBlockAlignment : have - bytes > kSmallSize) {
      b.size = bytes;
      blocks_[at + bytes] = Block{have - bytes, b.segment, true, small};
      free.insert({have - bytes, at + bytes});
    }
    allocated_ += blocks_[at].size;
    max_allocated_ = std::max(max_allocated_, allocated_);
    return at;
  }

  void release(std::uint64_t at) {
    auto it = blocks_.find(at);
    const bool small = it->second.small;
    allocated_ -= it->second.size;
    it->second.free = true;
    auto next = std::next(it);
    if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
      free_[small].erase({next->second.size, next->first});
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.free && prev->second.segment == it->second.segment) {
        free_[small].erase({prev->second.size, prev->first});
        prev->second.size += it->second.size;
        blocks_.erase(it);
        it = prev;
      }
    }
    free_[small].insert({it->second.size, it->first});
  }

  std::uint64_t reserved() const { return reserved_; }
  std::uint64_t max_allocated() const { return max_allocated_; }

 private:
  struct Block {
    std::uint64_t size = 0;
    std::uint64_t segment = 0;
    bool free = true;
    bool small = false;  // of the small pool
  };
  std::map<std::uint64_t, Block> blocks_;                        // by address
  std::set<std::pair<std::uint64_t, std::uint64_t>> free_[2];    // [small]: (size, address)
  std::uint64_t top_ = 0, reserved_ = 0, allocated_ = 0, max_allocated_ = 0, segments_ = 0;
};

}  // namespace

CachingEstimate caching_allocator_estimate(const RecordedStep& step) {
  CachingModel m;
  std::map<std::uint64_t, std::deque<std::uint64_t>> earlier;  // bytes -> the previous step's live blocks
  for (const auto& b : step.blocks)
    if (b.free_event == kNotFreed) earlier[b.bytes].push_back(m.malloc(b.bytes));
  std::vector<std::uint64_t> at(step.blocks.size(), 0);
  for (const auto& e : step.events) {
    if (e.alloc) {
      at[static_cast<std::size_t>(e.block)] = m.malloc(e.bytes);
    } else if (e.block >= 0) {
      m.release(at[static_cast<std::size_t>(e.block)]);
    } else if (auto q = earlier.find(e.bytes); q != earlier.end() && !q->second.empty()) {
      m.release(q->second.front());
      q->second.pop_front();
    }
  }
  return CachingEstimate{m.reserved(), m.max_allocated()};
}

}  // namespace memplan::torch_allocator

// A training step's allocation pattern for the planned allocator's tests, and a checker of live blocks.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "torch_allocator/planned_allocator.hpp"

namespace memplan::torch_allocator::testing {

// Live blocks by address: a new block must overlap none, and each is filled with a tag that must be
// intact when it is freed (a block handed out twice would be overwritten by its second owner).
class LiveBlocks {
 public:
  void add(void* p, std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(m_);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = live_.lower_bound(a);
    const bool clear_above = it == live_.end() || it->first >= a + bytes;
    const bool clear_below = it == live_.begin() || std::prev(it)->first + std::prev(it)->second.first <= a;
    if (!clear_above || !clear_below) ++overlaps;
    const auto tag = static_cast<unsigned char>(++tag_);
    std::memset(p, tag, bytes);
    live_[a] = {bytes, tag};
    bytes_ += bytes;
    // What live blocks need from a device at most: their bytes, each rounded up to 512.
    peak_bound = std::max(peak_bound, bytes_ + kBlockAlignment * live_.size());
  }
  void remove(void* p) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = live_.find(reinterpret_cast<std::uintptr_t>(p));
    REQUIRE(it != live_.end());
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::uint64_t i = 0; i < it->second.first; i += 61)
      if (b[i] != it->second.second) {
        ++corrupted;
        break;
      }
    bytes_ -= it->second.first;
    live_.erase(it);
  }
  std::size_t size() const { return live_.size(); }
  int overlaps = 0, corrupted = 0;
  std::uint64_t peak_bound = 0;  // most of (bytes live + 512 per live block) so far

 private:
  std::mutex m_;
  std::map<std::uintptr_t, std::pair<std::uint64_t, unsigned char>> live_;
  unsigned tag_ = 0;
  std::uint64_t bytes_ = 0;
};

// One step of a small network: zero_grad frees the previous step's gradients; the forward keeps one
// activation per layer and frees a temporary; the backward frees activations in reverse and makes a
// gradient per layer that lives into the next step (with keep_grads; otherwise it is freed at the step's
// end, as gradients reduced into the weights would be). Activation sizes scale with `batch`. setup()
// allocates weights before the first step, never freed.
struct Workload {
  PlannedAllocator& a;
  LiveBlocks& live;
  StreamId stream = 0;
  std::vector<void*> grads;
  std::vector<void*> served;  // every allocation of the last step, in order
  bool keep_grads = true;
  bool zero_grad_after_forward = false;  // PyTorch's usual loop: the previous gradients live through the forward
  std::vector<void*> weights;
  std::uint64_t one_off_bytes = 0;  // nonzero: the next step first allocates a block of these bytes, kept to finish()
  std::vector<void*> one_offs;

  void setup(int layers = 6) {
    for (int l = 0; l < layers; ++l) weights.push_back(alloc(3000 * static_cast<std::uint64_t>(l + 1) + 5));
  }

  void* alloc(std::uint64_t bytes) {
    void* p = a.allocate(bytes, stream);
    REQUIRE(p != nullptr);
    live.add(p, bytes);
    served.push_back(p);
    return p;
  }
  void release(void* p) {
    live.remove(p);
    a.deallocate(p, stream);
  }
  void step(std::uint64_t batch, int layers = 6) {
    served.clear();
    a.step_begin();
    auto zero_grad = [&] {
      for (void* g : grads) release(g);
      grads.clear();
    };
    if (!zero_grad_after_forward) zero_grad();
    if (one_off_bytes) one_offs.push_back(alloc(std::exchange(one_off_bytes, 0)));
    std::vector<void*> acts;
    for (int l = 0; l < layers; ++l) {
      acts.push_back(alloc(batch * 1000 * static_cast<std::uint64_t>(l % 3 + 1)));
      release(alloc(batch * 700 + 100));
    }
    if (zero_grad_after_forward) zero_grad();
    for (int l = layers; l-- > 0;) {
      void* dx = alloc(batch * 1000);
      release(acts[static_cast<std::size_t>(l)]);
      grads.push_back(alloc(4096 * static_cast<std::uint64_t>(l + 1) + 3));
      release(dx);
    }
    if (!keep_grads) {
      for (void* g : grads) release(g);
      grads.clear();
    }
    a.step_end();
  }
  void finish() {
    for (void* g : grads) release(g);
    grads.clear();
    for (void* p : weights) release(p);
    weights.clear();
    for (void* p : one_offs) release(p);
    one_offs.clear();
  }
};

}  // namespace memplan::torch_allocator::testing

// What PyTorch's CUDA caching allocator would reserve for a recorded step: the comparison the trace carries.
#pragma once

#include <cstdint>

#include "torch_allocator/recording.hpp"

namespace memplan::torch_allocator {

struct CachingEstimate {
  std::uint64_t reserved_bytes = 0;       // segments taken from the device (never given back)
  std::uint64_t max_allocated_bytes = 0;  // most block bytes allocated at once
};

// Replays the step, in steady state, through a model of c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x,
// default settings): sizes rounded to 512 bytes; blocks up to 1 MiB come from 2 MiB segments of the
// small pool, larger ones from 20 MiB segments (requests under 10 MiB) or their own segment rounded to
// 2 MiB; the smallest free block that fits is taken (lowest address among equals) and split when the rest
// is at least 512 bytes (small pool) or above 1 MiB (large pool); freed blocks merge with free
// neighbours of their segment. Streams are not told apart. Steady state: the blocks the step leaves live
// are allocated first, as the previous step's, and freed at the step's frees of earlier blocks of their size.
CachingEstimate caching_allocator_estimate(const RecordedStep& step);

}  // namespace memplan::torch_allocator

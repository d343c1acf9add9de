#include "planner/pytorch/cuda_reduce.hpp"

#include <algorithm>
#include <utility>

namespace memplan::planner {
namespace {

constexpr std::uint64_t kMaxThreads = 512;
constexpr std::uint64_t kWarp = 32;
constexpr std::uint64_t kInputVec = 4;
constexpr std::uint64_t kVt0 = 4;

using Group = std::vector<std::pair<std::uint64_t, std::uint64_t>>;  // (byte stride, size), ascending stride

std::uint64_t last_pow2(std::uint64_t n) {
  std::uint64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

std::uint64_t div_up(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// Adjacent dims merged where one's stride is the other's extent (the iterator's coalescing).
Group coalesce(Group g) {
  std::sort(g.begin(), g.end());
  Group out;
  for (const auto& [stride, n] : g) {
    if (!out.empty() && out.back().first * out.back().second == stride) out.back().second *= n;
    else out.emplace_back(stride, n);
  }
  return out;
}

struct Launch {
  std::uint64_t outputs = 1, inputs_per_output = 1;
  bool fastest = true;  // the reduced dims move fastest in memory
  std::uint64_t out_vec = 1, dim0 = 1, dim1 = 1;
};

Launch launch_dims(const Group& red, const Group& keep, std::uint64_t elem, std::uint64_t numel) {
  Launch l;
  for (const auto& d : keep) l.outputs *= d.second;
  l.inputs_per_output = numel / std::max<std::uint64_t>(l.outputs, 1);
  l.fastest = keep.empty() || (!red.empty() && red.front().first < keep.front().first);
  const std::uint64_t moving = l.fastest ? red.front().first : keep.front().first;
  l.dim0 = l.fastest ? l.inputs_per_output : l.outputs;
  l.dim1 = l.fastest ? l.outputs : l.inputs_per_output;
  if (moving == elem) {
    if (l.fastest && l.dim0 > 128 && red.size() == 1 && kVt0 >= kInputVec) {
      l.dim0 /= kInputVec;
    } else if (!l.fastest) {
      l.out_vec = 4;
      while (keep.front().second % l.out_vec) l.out_vec /= 2;
      l.dim0 /= l.out_vec;
    }
  }
  return l;
}

}  // namespace

std::uint64_t cuda_reduction_staging_bytes(const std::vector<std::int64_t>& shape, const std::vector<bool>& reduced,
                                           std::uint32_t element_bytes, const CudaReduceDevice& device) {
  if (shape.empty() || shape.size() != reduced.size() || element_bytes == 0) return 0;
  std::uint64_t numel = 1;
  for (auto d : shape) {
    if (d <= 0) return 0;
    numel *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t elem = element_bytes, acc = element_bytes == 8 ? 8 : 4;
  Group red, keep;
  std::uint64_t stride = elem;
  for (std::size_t k = shape.size(); k-- > 0;) {
    const auto n = static_cast<std::uint64_t>(shape[k]);
    if (n != 1) (reduced[k] ? red : keep).emplace_back(stride, n);
    stride *= n;
  }
  red = coalesce(std::move(red));
  keep = coalesce(std::move(keep));
  if (red.empty()) return 0;
  const Launch l = launch_dims(red, keep, elem, numel);
  if (l.inputs_per_output <= 1) return 0;
  // set_block_dimension, then how the block splits the work
  const std::uint64_t max_threads = kMaxThreads / l.out_vec;
  const std::uint64_t d0 = l.dim0 < max_threads ? last_pow2(l.dim0) : max_threads;
  const std::uint64_t d1 = l.dim1 < max_threads ? last_pow2(l.dim1) : max_threads;
  std::uint64_t bw = std::min(d0, kWarp);
  const std::uint64_t bh = std::min(d1, max_threads / bw);
  bw = std::min(d0, max_threads / bh);
  std::uint64_t step_in = 1, step_out = 1;
  const bool block_x_reduce = l.fastest;
  (block_x_reduce ? step_in : step_out) *= bw;
  const bool block_y_reduce = div_up(l.inputs_per_output, step_in) >= bh * 16 || div_up(l.inputs_per_output, step_in) >= 256;
  (block_y_reduce ? step_in : step_out) *= bh;
  const std::uint64_t target_grid = std::uint64_t{device.multiprocessors} * (device.max_threads_per_multiprocessor / (bw * bh));
  const std::uint64_t grid_x = div_up(l.outputs / l.out_vec, step_out);
  const std::uint64_t values_per_thread = div_up(l.inputs_per_output, step_in);
  if (!(block_y_reduce && values_per_thread >= 256 && grid_x <= target_grid)) return 0;
  const std::uint64_t ctas = std::max(std::min(div_up(target_grid, grid_x), div_up(values_per_thread, 16)),
                                      div_up(values_per_thread, 256));
  if (ctas <= 1) return 0;
  std::uint64_t size = acc * l.outputs * ctas;
  if (!block_x_reduce) size *= bw * l.out_vec;
  return size + 4 * grid_x;
}

}  // namespace memplan::planner

// The geometry of InstanceNormalization, GroupNormalization and memplan GroupNormGrad, shared by the CPU and CUDA
// backends: x [N, C, spatial...] normalized per sample and group of C / G consecutive channels (instance norm: G = C),
// so each (sample, group) is one contiguous row of (C / G) * plane elements; scale and bias per channel, or per group
// (GroupNormalization-18's [G] parameters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/error.hpp"
#include "analysis/graph.hpp"

namespace memplan::runtime {

struct NormGroups {
  std::int64_t samples = 0, channels = 0, groups = 0, plane = 1;
  bool scale_per_group = false;
  std::int64_t channels_per_group() const { return groups ? channels / groups : 0; }
  std::int64_t rows() const { return samples * groups; }
  std::int64_t row_length() const { return channels_per_group() * plane; }
};

// From the op (InstanceNormalization: G = C; GroupNormalization and GroupNormGrad: attribute num_groups), x's dims and
// the scale's element count. ErrorKind::unsupported naming the op when they do not fit.
inline NormGroups norm_groups(const analysis::Op& op, const std::vector<std::int64_t>& x, std::int64_t scale_elements) {
  auto refuse = [&](const std::string& what) {
    fail(ErrorKind::unsupported, "op '" + op.name + "' (" + op.type + "): " + what);
  };
  if (x.size() < 2) refuse("an input of rank 2 or more expected");
  NormGroups g;
  g.samples = x[0];
  g.channels = x[1];
  for (std::size_t d = 2; d < x.size(); ++d) g.plane *= x[d];
  g.groups = op.type == "InstanceNormalization" ? g.channels : op.attr_int("num_groups", 0);
  if (g.groups <= 0 || g.channels % g.groups != 0)
    refuse("num_groups " + std::to_string(g.groups) + " does not divide the " + std::to_string(g.channels) + " channels");
  g.scale_per_group = scale_elements == g.groups && g.groups != g.channels;
  if (scale_elements != g.channels && !g.scale_per_group) refuse("scale and bias must have C (or num_groups) elements");
  return g;
}

}  // namespace memplan::runtime

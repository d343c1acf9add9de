// Unique tail elision: the longest common suffix with the neighbours in reversed sorted order says how much to keep.
#include "viz/elide.hpp"

#include <algorithm>

namespace memplan::viz {

namespace {
std::size_t common_prefix(const std::string& a, const std::string& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}
}  // namespace

TailElider::TailElider(const std::vector<std::string>& names) {
  reversed_.reserve(names.size());
  for (const auto& n : names) reversed_.emplace_back(n.rbegin(), n.rend());
  std::sort(reversed_.begin(), reversed_.end());
}

std::size_t TailElider::distinguishing_tail(const std::string& name) const {
  const std::string rev(name.rbegin(), name.rend());
  // Other names sharing a suffix with `name` sort next to it; skip one copy of `name` itself.
  auto lo = std::lower_bound(reversed_.begin(), reversed_.end(), rev);
  auto hi = lo;
  if (hi != reversed_.end() && *hi == rev) ++hi;
  std::size_t shared = 0;
  if (lo != reversed_.begin()) shared = std::max(shared, common_prefix(rev, *std::prev(lo)));
  if (hi != reversed_.end()) shared = std::max(shared, common_prefix(rev, *hi));
  return std::min(name.size(), shared + 1);
}

std::string TailElider::elide(const std::string& name, std::size_t chars) const {
  std::size_t keep = std::max(chars, distinguishing_tail(name));
  if (keep + 3 >= name.size()) return name;  // "…" is 3 bytes: not worth it
  // Start on a whole UTF-8 character: step back over continuation bytes (keeping more, never less).
  std::size_t from = name.size() - keep;
  while (from > 0 && (static_cast<unsigned char>(name[from]) & 0xC0) == 0x80) --from;
  return "\u2026" + name.substr(from);
}

}  // namespace memplan::viz

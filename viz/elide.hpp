// Shortening names for pictures without making two of them look alike: keep each name's distinguishing tail.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace memplan::viz {

// Exporter names share long prefixes ("/model/layers.11/self_attn/..."), so a name is shortened from the
// left to "…tail". The tail kept is at least `chars` bytes and always long enough that no other name of
// the set ends with it: two shortened names never read the same, and a shortened name never reads like
// the tail of another. A name the tail cannot tell apart (a duplicate) stays whole.
class TailElider {
 public:
  explicit TailElider(const std::vector<std::string>& names);
  std::string elide(const std::string& name, std::size_t chars) const;
  // The fewest trailing bytes of `name` that no other name of the set ends with (name.size() if none do).
  std::size_t distinguishing_tail(const std::string& name) const;

 private:
  std::vector<std::string> reversed_;  // every name reversed, sorted
};

}  // namespace memplan::viz

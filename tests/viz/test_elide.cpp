// Tests of TailElider: shortened names keep a tail no other name ends with, and never cut a UTF-8 character.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "viz/elide.hpp"

using namespace memplan::viz;

namespace {
bool ends_with(const std::string& s, const std::string& tail) { return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0; }
const std::string kEllipsis = "\u2026";
}  // namespace

TEST_CASE("a shortened name is a tail that no other name ends with, however short the room") {
  const std::vector<std::string> names = {"/model/layers.1/self_attn/o_proj/MatMul", "/model/layers.11/self_attn/o_proj/MatMul",
                                          "/model/layers.2/mlp/down_proj/MatMul", "/model/layers.12/mlp/down_proj/MatMul", "/x/Relu"};
  const TailElider e(names);
  for (const auto& n : names)
    for (std::size_t chars : {4u, 12u, 20u, 200u}) {
      CAPTURE(n);
      CAPTURE(chars);
      const std::string shown = e.elide(n, chars);
      if (shown == n) continue;
      REQUIRE(shown.rfind(kEllipsis, 0) == 0);
      const std::string tail = shown.substr(kEllipsis.size());
      CHECK(tail.size() >= chars);
      for (const auto& other : names)
        if (other != n) CHECK_FALSE(ends_with(other, tail));
    }
  // "layers.1/..." and "layers.11/..." differ only at "1/" vs "11/": the tail must reach back past it.
  CHECK(e.distinguishing_tail(names[0]) == std::string("/self_attn/o_proj/MatMul").size() + 2);
}

TEST_CASE("a duplicate or a name that is another's whole tail stays whole") {
  const TailElider e({"/a/b/MatMul", "/a/b/MatMul", "b/MatMul", "/c/b/MatMul"});
  CHECK(e.elide("/a/b/MatMul", 3) == "/a/b/MatMul");
  CHECK(e.elide("b/MatMul", 3) == "b/MatMul");
}

TEST_CASE("random name sets: every elided name is unique among the shown ones and starts on a whole character") {
  std::mt19937 rng(15);
  const std::vector<std::string> parts = {"/layers.", "1", "11", "/attn", "/mlp", "/\u00e9t\u00e9", "/MatMul", "/Add", "_1"};
  for (int round = 0; round < 50; ++round) {
    CAPTURE(round);
    std::vector<std::string> names;
    for (int k = 0; k < 40; ++k) {
      std::string n;
      for (int p = 0; p < 6; ++p) n += parts[rng() % parts.size()];
      names.push_back(n);
    }
    const TailElider e(names);
    std::vector<std::string> shown;
    for (const auto& n : names) shown.push_back(e.elide(n, 6));
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (shown[i] == names[i]) continue;
      const std::string tail = shown[i].substr(kEllipsis.size());
      CHECK((static_cast<unsigned char>(tail[0]) & 0xC0) != 0x80);
      for (std::size_t j = 0; j < names.size(); ++j)
        if (names[j] != names[i]) CHECK_FALSE(ends_with(names[j], tail));
    }
  }
}

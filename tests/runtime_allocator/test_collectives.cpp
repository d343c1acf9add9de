// The host collectives: N ranks as threads of one process compute the mean, reduce-scatter and gather as NCCL
// defines them, and a failed rank's abort frees the others.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "runtime_allocator/collectives/collectives.hpp"

using namespace memplan;
using namespace memplan::runtime;

namespace {

// Runs body(rank, collectives) on `world` threads; returns each rank's error message (empty: none).
std::vector<std::string> on_ranks(LocalGroup& group, const std::function<void(int, Collectives&)>& body) {
  const int world = group.world_size();
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto c = group.member(r);
        body(r, *c);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        group.abort();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

std::vector<float> floats(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), b.size());
  return f;
}

std::vector<std::byte> bytes_of(const std::vector<float>& f) {
  std::vector<std::byte> b(f.size() * 4);
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("local all-reduce: every rank holds the mean over the ranks, in place") {
  for (int world : {1, 2, 3}) {
    LocalGroup group(world);
    std::vector<std::vector<std::byte>> data(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) data[static_cast<std::size_t>(r)] = bytes_of({float(r), 2.0f * float(r), -1.0f, 4.0f});
    const auto errors = on_ranks(group, [&](int r, Collectives& c) {
      CHECK(c.rank() == r);
      CHECK(c.world_size() == world);
      for (int repeat = 0; repeat < 3; ++repeat)  // back to back: no rank overwrites a buffer another still reads
        c.all_reduce_mean(data[static_cast<std::size_t>(r)].data(), 4, analysis::DType::f32);
    });
    for (const auto& e : errors) CHECK(e.empty());
    const float mean_r = float(world - 1) / 2.0f;
    for (const auto& d : data) CHECK(floats(d) == std::vector<float>{mean_r, 2.0f * mean_r, -1.0f, 4.0f});
  }
}

TEST_CASE("local reduce-scatter gives rank r the mean of chunk r, and all-gather concatenates in rank order") {
  LocalGroup group(2);
  std::vector<std::vector<float>> scattered(2), gathered(2);
  const auto errors = on_ranks(group, [&](int r, Collectives& c) {
    const auto send = bytes_of({1.0f + float(r), 2.0f, 3.0f, 4.0f * float(r)});  // two chunks of two
    std::vector<std::byte> recv(8);
    c.reduce_scatter_mean(send.data(), recv.data(), 2, analysis::DType::f32);
    scattered[static_cast<std::size_t>(r)] = floats(recv);
    std::vector<std::byte> all(16);
    c.all_gather(recv.data(), all.data(), 2, analysis::DType::f32);
    gathered[static_cast<std::size_t>(r)] = floats(all);
  });
  for (const auto& e : errors) CHECK(e.empty());
  CHECK(scattered[0] == std::vector<float>{1.5f, 2.0f});
  CHECK(scattered[1] == std::vector<float>{3.0f, 2.0f});
  for (const auto& g : gathered) CHECK(g == std::vector<float>{1.5f, 2.0f, 3.0f, 2.0f});
}

TEST_CASE("a rank that fails aborts the group: the others stop waiting with an error") {
  LocalGroup group(3);
  const auto errors = on_ranks(group, [&](int r, Collectives& c) {
    if (r == 1) fail(ErrorKind::runtime, "rank 1 failed before its collective");
    std::vector<std::byte> d = bytes_of({1.0f});
    c.all_reduce_mean(d.data(), 1, analysis::DType::f32);
  });
  CHECK(errors[1].find("rank 1 failed") != std::string::npos);
  CHECK(errors[0].find("aborted") != std::string::npos);
  CHECK(errors[2].find("aborted") != std::string::npos);
}

TEST_CASE("local collectives refuse integer reductions and ranks outside the group") {
  LocalGroup group(1);
  auto c = group.member(0);
  std::vector<std::byte> d(8);
  CHECK_THROWS_AS(c->all_reduce_mean(d.data(), 2, analysis::DType::i32), Error);
  CHECK_THROWS_AS(group.member(1), Error);
  CHECK_THROWS_AS(LocalGroup(0), Error);
}

// N ranks as threads of one process: collectives over host memory met at a barrier, summed in rank order.
#include "runtime_allocator/collectives/collectives.hpp"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "analysis/float16.hpp"

namespace memplan::runtime {

namespace {

// Element i of a float buffer of dtype d as a double, and back (rounded to nearest even).
double load(const std::byte* p, std::uint64_t i, analysis::DType d) {
  switch (d) {
    case analysis::DType::f32: {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return f;
    }
    case analysis::DType::f64: {
      double v;
      std::memcpy(&v, p + i * 8, 8);
      return v;
    }
    default: {
      std::uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return d == analysis::DType::bf16 ? analysis::bf16_to_float(h) : analysis::half_to_float(h);
    }
  }
}

void store(std::byte* p, std::uint64_t i, analysis::DType d, double v) {
  switch (d) {
    case analysis::DType::f32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p + i * 4, &f, 4);
      return;
    }
    case analysis::DType::f64:
      std::memcpy(p + i * 8, &v, 8);
      return;
    default: {
      const float f = static_cast<float>(v);
      const std::uint16_t h = d == analysis::DType::bf16 ? analysis::float_to_bf16(f) : analysis::float_to_half(f);
      std::memcpy(p + i * 2, &h, 2);
    }
  }
}

void require_float(analysis::DType d, const char* what) {
  if (d != analysis::DType::f32 && d != analysis::DType::f64 && d != analysis::DType::bf16 && d != analysis::DType::f16)
    fail(ErrorKind::unsupported, std::string("local collectives: ") + what + " of dtype " + analysis::dtype_name(d) +
                                     " (float32, float64, bf16 and f16 only)");
}

}  // namespace

struct LocalGroup::State {
  int world = 1;
  std::mutex m;
  std::condition_variable cv;
  std::uint64_t generation = 0;
  int arrived = 0;
  bool aborted = false;
  std::vector<const std::byte*> send;  // per rank, the buffer the current collective reads

  // Every rank arrives before any leaves; ErrorKind::runtime once the group is aborted.
  void barrier() {
    std::unique_lock lock(m);
    if (aborted) fail(ErrorKind::runtime, "local collectives: the group was aborted (a rank failed)");
    const std::uint64_t gen = generation;
    if (++arrived == world) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (generation == gen) fail(ErrorKind::runtime, "local collectives: the group was aborted (a rank failed)");
  }
};

namespace {

class LocalCollectives final : public Collectives {
 public:
  LocalCollectives(std::shared_ptr<LocalGroup::State> s, int rank) : s_(std::move(s)), rank_(rank) {}
  std::string name() const override { return "local"; }
  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return s_->world; }
  void queue_waits(Backend::Event) override {}
  void record(Backend::Event) override {}
  void synchronize() override {}

  void all_reduce_mean(std::byte* data, std::uint64_t count, analysis::DType dtype) override {
    require_float(dtype, "all-reduce");
    if (s_->world == 1) return;
    std::vector<double> mean(count, 0.0);
    exchange(data, [&](const std::vector<const std::byte*>& send) {
      for (const std::byte* p : send)
        for (std::uint64_t i = 0; i < count; ++i) mean[i] += load(p, i, dtype);
    });
    // Every rank has read every buffer (the second barrier in exchange): now each writes its own.
    for (std::uint64_t i = 0; i < count; ++i) store(data, i, dtype, mean[i] / s_->world);
  }

  void reduce_scatter_mean(const std::byte* send, std::byte* recv, std::uint64_t count, analysis::DType dtype) override {
    require_float(dtype, "reduce-scatter");
    std::vector<double> mean(count, 0.0);
    const std::uint64_t chunk = static_cast<std::uint64_t>(rank_) * count;
    exchange(send, [&](const std::vector<const std::byte*>& all) {
      for (const std::byte* p : all)
        for (std::uint64_t i = 0; i < count; ++i) mean[i] += load(p, chunk + i, dtype);
    });
    for (std::uint64_t i = 0; i < count; ++i) store(recv, i, dtype, mean[i] / s_->world);
  }

  void all_gather(const std::byte* send, std::byte* recv, std::uint64_t count, analysis::DType dtype) override {
    const std::uint64_t bytes = checked_mul(count, analysis::dtype_bits(dtype) / 8, "all-gather bytes");
    std::vector<std::byte> gathered(checked_mul(bytes, static_cast<std::uint64_t>(s_->world), "all-gather bytes"));
    exchange(send, [&](const std::vector<const std::byte*>& all) {
      for (std::size_t r = 0; r < all.size(); ++r)
        if (bytes) std::memcpy(gathered.data() + r * bytes, all[r], bytes);
    });
    if (!gathered.empty()) std::memcpy(recv, gathered.data(), gathered.size());
  }

 private:
  // Publishes this rank's buffer, reads every rank's between two barriers: no rank writes a buffer (an in-place
  // all-reduce) before all have read it.
  template <class Read>
  void exchange(const std::byte* mine, Read&& read) {
    {
      std::lock_guard lock(s_->m);
      s_->send[static_cast<std::size_t>(rank_)] = mine;
    }
    s_->barrier();
    std::vector<const std::byte*> all;
    {
      std::lock_guard lock(s_->m);
      all = s_->send;
    }
    read(all);
    s_->barrier();
  }

  std::shared_ptr<LocalGroup::State> s_;
  int rank_ = 0;
};

}  // namespace

LocalGroup::LocalGroup(int world_size) : state_(std::make_shared<State>()) {
  if (world_size < 1) fail(ErrorKind::usage, "a local group needs at least one rank, " + std::to_string(world_size) + " asked");
  state_->world = world_size;
  state_->send.assign(static_cast<std::size_t>(world_size), nullptr);
}

LocalGroup::~LocalGroup() = default;

std::unique_ptr<Collectives> LocalGroup::member(int rank) {
  if (rank < 0 || rank >= state_->world)
    fail(ErrorKind::usage, "rank " + std::to_string(rank) + " outside a local group of " + std::to_string(state_->world));
  return std::make_unique<LocalCollectives>(state_, rank);
}

void LocalGroup::abort() noexcept {
  std::lock_guard lock(state_->m);
  state_->aborted = true;
  state_->cv.notify_all();
}

int LocalGroup::world_size() const noexcept { return state_->world; }

}  // namespace memplan::runtime

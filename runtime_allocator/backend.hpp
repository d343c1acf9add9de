// The device a runtime runs on: its memory (allocate, free, copies to and from the host) and its kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/ops.hpp"

namespace memplan::runtime {

// A tensor as a kernel sees it: bytes in the backend's memory, a dtype and a concrete shape.
// `data` is null for an omitted optional input or output.
struct TensorRef {
  std::byte* data = nullptr;
  analysis::DType dtype = analysis::DType::undefined;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;

  std::int64_t elements() const noexcept;
  template <class T> T* as() const noexcept { return reinterpret_cast<T*>(data); }
};

// One op as a kernel runs it: its inputs and outputs bound in the backend's memory, and the plan's scratch
// region for it (a convolution's workspace), if any.
struct OpCall {
  const analysis::Op& op;
  analysis::OpId id = analysis::kNoOp;
  const std::vector<TensorRef>& in;
  const std::vector<TensorRef>& out;
  std::byte* scratch = nullptr;
  std::uint64_t scratch_bytes = 0;
};

// The kernels of one backend, registered against the op registry's ids (analysis::OpTypeId) with their
// own constraints (dtypes, ranks). `run` computes op's outputs from its inputs; both live in the backend's
// memory. An output may share its bytes with an input only where `alias_safe(op)` says so (elementwise
// kernels that read element i before writing element i); the executor stages every other overlap.
class KernelSet {
 public:
  virtual ~KernelSet() = default;
  // Empty when a kernel runs `op` of `g` as shaped there (dtypes and ranks included); otherwise why not,
  // in a few words ("no kernel", "dtype f16 of input 0", "rank 9 above 8").
  virtual std::string unsupported_reason(const analysis::Graph& g, const analysis::Op& op) const = 0;
  bool supports(const analysis::Graph& g, const analysis::Op& op) const { return unsupported_reason(g, op).empty(); }
  virtual bool alias_safe(const analysis::Op& op) const = 0;
  // Called once per graph before its ops run (a backend may prepare per-op state there).
  virtual void prepare(const analysis::Graph& /*g*/) {}
  // False where the kernels ignore OpCall::scratch (their own workspace beside the arena): then a swap's
  // ordering need not consider later ops' scratch regions.
  virtual bool uses_plan_scratch() const { return true; }
  // Errors: ErrorKind::unsupported naming the op when an attribute is not handled.
  virtual void run(const OpCall& call) = 0;
};

// What a kernel accepts, beside its op type: the dtypes of its input 0 (one bit per analysis::DType) and
// the highest rank of any of its inputs and outputs.
using DTypeMask = std::uint32_t;
constexpr DTypeMask dtype_bit(analysis::DType d) noexcept { return DTypeMask{1} << static_cast<unsigned>(d); }
inline constexpr DTypeMask kF32 = dtype_bit(analysis::DType::f32);
inline constexpr DTypeMask kBool = dtype_bit(analysis::DType::boolean);
// The dtypes visited by the CPU kernels that compute on any numeric input (float, double, int64, int32,
// bool, uint8).
inline constexpr DTypeMask kVisitedDTypes = kF32 | dtype_bit(analysis::DType::f64) | dtype_bit(analysis::DType::i64) |
                                            dtype_bit(analysis::DType::i32) | kBool | dtype_bit(analysis::DType::u8);
inline constexpr DTypeMask kAnyDType = ~DTypeMask{0};
inline constexpr std::uint8_t kAnyRank = 255;

struct KernelConstraints {
  DTypeMask dtypes = kF32;
  std::uint8_t max_rank = kAnyRank;
};
// Empty when op of g meets `c`; otherwise "dtype X of input 0" or "rank R above N" (of input or output i).
// An input whose dtype the graph does not know is not checked.
std::string constraint_reason(const analysis::Graph& g, const analysis::Op& op, const KernelConstraints& c);
// The registry id of a kernel table's key: the op type for the default ONNX domain, "memplan::<type>" for
// memplan's own ops. A key the registry does not know is ErrorKind::unsupported naming it, raised when
// the table is built (a kernel for an op memplan cannot plan is a bug in the table).
analysis::OpTypeId kernel_op_id(std::string_view key);

// The op types a backend's kernels cover, known without a device: "cpu", and "cuda" when memplan was
// built with the CUDA backend (empty otherwise). Sorted by id.
std::vector<analysis::OpTypeId> registered_kernels(std::string_view backend);
// What backend's kernel for op type `id` accepts; empty when it has none. Known for "cpu" only (empty otherwise).
std::optional<KernelConstraints> kernel_constraints(std::string_view backend, analysis::OpTypeId id);

// Memory of one device. Pointers it returns are device pointers: only its copies and kernels read them.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // `alignment` is a power of two; failure is ErrorKind::runtime naming the request.
  virtual std::byte* allocate(std::uint64_t bytes, std::uint64_t alignment) = 0;
  virtual void deallocate(std::byte* p, std::uint64_t bytes) noexcept = 0;
  virtual void copy_to_device(std::byte* dst, const std::byte* host_src, std::uint64_t bytes) = 0;
  virtual void copy_to_host(std::byte* host_dst, const std::byte* src, std::uint64_t bytes) = 0;
  virtual void copy_on_device(std::byte* dst, const std::byte* src, std::uint64_t bytes) = 0;
  // Waits for queued work (copies, kernels); a no-op on the host.
  virtual void synchronize() {}
  virtual KernelSet& kernels() = 0;
  // Alignment of the executor's own buffers (inputs, weights, pool blocks).
  virtual std::uint64_t buffer_alignment() const { return 64; }

  // Host memory the device copies to and from asynchronously (pinned on a GPU): tensors placed on the
  // host (Tensor::on_host, a SwapOut's destination). Not counted against the device's memory.
  virtual std::byte* allocate_host(std::uint64_t bytes, std::uint64_t alignment) = 0;
  virtual void deallocate_host(std::byte* p, std::uint64_t bytes) noexcept = 0;

  // Swaps run on a copy queue beside the compute queue, ordered by events: the executor records an event
  // on the compute queue, queues the copy after it and records the copy's own event, and makes the
  // compute queue wait for that event before the first op that needs the copy done. A backend without
  // queues (the host) copies at once and its events are no-ops.
  using Event = std::uint32_t;
  virtual Event create_event() = 0;
  virtual void record_on_compute(Event e) = 0;
  // Copies host<->device (either direction) on the copy queue after `after`, then records `done` there.
  virtual void copy_async(std::byte* dst, const std::byte* src, std::uint64_t bytes, Event after, Event done) = 0;
  virtual void compute_waits(Event e) = 0;

  // Around one run of a schedule: the backend may time it (events) and read its memory in use.
  // `end_run` returns the run's seconds as the backend measured them (the host: wall time).
  virtual void begin_run() = 0;
  virtual double end_run() = 0;
};

// Aligned host memory and the CPU reference kernels. `capacity_bytes` (0: unlimited) caps what is
// allocated at once, standing in for a device's memory in tests.
class HostBackend final : public Backend {
 public:
  explicit HostBackend(std::uint64_t capacity_bytes = 0);
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  std::string name() const override { return "host"; }
  std::byte* allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  void deallocate(std::byte* p, std::uint64_t bytes) noexcept override;
  void copy_to_device(std::byte* dst, const std::byte* host_src, std::uint64_t bytes) override;
  void copy_to_host(std::byte* host_dst, const std::byte* src, std::uint64_t bytes) override;
  void copy_on_device(std::byte* dst, const std::byte* src, std::uint64_t bytes) override;
  KernelSet& kernels() override;
  std::byte* allocate_host(std::uint64_t bytes, std::uint64_t alignment) override;
  void deallocate_host(std::byte* p, std::uint64_t bytes) noexcept override;
  Event create_event() override { return 0; }
  void record_on_compute(Event) override {}
  void copy_async(std::byte* dst, const std::byte* src, std::uint64_t bytes, Event, Event) override;
  void compute_waits(Event) override {}
  void begin_run() override;
  double end_run() override;
  std::uint64_t allocated_bytes() const noexcept { return allocated_; }
  std::uint64_t host_bytes() const noexcept { return host_allocated_; }

 private:
  std::byte* aligned(std::uint64_t bytes, std::uint64_t alignment, bool capped);
  std::uint64_t capacity_ = 0;
  std::uint64_t allocated_ = 0;
  std::uint64_t host_allocated_ = 0;
  std::unordered_map<std::byte*, std::uint64_t> sizes_;  // live allocations and their rounded sizes
  std::unordered_map<std::byte*, std::uint64_t> host_sizes_;  // the same for allocate_host
  double run_start_ = 0.0;  // steady clock seconds at begin_run
  std::unique_ptr<KernelSet> kernels_;  // made on first use
};

// The CPU reference kernels (float32; int64/int32 for shape arithmetic; bool for masks).
std::unique_ptr<KernelSet> make_cpu_kernels();

// One allocation of a backend, released when the owner goes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, std::uint64_t bytes, std::uint64_t alignment);
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  std::byte* data() const noexcept { return ptr_; }
  std::uint64_t size() const noexcept { return bytes_; }

 private:
  void release() noexcept;
  Backend* backend_ = nullptr;
  std::byte* ptr_ = nullptr;
  std::uint64_t bytes_ = 0;
};

}  // namespace memplan::runtime

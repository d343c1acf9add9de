// GPU tests of N-d indexing and resampling against the CPU kernels: GatherND (batch_dims), ScatterND and
// ScatterElements (every reduction, int64 and float data), Resize/Upsample in each mode, ArgMax/ArgMin/TopK/Size, the
// trigonometric ops (generated kernels), Range, Trilu, IsInf, integer Mod and bitwise ops, and the gradients of a training step
// through them; exit 77 (skipped) without a device.
#include <doctest/doctest.h>

#ifdef MEMPLAN_HAVE_CUDA
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <utility>

#include "analysis/shapes.hpp"
#include "analysis/training.hpp"
#include "runtime_allocator/cuda/cuda_backend.hpp"
#include "tests/runtime_allocator/cuda_compare.hpp"
#include "tests/runtime_allocator/op_graph.hpp"
#include "tests/runtime_allocator/training_fixture.hpp"

using namespace memplan;
using namespace memplan::runtime::testing;
using analysis::DType;
using analysis::TensorData;
using analysis::TensorId;
using Attrs = std::map<std::string, analysis::Attribute>;

namespace {

TensorData floats_of(std::vector<std::int64_t> dims, std::vector<double> v) {
  return TensorData::from_double(DType::f32, std::move(dims), v);
}

}  // namespace

TEST_CASE("GatherND, ScatterND and ScatterElements on the GPU equal the CPU kernels for every reduction and dtype") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(5);
  OpGraph b;
  b.g.opset = 18;
  const TensorId x = b.input("x", random_f32({6, 5, 7}, rng));
  std::vector<double> idv(6 * 9);
  for (std::size_t k = 0; k < idv.size(); ++k) idv[k] = static_cast<double>(k * 7 % 50);
  const TensorId ids = b.input("ids", TensorData::from_double(DType::i64, {6, 9}, idv));
  std::vector<TensorId> checked;
  auto add = [&](const char* type, std::vector<TensorId> in, DType dt, std::vector<std::int64_t> dims, Attrs at = {}) {
    checked.push_back(b.result(std::string(type) + std::to_string(checked.size()), dt, dims));
    b.op(type, "", std::move(in), {checked.back()}, std::move(at));
  };
  add("GatherND", {x, b.constant("t1", ints(DType::i64, {4, 2}, {0, 1, -1, 4, 3, 0, 5, -5}))}, DType::f32, {4, 7});
  add("GatherND", {x, b.constant("t2", ints(DType::i64, {6, 2, 1}, {0, 4, 1, 3, 2, 2, 3, 1, 4, 0, 0, -1}))}, DType::f32,
      {6, 2, 7}, {{"batch_dims", int_attr(1)}});
  add("GatherND", {ids, b.constant("t3", ints(DType::i32, {3, 2}, {0, 0, 5, 8, -2, 3}))}, DType::i64, {3});
  add("ScatterND", {x, b.constant("t4", ints(DType::i64, {2, 1}, {4, -6})), b.input("u4", random_f32({2, 5, 7}, rng))},
      DType::f32, {6, 5, 7});
  add("ScatterND",
      {ids, b.constant("t5", ints(DType::i64, {3, 2}, {0, 0, 1, 8, 5, 4})), b.constant("u5", ints(DType::i64, {3}, {-1, 2, 3}))},
      DType::i64, {6, 9});
  for (const char* r : {"add", "mul", "max", "min"}) {
    add("ScatterND",
        {x, b.constant(std::string("t6") + r, ints(DType::i64, {4, 2}, {1, 1, 1, 1, 2, 3, -5, 1})),
         b.input(std::string("u6") + r, random_f32({4, 7}, rng))},
        DType::f32, {6, 5, 7}, {{"reduction", string_attr(r)}});
    add("ScatterND",
        {ids, b.constant(std::string("t7") + r, ints(DType::i64, {3, 1}, {2, 2, 0})),
         b.constant(std::string("u7") + r, ints(DType::i64, {3, 9}, std::vector<std::int64_t>(27, 3)))},
        DType::i64, {6, 9}, {{"reduction", string_attr(r)}});
    add("ScatterElements",
        {x, b.constant(std::string("t8") + r, ints(DType::i64, {6, 5, 2}, std::vector<std::int64_t>(60, -2))),
         b.input(std::string("u8") + r, random_f32({6, 5, 2}, rng))},
        DType::f32, {6, 5, 7}, {{"axis", int_attr(2)}, {"reduction", string_attr(r)}});
  }
  std::vector<std::int64_t> perm;
  for (int k = 0; k < 5 * 7; ++k) perm.push_back((k * 5 + k / 7) % 6);  // distinct rows per column when axis 0 has 1 row
  add("ScatterElements", {x, b.constant("t9", ints(DType::i64, {1, 5, 7}, perm)), b.input("u9", random_f32({1, 5, 7}, rng))},
      DType::f32, {6, 5, 7}, {{"axis", int_attr(0)}});
  check_against_cpu(shaped(b), checked, 1e-6);
}

TEST_CASE("Resize and Upsample on the GPU equal the CPU kernels in every coordinate and nearest mode") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(6);
  OpGraph b;
  b.g.opset = 18;
  const TensorId x = b.input("x", random_f32({2, 3, 9, 11}, rng));
  const TensorId none = b.constant("none", floats_of({0}, {}));
  std::vector<TensorId> checked;
  auto add = [&](const char* type, std::vector<TensorId> in, std::vector<std::int64_t> dims, Attrs at, DType dt = DType::f32) {
    checked.push_back(b.result(std::string(type) + std::to_string(checked.size()), dt, dims));
    b.op(type, "", std::move(in), {checked.back()}, std::move(at));
  };
  const TensorId up = b.constant("up", floats_of({4}, {1, 1, 2.5, 1.7}));
  const TensorId down = b.constant("down", floats_of({4}, {1, 1, 0.6, 0.45}));
  for (const char* coord :
       {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"})
    for (const char* nearest : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
      add("Resize", {x, none, up}, {2, 3, 22, 18},
          {{"coordinate_transformation_mode", string_attr(coord)}, {"nearest_mode", string_attr(nearest)}});
      add("Resize", {x, none, down}, {2, 3, 5, 4},
          {{"coordinate_transformation_mode", string_attr(coord)}, {"nearest_mode", string_attr(nearest)}});
    }
  for (const char* coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}) {
    add("Resize", {x, none, up}, {2, 3, 22, 18},
        {{"mode", string_attr("linear")}, {"coordinate_transformation_mode", string_attr(coord)}});
    add("Resize", {x, none, none, b.constant(std::string("sz") + coord, ints(DType::i64, {4}, {2, 3, 4, 13}))}, {2, 3, 4, 13},
        {{"mode", string_attr("linear")}, {"coordinate_transformation_mode", string_attr(coord)}});
  }
  add("Resize", {x, b.constant("roi", floats_of({4}, {0.1, -0.2, 0.8, 1.1})), b.constant("s2", floats_of({2}, {1.5, 1.0}))},
      {2, 3, 13, 11},
      {{"mode", string_attr("linear")},
       {"axes", ints_attr({2, 3})},
       {"coordinate_transformation_mode", string_attr("tf_crop_and_resize")},
       {"extrapolation_value", float_attr(-3.0)}});
  add("Upsample", {x, b.constant("s3", floats_of({4}, {1, 1, 2, 3}))}, {2, 3, 18, 33}, {});
  add("Upsample", {x, b.constant("s4", floats_of({4}, {1, 1, 2, 2}))}, {2, 3, 18, 22}, {{"mode", string_attr("linear")}});
  const TensorId v = b.input("v", random_f32({1, 2, 3, 4, 5}, rng));
  add("Resize", {v, none, b.constant("s5", floats_of({5}, {1, 1, 2, 1.5, 0.8}))}, {1, 2, 6, 6, 4},
      {{"mode", string_attr("linear")}});
  const TensorId img = b.input("img", TensorData::from_double(DType::u8, {1, 1, 3, 3}, {0, 10, 20, 30, 40, 50, 60, 70, 255}));
  add("Resize", {img, none, b.constant("s6", floats_of({4}, {1, 1, 2, 2}))}, {1, 1, 6, 6}, {}, DType::u8);
  check_against_cpu(shaped(b), checked, 1e-5);
}

TEST_CASE("ArgMax, ArgMin, TopK, Size and the trigonometric ops on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(8);
  OpGraph b;
  b.g.opset = 18;
  const TensorId x = b.input("x", random_f32({5, 33, 7}, rng, -0.9, 0.9));
  std::vector<std::int64_t> tv(5 * 33 * 7);
  for (std::size_t k = 0; k < tv.size(); ++k) tv[k] = static_cast<std::int64_t>(k * 13 % 5);  // many ties
  const TensorId ties = b.input("ties", TensorData::from_int64(DType::i64, {5, 33, 7}, tv));
  std::vector<TensorId> checked;
  auto add = [&](const char* type, std::vector<TensorId> in, DType dt, std::vector<std::int64_t> dims, Attrs at = {}) {
    checked.push_back(b.result(std::string(type) + std::to_string(checked.size()), dt, dims));
    b.op(type, "", std::move(in), {checked.back()}, std::move(at));
  };
  for (const char* arg : {"ArgMax", "ArgMin"})
    for (int last = 0; last < 2; ++last) {
      add(arg, {ties}, DType::i64, {5, 1, 7}, {{"axis", int_attr(1)}, {"select_last_index", int_attr(last)}});
      add(arg, {x}, DType::i64, {33, 7},
          {{"axis", int_attr(0)}, {"keepdims", int_attr(0)}, {"select_last_index", int_attr(last)}});
    }
  for (int largest = 0; largest < 2; ++largest)
    for (TensorId in : {x, ties}) {
      const DType dt = in == x ? DType::f32 : DType::i64;
      const TensorId v = b.result("values" + std::to_string(checked.size()), dt, {5, 4, 7});
      const TensorId i = b.result("indices" + std::to_string(checked.size()), DType::i64, {5, 4, 7});
      b.op("TopK", "", {in, b.constant("k" + std::to_string(checked.size()), ints(DType::i64, {1}, {4}))}, {v, i},
           {{"axis", int_attr(1)}, {"largest", int_attr(largest)}});
      checked.push_back(v);
      checked.push_back(i);
    }
  add("Size", {x}, DType::i64, {});
  for (const char* trig : {"Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Atanh"})
    add(trig, {x}, DType::f32, {5, 33, 7});
  check_against_cpu(shaped(b), checked, 1e-5);
}

TEST_CASE("Range, Trilu, IsInf, integer Mod and bitwise ops on the GPU equal the CPU kernels") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(9);
  OpGraph b;
  b.g.opset = 18;
  std::vector<TensorId> checked;
  auto add = [&](const char* type, std::vector<TensorId> in, DType dt, std::vector<std::int64_t> dims, Attrs at = {}) {
    checked.push_back(b.result(std::string(type) + std::to_string(checked.size()), dt, dims));
    b.op(type, "", std::move(in), {checked.back()}, std::move(at));
  };
  auto scalar = [&](const char* name, DType dt, double v) { return b.constant(name, TensorData::from_double(dt, {}, {v})); };
  add("Range", {scalar("f0", DType::f32, 0.5), scalar("f1", DType::f32, -70.0), scalar("f2", DType::f32, -0.3)}, DType::f32,
      {235});
  add("Range", {scalar("i0", DType::i64, -7), scalar("i1", DType::i64, 1000), scalar("i2", DType::i64, 3)}, DType::i64, {336});
  const TensorId x = b.input("x", random_f32({3, 17, 9}, rng));
  add("Trilu", {x, b.constant("k", ints(DType::i64, {}, {2}))}, DType::f32, {3, 17, 9}, {{"upper", int_attr(0)}});
  add("Trilu", {x}, DType::f32, {3, 17, 9});
  const TensorId inf = b.input("inf", TensorData::from_double(DType::f32, {5}, {1.0, INFINITY, -INFINITY, NAN, -2.0}));
  add("IsInf", {inf}, DType::boolean, {5});
  add("IsInf", {inf}, DType::boolean, {5}, {{"detect_positive", int_attr(0)}});
  std::vector<std::int64_t> av(4 * 6), bv(6);
  for (std::size_t k = 0; k < av.size(); ++k) av[k] = static_cast<std::int64_t>(k * 7 % 41) - 20;
  for (std::size_t k = 0; k < bv.size(); ++k) bv[k] = (k % 2 ? -1 : 1) * static_cast<std::int64_t>(k + 2);
  const TensorId a = b.input("a", TensorData::from_int64(DType::i64, {4, 6}, av));
  const TensorId d = b.input("d", TensorData::from_int64(DType::i64, {6}, bv));
  add("Mod", {a, d}, DType::i64, {4, 6});
  add("Mod", {a, d}, DType::i64, {4, 6}, {{"fmod", int_attr(1)}});
  for (const char* bit : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) add(bit, {a, d}, DType::i64, {4, 6});
  analysis::ShapeOptions so;
  so.fold_max_elements = 0;  // keep Range of constants an op
  b.g = analysis::infer_shapes(b.g, so);
  check_against_cpu(b, checked, 0.0);
}

TEST_CASE("a training step through Resize (nearest, bilinear), GatherND and ScatterND gives the CPU's gradients on the GPU") {
  if (!runtime::cuda::cuda_available()) std::exit(77);
  std::mt19937 rng(7);
  OpGraph b;
  b.g.opset = 18;
  const TensorId x = b.input("x", random_f32({2, 3, 5, 6}, rng));
  const TensorId w = b.constant("w", random_f32({2, 3, 5, 6}, rng));
  const TensorId none = b.constant("none", floats_of({0}, {}));
  auto tensor = [&](const char* name, std::vector<std::int64_t> dims) {
    return b.tensor(name, DType::f32, dims, analysis::TensorRole::activation);
  };
  const TensorId h = tensor("h", {2, 3, 5, 6}), up = tensor("up", {2, 3, 10, 12}), near = tensor("near", {2, 3, 10, 12});
  const TensorId sum = tensor("sum", {2, 3, 10, 12}), picked = tensor("picked", {3, 10, 12}), upd = tensor("upd", {2, 3, 10, 12});
  b.op("Mul", "", {x, w}, {h});
  b.op("Resize", "", {h, none, b.constant("s", floats_of({4}, {1, 1, 2, 2}))}, {up}, {{"mode", string_attr("linear")}});
  b.op("Resize", "", {h, none, none, b.constant("sz", ints(DType::i64, {4}, {2, 3, 10, 12}))}, {near},
       {{"coordinate_transformation_mode", string_attr("asymmetric")}, {"nearest_mode", string_attr("floor")}});
  b.op("Add", "", {up, near}, {sum});
  b.op("GatherND", "", {sum, b.constant("i1", ints(DType::i64, {3, 2}, {0, 1, 1, 2, 0, 1}))}, {picked});
  b.op("ScatterND", "", {sum, b.constant("i2", ints(DType::i64, {3, 2}, {1, 0, 0, 2, 1, 1})), picked}, {upd});
  b.g.outputs.push_back(upd);
  b.g.tensors[upd].is_graph_output = true;
  analysis::TrainingOptions to;
  // The weight trains as an initializer does: its value off the graph while the training graph is built.
  analysis::Graph fg = analysis::infer_shapes(b.g, {});
  auto w_value = std::exchange(fg.tensors[fg.find("w")].data, nullptr);
  auto tg = analysis::build_training_graph(fg, to);
  tg.graph.tensors[tg.graph.find("w")].data = w_value;
  std::vector<TensorData> in{b.feeds[0]};
  for (std::size_t k = 1; k < tg.graph.inputs.size(); ++k)
    in.push_back(random_f32(tg.graph.tensors[tg.graph.inputs[k]].shape(), rng));
  runtime::HostBackend ref_backend;
  runtime::Executor ref(tg.graph, planner::Plan{}, ref_backend, runtime::ExecOptions{.unshared = true});
  ref.run(in);
  std::map<std::string, TensorData> feed;
  for (std::size_t k = 0; k < in.size(); ++k) feed[tg.graph.tensors[tg.graph.inputs[k]].name] = in[k];
  const auto planned = plan_strategy(tg, "none");
  REQUIRE(planned);
  runtime::cuda::CudaBackend gpu_backend;
  runtime::Executor gpu(planned->graph, planned->plan, gpu_backend);
  gpu.run(feed);
  REQUIRE(!tg.param_grads.empty());
  for (const auto& pg : tg.param_grads) {
    const auto got = gpu.read(pg.second);
    const auto want = floats(ref.address(pg.second), tg.graph.tensors[pg.second].bytes());
    INFO("gradient of " << tg.graph.tensors[pg.first].name);
    CHECK(max_rel_diff(floats(got.bytes.data(), got.bytes.size()), want) <= 1e-4);
  }
}

#endif  // MEMPLAN_HAVE_CUDA

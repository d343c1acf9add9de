// Shape rules of neural-network ops: MatMul, Gemm, Conv, ConvTranspose, pooling, normalization, Flatten, Resize.
#include <cmath>

#include "analysis/shape_rules.hpp"

namespace memplan::analysis::shape_detail {
namespace {

void matmul_op(OpContext& c) {
  c.require_same_dtype(0, 1);
  Shape a = c.in_shape(0), b = c.in_shape(1);
  if (a.empty() || b.empty()) c.fail_shape("MatMul needs inputs of rank >= 1, got " + shape_str(a) + " and " + shape_str(b));
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  if (a[a.size() - 1] != b[b.size() - 2])
    c.fail_shape("inner dims differ: " + shape_str(c.in_shape(0)) + " x " + shape_str(c.in_shape(1)));
  Shape batch = broadcast(c, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!a_vec) batch.push_back(a[a.size() - 2]);
  if (!b_vec) batch.push_back(b.back());
  c.set_output(0, c.in_dtype(0), batch);
}

void gemm_op(OpContext& c) {
  c.require_same_dtype(0, 1);
  c.require_same_dtype(0, 2);
  Shape a = c.in_shape(0), b = c.in_shape(1);
  if (a.size() != 2 || b.size() != 2) c.fail_shape("Gemm needs 2-D inputs, got " + shape_str(a) + " and " + shape_str(b));
  if (c.op().attr_int("transA", 0)) std::swap(a[0], a[1]);
  if (c.op().attr_int("transB", 0)) std::swap(b[0], b[1]);
  if (a[1] != b[0])
    c.fail_shape("inner dims differ: A " + shape_str(a) + " x B " + shape_str(b) + " (after transA/transB)");
  const Shape out{a[0], b[1]};
  if (c.has_input(2) && broadcast(c, out, c.in_shape(2)) != out)
    c.fail_shape("C " + shape_str(c.in_shape(2)) + " does not broadcast to " + shape_str(out));
  c.set_output(0, c.in_dtype(0), out);
}

// Per spatial axis: kernel, strides, dilations, pads (begin..., end...) and how padding is chosen.
struct Window {
  Shape kernel, strides, dilations, pads;
  std::string auto_pad;
  bool ceil_mode = false;
};

Window read_window(const OpContext& c, std::size_t spatial, const Shape& kernel_default) {
  Window w;
  w.kernel = c.op().attr_ints("kernel_shape", kernel_default);
  w.strides = c.op().attr_ints("strides", Shape(spatial, 1));
  w.dilations = c.op().attr_ints("dilations", Shape(spatial, 1));
  w.pads = c.op().attr_ints("pads", Shape(2 * spatial, 0));
  w.auto_pad = c.op().attr_string("auto_pad", "NOTSET");
  w.ceil_mode = c.op().attr_int("ceil_mode", 0) != 0;
  if (w.kernel.size() != spatial || w.strides.size() != spatial || w.dilations.size() != spatial ||
      w.pads.size() != 2 * spatial)
    c.fail_shape("kernel_shape/strides/dilations/pads do not match " + std::to_string(spatial) + " spatial dims");
  for (std::size_t k = 0; k < spatial; ++k)
    if (w.kernel[k] < 1 || w.strides[k] < 1 || w.dilations[k] < 1 || w.pads[k] < 0 || w.pads[k + spatial] < 0)
      c.fail_shape("kernel, strides and dilations must be >= 1 and pads >= 0");
  if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" && w.auto_pad != "VALID")
    c.fail_shape("unknown auto_pad '" + w.auto_pad + "'");
  return w;
}

// Output extent of a sliding window (Conv and pooling), ONNX semantics including ceil_mode's rule that
// the last window must start inside the input or its left padding.
Shape window_output(const OpContext& c, const Shape& in, const Window& w) {
  Shape out(in.size());
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::int64_t s = w.strides[k];
    if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
      out[k] = in[k] / s + (in[k] % s ? 1 : 0);
      continue;
    }
    const std::int64_t extent = c.add(c.mul(w.kernel[k] - 1, w.dilations[k]), 1);
    const std::int64_t pb = w.auto_pad == "VALID" ? 0 : w.pads[k];
    const std::int64_t pe = w.auto_pad == "VALID" ? 0 : w.pads[k + in.size()];
    const std::int64_t room = c.add(c.add(in[k], pb), pe) - extent;
    // ceil_mode takes a window wider than the padded input when one window still starts there (PyTorch's
    // AvgPool2d(k, ceil_mode=True) on a smaller map: one output over the whole map).
    if (w.ceil_mode && room < 0 && room > -s) {
      out[k] = 1;
      continue;
    }
    if (room < 0)
      c.fail_shape("window of extent " + std::to_string(extent) + " does not fit spatial dim " + std::to_string(in[k]) +
                   " with pads " + std::to_string(pb) + "+" + std::to_string(pe));
    std::int64_t o = room / s + (w.ceil_mode && room % s ? 1 : 0) + 1;
    if (w.ceil_mode && (o - 1) * s >= in[k] + pb) --o;
    out[k] = o;
  }
  return out;
}

void conv_op(OpContext& c) {
  c.require_same_dtype(0, 1);
  c.require_same_dtype(0, 2);
  const Shape x = c.in_shape(0), wt = c.in_shape(1);
  if (x.size() < 3 || wt.size() != x.size())
    c.fail_shape("needs X of rank >= 3 and W of the same rank, got " + shape_str(x) + " and " + shape_str(wt));
  const std::int64_t group = c.op().attr_int("group", 1);
  if (group < 1 || x[1] != c.mul(wt[1], group) || wt[0] % group != 0)
    c.fail_shape("channels disagree: X " + shape_str(x) + ", W " + shape_str(wt) + ", group " + std::to_string(group));
  const Window w = read_window(c, x.size() - 2, Shape(wt.begin() + 2, wt.end()));
  Shape out = window_output(c, Shape(x.begin() + 2, x.end()), w);
  out.insert(out.begin(), {x[0], wt[0]});
  c.set_output(0, c.in_dtype(0), out);
}

void conv_transpose_op(OpContext& c) {
  c.require_same_dtype(0, 1);
  c.require_same_dtype(0, 2);
  const Shape x = c.in_shape(0), wt = c.in_shape(1);
  if (x.size() < 3 || wt.size() != x.size())
    c.fail_shape("needs X of rank >= 3 and W of the same rank, got " + shape_str(x) + " and " + shape_str(wt));
  const std::int64_t group = c.op().attr_int("group", 1);
  if (group < 1 || x[1] != wt[0] || x[1] % group != 0)
    c.fail_shape("channels disagree: X " + shape_str(x) + ", W " + shape_str(wt) + ", group " + std::to_string(group));
  const std::size_t spatial = x.size() - 2;
  const Window w = read_window(c, spatial, Shape(wt.begin() + 2, wt.end()));
  const Shape out_pad = c.op().attr_ints("output_padding", Shape(spatial, 0));
  Shape out = c.op().attr_ints("output_shape");
  if (out.size() == x.size()) out.erase(out.begin(), out.begin() + 2);
  if (out_pad.size() != spatial || (!out.empty() && out.size() != spatial))
    c.fail_shape("output_padding/output_shape do not match " + std::to_string(spatial) + " spatial dims");
  for (std::size_t k = 0; k < spatial; ++k)
    if (out_pad[k] < 0 || (out_pad[k] >= w.strides[k] && out_pad[k] >= w.dilations[k]))
      c.fail_shape("output_padding " + shape_str(out_pad) + " must be >= 0 and below the stride or the dilation");
  for (std::int64_t o : out)
    if (o < 1) c.fail_shape("output_shape " + shape_str(out) + " must be positive");
  if (out.empty()) {
    for (std::size_t k = 0; k < spatial; ++k) {
      const std::int64_t in = x[k + 2], s = w.strides[k];
      if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
        // ONNX Runtime refuses a SAME output longer than the transposed convolution reaches (negative padding).
        const std::int64_t reach = c.add(c.add(c.mul(s, in - 1), out_pad[k]), c.add(c.mul(w.kernel[k] - 1, w.dilations[k]), 1));
        if (reach < c.mul(in, s))
          c.fail_shape("auto_pad " + w.auto_pad + " asks for " + std::to_string(in * s) + " outputs along spatial axis " +
                       std::to_string(k) + " but the kernel reaches " + std::to_string(reach));
        out.push_back(c.mul(in, s));
        continue;
      }
      const bool valid = w.auto_pad == "VALID";
      const std::int64_t extent = c.add(c.mul(w.kernel[k] - 1, w.dilations[k]), 1);
      std::int64_t o = c.add(c.add(c.mul(s, in - 1), out_pad[k]), extent);
      if (!valid) o -= c.add(w.pads[k], w.pads[k + spatial]);
      out.push_back(o);
    }
  }
  out.insert(out.begin(), {x[0], c.mul(wt[1], group)});
  c.set_output(0, c.in_dtype(0), out);
}

// Pads below the kernel still leave a dilated window over padding alone (its taps stride over the input): MaxPool
// would give -inf and AveragePool without count_include_pad 0/0 there, so such windows are refused too.
void refuse_padding_only_windows(const OpContext& c, const Shape& in, const Shape& out, const Window& w) {
  for (std::size_t k = 0; k < in.size(); ++k)
    for (std::int64_t o = 0; o < out[k]; ++o) {
      const std::int64_t start = o * w.strides[k] - w.pads[k], d = w.dilations[k];
      const std::int64_t first = start >= 0 ? 0 : (-start + d - 1) / d;  // the first tap at or past 0
      if (first >= w.kernel[k] || start + first * d >= in[k])
        c.fail_shape("window " + std::to_string(o) + " of spatial axis " + std::to_string(k) + " covers padding only (pads " +
                     shape_str(w.pads) + ", dilations " + shape_str(w.dilations) + ", input " + shape_str(in) + ")");
    }
}

void pool_op(OpContext& c) {
  const Shape x = c.in_shape(0);
  if (x.size() < 3) c.fail_shape("needs an input of rank >= 3, got " + shape_str(x));
  if (!c.op().attr("kernel_shape")) c.fail_shape("attribute 'kernel_shape' is required");
  const Window w = read_window(c, x.size() - 2, {});
  // ONNX Runtime and PyTorch refuse pool padding as wide as the window: a window over padding alone has no
  // input element (MaxPool would give -inf, AveragePool 0/0), in every spatial rank.
  if (w.auto_pad == "NOTSET")
    for (std::size_t k = 0; k < w.kernel.size(); ++k)
      if (w.pads[k] >= w.kernel[k] || w.pads[k + w.kernel.size()] >= w.kernel[k])
        c.fail_shape("pads " + shape_str(w.pads) + " must be smaller than kernel_shape " + shape_str(w.kernel));
  const std::int64_t order = c.op().attr_int("storage_order", 0);
  if (order != 0 && order != 1) c.fail_shape("storage_order must be 0 (row-major) or 1 (column-major), got " + std::to_string(order));
  if (c.op().type == "LpPool" && c.op().attr_int("p", 2) < 1) c.fail_shape("p must be >= 1");
  Shape out = window_output(c, Shape(x.begin() + 2, x.end()), w);
  const bool empty_window_defined = c.op().type == "LpPool" || c.op().attr_int("count_include_pad", 0) != 0;
  if (w.auto_pad == "NOTSET" && !empty_window_defined) refuse_padding_only_windows(c, Shape(x.begin() + 2, x.end()), out, w);
  out.insert(out.begin(), {x[0], x[1]});
  c.set_output(0, c.in_dtype(0), out);
  c.set_output(1, DType::i64, out);  // MaxPool's Indices
}

void global_pool_op(OpContext& c) {
  Shape x = c.in_shape(0);
  if (x.size() < 3) c.fail_shape("needs an input of rank >= 3, got " + shape_str(x));
  for (std::size_t k = 2; k < x.size(); ++k) x[k] = 1;
  c.set_output(0, c.in_dtype(0), x);
}

void flatten_op(OpContext& c) {
  const Shape x = c.in_shape(0);
  const std::int64_t a = c.op().attr_int("axis", 1);
  const std::size_t axis = a == static_cast<std::int64_t>(x.size()) ? x.size() : c.axis(a, x.size(), "axis");
  c.set_output(0, c.in_dtype(0), {c.product(x, 0, axis), c.product(x, axis)});
}

void layer_norm_op(OpContext& c) {
  const Shape x = c.in_shape(0);
  const std::size_t axis = c.axis(c.op().attr_int("axis", -1), x.size(), "axis");
  Shape stats = x;
  for (std::size_t k = axis; k < x.size(); ++k) stats[k] = 1;
  const std::int64_t stash = c.op().attr_int("stash_type", 1);
  if (stash <= 0 || stash > kMaxDType) c.fail_shape("attribute 'stash_type' is not a dtype");
  c.set_output(0, c.in_dtype(0), x);
  c.set_output(1, static_cast<DType>(stash), stats);
  c.set_output(2, static_cast<DType>(stash), stats);
}

// ONNX Attention (opset 23): Q [B,Hq,Sq,D], K [B,Hkv,Sk,D], V [B,Hkv,Sk,Dv] -> Y [B,Hq,Sq,Dv]; or 3-D
// [B,S,H*D] operands with q_num_heads and kv_num_heads -> Y [B,Sq,Hq*Dv]. past_key/past_value [B,Hkv,Sp,*]
// are prepended along the sequence in present_key/present_value; qk_matmul_output is [B,Hq,Sq,Sp+Sk].
void attention_op(OpContext& c) {
  Shape q = c.in_shape(0), k = c.in_shape(1), v = c.in_shape(2);
  const bool three = q.size() == 3;
  if ((q.size() != 4 && !three) || k.size() != q.size() || v.size() != q.size())
    c.fail_shape("needs Q, K and V all 3-D or all 4-D, got " + shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v));
  if (three) {
    const std::int64_t hq = c.op().attr_int("q_num_heads", 0), hkv = c.op().attr_int("kv_num_heads", 0);
    if (hq <= 0 || hkv <= 0 || q[2] % hq != 0 || k[2] % hkv != 0 || v[2] % hkv != 0)
      c.fail_shape("3-D inputs need q_num_heads and kv_num_heads dividing their hidden sizes");
    q = {q[0], hq, q[1], q[2] / hq};
    k = {k[0], hkv, k[1], k[2] / hkv};
    v = {v[0], hkv, v[1], v[2] / hkv};
  }
  if (q[0] != k[0] || q[0] != v[0] || q[3] != k[3] || k[1] != v[1] || k[2] != v[2] || k[1] <= 0 || q[1] % k[1] != 0)
    c.fail_shape("Q " + shape_str(q) + ", K " + shape_str(k) + " and V " + shape_str(v) + " do not agree");
  std::int64_t past = 0;
  if (c.has_input(4)) {
    const Shape pk = c.in_shape(4);
    if (pk.size() != 4 || pk[0] != k[0] || pk[1] != k[1] || pk[3] != k[3]) c.fail_shape("past_key " + shape_str(pk) + " does not match K");
    past = pk[2];
  }
  const std::int64_t total = c.add(past, k[2]);
  const DType dt = c.in_dtype(0);
  c.set_output(0, dt, three ? Shape{q[0], q[2], c.mul(q[1], v[3])} : Shape{q[0], q[1], q[2], v[3]});
  c.set_output(1, dt, {k[0], k[1], total, k[3]});
  c.set_output(2, dt, {v[0], v[1], total, v[3]});
  c.set_output(3, dt, {q[0], q[1], q[2], total});
}

// X [N, C, ...] of a per-channel normalization, its inputs 1 to `inputs` - 1 (where present) of shape [C].
Shape channel_input(const OpContext& c, std::size_t inputs) {
  const Shape x = c.in_shape(0);
  if (x.size() < 2) c.fail_shape("needs an input of rank >= 2, got " + shape_str(x));
  for (std::size_t i = 1; i < inputs && i < c.num_inputs(); ++i)
    if (c.has_input(i) && c.in_shape(i) != Shape{x[1]})
      c.fail_shape("input '" + c.input(i).name + "' has shape " + shape_str(c.in_shape(i)) + ", expected [" +
                   std::to_string(x[1]) + "]");
  return x;
}

// Inference: Y only. Training (training_mode=1, or the old opsets' extra outputs): running or saved
// mean and variance, each of shape [C].
void batch_norm_op(OpContext& c) {
  const Shape x = channel_input(c, 5);
  c.set_output(0, c.in_dtype(0), x);
  const DType stat = c.has_input(3) ? c.in_dtype(3) : c.in_dtype(0);
  for (std::size_t k = 1; k < c.num_outputs(); ++k) c.set_output(k, stat, {x[1]});
}

// InstanceNormalization: X [N, C, spatial...], scale and B [C]; Y like X. In a training graph it also outputs the
// float32 mean and inverse std per sample and channel, [N, C, 1...] (autodiff::prepare_forward adds them).
void instance_norm_op(OpContext& c) {
  const Shape x = channel_input(c, 3);
  c.set_output(0, c.in_dtype(0), x);
  Shape stats = x;
  for (std::size_t k = 2; k < stats.size(); ++k) stats[k] = 1;
  for (std::size_t k = 1; k < c.num_outputs(); ++k) c.set_output(k, DType::f32, stats);
}

// GroupNormalization: X [N, C, spatial...] in num_groups groups of channels; scale and bias [C] (opset 21) or
// [num_groups] (opset 18); Y like X. In a training graph it also outputs the float32 mean and inverse std per sample
// and group, [N, num_groups], as PyTorch's native_group_norm saves them (autodiff::prepare_forward adds them).
void group_norm_op(OpContext& c) {
  const Shape x = c.in_shape(0);
  if (x.size() < 2) c.fail_shape("needs an input of rank >= 2, got " + shape_str(x));
  const std::int64_t groups = c.op().attr_int("num_groups", 0);
  if (groups <= 0 || x[1] % groups != 0)
    c.fail_shape("num_groups " + std::to_string(groups) + " does not divide the " + std::to_string(x[1]) + " channels");
  for (std::size_t i = 1; i < 3; ++i)
    if (c.in_shape(i) != Shape{x[1]} && c.in_shape(i) != Shape{groups})
      c.fail_shape("input '" + c.input(i).name + "' has shape " + shape_str(c.in_shape(i)) + ", expected [" +
                   std::to_string(x[1]) + "] or [" + std::to_string(groups) + "]");
  c.set_output(0, c.in_dtype(0), x);
  for (std::size_t k = 1; k < c.num_outputs(); ++k) c.set_output(k, DType::f32, {x[0], groups});
}

bool present(const OpContext& c, std::size_t i) { return c.has_input(i) && c.input(i).element_count() > 0; }

void resize_op(OpContext& c) {
  const Shape x = c.in_shape(0);
  const bool v10 = c.op().type == "Upsample" || (c.num_inputs() == 2 && c.opset() < 11);
  const std::size_t scales_in = v10 ? 1 : 2, sizes_in = 3;
  Shape axes_attr = c.op().attr_ints("axes");
  std::vector<std::size_t> axes;
  for (auto a : axes_attr) axes.push_back(c.axis(a, x.size(), "axis"));
  if (axes.empty())
    for (std::size_t k = 0; k < x.size(); ++k) axes.push_back(k);
  Shape out = x;
  if (!v10 && present(c, sizes_in)) {
    const Shape sizes = c.in_ints(sizes_in, "sizes");
    if (sizes.size() != axes.size()) c.fail_shape("sizes has " + std::to_string(sizes.size()) + " values for " + std::to_string(axes.size()) + " axes");
    const std::string policy = c.op().attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (std::size_t k = 0; k < axes.size(); ++k) out[axes[k]] = sizes[k];
    } else {
      double scale = policy == "not_larger" ? HUGE_VAL : 0.0;
      for (std::size_t k = 0; k < axes.size(); ++k) {
        const double r = static_cast<double>(sizes[k]) / static_cast<double>(x[axes[k]]);
        scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
      }
      for (auto a : axes) {
        const double v = std::round(scale * static_cast<double>(x[a]));
        if (!(v >= 0.0 && v < 9.0e18)) c.fail_shape("sizes " + shape_str(sizes) + " give no valid output for " + shape_str(x));
        out[a] = static_cast<std::int64_t>(v);
      }
    }
  } else {
    std::vector<double> scales;
    if (c.op().attr("scales")) {
      for (double f : c.op().attr("scales")->floats) scales.push_back(f);
    } else {
      if (!present(c, scales_in)) c.fail_shape("needs scales or sizes");
      (void)c.in_ints(scales_in, "scales");  // fails with the standard message when not constant
      scales = c.in_value(scales_in)->as_double();
    }
    if (scales.size() != axes.size()) c.fail_shape("scales has " + std::to_string(scales.size()) + " values for " + std::to_string(axes.size()) + " axes");
    for (std::size_t k = 0; k < axes.size(); ++k) {
      const double v = std::floor(static_cast<double>(x[axes[k]]) * scales[k]);
      if (!(v >= 0.0 && v < 9.0e18)) c.fail_shape("scale " + std::to_string(scales[k]) + " gives an invalid size");
      out[axes[k]] = static_cast<std::int64_t>(v);
    }
  }
  c.set_output(0, c.in_dtype(0), out);
}

// SoftmaxCrossEntropyLoss (opset 12): scores [N, C, D...], labels [N, D...] -> loss (scalar, or [N, D...] with
// reduction none) and optionally log_prob of the scores' shape.
void softmax_cross_entropy_op(OpContext& c) {
  const Shape x = c.in_shape(0);
  if (x.size() < 2) c.fail_shape("scores need rank 2 or more, got " + shape_str(x));
  Shape rows = x;
  rows.erase(rows.begin() + 1);
  if (c.in_shape(1) != rows) c.fail_shape("labels " + shape_str(c.in_shape(1)) + " are not the scores' shape without axis 1 " + shape_str(rows));
  c.set_output(0, c.in_dtype(0), c.op().attr_string("reduction", "mean") == "none" ? rows : Shape{});
  c.set_output(1, c.in_dtype(0), x);
}

}  // namespace

void add_nn_rules(RuleTable& t) {
  t["SoftmaxCrossEntropyLoss"].shape = &softmax_cross_entropy_op;
  t["MatMul"].shape = &matmul_op;
  t["Gemm"].shape = &gemm_op;
  t["Conv"].shape = &conv_op;
  t["ConvTranspose"].shape = &conv_transpose_op;
  for (const char* name : {"MaxPool", "AveragePool", "LpPool"}) t[name].shape = &pool_op;
  for (const char* name : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) t[name].shape = &global_pool_op;
  t["Flatten"].shape = &flatten_op;
  t["LayerNormalization"].shape = &layer_norm_op;
  t["Attention"].shape = &attention_op;
  t["BatchNormalization"].shape = &batch_norm_op;
  t["InstanceNormalization"].shape = &instance_norm_op;
  t["GroupNormalization"].shape = &group_norm_op;
  t["Resize"].shape = &resize_op;
  t["Upsample"].shape = &resize_op;
}

}  // namespace memplan::analysis::shape_detail

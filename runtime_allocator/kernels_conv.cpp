// CPU convolution-family kernels (1-D and 2-D): Conv, MaxPool, AveragePool, global pools, BatchNormalization.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime_allocator/cpu_kernels.hpp"

namespace memplan::runtime::cpu {

namespace {
std::int64_t auto_pad_begin(const std::string& mode, std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t s,
                            std::int64_t d) {
  const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in);
  return mode == "SAME_LOWER" ? (total + 1) / 2 : total / 2;
}

}  // namespace

Window window(const Op& op, const TensorRef& x, const TensorRef& y, std::vector<std::int64_t> kernel) {
  const std::size_t rank = x.shape.size();
  if (rank != 3 && rank != 4) unsupported(op, "only 1-D and 2-D spatial inputs are supported");
  const std::size_t sp = rank - 2;
  if (kernel.size() != sp) unsupported(op, "kernel_shape rank does not match the input");
  auto get = [&](const char* key, std::int64_t fallback, std::size_t n) {
    auto v = op.attr_ints(key, std::vector<std::int64_t>(n, fallback));
    if (v.size() != n) unsupported(op, std::string("attribute ") + key + " has the wrong length");
    return v;
  };
  auto strides = get("strides", 1, sp), dil = get("dilations", 1, sp), pads = get("pads", 0, 2 * sp);
  const std::string mode = op.attr_string("auto_pad", "NOTSET");
  Window w;
  w.N = x.shape[0];
  w.C = x.shape[1];
  w.OC = y.shape[1];
  const std::size_t o = sp == 2 ? 0 : 1;  // index shift: 1-D fills only the W slot
  std::int64_t* in[2] = {&w.H, &w.W};
  std::int64_t* outd[2] = {&w.OH, &w.OW};
  std::int64_t* ks[2] = {&w.kh, &w.kw};
  std::int64_t* ss[2] = {&w.sh, &w.sw};
  std::int64_t* ds[2] = {&w.dh, &w.dw};
  std::int64_t* pb[2] = {&w.ph, &w.pw};
  std::int64_t* pe[2] = {&w.ph_end, &w.pw_end};
  for (std::size_t k = 0; k < sp; ++k) {
    *in[k + o] = x.shape[2 + k];
    *outd[k + o] = y.shape[2 + k];
    *ks[k + o] = kernel[k];
    *ss[k + o] = strides[k];
    *ds[k + o] = dil[k];
    if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      *pb[k + o] = auto_pad_begin(mode, x.shape[2 + k], y.shape[2 + k], kernel[k], strides[k], dil[k]);
    } else if (mode != "VALID") {
      *pb[k + o] = pads[k];
      *pe[k + o] = pads[sp + k];
    }
  }
  return w;
}

namespace {

void k_conv(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  const TensorRef& wt = required(op, in, 1);
  if (x.dtype != DType::f32 || wt.dtype != DType::f32) unsupported(op, "float32 only");
  const Window w = window(op, x, out[0], std::vector<std::int64_t>(wt.shape.begin() + 2, wt.shape.end()));
  const std::int64_t group = op.attr_int("group", 1);
  if (group < 1 || w.C % group || w.OC % group) unsupported(op, "channels do not divide into groups");
  const std::int64_t icg = w.C / group, ocg = w.OC / group;
  const float* px = x.as<float>();
  const float* pw = wt.as<float>();
  const float* bias = in.size() > 2 && in[2].data ? in[2].as<float>() : nullptr;
  float* py = out[0].as<float>();
  for (std::int64_t n = 0; n < w.N; ++n)
    for (std::int64_t oc = 0; oc < w.OC; ++oc) {
      float* plane = py + (n * w.OC + oc) * w.OH * w.OW;
      std::fill(plane, plane + w.OH * w.OW, bias ? bias[oc] : 0.0f);
      const std::int64_t g = oc / ocg;
      for (std::int64_t ic = 0; ic < icg; ++ic) {
        const float* xin = px + (n * w.C + g * icg + ic) * w.H * w.W;
        for (std::int64_t r = 0; r < w.kh; ++r)
          for (std::int64_t s = 0; s < w.kw; ++s) {
            const float wv = pw[((oc * icg + ic) * w.kh + r) * w.kw + s];
            for (std::int64_t oh = 0; oh < w.OH; ++oh) {
              const std::int64_t ih = oh * w.sh - w.ph + r * w.dh;
              if (ih < 0 || ih >= w.H) continue;
              float* yrow = plane + oh * w.OW;
              const float* xrow = xin + ih * w.W;
              for (std::int64_t ow = 0; ow < w.OW; ++ow) {
                const std::int64_t iw = ow * w.sw - w.pw + s * w.dw;
                if (iw >= 0 && iw < w.W) yrow[ow] += wv * xrow[iw];
              }
            }
          }
      }
    }
}

template <bool kMax>
void pool(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32) unsupported(op, "float32 only");
  std::int64_t* indices = kMax && out.size() > 1 && out[1].data ? out[1].as<std::int64_t>() : nullptr;
  if (indices && op.attr_int("storage_order", 0) != 0) unsupported(op, "column-major Indices are not supported");
  const Window w = window(op, x, out[0], op.attr_ints("kernel_shape"));
  const bool include_pad = op.attr_int("count_include_pad", 0) != 0;
  const float* px = x.as<float>();
  float* py = out[0].as<float>();
  for (std::int64_t nc = 0; nc < w.N * w.C; ++nc)
    for (std::int64_t oh = 0; oh < w.OH; ++oh)
      for (std::int64_t ow = 0; ow < w.OW; ++ow) {
        float acc = kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
        std::int64_t count = 0, arg = 0;
        for (std::int64_t r = 0; r < w.kh; ++r)
          for (std::int64_t s = 0; s < w.kw; ++s) {
            const std::int64_t ih = oh * w.sh - w.ph + r * w.dh, iw = ow * w.sw - w.pw + s * w.dw;
            if (include_pad && ih < w.H + w.ph_end && iw < w.W + w.pw_end) ++count;
            if (ih < 0 || ih >= w.H || iw < 0 || iw >= w.W) continue;
            const std::int64_t at = (nc * w.H + ih) * w.W + iw;  // ONNX Indices: flat over all of X
            const float v = px[at];
            if (kMax && (v > acc || count == 0)) {
              acc = v;
              arg = at;
            } else if (!kMax) {
              acc += v;
            }
            if (!include_pad) ++count;
          }
        py[(nc * w.OH + oh) * w.OW + ow] = kMax ? acc : (count ? acc / static_cast<float>(count) : 0.0f);
        if (indices) indices[(nc * w.OH + oh) * w.OW + ow] = arg;
      }
}

template <bool kMax>
void global_pool(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32 || x.shape.size() < 2) unsupported(op, "float32 [N, C, ...] input expected");
  const std::int64_t nc = x.shape[0] * x.shape[1], plane = dims_product(x.shape, 2);
  for (std::int64_t i = 0; i < nc; ++i) {
    const float* p = x.as<float>() + i * plane;
    float acc = kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
    // A NaN in the plane is its max (as ONNX Runtime and numpy): once acc is NaN no comparison replaces it.
    for (std::int64_t j = 0; j < plane; ++j) acc = kMax ? (p[j] > acc || p[j] != p[j] ? p[j] : acc) : acc + p[j];
    out[0].as<float>()[i] = kMax ? acc : acc / static_cast<float>(plane);
  }
}

// Inference form: y = scale * (x - mean) / sqrt(var + eps) + bias, per channel (axis 1). Training form
// (training_mode=1): batch statistics, plus the updated running mean and variance as outputs 1 and 2.
void k_batch_norm(const Op& op, const Refs& in, const Refs& out) {
  const TensorRef& x = required(op, in, 0);
  if (x.dtype != DType::f32 || x.shape.size() < 2) unsupported(op, "float32 [N, C, ...] input expected");
  const float eps = static_cast<float>(op.attr_float("epsilon", 1e-5)), momentum = static_cast<float>(op.attr_float("momentum", 0.9));
  const std::int64_t N = x.shape[0], C = x.shape[1], plane = dims_product(x.shape, 2);
  const float* scale = required(op, in, 1).as<float>();
  const float* bias = required(op, in, 2).as<float>();
  const float* rmean = required(op, in, 3).as<float>();
  const float* rvar = required(op, in, 4).as<float>();
  const bool training = op.attr_int("training_mode", 0) != 0;
  const float* px = x.as<float>();
  std::vector<float> mean(rmean, rmean + C), var(rvar, rvar + C);
  if (training) {
    const float count = static_cast<float>(N * plane);
    for (std::int64_t c = 0; c < C; ++c) {
      double s = 0.0, s2 = 0.0;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < plane; ++j) s += px[(n * C + c) * plane + j];
      const double m = s / count;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t j = 0; j < plane; ++j) {
          const double d = px[(n * C + c) * plane + j] - m;
          s2 += d * d;
        }
      mean[static_cast<std::size_t>(c)] = static_cast<float>(m);
      var[static_cast<std::size_t>(c)] = static_cast<float>(s2 / count);
    }
    for (std::size_t k = 1; k < 3 && k < out.size(); ++k)
      if (out[k].data)
        for (std::int64_t c = 0; c < C; ++c) {
          const float running = (k == 1 ? rmean : rvar)[c], batch = (k == 1 ? mean : var)[static_cast<std::size_t>(c)];
          out[k].as<float>()[c] = running * momentum + batch * (1.0f - momentum);
        }
  }
  float* py = out[0].as<float>();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c) {
      const float k = scale[c] / std::sqrt(var[static_cast<std::size_t>(c)] + eps), m = mean[static_cast<std::size_t>(c)];
      const std::int64_t base = (n * C + c) * plane;
      for (std::int64_t j = 0; j < plane; ++j) py[base + j] = (px[base + j] - m) * k + bias[c];
    }
}

}  // namespace

void add_conv_kernels(KernelTable& t) {
  // Windows of 1-D and 2-D spatial inputs ([N, C, W] or [N, C, H, W]).
  t["Conv"] = {k_conv, false, {kF32, 4}};
  t["MaxPool"] = {pool<true>, false, {kF32, 4}};
  t["AveragePool"] = {pool<false>, false, {kF32, 4}};
  t["GlobalAveragePool"] = {global_pool<false>, false};
  t["GlobalMaxPool"] = {global_pool<true>, false};
  t["BatchNormalization"] = {k_batch_norm, true};  // statistics are read before any output is written
}

}  // namespace memplan::runtime::cpu

"""ATen -> memplan op mapping: neural-network ops (matmuls, convolution, norms, pooling, dropout, softmax,
embedding, scaled-dot-product attention)."""
import math
import operator

import torch

from .aten_ops import aten
from .convert import norm_axis

MEMPLAN = "memplan"


# ---- matrix products
@aten("mm", "bmm", "matmul")
def _mm(c):
    return c.op1("MatMul", [c.x(0), c.x(1)])


@aten("addmm")
def _addmm(c):  # beta * bias + alpha * (a @ b)
    beta, alpha = float(c.kw("beta", 1)), float(c.kw("alpha", 1))
    return c.op1("Gemm", [c.x(1), c.x(2), c.x(0)], {"alpha": alpha, "beta": beta})


@aten("linear")
def _linear(c):
    """x @ W^T + b as Gemm(transB=1) over x viewed as 2-D, as PyTorch runs it (addmm/mm on a view, W^T a view
    too): the eager model then sees no transposed copy of W saved for the backward. With more than one symbolic
    leading dim (no single Reshape back), MatMul(x, Transpose(W)) (+ b)."""
    x, w, b = c.arg(0), c.arg(1), c.arg(2)
    lead = c.shape(x)[:-1]
    n_in, n_out = c.shape(w)[1], c.shape(w)[0]
    ins = [c.t(w)] + ([c.t(b)] if b is not None else [])
    if len(lead) == 1:
        return c.op1("Gemm", [c.t(x)] + ins, {"transB": 1})
    if sum(1 for d in lead if not isinstance(d, int)) <= 1 and lead:
        flat = c.op1("Reshape", [c.t(x), c.g.i64([-1, n_in], "shape")])
        y = c.op1("Gemm", [flat] + ins, {"transB": 1})
        return c.op1("Reshape", [y, c.g.i64([d if isinstance(d, int) else -1 for d in lead] + [n_out], "shape")])
    wt = c.op1("Transpose", [c.t(w)], {"perm": [1, 0]})
    y = c.op1("MatMul", [c.t(x), wt])
    return y if b is None else c.op1("Add", [y, c.t(b)])


# ---- convolution
@aten("convolution", "conv2d", "conv1d", "conv3d", "_convolution")
def _conv(c):
    name = c.node.target.__name__.split(".")[0]
    a = list(c.node.args) + [None] * 12
    x, w, b = a[0], a[1], a[2]
    nd = c.rank(w) - 2
    if name in ("convolution", "_convolution"):
        stride, padding, dilation, transposed, out_pad, groups = a[3], a[4], a[5], a[6], a[7], a[8]
    else:
        stride, padding, dilation, groups = a[3] or 1, a[4] or 0, a[5] or 1, a[6] or 1
        transposed, out_pad = False, [0] * nd
    if isinstance(padding, str):
        raise ValueError(f"{c.where()}: padding='{padding}' is not mapped (export with numeric padding)")
    rep = lambda v: list(v) * (nd if len(list(v)) == 1 else 1) if isinstance(v, (list, tuple)) else [v] * nd
    stride, padding, dilation = rep(stride), rep(padding), rep(dilation)
    attrs = {"strides": stride, "pads": padding + padding, "dilations": dilation, "group": int(groups),
             "kernel_shape": list(c.concrete_shape(w)[2:])}
    ins = [c.t(x), c.t(w)] + ([c.t(b)] if b is not None else [])
    if transposed:
        attrs["output_padding"] = rep(out_pad)
        return c.op1("ConvTranspose", ins, attrs)
    return c.op1("Conv", ins, attrs)


# ---- normalization
def _ones_or(c, t, n, value):
    return c.t(t) if t is not None else c.g.const([value] * n, c.dtype(), [n], "ones" if value else "zeros")


@aten("_native_batch_norm_legit_functional", "_native_batch_norm_legit", "native_batch_norm",
      "_native_batch_norm_legit_no_training", "batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm")
def _batch_norm(c):
    name = c.node.target.__name__.split(".")[0]
    a = list(c.node.args) + [None] * 9
    x, w, b, rm, rv = a[0], a[1], a[2], a[3], a[4]
    no_stats = isinstance(rm, bool)  # _native_batch_norm_legit.no_stats(x, w, b, training, momentum, eps)
    if no_stats:  # batch statistics only (weight standardization): running statistics that nothing reads
        rm, rv, a = None, None, a[:3] + [None, None] + a[3:]
    if name == "_native_batch_norm_legit_no_training":
        training, momentum, eps = False, a[5], a[6]
    elif name == "batch_norm":
        training, momentum, eps = a[5], a[6], a[7]
    else:
        training, momentum, eps = a[5], a[6], a[7]
    if rm is None and not (no_stats and training):
        raise ValueError(f"{c.where()}: batch norm without running statistics is not mapped")
    ch = c.shape(x)[1]
    if not isinstance(ch, int):
        raise ValueError(f"{c.where()}: batch norm over a symbolic channel count is not mapped")
    stats = [_ones_or(c, None, ch, 0.0), _ones_or(c, None, ch, 1.0)] if rm is None else [c.t(rm), c.t(rv)]
    ins = [c.t(x), _ones_or(c, w, ch, 1.0), _ones_or(c, b, ch, 0.0)] + stats
    attrs = {"epsilon": float(eps), "momentum": 1.0 - float(momentum or 0.0)}
    if training:
        attrs["training_mode"] = 1
    y = c.op1("BatchNormalization", ins, attrs)
    vals = c.meta()
    if isinstance(vals, (tuple, list)):  # (y, save_mean, save_invstd[, running_mean, running_var]): only y is read
        return [y] + [None] * (len(vals) - 1)
    return y


@aten("native_layer_norm", "layer_norm")
def _layer_norm(c):
    x, shape = c.arg(0), list(c.arg(1))
    w, b, eps = c.arg(2), c.arg(3), c.arg(4, 1e-5)
    axis = c.rank(x) - len(shape)
    if w is None:  # no scale: decomposed (a synthesized ones scale would train as a parameter)
        y = _layer_norm_decomposed(c, c.t(x), axis, eps)
        y = y if b is None else c.op1("Add", [y, c.t(b)])
    else:
        ins = [c.t(x), c.t(w)] + ([c.t(b)] if b is not None else [])
        y = c.op1("LayerNormalization", ins, {"axis": axis, "epsilon": float(eps)})
    vals = c.meta()
    return [y, None, None] if isinstance(vals, (tuple, list)) else y


def _layer_norm_decomposed(c, x, axis, eps):
    axes = list(range(axis, c.rank(c.arg(0))))
    dt = c.dtype(c.arg(0))
    m = c.op1("ReduceMean", [x], {"axes": axes, "keepdims": 1})
    d = c.op1("Sub", [x, m])
    v = c.op1("ReduceMean", [c.op1("Mul", [d, d])], {"axes": axes, "keepdims": 1})
    s = c.op1("Sqrt", [c.op1("Add", [v, c.scalar(eps, dt)])])
    return c.op1("Div", [d, s])


@aten("rms_norm", "_fused_rms_norm")
def _rms_norm(c):
    x, shape, w = c.arg(0), list(c.arg(1)), c.arg(2)
    eps = c.arg(3)
    if eps is None:
        eps = torch.finfo(c.meta(x).dtype).eps
    axis = c.rank(x) - len(shape)
    dt = c.dtype(x)
    if not c.dynamic:
        ins = [c.t(x)] + ([c.t(w)] if w is not None else [])
        out = c.g.tensor(c.g.fresh(c.node.name), dt, c.concrete_shape(x))
        y = c.op("RMSNormalization", ins, [out], {"axis": axis, "epsilon": float(eps)}, MEMPLAN)[0]
    else:  # declared shapes need concrete dims: the decomposed form, which memplan's fusion turns back into one op
        axes = list(range(axis, c.rank(x)))
        ms = c.op1("ReduceMean", [c.op1("Mul", [c.t(x), c.t(x)])], {"axes": axes, "keepdims": 1})
        r = c.op1("Reciprocal", [c.op1("Sqrt", [c.op1("Add", [ms, c.scalar(eps, dt)])])])
        y = c.op1("Mul", [c.t(x), r])
        y = y if w is None else c.op1("Mul", [y, c.t(w)])
    return [y, None] if isinstance(c.meta(), (tuple, list)) else y


# ---- softmax
@aten("_softmax", "softmax")
def _softmax(c):
    return c.op1("Softmax", [c.x()], {"axis": norm_axis(c.arg(1), c.rank())})


@aten("_log_softmax", "log_softmax")
def _log_softmax(c):
    return c.op1("LogSoftmax", [c.x()], {"axis": norm_axis(c.arg(1), c.rank())})


# ---- dropout
def _dropout(c, x, p, train):
    if not train or p == 0:
        return c.op1("Identity", [x])
    return c.op1("Dropout", [x, c.scalar(float(p), c.dtype(c.arg(0))), c.g.scalar(1, "bool", "training")])


@aten("native_dropout")
def _native_dropout(c):
    y = _dropout(c, c.x(), c.arg(1), c.arg(2, True))
    return [y, None]  # the mask (read only by the backward memplan builds)


@aten("dropout", "dropout_", "feature_dropout", "alpha_dropout")
def _aten_dropout(c):
    return _dropout(c, c.x(), c.arg(1), c.arg(2, True))


# ---- embedding
@aten("embedding")
def _embedding(c):
    return c.op1("Gather", [c.x(0), c.operand(c.arg(1), "int64")], {"axis": 0})


# ---- pooling
def _pool_attrs(c, kernel, stride, padding, ceil_mode, dilation=None):
    nd = len(kernel)
    rep = lambda v, d: [d] * nd if not v else (list(v) * nd if len(v) == 1 else list(v))
    attrs = {"kernel_shape": list(kernel), "strides": rep(stride, None) if stride else list(kernel),
             "pads": rep(padding, 0) * 2, "ceil_mode": int(bool(ceil_mode))}
    if dilation and any(d != 1 for d in dilation):
        attrs["dilations"] = rep(dilation, 1)
    if attrs["strides"] and attrs["strides"][0] is None:
        attrs["strides"] = list(kernel)
    return attrs


@aten("max_pool2d_with_indices", "max_pool2d", "max_pool1d", "max_pool3d", "max_pool3d_with_indices")
def _max_pool(c):
    a = list(c.node.args) + [None] * 6
    k = a[1] if isinstance(a[1], (list, tuple)) else [a[1]] * (c.rank(a[0]) - 2)
    y = c.op1("MaxPool", [c.x()], _pool_attrs(c, k, a[2], a[3], a[5], a[4]))
    if isinstance(c.meta(), (tuple, list)):
        for u in c.node.users:  # torch's indices are per plane, ONNX's flat: only the output may be read
            if u.target is operator.getitem and u.args[1] != 0 and u.users:
                raise ValueError(f"{c.where()}: max pooling indices are read; not mapped")
        return [y, None]
    return y


@aten("avg_pool2d", "avg_pool1d", "avg_pool3d")
def _avg_pool(c):
    a = list(c.node.args) + [None] * 7
    k = a[1] if isinstance(a[1], (list, tuple)) else [a[1]]
    if a[6] is not None:
        raise ValueError(f"{c.where()}: divisor_override is not mapped")
    attrs = _pool_attrs(c, k, a[2], a[3], a[4])
    attrs["count_include_pad"] = int(a[5] if a[5] is not None else True)
    _clip_windows(c, attrs)
    if all(d == 1 for d in c.shape()[2:]) and attrs["kernel_shape"] == c.shape(a[0])[2:] and not any(attrs["pads"]):
        return c.op1("GlobalAveragePool", [c.x()])
    return c.op1("AveragePool", [c.x()], attrs)


def _clip_windows(c, attrs):
    """A window wider than its unpadded input whose output is one element (HF EfficientNet's AvgPool2d(hidden_dim,
    ceil_mode=True)): torch clips it to the input and divides by what it covers, which is a window of the input's
    extent."""
    spatial, out = c.shape(c.arg(0))[2:], c.shape()[2:]
    nd = len(spatial)
    for d in range(nd):
        k, n = attrs["kernel_shape"][d], spatial[d]
        if isinstance(n, int) and k > n and out[d] == 1 and attrs["pads"][d] == 0 and attrs["pads"][d + nd] == 0:
            attrs["kernel_shape"][d] = n
            attrs["strides"][d] = n


@aten("adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_avg_pool1d", "mean_global", "_adaptive_avg_pool3d",
      "adaptive_avg_pool3d")
def _adaptive_avg(c):
    in_shape = c.shape(c.arg(0))
    if not all(isinstance(d, int) for d in in_shape[2:]):
        raise ValueError(f"{c.where()}: adaptive pooling over symbolic spatial dims is not mapped")
    out = list(c.arg(1))
    if all(o == 1 for o in out):
        return c.op1("GlobalAveragePool", [c.x()])
    spatial = in_shape[2:]
    if any(s % o for s, o in zip(spatial, out)):
        raise ValueError(f"{c.where()}: adaptive pooling {spatial} -> {out} with uneven windows is not mapped")
    k = [s // o for s, o in zip(spatial, out)]
    return c.op1("AveragePool", [c.x()], {"kernel_shape": k, "strides": k})


# ---- attention
SDPA_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention")


@aten(*SDPA_OPS)
def _sdpa(c):
    name = c.node.target.__name__.split(".")[0]
    q, k, v = c.arg(0), c.arg(1), c.arg(2)
    if name == "scaled_dot_product_attention":
        mask, p, causal = c.kw("attn_mask", c.arg(3)), c.kw("dropout_p", c.arg(4, 0.0)), c.kw("is_causal", c.arg(5, False))
        gqa = c.kw("enable_gqa", False)
    elif name == "_scaled_dot_product_efficient_attention":
        mask, p, causal, gqa = c.arg(3), c.arg(5, 0.0), c.arg(6, False), False
    else:
        mask, p, causal, gqa = c.kw("attn_mask"), c.arg(3, 0.0), c.arg(4, False), False
    scale = c.kw("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(c.shape(q)[-1])
    ranks = {c.rank(q), c.rank(k), c.rank(v)}
    if ranks == {4}:
        ops = [_Operand(c, a) for a in (q, k, v)]
        m = _Operand(c, mask) if mask is not None else None
        y = _sdpa4(c, *ops, m, p, causal, scale, gqa)
    else:
        y = _sdpa_any_rank(c, q, k, v, mask, p, causal, scale, gqa)
    return y if not isinstance(c.meta(), (tuple, list)) else [y] + [None] * (len(c.meta()) - 1)


class _Operand:
    """An attention operand: its tensor name, dtype and shape (memplan dims, and torch's sizes for symbols)."""

    def __init__(self, c, node=None, name=None, dtype=None, sizes=None):
        self.name = c.t(node) if node is not None else name
        self.dtype = c.dtype(node) if node is not None else dtype
        self.sizes = list(c.meta(node).shape) if node is not None else list(sizes)
        self.shape = [c.conv.dim_of(d) for d in self.sizes]


def _sdpa_any_rank(c, q, k, v, mask, p, causal, scale, gqa):
    """Attention over operands of rank 3, 5 or more ([..., S, D], the leading dims batch-like, the last of them
    heads when the rank is 4 or more): each viewed as 4-D [prod(leading), heads, S, D] around the 4-D attention,
    the result viewed back to the node's shape. A mask is expanded to the query's leading dims first."""
    qm, km, vm = (list(c.meta(a).shape) for a in (q, k, v))
    if len(qm) < 2 or not (len(qm) == len(km) == len(vm)):
        raise ValueError(f"{c.where()}: attention over operands of ranks {len(qm)}, {len(km)}, {len(vm)} is not mapped")
    dims = lambda sizes: [c.conv.dim_of(d) for d in sizes]
    if dims(qm[:-3]) != dims(km[:-3]) or dims(km[:-2]) != dims(vm[:-2]):
        raise ValueError(f"{c.where()}: attention with leading dims {qm[:-2]} vs {km[:-2]} is not mapped")
    # rank 3 with as many key/value as query heads: the first dim batch-like (one head each), so that a symbolic
    # batch folded into it (timm's [B * heads, N, D]) stays out of the heads
    batch_like = len(qm) == 3 and dims(qm[:1]) == dims(km[:1])
    ops = [_as4d(c, c.t(a), c.dtype(a), sizes, batch_like) for a, sizes in ((q, qm), (k, km), (v, vm))]
    m = None
    if mask is not None:
        full = qm[:-1] + [km[-2]]
        mt = c.op1("Expand", [c.t(mask), c.sizes(full)])
        m = _as4d(c, mt, c.dtype(mask), full, batch_like)
    y = _sdpa4(c, *ops, m, p, causal, scale, gqa)
    out = list(c.meta().shape) if not isinstance(c.meta(), (tuple, list)) else list(c.meta()[0].shape)
    return c.op1("Reshape", [y, c.sizes(out)])


def _as4d(c, name, dtype, sizes, batch_like):
    """[..., H, S, D] as [prod(...), H, S, D]; [S, D] as [1, 1, S, D]; [N, S, D] as [N, 1, S, D] when batch_like."""
    if len(sizes) == 2:
        four = [1, 1] + sizes
    elif batch_like:
        four = [sizes[0], 1] + sizes[1:]
    else:
        lead = 1
        for d in sizes[:-3]:
            lead = lead * d
        four = [lead] + sizes[-3:]
    return _Operand(c, name=c.op1("Reshape", [name, c.sizes(four)]), dtype=dtype, sizes=four)


def _sdpa4(c, q, k, v, mask, p, causal, scale, gqa):
    qs, ks, vs = q.shape, k.shape, v.shape
    grouped = gqa or ks[1] == 1  # one key/value head broadcasts over the query heads (multi-query attention)
    if not isinstance(qs[1], int) or not isinstance(ks[1], int) or qs[1] % ks[1] or (qs[1] != ks[1] and not grouped):
        raise ValueError(f"{c.where()}: heads {qs[1]} vs {ks[1]} are not grouped-query attention")
    if c.dynamic or not c.g.fused_attention or not all(isinstance(d, int) for d in qs + vs):
        return _sdpa_decomposed(c, q, k, v, mask, p, causal, scale)
    out = c.g.tensor(c.g.fresh(c.node.name), q.dtype, [qs[0], qs[1], qs[2], vs[3]])
    ins = [q.name, k.name, v.name] + ([mask.name] if mask is not None else [])
    attrs = {"scale": float(scale), "causal": int(bool(causal))}
    if p:
        attrs["dropout_ratio"] = float(p)
        attrs["seed"] = c.g.next_seed()
    eager = c.conv.eager_sdpa.get(c.node) if getattr(c.conv, "eager_sdpa", None) else None
    if eager is not None and eager["q_heads"] == qs[1]:
        # How PyTorch eager calls it, where the trace differs (pytorch_peak_bytes picks the CUDA kernel from it)
        attrs["pytorch_kv_heads"] = eager["kv_heads"]
        attrs["pytorch_mask"] = int(eager["mask"])
    return c.op("FusedAttention", ins, [out], attrs, MEMPLAN)[0]


def _sdpa_decomposed(c, q, k, v, mask, p, causal, scale):
    """softmax(scale Q K^T + mask) V in ONNX ops (the form memplan's attention fusion matches), with K and V
    repeated per group for grouped-query attention. Q and K^T are each scaled by sqrt(scale), as the ONNX exporters
    write SDPA (aten's math backend): the form pytorch_peak_bytes takes for an SDPA call, where attention scaled
    on the scores is a model's own matmul, softmax, matmul."""
    dt = q.dtype
    qs, ks = q.shape, k.shape
    kk, vv = k.name, v.name
    if qs[1] != ks[1]:
        n = qs[1] // ks[1]
        kk, vv = (_repeat_heads(c, t, ks, n) for t in (kk, vv))
    kt = c.op1("Transpose", [kk], {"perm": [0, 1, 3, 2]})
    if scale > 0:
        root = math.sqrt(float(scale))
        s = c.op1("MatMul", [c.op1("Mul", [q.name, c.scalar(root, dt)]), c.op1("Mul", [kt, c.scalar(root, dt)])])
    else:  # no square root: the scores scaled
        s = c.op1("Mul", [c.op1("MatMul", [q.name, kt]), c.scalar(float(scale), dt)])
    if causal:
        sq, sk = qs[2], ks[2]
        if isinstance(sq, int) and isinstance(sk, int):
            m = c.g.const(torch.tril(torch.ones(sq, sk, dtype=torch.bool)).flatten().tolist(), "bool", [sq, sk],
                          "causal_mask")
        else:  # torch's is_causal mask (tril, top-left aligned) of the symbolic sizes
            size = c.sizes([q.sizes[2], k.sizes[2]])
            m = c.op1("Trilu", [c.op1("Expand", [c.g.scalar(1, "bool", "c"), size])], {"upper": 0})
        s = c.op1("Where", [m, s, c.scalar(float("-inf"), dt)])
    if mask is not None:
        s = c.op1("Where", [mask.name, s, c.scalar(float("-inf"), dt)]) if mask.dtype == "bool" \
            else c.op1("Add", [s, mask.name])
    prob = c.op1("Softmax", [s], {"axis": 3})
    if p:
        prob = c.op1("Dropout", [prob, c.scalar(float(p), dt), c.g.scalar(1, "bool", "training")])
    return c.op1("MatMul", [prob, vv])


def _repeat_heads(c, t, shape, n):
    b, h, s, d = shape
    u = c.op1("Unsqueeze", [t, c.g.i64([2], "axes")])
    e = c.op1("Expand", [u, c.g.i64([1, h, n, 1, d], "shape")])
    return c.op1("Reshape", [e, c.g.i64([0, h * n, -1, d] if not isinstance(s, int) else [0, h * n, s, d], "shape")])

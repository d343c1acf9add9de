"""ATen -> memplan op mapping, the rest of PyTorch's core ATen opset: creation (full, empty, rand), indexing and
scatter (gather, index_select, index_put, slice/select_scatter, copy), padding, cumulative and arg reductions,
group and vector norms, resampling, and the extra elementwise math. Data-dependent ops (nonzero,
masked_scatter) are planned at the example's sizes and recorded as approximations (export_graph warns)."""
import math

import torch

from .aten_ops import _dims, aten
from .convert import FLOAT_DTYPES, norm_axis, onnx_dtype

I64_MAX = (1 << 63) - 1


def _overload(c):
    return getattr(c.node.target, "_overloadname", "default")


# ---- creation: the values of a constant fill, shaped by the node's own (possibly symbolic) output shape
def _filled(c, value):
    return c.op1("Expand", [c.scalar(value), c.out_sizes()])


@aten("full")
def _full(c):
    v = c.arg(1)
    if isinstance(v, torch.fx.Node):
        return c.op1("Expand", [c.operand(v, c.dtype()), c.out_sizes()])
    return _filled(c, v)


@aten("empty", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "zeros", "new_zeros")
def _empty(c):  # uninitialized memory, planned as zeros
    return _filled(c, 0)


@aten("ones", "new_ones")
def _ones(c):
    return _filled(c, 1)


@aten("new_full")
def _new_full(c):
    return _filled(c, c.arg(2))


@aten("fill", "fill_")
def _fill(c):
    v = c.arg(1)
    return c.op1("Expand", [c.operand(v, c.dtype()) if isinstance(v, torch.fx.Node) else c.scalar(v), c.out_sizes()])


@aten("scalar_tensor")
def _scalar_tensor(c):
    v = c.arg(0)
    return c.operand(v, c.dtype()) if isinstance(v, torch.fx.Node) else c.scalar(v)


@aten("rand", "randn", "rand_like", "randn_like")
def _rand(c):
    name = c.node.target.__name__.split(".")[0]
    dt = c.dtype()
    zeros = c.op1("Expand", [c.scalar(0), c.out_sizes()])
    if name.startswith("randn"):
        return c.op1("RandomNormalLike", [zeros], {"dtype": onnx_dtype(dt), "mean": 0.0, "scale": 1.0})
    return c.op1("RandomUniformLike", [zeros], {"dtype": onnx_dtype(dt), "low": 0.0, "high": 1.0})


@aten("uniform", "uniform_")
def _uniform(c):  # x's shape filled from U[from, to)
    lo, hi = c.arg(1, c.kw("from", 0.0)), c.arg(2, c.kw("to", 1.0))
    return c.op1("RandomUniformLike", [c.x()], {"dtype": onnx_dtype(c.dtype()), "low": float(lo), "high": float(hi)})


@aten("exponential", "exponential_")
def _exponential(c):  # inverse-CDF sampling: -log(1 - U[0, 1)) / lambd
    dt = c.dtype()
    u = c.op1("RandomUniformLike", [c.x()], {"dtype": onnx_dtype(dt), "low": 0.0, "high": 1.0})
    e = c.op1("Neg", [c.op1("Log", [c.op1("Sub", [c.scalar(1.0, dt), u])])])
    lambd = float(c.arg(1, c.kw("lambd", 1.0)))
    return e if lambd == 1.0 else c.op1("Div", [e, c.scalar(lambd, dt)])


@aten("copy", "copy_")
def _copy(c):  # src broadcast into self's shape and dtype
    y = c.operand(c.arg(1), c.dtype())
    if c.meta(c.arg(1)) is not None and list(c.meta(c.arg(1)).shape) == list(c.meta().shape):
        return c.op1("Identity", [y]) if y == c.t(c.arg(1)) else y
    return c.op1("Expand", [y, c.out_sizes()])


# ---- cumulative, arg and logical reductions
@aten("cumsum")
def _cumsum(c):
    dt = c.dtype()
    x = c.operand(c.arg(0), dt)
    return c.op1("CumSum", [x, c.g.scalar(norm_axis(c.arg(1), c.rank()), "int64", "axis")])


def _arg_reduce(onnx_type):
    def fn(c):
        dim, keep = c.arg(1), int(bool(c.arg(2, c.kw("keepdim", False))))
        x = c.x()
        if dim is None:
            x = c.op1("Reshape", [x, c.g.i64([-1], "shape")])
            dim, keep = 0, 0
        y = c.op1(onnx_type, [x], {"axis": norm_axis(dim, max(c.rank(c.arg(0)), 1)), "keepdims": keep})
        return y
    return fn


aten("argmax")(_arg_reduce("ArgMax"))
aten("argmin")(_arg_reduce("ArgMin"))


def _max_min(reduce_type, arg_type, binary):
    def fn(c):
        ov = _overload(c)
        if ov in ("other", "out") or isinstance(c.arg(1), torch.fx.Node):
            dt = c.dtype()
            return c.op1(binary, [c.operand(c.arg(0), dt), c.operand(c.arg(1), dt)])
        x = c.x()
        rank = c.rank(c.arg(0))
        if ov in ("dim", "names_dim") or isinstance(c.arg(1), int):
            axis = norm_axis(c.arg(1), rank)
            keep = int(bool(c.arg(2, c.kw("keepdim", False))))
            v = c.op1(reduce_type, [x], {"axes": [axis], "keepdims": keep})
            i = c.op1(arg_type, [x], {"axis": axis, "keepdims": keep})
            return [v, i]
        return c.op1(reduce_type, [x], {"axes": list(range(rank)), "keepdims": 0})
    return fn


aten("max")(_max_min("ReduceMax", "ArgMax", "Max"))
aten("min")(_max_min("ReduceMin", "ArgMin", "Min"))


def _any_all(reduce_type):
    def fn(c):
        rank = c.rank(c.arg(0))
        axes = _dims(c, 1, rank)
        keep = int(bool(c.kw("keepdim", c.arg(2, False))))
        f = c.cast(c.x(), c.dtype(c.arg(0)), "float32")
        y = c.op1(reduce_type, [f], {"axes": axes, "keepdims": keep})
        return c.op1("Cast", [y], {"to": onnx_dtype("bool")})
    return fn


aten("any")(_any_all("ReduceMax"))
aten("all")(_any_all("ReduceMin"))


@aten("prod")
def _prod(c):
    rank = c.rank(c.arg(0))
    dim = c.arg(1) if isinstance(c.arg(1), int) else None
    axes = list(range(rank)) if dim is None else [norm_axis(dim, rank)]
    keep = int(bool(c.arg(2, c.kw("keepdim", False)))) if dim is not None else 0
    x = c.cast(c.x(), c.dtype(c.arg(0)), c.dtype())
    return c.op1("ReduceProd", [x, c.g.i64(axes, "axes")], {"keepdims": keep})


@aten("topk")
def _topk(c):
    k, dim = c.arg(1), c.arg(2, -1)
    largest, srt = c.arg(3, True), c.arg(4, True)
    outs = c.op("TopK", [c.x(), c.i64_1d(k)], 2, {"axis": norm_axis(dim, c.rank(c.arg(0))),
                                                   "largest": int(bool(largest)), "sorted": int(bool(srt))})
    return outs


# ---- indexing, gathering and scattering
@aten("gather")
def _gather(c):
    return c.op1("GatherElements", [c.x(), c.operand(c.arg(2), "int64")], {"axis": norm_axis(c.arg(1), c.rank())})


@aten("index_select")
def _index_select(c):
    return c.op1("Gather", [c.x(), c.operand(c.arg(2), "int64")], {"axis": norm_axis(c.arg(1), c.rank())})


@aten("scatter", "scatter_", "scatter_add", "scatter_reduce")
def _scatter(c):
    name = c.node.target.__name__.split(".")[0]
    rank = c.rank()
    axis = norm_axis(c.arg(1), rank)
    index = c.operand(c.arg(2), "int64")
    src = c.arg(3)
    if isinstance(src, torch.fx.Node) and c.meta(src).dim() > 0:
        upd = c.operand(src, c.dtype())
    else:  # a scalar value: broadcast to the index's shape
        upd = c.op1("Expand", [c.operand(src, c.dtype()), c.op1("Shape", [index])])
    reduce = None
    if name == "scatter_add":
        reduce = "add"
    elif name == "scatter_reduce":
        reduce = c.arg(4)
        if c.kw("include_self", c.arg(5, True)) is False:
            c.approximate("scatter_reduce(include_self=False)")
    else:
        reduce = c.kw("reduce", c.arg(4))
    red = {None: "none", "add": "add", "sum": "add", "multiply": "mul", "prod": "mul", "amax": "max", "amin": "min",
           "mean": None}[reduce]
    if red is None:
        raise ValueError(f"{c.where()}: scatter with reduce='mean' is not mapped")
    attrs = {"axis": axis}
    if red != "none":
        attrs["reduction"] = red
    return c.op1("ScatterElements", [c.x(), index, upd], attrs)


@aten("index_add", "index_add_")
def _index_add(c):  # scatter-add of source rows along dim: the index expanded over the source's other axes
    rank = c.rank()
    axis = norm_axis(c.arg(1), rank)
    src = c.operand(c.arg(3), c.dtype())
    alpha = c.kw("alpha", c.arg(4, 1))
    if alpha != 1:
        src = c.op1("Mul", [src, c.scalar(alpha)])
    shape = [1] * rank
    shape[axis] = -1
    idx = c.op1("Reshape", [c.operand(c.arg(2), "int64"), c.g.i64(shape, "shape")])
    idx = c.op1("Expand", [idx, c.op1("Shape", [src])])
    return c.op1("ScatterElements", [c.x(), idx, src], {"axis": axis, "reduction": "add"})


@aten("index_put", "index_put_", "_unsafe_index_put")
def _index_put(c):
    x, indices, values = c.arg(0), list(c.arg(1)), c.arg(2)
    accumulate = bool(c.arg(3, False))
    dt = c.dtype()
    rank = c.rank()
    if len(indices) == 1 and indices[0] is not None and c.dtype(indices[0]) == "bool":
        mask = indices[0]
        m = c.t(mask)
        mr = c.rank(mask)
        if mr < rank:
            m = c.op1("Unsqueeze", [m, c.g.i64(list(range(mr, rank)), "axes")])
        vmeta = c.meta(values)
        if vmeta.numel() != 1:  # values laid out over the mask's True elements: a data-dependent layout
            c.approximate("index_put with a boolean mask and tensor values")
            v = c.op1("Expand", [c.op1("ReduceMean", [c.operand(values, dt)], {"keepdims": 0}), c.out_sizes()])
        else:
            v = c.op1("Reshape", [c.operand(values, dt), c.g.i64([], "shape")]) if vmeta.dim() else c.operand(values, dt)
        if accumulate:
            return c.op1("Add", [c.x(), c.op1("Where", [m, v, c.scalar(0)])])
        return c.op1("Where", [m, v, c.x()])
    # Sliced axes (None) before or between the indices: the indexed axes moved first (a Transpose), the values laid
    # out as torch's x[indices] (broadcast index dims in place of adjacent indexed axes, else first) moved likewise,
    # one ScatterND over the leading axes, and the axes moved back.
    full = indices + [None] * (rank - len(indices))
    axes = [a for a, i in enumerate(full) if i is not None]
    k = len(axes)
    shapes = [list(c.meta(full[a]).shape) for a in axes]
    try:
        bshape = list(torch.broadcast_shapes(*[tuple(s) for s in shapes]))
    except Exception as e:  # noqa: BLE001 - symbolic index shapes
        raise ValueError(f"{c.where()}: index_put over index shapes {shapes} is not mapped") from e
    perm = axes + [a for a in range(rank) if a not in axes]
    moved = perm != list(range(rank))
    sizes = list(c.meta().shape)
    xs = [c.shape()[a] for a in perm]
    x = c.op1("Transpose", [c.x()], {"perm": perm}) if moved else c.x()
    parts = []
    for a, n in zip(axes, xs[:k]):
        t = c.operand(full[a], "int64")
        if isinstance(n, int):
            zero = c.g.scalar(0, "int64", "c")
            t = c.op1("Where", [c.op1("Less", [t, zero]), c.op1("Add", [t, c.g.scalar(n, "int64", "c")]), t])
        t = c.op1("Expand", [t, c.sizes(bshape)])
        parts.append(c.op1("Unsqueeze", [t, c.g.i64([-1], "axes")]))
    idx = parts[0] if k == 1 else c.op1("Concat", parts, {"axis": -1})
    a0, nb = axes[0], len(bshape)
    if axes == list(range(a0, a0 + k)):  # adjacent: x[indices] has the index dims in their place
        laid = sizes[:a0] + bshape + sizes[a0 + k:]
        upd = c.op1("Expand", [c.operand(values, dt), c.sizes(laid)])
        if a0:
            upd = c.op1("Transpose", [upd], {"perm": list(range(a0, a0 + nb)) + list(range(a0)) +
                                              list(range(a0 + nb, len(laid)))})
    else:
        upd = c.op1("Expand", [c.operand(values, dt), c.sizes(bshape + [sizes[a] for a in perm[k:]])])
    attrs = {"reduction": "add"} if accumulate else None
    y = c.op1("ScatterND", [x, idx, upd], attrs)
    if moved:
        y = c.op1("Transpose", [y], {"perm": [perm.index(a) for a in range(rank)]})
    return y


def _slice(c, x, axis, start, end):
    return c.op1("Slice", [x, c.i64_1d(start), c.i64_1d(end), c.g.i64([axis], "axes")])


@aten("slice_scatter")
def _slice_scatter(c):
    rank = c.rank()
    axis = norm_axis(c.kw("dim", c.arg(2, 0)), rank)
    start, end, step = c.kw("start", c.arg(3)), c.kw("end", c.arg(4)), c.kw("step", c.arg(5, 1))
    start = 0 if start is None else start
    size = c.shape(c.arg(0))[axis]
    if isinstance(end, int) and isinstance(size, int):
        end = min(end, size)
    if isinstance(start, int) and start < 0 and isinstance(size, int):
        start += size
    if isinstance(end, int) and end < 0 and isinstance(size, int):
        end += size
    src = c.operand(c.arg(1), c.dtype())
    x = c.x()
    if step == 1:
        parts = []
        if not (isinstance(start, int) and start == 0):
            parts.append(_slice(c, x, axis, 0, start))
        parts.append(src)
        if not (end is None or (isinstance(end, int) and isinstance(size, int) and end >= size) or end == I64_MAX):
            parts.append(_slice(c, x, axis, end, I64_MAX))
        return parts[0] if len(parts) == 1 else c.op1("Concat", parts, {"axis": axis})
    n = c.shape(c.arg(1))[axis]
    if not isinstance(start, int) or not isinstance(n, int):
        raise ValueError(f"{c.where()}: strided slice_scatter with symbolic bounds is not mapped")
    shape = [1] * rank
    shape[axis] = n
    idx = c.g.const(list(range(start, start + n * step, step)), "int64", shape, "index")
    idx = c.op1("Expand", [idx, c.op1("Shape", [src])])
    return c.op1("ScatterElements", [x, idx, src], {"axis": axis})


@aten("select_scatter")
def _select_scatter(c):
    rank = c.rank()
    axis, index = norm_axis(c.arg(2), rank), c.arg(3)
    size = c.shape(c.arg(0))[axis]
    if isinstance(index, int) and index < 0:
        if not isinstance(size, int):
            raise ValueError(f"{c.where()}: negative index over a symbolic dim is not mapped")
        index += size
    src = c.op1("Unsqueeze", [c.operand(c.arg(1), c.dtype()), c.g.i64([axis], "axes")])
    x = c.x()
    parts = []
    if index != 0:
        parts.append(_slice(c, x, axis, 0, index))
    parts.append(src)
    if not (isinstance(size, int) and isinstance(index, int) and index + 1 >= size):
        nxt = index + 1 if isinstance(index, int) else c.op1("Add", [c.operand(index, "int64"), c.g.scalar(1, "int64", "c")])
        parts.append(c.op1("Slice", [x, c.i64_1d(nxt) if isinstance(nxt, int) else
                                     c.op1("Reshape", [nxt, c.g.i64([1], "shape")]),
                                     c.g.i64([I64_MAX], "ends"), c.g.i64([axis], "axes")]))
    return parts[0] if len(parts) == 1 else c.op1("Concat", parts, {"axis": axis})


@aten("masked_scatter", "masked_scatter_")
def _masked_scatter(c):  # source's elements land where mask is True: data-dependent, planned as a broadcast
    c.approximate("masked_scatter")
    dt = c.dtype()
    src = c.op1("ReduceMean", [c.operand(c.arg(2), dt)], {"keepdims": 0})
    return c.op1("Where", [c.operand(c.arg(1), "bool"), c.op1("Expand", [src, c.out_sizes()]), c.x()])


@aten("nonzero", "nonzero_static", "argwhere")
def _nonzero(c):  # its count is data-dependent: the example's count (from draft_export), the indices as zeros
    c.approximate("nonzero")
    return c.op1("Expand", [c.g.scalar(0, "int64", "c"), c.out_sizes()])


@aten("flip")
def _flip(c):
    rank = c.rank()
    axes = [norm_axis(a, rank) for a in c.arg(1)]
    n = len(axes)
    return c.op1("Slice", [c.x(), c.g.i64([-1] * n, "starts"), c.g.i64([-I64_MAX] * n, "ends"),
                           c.g.i64(axes, "axes"), c.g.i64([-1] * n, "steps")])


@aten("unfold")
def _unfold(c):  # windows of `size` every `step` along dim, as a Gather of constant indices, the window axis last
    rank = c.rank(c.arg(0))
    axis = norm_axis(c.arg(1), max(rank, 1))
    size, step = c.arg(2), c.arg(3)
    length = c.shape(c.arg(0))[axis]
    if not isinstance(length, int):
        raise ValueError(f"{c.where()}: unfold along a symbolic dim is not mapped")
    n = (length - size) // step + 1
    idx = [w * step + j for w in range(n) for j in range(size)]
    y = c.op1("Gather", [c.x(), c.g.const(idx, "int64", [n, size], "index")], {"axis": axis})
    perm = list(range(axis + 1)) + list(range(axis + 2, rank + 1)) + [axis + 1]
    return y if perm == list(range(rank + 1)) else c.op1("Transpose", [y], {"perm": perm})


@aten("diagonal")
def _diagonal(c):  # dim1, dim2 moved last, merged, the diagonal gathered (appended as the last axis, as torch)
    rank = c.rank(c.arg(0))
    off, d1, d2 = c.arg(1, 0), norm_axis(c.arg(2, 0), rank), norm_axis(c.arg(3, 1), rank)
    shape = c.shape(c.arg(0))
    n, m = shape[d1], shape[d2]
    if not isinstance(n, int) or not isinstance(m, int):
        raise ValueError(f"{c.where()}: diagonal over symbolic dims is not mapped")
    perm = [i for i in range(rank) if i not in (d1, d2)] + [d1, d2]
    x = c.x() if perm == list(range(rank)) else c.op1("Transpose", [c.x()], {"perm": perm})
    lead = [shape[i] if isinstance(shape[i], int) else 0 for i in perm[:-2]]
    x = c.op1("Reshape", [x, c.g.i64(lead + [n * m], "shape")])
    idx = [i * m + i + off for i in range(n) if 0 <= i + off < m] if off >= 0 else \
        [(i - off) * m + i for i in range(m) if 0 <= i - off < n]
    return c.op1("Gather", [x, c.g.const(idx, "int64", [len(idx)], "index")], {"axis": rank - 2})


# ---- padding
def _torch_pads(c, pad, rank):
    """torch's pad list (last axis first, begin/end pairs) as ONNX pads (all begins, then all ends)."""
    if any(not isinstance(p, int) for p in pad):
        raise ValueError(f"{c.where()}: symbolic padding is not mapped")
    begins, ends = [0] * rank, [0] * rank
    for k in range(len(pad) // 2):
        axis = rank - 1 - k
        begins[axis], ends[axis] = pad[2 * k], pad[2 * k + 1]
    return begins + ends


def _crop(c, x, pads, rank):
    """The negative pads of `pads` (ONNX layout) as a Slice of `x` (a crop, whose gradient memplan has), and the
    pads left (each at least 0)."""
    begins, ends = pads[:rank], pads[rank:]
    axes = [a for a in range(rank) if begins[a] < 0 or ends[a] < 0]
    if not axes:
        return x, pads
    starts = [max(0, -begins[a]) for a in axes]
    stops = [ends[a] if ends[a] < 0 else I64_MAX for a in axes]
    x = c.op1("Slice", [x, c.g.i64(starts, "starts"), c.g.i64(stops, "ends"), c.g.i64(axes, "axes")])
    return x, [max(0, p) for p in pads]


@aten("constant_pad_nd", "pad")
def _constant_pad(c):
    rank = c.rank()
    pads = _torch_pads(c, list(c.arg(1)), rank)
    mode = c.kw("mode", c.arg(2, "constant")) if c.node.target.__name__.startswith("pad") else "constant"
    value = c.kw("value", c.arg(3 if mode != "constant" or c.node.target.__name__.startswith("pad") else 2, 0)) or 0
    if mode != "constant":
        return c.op1("Pad", [c.x(), c.g.i64(pads, "pads")], {"mode": {"reflect": "reflect", "replicate": "edge",
                                                                      "circular": "wrap"}[mode]})
    x, pads = _crop(c, c.x(), pads, rank)  # torch crops where a pad is negative
    if not any(pads):
        return x if x != c.x() else c.op1("Identity", [x])
    return c.op1("Pad", [x, c.g.i64(pads, "pads"), c.scalar(value)], {"mode": "constant"})


def _mode_pad(mode):
    def fn(c):
        return c.op1("Pad", [c.x(), c.g.i64(_torch_pads(c, list(c.arg(1)), c.rank()), "pads")], {"mode": mode})
    return fn


for _n in ("reflection_pad1d", "reflection_pad2d", "reflection_pad3d"):
    aten(_n)(_mode_pad("reflect"))
for _n in ("replication_pad1d", "replication_pad2d", "replication_pad3d"):
    aten(_n)(_mode_pad("edge"))


# ---- norms
@aten("native_group_norm", "group_norm")
def _group_norm(c):
    name = c.node.target.__name__.split(".")[0]
    x = c.arg(0)
    if name == "group_norm":
        groups, w, b, eps = c.arg(1), c.arg(2), c.arg(3), c.arg(4, 1e-5)
    else:
        w, b, groups, eps = c.arg(1), c.arg(2), c.arg(6), c.arg(7)
    dt = c.dtype(x)
    rank = c.rank(x)
    g = c.op1("Reshape", [c.t(x), c.g.i64([0, int(groups), -1], "shape")])
    m = c.op1("ReduceMean", [g], {"axes": [2], "keepdims": 1})
    d = c.op1("Sub", [g, m])
    v = c.op1("ReduceMean", [c.op1("Mul", [d, d])], {"axes": [2], "keepdims": 1})
    y = c.op1("Div", [d, c.op1("Sqrt", [c.op1("Add", [v, c.scalar(float(eps), dt)])])])
    y = c.op1("Reshape", [y, c.op1("Shape", [c.t(x)])])
    per_channel = [-1] + [1] * (rank - 2)
    if w is not None:
        y = c.op1("Mul", [y, c.op1("Reshape", [c.t(w), c.g.i64(per_channel, "shape")])])
    if b is not None:
        y = c.op1("Add", [y, c.op1("Reshape", [c.t(b), c.g.i64(per_channel, "shape")])])
    return [y, None, None] if isinstance(c.meta(), (tuple, list)) else y


@aten("linalg_vector_norm", "norm")
def _vector_norm(c):
    x, p = c.arg(0), c.kw("ord", c.arg(1, 2))
    p = 2 if p is None else p
    rank = c.rank(x)
    axes = _dims(c, 2, rank)
    keep = int(bool(c.kw("keepdim", c.arg(3, False))))
    dt = c.dtype()
    t = c.cast(c.t(x), c.dtype(x), dt)
    if p == 2:
        return c.op1("ReduceL2", [t], {"axes": axes, "keepdims": keep})
    a = c.op1("Abs", [t])
    if p == float("inf"):
        return c.op1("ReduceMax", [a], {"axes": axes, "keepdims": keep})
    if p == float("-inf"):
        return c.op1("ReduceMin", [a], {"axes": axes, "keepdims": keep})
    if p == 1:
        return c.op1("ReduceSum", [a, c.g.i64(axes, "axes")], {"keepdims": keep})
    s = c.op1("ReduceSum", [c.op1("Pow", [a, c.scalar(float(p), dt)]), c.g.i64(axes, "axes")], {"keepdims": keep})
    return c.op1("Pow", [s, c.scalar(1.0 / float(p), dt)])


# ---- resampling
def _resize(mode):
    def fn(c):
        name = c.node.target.__name__
        ins, outs = c.shape(c.arg(0)), c.shape()
        attrs = {"mode": mode}
        if mode == "nearest":
            attrs.update({"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
        else:
            align = c.arg(2) if "vec" in name or len(c.node.args) > 2 else False
            align = c.kw("align_corners", align)
            attrs["coordinate_transformation_mode"] = "align_corners" if align else "pytorch_half_pixel"
        spatial = list(zip(ins[2:], outs[2:]))
        if all(isinstance(i, int) and isinstance(o, int) and o % i == 0 for i, o in spatial):
            scales = c.g.const([1.0, 1.0] + [o / i for i, o in spatial], "float32", None, "scales")
            return c.op1("Resize", [c.x(), "", scales], attrs)
        return c.op1("Resize", [c.x(), "", "", c.out_sizes()], attrs)
    return fn


for _n in ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact2d"):
    aten(_n)(_resize("nearest"))
for _n in ("upsample_bilinear2d", "upsample_linear1d", "upsample_trilinear3d", "_upsample_bilinear2d_aa"):
    aten(_n)(_resize("linear"))
aten("upsample_bicubic2d")(_resize("cubic"))


# ---- elementwise math beyond aten_ops'
def _unary(onnx_type):
    return lambda c: c.op1(onnx_type, [c.operand(c.arg(0), c.dtype())])


for _n, _o in {"acos": "Acos", "asin": "Asin", "atan": "Atan", "acosh": "Acosh", "asinh": "Asinh", "atanh": "Atanh",
               "cosh": "Cosh", "sinh": "Sinh", "tan": "Tan"}.items():
    aten(_n)(_unary(_o))
aten("isinf")(lambda c: c.op1("IsInf", [c.x()]))
aten("isnan")(lambda c: c.op1("IsNaN", [c.x()]))


@aten("trunc")
def _trunc(c):
    x = c.operand(c.arg(0), c.dtype())
    return c.op1("Mul", [c.op1("Sign", [x]), c.op1("Floor", [c.op1("Abs", [x])])])


def _log_base(base):
    def fn(c):
        x = c.operand(c.arg(0), c.dtype())
        return c.op1("Div", [c.op1("Log", [x]), c.scalar(math.log(base))])
    return fn


aten("log10")(_log_base(10.0))
aten("log2")(_log_base(2.0))
aten("log1p")(lambda c: c.op1("Log", [c.op1("Add", [c.operand(c.arg(0), c.dtype()), c.scalar(1.0)])]))
aten("expm1")(lambda c: c.op1("Sub", [c.op1("Exp", [c.operand(c.arg(0), c.dtype())]), c.scalar(1.0)]))


@aten("atan2")
def _atan2(c):  # atan(y / x) moved to the quadrant of (x, y)
    dt = c.dtype()
    y, x = c.operand(c.arg(0), dt), c.operand(c.arg(1), dt)
    a = c.op1("Atan", [c.op1("Div", [y, x])])
    zero = c.scalar(0.0)
    pi = c.op1("Where", [c.op1("GreaterOrEqual", [y, zero]), c.scalar(math.pi), c.scalar(-math.pi)])
    return c.op1("Add", [a, c.op1("Where", [c.op1("Less", [x, zero]), pi, zero])])


def _mod(floor):
    def fn(c):
        dt = c.dtype()
        a, b = c.operand(c.arg(0), dt), c.operand(c.arg(1), dt)
        if dt not in FLOAT_DTYPES:
            return c.op1("Mod", [a, b], {"fmod": 0 if floor else 1})
        q = c.op1("Div", [a, b])
        q = c.op1("Floor", [q]) if floor else c.op1("Mul", [c.op1("Sign", [q]), c.op1("Floor", [c.op1("Abs", [q])])])
        return c.op1("Sub", [a, c.op1("Mul", [q, b])])
    return fn


aten("fmod")(_mod(False))
aten("remainder")(_mod(True))


def _xor(c):
    if c.dtype() == "bool":
        return c.op1("Xor", [c.operand(c.arg(0), "bool"), c.operand(c.arg(1), "bool")])
    dt = c.dtype()
    return c.op1("BitwiseXor", [c.operand(c.arg(0), dt), c.operand(c.arg(1), dt)])


aten("bitwise_xor", "logical_xor")(_xor)

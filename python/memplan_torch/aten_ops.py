"""ATen -> memplan op mapping: elementwise math, comparisons, reductions and layout ops (views, slices, joins).

Each converter takes a Context (convert.py) and returns the output tensor name, or a list for ops with
several outputs. The table is keyed by the ATen overload packet name (aten.add.Tensor -> "add").
"""
import torch

from .convert import FLOAT_DTYPES, norm_axis, onnx_dtype

OPS = {}

_BACKWARD = ("a backward kernel: memplan builds the backward from the forward graph itself (its training builder), "
             "and a forward capture never holds one")
_SYMBOLIC = ("a symbolic int, no tensor: its value is written from its sympy expression over the inputs' Shape "
             "where a tensor op reads it")
# Core ATen ops (torch.Tag.core) memplan does not map, each with the reason; export_graph raises UnmappedOps
# naming them. tests/python/test_torch_core_aten.py fails on a core op in neither OPS nor this table.
REFUSED = {
    "randperm": "a random permutation: no memplan op (no gradient; build it outside the captured model)",
    "_local_scalar_dense": "Tensor.item(): a Python scalar, no tensor; what reads it is data-dependent",
    "_embedding_bag": "no memplan op for bag reductions (per-bag offsets are data-dependent)",
    "_cdist_forward": "no memplan op for pairwise distances (write it as matmul and norms)",
    "_pdist_forward": "no memplan op for condensed pairwise distances",
    "_fft_r2c": "no memplan FFT op for one-sided real transforms (_fft_c2c is mapped: aten_complex.py)",
    "_fft_c2r": "no memplan FFT op for one-sided real transforms (_fft_c2c is mapped: aten_complex.py)",
    "col2im": "no memplan fold (col2im) op",
    "grid_sampler_2d": "no memplan grid-sample op (ONNX GridSample has no memplan shape or backward rule)",
    "convolution_backward": _BACKWARD,
    "avg_pool2d_backward": _BACKWARD,
    "_adaptive_avg_pool2d_backward": _BACKWARD,
    "max_pool2d_with_indices_backward": _BACKWARD,
    "embedding_dense_backward": _BACKWARD,
    "native_group_norm_backward": _BACKWARD,
    "native_layer_norm_backward": _BACKWARD,
    "sym_size": _SYMBOLIC,
    "sym_numel": _SYMBOLIC,
    "sym_stride": _SYMBOLIC,
    "sym_storage_offset": _SYMBOLIC,
}


def aten(*names):
    def reg(fn):
        for n in names:
            OPS[n] = fn
        return fn
    return reg


def _promoted(c):
    return c.dtype()  # the node's own output dtype: torch's type promotion already applied


# ---- elementwise arithmetic
def _binary(onnx_type, compute_dtype=None):
    def fn(c):
        dt = compute_dtype(c) if compute_dtype else _promoted(c)
        a, b = c.arg(0), c.arg(1)
        alpha = c.kw("alpha", 1)
        bb = c.operand(b, dt)
        if alpha != 1:
            bb = c.op1("Mul", [bb, c.scalar(alpha, dt)])
        return c.op1(onnx_type, [c.operand(a, dt), bb])
    return fn


aten("add", "add_")(_binary("Add"))
aten("sub", "sub_")(_binary("Sub"))
aten("mul", "mul_")(_binary("Mul"))
aten("maximum")(_binary("Max"))
aten("minimum")(_binary("Min"))


@aten("rsub")
def _rsub(c):  # other - alpha * self
    dt = c.dtype()
    x = c.operand(c.arg(0), dt)
    alpha = c.kw("alpha", c.arg(2, 1))
    if alpha != 1:
        x = c.op1("Mul", [x, c.scalar(alpha, dt)])
    return c.op1("Sub", [c.operand(c.arg(1), dt), x])


@aten("div", "div_")
def _div(c):
    mode = c.kw("rounding_mode")
    dt = c.dtype()
    if mode is None:
        return c.op1("Div", [c.operand(c.arg(0), dt), c.operand(c.arg(1), dt)])
    a, b = c.operand(c.arg(0), dt), c.operand(c.arg(1), dt)
    if dt not in FLOAT_DTYPES:
        if mode == "trunc":  # integer Div truncates toward zero, as C
            return c.op1("Div", [a, b])
        # floor: a minus its floor modulus (the divisor's sign, Python's %) divides exactly
        return c.op1("Div", [c.op1("Sub", [a, c.op1("Mod", [a, b], {"fmod": 0})]), b])
    q = c.op1("Div", [a, b])
    if mode == "floor":
        return c.op1("Floor", [q])
    return c.op1("Mul", [c.op1("Sign", [q]), c.op1("Floor", [c.op1("Abs", [q])])])  # trunc


@aten("pow")
def _pow(c):
    dt = c.dtype()
    base, e = c.arg(0), c.arg(1)
    if not isinstance(base, torch.fx.Node):  # scalar ** tensor
        return c.op1("Pow", [c.scalar(base, dt), c.operand(e, dt)])
    return c.op1("Pow", [c.operand(base, dt), c.operand(e, dt)])


def _unary(onnx_type):
    return lambda c: c.op1(onnx_type, [c.operand(c.arg(0), c.dtype())])


for _n, _o in {"relu": "Relu", "relu_": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
               "sqrt": "Sqrt", "neg": "Neg", "reciprocal": "Reciprocal", "erf": "Erf", "sin": "Sin", "cos": "Cos",
               "abs": "Abs", "floor": "Floor", "ceil": "Ceil", "sign": "Sign", "round": "Round"}.items():
    aten(_n)(_unary(_o))


@aten("rsqrt")
def _rsqrt(c):  # written as 1 / sqrt(x): the form memplan's RMSNorm fusion recognizes
    return c.op1("Reciprocal", [c.op1("Sqrt", [c.x()])])


@aten("silu", "silu_")
def _silu(c):  # Swish (alpha 1): one op whose backward reads only x, as PyTorch's SiLU saves only its input
    return c.op1("Swish", [c.x()], {"alpha": 1.0})


@aten("gelu")
def _gelu(c):
    approx = c.kw("approximate", c.arg(1, "none"))
    return c.op1("Gelu", [c.x()], {"approximate": approx})


@aten("softplus")
def _softplus(c):  # log(1 + exp(beta x)) / beta (threshold ignored: same value in float32 up to it)
    beta = c.arg(1, 1)
    dt = c.dtype()
    x = c.x() if beta == 1 else c.op1("Mul", [c.x(), c.scalar(beta, dt)])
    y = c.op1("Log", [c.op1("Add", [c.op1("Exp", [x]), c.scalar(1.0, dt)])])
    return y if beta == 1 else c.op1("Div", [y, c.scalar(beta, dt)])


@aten("mish")
def _mish(c):
    dt = c.dtype()
    x = c.x()
    sp = c.op1("Log", [c.op1("Add", [c.op1("Exp", [x]), c.scalar(1.0, dt)])])
    return c.op1("Mul", [x, c.op1("Tanh", [sp])])


def _clip(c, x, lo, hi):
    dt = c.dtype()
    ins = [x, "" if lo is None else c.scalar(lo, dt)]
    if hi is not None:
        ins.append(c.scalar(hi, dt))
    return c.op1("Clip", ins)


@aten("clamp", "clamp_", "clip")
def _clamp(c):
    lo, hi = c.kw("min", c.arg(1)), c.kw("max", c.arg(2))
    if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):  # tensor bounds: max, then min (torch's order)
        dt = c.dtype()
        y = c.operand(c.arg(0), dt)
        if lo is not None:
            y = c.op1("Max", [y, c.operand(lo, dt)])
        if hi is not None:
            y = c.op1("Min", [y, c.operand(hi, dt)])
        return y
    return _clip(c, c.x(), lo, hi)


@aten("hardtanh", "hardtanh_")
def _hardtanh(c):
    return _clip(c, c.x(), c.arg(1, -1.0), c.arg(2, 1.0))


@aten("hardsigmoid")
def _hardsigmoid(c):  # clip(x / 6 + 0.5, 0, 1), in ops with backward rules
    dt = c.dtype()
    y = c.op1("Add", [c.op1("Div", [c.x(), c.scalar(6.0, dt)]), c.scalar(0.5, dt)])
    return _clip(c, y, 0.0, 1.0)


@aten("hardswish", "hardswish_")
def _hardswish(c):  # x * clip(x + 3, 0, 6) / 6
    dt = c.dtype()
    x = c.x()
    r = _clip(c, c.op1("Add", [x, c.scalar(3.0, dt)]), 0.0, 6.0)
    return c.op1("Div", [c.op1("Mul", [x, r]), c.scalar(6.0, dt)])


@aten("leaky_relu", "leaky_relu_")
def _leaky(c):
    return c.op1("LeakyRelu", [c.x()], {"alpha": float(c.arg(1, 0.01))})


@aten("elu")
def _elu(c):
    return c.op1("Elu", [c.x()], {"alpha": float(c.arg(1, 1.0))})


# ---- comparisons and selection
def _compare(onnx_type, negate=False):
    def fn(c):
        a, b = c.arg(0), c.arg(1)
        dts = [c.dtype(v) for v in (a, b) if isinstance(v, torch.fx.Node)]
        dt = dts[0] if len(dts) == 1 or dts[0] == dts[1] else torch_promote(dts)
        y = c.op1(onnx_type, [c.operand(a, dt), c.operand(b, dt)])
        return c.op1("Not", [y]) if negate else y
    return fn


def torch_promote(dts):
    from .graph_json import DTYPES
    inv = {v: getattr(torch, v) for v in set(DTYPES.values())}
    return str(torch.promote_types(inv[dts[0]], inv[dts[1]])).replace("torch.", "")


aten("eq")(_compare("Equal"))
aten("ne")(_compare("Equal", negate=True))
aten("lt")(_compare("Less"))
aten("gt")(_compare("Greater"))
aten("le")(_compare("LessOrEqual"))
aten("ge")(_compare("GreaterOrEqual"))
aten("logical_not")(lambda c: c.op1("Not", [c.operand(c.arg(0), "bool")]))
aten("logical_and")(lambda c: c.op1("And", [c.operand(c.arg(0), "bool"), c.operand(c.arg(1), "bool")]))
aten("logical_or")(lambda c: c.op1("Or", [c.operand(c.arg(0), "bool"), c.operand(c.arg(1), "bool")]))


@aten("where")
def _where(c):
    dt = c.dtype()
    return c.op1("Where", [c.operand(c.arg(0), "bool"), c.operand(c.arg(1), dt), c.operand(c.arg(2), dt)])


@aten("masked_fill", "masked_fill_")
def _masked_fill(c):
    dt = c.dtype()
    return c.op1("Where", [c.operand(c.arg(1), "bool"), c.operand(c.arg(2), dt), c.x()])


# ---- dtype and identity
@aten("_to_copy", "to", "type_as")
def _to_copy(c):
    src = c.dtype(c.arg(0))
    dst = c.dtype()
    return c.op1("Identity", [c.x()]) if src == dst else c.op1("Cast", [c.x()], {"to": onnx_dtype(dst)})


for _n in ("clone", "alias", "detach", "contiguous", "lift_fresh_copy"):
    aten(_n)(lambda c: c.op1("Identity", [c.x()]))


# ---- reductions
def _dims(c, i, rank):
    d = c.arg(i) if i < len(c.node.args) else c.kw("dim")
    if d is None or d == []:
        return list(range(rank))
    d = [d] if isinstance(d, int) else list(d)
    return sorted(norm_axis(a, rank) for a in d)


def _reduce(onnx_type, axes_as_input):
    def fn(c):
        rank = c.rank(c.arg(0))
        axes = _dims(c, 1, rank)
        keep = int(bool(c.kw("keepdim", c.arg(2, False))))
        # in the output's dtype: an explicit dtype=, or torch's promotion (sum of bool or int32 is int64)
        x = c.cast(c.x(), c.dtype(c.arg(0)), c.dtype())
        if axes_as_input:
            return c.op1(onnx_type, [x, c.g.i64(axes, "axes")], {"keepdims": keep})
        return c.op1(onnx_type, [x], {"axes": axes, "keepdims": keep})
    return fn


aten("mean")(_reduce("ReduceMean", False))
aten("sum")(_reduce("ReduceSum", True))
aten("amax")(_reduce("ReduceMax", False))
aten("amin")(_reduce("ReduceMin", False))


@aten("var")
def _var(c):  # mean((x - mean(x))^2) * n / (n - correction)
    rank = c.rank(c.arg(0))
    axes = _dims(c, 1, rank)
    corr = c.kw("correction", 1)
    keep = int(bool(c.kw("keepdim", False)))
    dt = c.dtype()
    x = c.x()
    m = c.op1("ReduceMean", [x], {"axes": axes, "keepdims": 1})
    d = c.op1("Sub", [x, m])
    v = c.op1("ReduceMean", [c.op1("Mul", [d, d])], {"axes": axes, "keepdims": keep})
    if not corr:
        return v
    dims = [c.shape(c.arg(0))[a] for a in axes]
    if all(isinstance(d, int) for d in dims):
        n = 1
        for d in dims:
            n *= d
        return c.op1("Mul", [v, c.scalar(n / (n - corr), dt)])
    n = c.op1("Cast", [c.op1("ReduceProd", [c.sizes([c.meta(c.arg(0)).shape[a] for a in axes]), c.g.i64([0], "axes")],
                             {"keepdims": 0})], {"to": onnx_dtype(dt)})
    return c.op1("Mul", [v, c.op1("Div", [n, c.op1("Sub", [n, c.scalar(float(corr), dt)])])])


# ---- layout: views, reshapes, slices, joins
def reshape_target(c, src, out):
    """Reshape's shape input for the node's output: concrete dims, 0 to copy a symbolic dim of the input at the
    same position, -1 for at most one other symbolic dim."""
    src_shape, out_shape = c.shape(src), c.shape()
    target, free = [], 0
    for i, d in enumerate(out_shape):
        if isinstance(d, int):
            target.append(d)
        elif i < len(src_shape) and src_shape[i] == d:
            target.append(0)
        else:
            target.append(-1)
            free += 1
    if free > 1 or (0 in target and any(isinstance(d, int) and d == 0 for d in out_shape)):
        raise ValueError(f"{c.where()}: reshape to {out_shape} cannot be written with one inferred dim")
    return target


@aten("view", "_unsafe_view", "reshape", "flatten", "unflatten", "view_as", "reshape_as")
def _view(c):
    try:
        target = c.g.i64(reshape_target(c, c.arg(0), c.node), "shape")
    except ValueError:  # several symbolic dims: the target written from their expressions
        target = c.out_sizes()
    return c.op1("Reshape", [c.x(), target])


@aten("permute")
def _permute(c):
    rank = c.rank(c.arg(0))
    return c.op1("Transpose", [c.x()], {"perm": [norm_axis(p, rank) for p in c.arg(1)]})


@aten("transpose")
def _transpose(c):
    rank = c.rank(c.arg(0))
    perm = list(range(rank))
    a, b = norm_axis(c.arg(1), rank), norm_axis(c.arg(2), rank)
    perm[a], perm[b] = perm[b], perm[a]
    return c.op1("Transpose", [c.x()], {"perm": perm})


@aten("t", "numpy_T")
def _t(c):
    return c.op1("Transpose", [c.x()], {"perm": [1, 0]}) if c.rank(c.arg(0)) == 2 else c.op1("Identity", [c.x()])


@aten("expand", "expand_as", "broadcast_to")
def _expand(c):
    # Symbolic dims the input already has expand to 1 (Expand broadcasts, so the input's own dim is kept);
    # a size-1 dim expanded to a symbolic size is written from its expression.
    out, src = c.shape(), c.shape(c.arg(0))
    src = [None] * (len(out) - len(src)) + src
    if any(not isinstance(d, int) and d != s for d, s in zip(out, src)):
        return c.op1("Expand", [c.x(), c.out_sizes()])
    target = [d if isinstance(d, int) else 1 for d in out]
    return c.op1("Expand", [c.x(), c.g.i64(target, "shape")])


@aten("unsqueeze")
def _unsqueeze(c):
    return c.op1("Unsqueeze", [c.x(), c.g.i64([norm_axis(c.arg(1), c.rank())], "axes")])


@aten("squeeze")
def _squeeze(c):
    rank = c.rank(c.arg(0))
    shape = c.shape(c.arg(0))
    d = c.arg(1)
    dims = [i for i, s in enumerate(shape) if s == 1] if d is None else ([d] if isinstance(d, int) else list(d))
    dims = [norm_axis(a, rank) for a in dims if shape[norm_axis(a, rank)] == 1]
    if not dims:
        return c.op1("Identity", [c.x()])
    return c.op1("Squeeze", [c.x(), c.g.i64(sorted(dims), "axes")])


@aten("slice")
def _slice(c):
    rank = c.rank(c.arg(0))
    dim = norm_axis(c.arg(1, 0), rank)
    start, end, step = c.arg(2, None), c.arg(3, None), c.arg(4, 1)
    start = 0 if start is None else start
    end = (1 << 63) - 1 if end is None else end
    if isinstance(start, (torch.fx.Node, torch.SymInt)) or isinstance(end, (torch.fx.Node, torch.SymInt)):
        return c.op1("Slice", [c.x(), c.i64_1d(start), c.i64_1d(end), c.g.i64([dim], "axes"), c.g.i64([step], "steps")])
    if start == 0 and end >= (1 << 62) and step == 1:
        return c.op1("Identity", [c.x()])
    return c.op1("Slice", [c.x(), c.g.i64([start], "starts"), c.g.i64([min(end, (1 << 63) - 1)], "ends"),
                           c.g.i64([dim], "axes"), c.g.i64([step], "steps")])


@aten("select")
def _select(c):
    rank = c.rank(c.arg(0))
    return c.op1("Gather", [c.x(), c.g.const([c.arg(2)], "int64", [], "index")], {"axis": norm_axis(c.arg(1), rank)})


@aten("cat", "concat")
def _cat(c):
    tensors = [t for t in c.arg(0) if c.meta(t) is not None and c.meta(t).numel() != 0 or c.meta(t).dim() > 1]
    rank = c.rank()
    dt = c.dtype()
    ins = [c.operand(t, dt) for t in tensors]
    if len(ins) == 1:
        return c.op1("Identity", ins)
    return c.op1("Concat", ins, {"axis": norm_axis(c.kw("dim", c.arg(1, 0)), rank)})


@aten("split", "split_with_sizes", "chunk", "unbind", "tensor_split")
def _split(c):
    outs = c.meta()
    rank = c.rank(c.arg(0))
    target = c.node.target.__name__.split(".")[0]
    dim = norm_axis(c.kw("dim", c.arg(1 if target == "unbind" else 2, 0)), rank)
    sizes = [o.shape[dim] for o in outs] if target != "unbind" else [1] * len(outs)
    parts = c.op("Split", [c.x(), c.sizes(sizes, "split")], len(sizes), {"axis": dim})
    if target == "unbind":
        axes = c.g.i64([dim], "axes")
        parts = [c.op1("Squeeze", [p, axes]) for p in parts]
    return parts


@aten("index")
def _index(c):
    """x[i0, i1, ...] (advanced indexing, None for a sliced axis): the index tensors broadcast and combine into
    one linear index into the indexed axes, which a Gather reads from x reshaped (or transposed, when the indexed
    axes are not adjacent: torch then puts the broadcast dims first) so that those axes are one."""
    idx = list(c.arg(1))
    rank = c.rank(c.arg(0))
    axes = [i for i, v in enumerate(idx) if v is not None]
    if not axes:
        return c.op1("Identity", [c.x()])
    for a in axes:
        if c.dtype(idx[a]) == "bool":
            raise ValueError(f"{c.where()}: indexing with a boolean mask (data-dependent shape) is not mapped")
    if len(axes) == 1:
        return c.op1("Gather", [c.x(), c.operand(idx[axes[0]], "int64")], {"axis": axes[0]})
    shape = c.shape(c.arg(0))
    sizes = [shape[a] for a in axes]
    linear = _linear_index(c, [idx[a] for a in axes], [c.meta(c.arg(0)).shape[a] for a in axes])
    x = c.x()
    adjacent = axes == list(range(axes[0], axes[-1] + 1))
    if not adjacent:  # the indexed axes first, in order, then the others
        perm = axes + [i for i in range(rank) if i not in axes]
        x = c.op1("Transpose", [x], {"perm": perm})
        shape = [shape[i] for i in perm]
        first = 0
    else:
        first = axes[0]
    rest = shape[first + len(axes):]
    head = [d if isinstance(d, int) else 0 for d in shape[:first]]
    tail = [d if isinstance(d, int) else -1 for d in rest]
    if sum(1 for d in rest if not isinstance(d, int)) > 1 or (0 in head and any(d == 0 for d in shape if isinstance(d, int))):
        raise ValueError(f"{c.where()}: the indexed view of {shape} cannot be written with one inferred dim")
    if all(isinstance(d, int) for d in sizes):
        n = 1
        for d in sizes:
            n *= d
        target = c.g.i64(head + [n] + tail, "shape")
    else:  # the merged axes' size written from their symbolic sizes (memplan folds it once --dim binds them)
        n = c.op1("ReduceProd", [c.sizes([c.meta(c.arg(0)).shape[a] for a in axes]), c.g.i64([0], "axes")],
                  {"keepdims": 1})
        target = c.op1("Concat", [p for p in (c.g.i64(head, "shape") if head else None, n,
                                              c.g.i64(tail, "shape") if tail else None) if p is not None], {"axis": 0})
    flat = c.op1("Reshape", [x, target])
    return c.op1("Gather", [flat, linear], {"axis": first})


def _linear_index(c, index_nodes, sizes):
    """sum_k i_k * prod(sizes[k+1:]) over the broadcast index tensors (negative indices wrapped), as an int64
    tensor: a constant when every index folds to one (transformers' mask code indexes with aranges)."""
    sizes = [c.conv.dim_of(d) if isinstance(d, torch.SymInt) else int(d) for d in sizes]
    if not all(isinstance(d, int) for d in sizes):
        return _linear_index_symbolic(c, index_nodes, sizes)
    strides = [1] * len(sizes)
    for k in range(len(sizes) - 2, -1, -1):
        strides[k] = strides[k + 1] * sizes[k + 1]
    known = c.conv.known
    if all(n in known for n in index_nodes):
        total = None
        for n, size, stride in zip(index_nodes, sizes, strides):
            v = known[n].to(torch.int64)
            v = torch.where(v < 0, v + size, v) * stride
            total = v if total is None else total + v
        return c.g.const(total.reshape(-1).tolist(), "int64", list(total.shape), "index")
    total = None
    for n, size, stride in zip(index_nodes, sizes, strides):
        i = c.operand(n, "int64")
        zero = c.g.scalar(0, "int64", "c")
        i = c.op1("Where", [c.op1("Less", [i, zero]), c.op1("Add", [i, c.g.scalar(size, "int64", "c")]), i])
        if stride != 1:
            i = c.op1("Mul", [i, c.g.scalar(stride, "int64", "c")])
        total = i if total is None else c.op1("Add", [total, i])
    return total


def _linear_index_symbolic(c, index_nodes, sizes):
    """_linear_index over axes of which some have symbolic sizes: sizes and strides as int64 scalars written from
    the symbols (sizes holds ints and symbol names; the node's input shape gives their expressions)."""
    syms = [d for d in c.meta(c.node.args[0]).shape]
    by_name = {c.conv.dim_of(d): d for d in syms if isinstance(d, torch.SymInt)}

    def scalar(d):
        return c.g.scalar(d, "int64", "c") if isinstance(d, int) else c.conv.sym_value(by_name[d].node.expr)

    size_t = [scalar(d) for d in sizes]
    strides = [None] * len(sizes)
    for k in range(len(sizes) - 2, -1, -1):
        nxt = size_t[k + 1]
        strides[k] = nxt if strides[k + 1] is None else c.op1("Mul", [strides[k + 1], nxt])
    total = None
    zero = c.g.scalar(0, "int64", "c")
    for n, size, stride in zip(index_nodes, size_t, strides):
        i = c.operand(n, "int64")
        i = c.op1("Where", [c.op1("Less", [i, zero]), c.op1("Add", [i, size]), i])
        if stride is not None:
            i = c.op1("Mul", [i, stride])
        total = i if total is None else c.op1("Add", [total, i])
    return total


@aten("repeat")
def _repeat(c):
    reps = list(c.arg(1))
    x = c.x()
    extra = len(reps) - c.rank(c.arg(0))
    if extra > 0:
        x = c.op1("Reshape", [x, c.g.i64([1] * extra + [d if isinstance(d, int) else 0 for d in c.shape(c.arg(0))], "shape")])
    return c.op1("Tile", [x, c.g.i64(reps, "repeats")])


@aten("tril", "triu")
def _trilu(c):
    k = c.arg(1, 0)
    upper = int(c.node.target.__name__.startswith("triu"))
    return c.op1("Trilu", [c.x(), c.g.i64([k], "k")] if k else [c.x()], {"upper": upper})


@aten("arange")
def _arange(c):
    args = [a for a in c.node.args]
    if len(args) == 1:
        args = [0, args[0], 1]
    elif len(args) == 2:
        args = [args[0], args[1], 1]
    dt = c.dtype()
    return c.op1("Range", [c.operand(a, dt) for a in args])


def _bitwise(logical, bitwise):
    # both operands in the node's dtype: torch promotes bool & int32 to int32, memplan's ops take one dtype
    def fn(c):
        dt = c.dtype()
        return c.op1(logical if dt == "bool" else bitwise, [c.operand(c.arg(0), dt), c.operand(c.arg(1), dt)])
    return fn


aten("bitwise_and")(_bitwise("And", "BitwiseAnd"))
aten("bitwise_or")(_bitwise("Or", "BitwiseOr"))
aten("bitwise_not")(lambda c: c.op1("Not", [c.x()]) if c.dtype() == "bool" else c.op1("BitwiseNot", [c.x()]))


@aten("full_like", "zeros_like", "ones_like")
def _full_like(c):
    kind = c.node.target.__name__.split(".")[0]
    value = {"zeros_like": 0, "ones_like": 1}.get(kind, c.arg(1))
    shape = c.shape()
    target = c.g.i64(shape, "shape") if all(isinstance(d, int) for d in shape) else c.op1("Shape", [c.x()])
    return c.op1("Expand", [c.scalar(value), target])


@aten("bernoulli")
def _bernoulli(c):  # (uniform < p) as the tensor's dtype: DropPath's per-sample keep mask
    p = c.arg(1, 0.5)
    if isinstance(p, torch.fx.Node):
        raise ValueError(f"{c.where()}: bernoulli with a tensor of probabilities is not mapped")
    dt = c.dtype()
    u = c.op1("RandomUniformLike", [c.x()], {"dtype": onnx_dtype(dt), "low": 0.0, "high": 1.0})
    return c.op1("Cast", [c.op1("Less", [u, c.scalar(float(p), dt)])], {"to": onnx_dtype(dt)})


@aten("as_strided")
def _as_strided(c):
    """as_strided where it is a view of a dense tensor: the storage (the input in its stride order) reshaped so
    that each output axis is one axis of it, sliced, transposed to the output's order, with stride-0 axes
    expanded. Anything else (overlapping or non-divisible strides) raises naming the node."""
    src = c.meta(c.arg(0))
    size, stride = list(c.arg(1)), list(c.arg(2))
    offset = c.arg(3, c.kw("storage_offset", None))
    offset = 0 if offset is None else offset
    if not all(isinstance(v, int) for v in size + stride + [offset]) or \
            not all(isinstance(d, int) for d in src.shape) or not all(isinstance(s, int) for s in src.stride()):
        raise ValueError(f"{c.where()}: as_strided with symbolic sizes, strides or offset is not mapped")
    x = c.x()
    # the input's storage order: its dims by decreasing stride (size-1 dims anywhere); dense storage only
    in_shape, in_stride = list(src.shape), list(src.stride())
    order = sorted(range(len(in_shape)), key=lambda i: (-in_stride[i] if in_shape[i] > 1 else 0, i))
    expect = 1
    for i in reversed(order):
        if in_shape[i] > 1 and in_stride[i] != expect:
            raise ValueError(f"{c.where()}: as_strided of a non-dense input (strides {in_stride}) is not mapped")
        expect *= in_shape[i]
    numel = expect
    offset -= src.storage_offset()
    if order != sorted(order):
        x = c.op1("Transpose", [x], {"perm": order})
    view = strided_view(size, stride, offset, numel)
    if view is None:
        raise ValueError(f"{c.where()}: as_strided(size={size}, stride={stride}, offset={offset}) of a "
                         f"{numel}-element tensor is not a reshape/permute/slice/expand of it; not mapped")
    base, starts, keep, perm = view
    if _prod(base) != numel:  # the strides reach only the buffer's first prod(base) elements
        x = c.op1("Reshape", [x, c.g.i64([-1], "shape")])
        x = c.op1("Slice", [x, c.g.i64([0], "starts"), c.g.i64([_prod(base)], "ends"), c.g.i64([0], "axes")])
    if base != [in_shape[i] for i in order]:
        x = c.op1("Reshape", [x, c.g.i64(base, "shape")])
    if starts is not None:
        axes = [a for a, (s, n) in enumerate(zip(starts, keep)) if s != 0 or n != base[a]]
        if axes:
            x = c.op1("Slice", [x, c.g.i64([starts[a] for a in axes], "starts"),
                                c.g.i64([starts[a] + keep[a] for a in axes], "ends"), c.g.i64(axes, "axes")])
    if perm != sorted(perm):
        x = c.op1("Transpose", [x], {"perm": perm})
    squeezed = [s if st != 0 else 1 for s, st in zip(size, stride)]
    x = c.op1("Reshape", [x, c.g.i64(squeezed, "shape")])
    if squeezed != size:
        x = c.op1("Expand", [x, c.g.i64(size, "shape")])
    return x


def _prod(v):
    n = 1
    for d in v:
        n *= d
    return n


def strided_view(size, stride, offset, numel):
    """A dense buffer of `numel` elements read as as_strided(size, stride, offset), written as a view:
    (base, starts, keep, perm): the buffer's first prod(base) elements reshaped to `base`, sliced to
    [starts, starts + keep) per axis (starts None: no slice), transposed by `perm` to the output's axes of size
    > 1 and stride != 0 in order; None when no such view exists (overlap, strides that do not nest)."""
    if any(s < 0 for s in stride) or offset < 0 or any(n == 0 for n in size):
        return None
    dims = [i for i, (n, s) in enumerate(zip(size, stride)) if n > 1 and s != 0]
    by_stride = sorted(dims, key=lambda i: -stride[i])
    if not by_stride:  # one element (or one broadcast): the element at `offset`
        if offset >= numel:
            return None
        return [numel], [offset], [1], []
    strides = [stride[i] for i in by_stride]
    if len(set(strides)) != len(strides):
        return None  # two axes on one stride: overlapping
    base = []
    for k in range(1, len(strides)):
        if strides[k - 1] % strides[k]:
            return None
        base.append(strides[k - 1] // strides[k])
    inner = strides[-1]
    outer = numel // strides[0]
    base = [outer] + base + ([inner] if inner > 1 else [])
    # the offset split over the base axes (most significant first)
    starts, rem = [], offset
    for s in strides:
        starts.append(rem // s)
        rem %= s
    keep = [size[i] for i in by_stride]
    if inner > 1:
        starts.append(rem)
        keep.append(1)
    elif rem:
        return None
    if any(st + n > b for st, n, b in zip(starts, keep, base)):
        return None
    # output order of the kept axes; the trailing inner axis (one element) is dropped by the final reshape
    pos = {d: k for k, d in enumerate(by_stride)}
    perm = [pos[d] for d in dims] + ([len(by_stride)] if inner > 1 else [])
    sliced = any(st != 0 or n != b for st, n, b in zip(starts, keep, base))
    return base, (starts if sliced else None), keep, perm

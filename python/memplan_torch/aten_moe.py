"""ATen -> memplan op mapping for mixture-of-experts routing: sort, histc and grouped matmuls (torch._grouped_mm,
transformers' grouped_mm_fallback custom op). transformers' MoE layers sort the (token, expert) pairs by expert,
count them per expert with histc and run one grouped matmul over the sorted rows."""
from .aten_ops import aten
from .convert import norm_axis, onnx_dtype


@aten("sort")
def _sort(c):
    """TopK over the whole axis (k = the axis' size, sorted): the same shapes and dtypes as torch's (values,
    int64 indices) and the same values; only the order among equal values may differ from torch's stable one,
    which no size depends on."""
    x = c.arg(0)
    rank = c.rank(x)
    if rank == 0:
        raise ValueError(f"{c.where()}: sort of a 0-d tensor is not mapped")
    dim = c.kw("dim", c.arg(1, -1) if _overload(c) in ("default", "values") else -1)
    descending = c.kw("descending", c.arg(2, False) if _overload(c) in ("default", "values") else False)
    axis = norm_axis(dim, rank)
    k = c.i64_1d(c.meta(x).shape[axis])
    return c.op("TopK", [c.x(), k], 2, {"axis": axis, "largest": int(bool(descending)), "sorted": 1})


def _overload(c):
    return getattr(c.node.target, "_overloadname", "default")


@aten("histc")
def _histc(c):
    """torch.histc as a scatter-add of ones into `bins` zeros: bin = floor((x - min) * bins / (max - min)), x ==
    max in the last bin, values outside [min, max] not counted. The memory is torch's (the bins, plus temporaries
    of x's size). min == max takes the range from the data (ReduceMin/ReduceMax), as torch does."""
    dt = c.dtype()
    bins = int(c.arg(1, c.kw("bins", 100)))
    lo, hi = c.arg(2, c.kw("min", 0)), c.arg(3, c.kw("max", 0))
    x = c.op1("Reshape", [c.operand(c.arg(0), dt), c.g.i64([-1], "shape")])
    if lo == hi:
        # torch widens an empty range (all values equal) by 1 on each side; planned as the data's range
        c.approximate("histc with the range from the data")
        lo_t = c.op1("ReduceMin", [x], {"axes": [0], "keepdims": 0})
        hi_t = c.op1("ReduceMax", [x], {"axes": [0], "keepdims": 0})
    else:
        lo_t, hi_t = c.scalar(float(lo), dt), c.scalar(float(hi), dt)
    shifted = c.op1("Sub", [x, lo_t])
    scale = c.op1("Div", [c.scalar(float(bins), dt), c.op1("Sub", [hi_t, lo_t])])
    pos = c.op1("Cast", [c.op1("Floor", [c.op1("Mul", [shifted, scale])])], {"to": onnx_dtype("int64")})
    pos = c.op1("Max", [c.op1("Min", [pos, c.g.scalar(bins - 1, "int64", "c")]), c.g.scalar(0, "int64", "c")])
    inside = c.op1("And", [c.op1("GreaterOrEqual", [x, lo_t]), c.op1("LessOrEqual", [x, hi_t])])
    ones = c.op1("Cast", [inside], {"to": onnx_dtype(dt)})
    zeros = c.op1("Expand", [c.scalar(0.0, dt), c.g.i64([bins], "shape")])
    return c.op1("ScatterElements", [zeros, pos, ones], {"axis": 0, "reduction": "add"})


def _grouped_rows(c, what):
    """(rows, in) @ grouped (experts, in, out) by offsets -> (rows, out), planned as one MatMul of every row
    against the first expert's weight: the output, the saved input and the weight's gradient have torch's sizes;
    the split of rows among experts (data-dependent) is not represented."""
    a, w = c.arg(0), c.arg(1)
    ra, rw = c.rank(a), c.rank(w)
    dt = c.dtype()
    x = c.operand(a, dt)
    if ra == 3 and rw == 3:  # batched: one matmul per expert, as bmm
        return c.op1("MatMul", [x, c.operand(w, dt)])
    if ra != 2 or rw != 3:
        raise ValueError(f"{c.where()}: {what} of a rank-{ra} input and rank-{rw} weight is not mapped")
    c.approximate(f"{what} as one matmul (per-expert splits of the rows not represented)")
    first = c.g.const([0], "int64", [], "index")
    y = c.op1("MatMul", [x, c.op1("Gather", [c.operand(w, dt), first], {"axis": 0})])
    bias = c.kw("bias", c.arg(3))
    if bias is not None:  # torch._grouped_mm's per-expert bias (experts, out): the first expert's row
        y = c.op1("Add", [y, c.op1("Gather", [c.operand(bias, dt), first], {"axis": 0})])
    return y


aten("grouped_mm_fallback")(lambda c: _grouped_rows(c, "grouped_mm_fallback"))
aten("_grouped_mm", "grouped_mm")(lambda c: _grouped_rows(c, "grouped_mm"))


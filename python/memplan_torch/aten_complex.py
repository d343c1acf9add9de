"""Complex tensors as real ones: a complex tensor of shape S is the real tensor of shape S + [2] (real, imaginary),
the layout torch.view_as_real gives it, and the ops on complex values are real arithmetic over that last axis.

Rotary embeddings written with complex numbers (Llama-style `freqs_cis`: polar, view_as_complex, a complex
multiply, view_as_real) and FNet's Fourier mixing (_fft_c2c, a DFT as real matrix products) are what models
do with them. The table COMPLEX_OPS is used for every node with a complex input or output (export.Converter).
"""
import math

import torch

from .convert import norm_axis

COMPLEX_OPS = {}
_REAL = {torch.complex64: "float32", torch.complex128: "float64", torch.complex32: "float16"}


def is_complex(v):
    return isinstance(v, torch.Tensor) and v.is_complex()


def touches_complex(node):
    """Whether an fx node reads or makes a complex tensor."""
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    for v in vals:
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if is_complex(x):
                return True
    return False


def complex_op(*names):
    def reg(fn):
        for n in names:
            COMPLEX_OPS[n] = fn
        return fn
    return reg


def _real_dtype(c, a=None):
    v = c.meta(a)
    return _REAL[v.dtype] if is_complex(v) else c.dtype(a)


def _parts(c, name):
    """(real, imaginary) of a complex tensor, each keeping the last axis at size 1."""
    axes = c.g.i64([-1], "axes")
    re = c.op1("Slice", [name, c.g.i64([0], "starts"), c.g.i64([1], "ends"), axes])
    im = c.op1("Slice", [name, c.g.i64([1], "starts"), c.g.i64([2], "ends"), axes])
    return re, im


def _join(c, re, im):
    return c.op1("Concat", [re, im], {"axis": -1})


def _as_complex_operand(c, a, dt):
    """Argument `a` of a complex op: a complex tensor as is; a real tensor or a number as (value, None)."""
    if isinstance(a, torch.fx.Node) and is_complex(c.meta(a)):
        return c.t(a), True
    if isinstance(a, torch.fx.Node):
        return c.op1("Unsqueeze", [c.operand(a, dt), c.g.i64([-1], "axes")]), False
    return c.scalar(a, dt), False


@complex_op("view_as_complex", "view_as_real", "clone", "alias", "detach", "contiguous", "lift_fresh_copy",
            "resolve_conj", "resolve_neg")
def _same(c):
    return c.op1("Identity", [c.x()])


@complex_op("_to_copy", "to", "type_as")
def _to_copy(c):
    if not is_complex(c.meta()):
        raise ValueError(f"{c.where()}: a complex tensor cast to a real dtype (its imaginary part dropped) is not mapped")
    src, dst = _real_dtype(c, c.arg(0)), _real_dtype(c)
    x = c.x()
    if not is_complex(c.meta(c.arg(0))):  # real -> complex: a zero imaginary part
        x = c.op1("Unsqueeze", [c.cast(x, src, dst), c.g.i64([-1], "axes")])
        return _join(c, x, c.op1("Mul", [x, c.scalar(0.0, dst)]))
    return c.cast(x, src, dst)


@complex_op("polar")
def _polar(c):  # abs * (cos(angle), sin(angle))
    dt = _real_dtype(c)
    axes = c.g.i64([-1], "axes")
    mag, ang = c.operand(c.arg(0), dt), c.operand(c.arg(1), dt)
    re = c.op1("Unsqueeze", [c.op1("Mul", [mag, c.op1("Cos", [ang])]), axes])
    im = c.op1("Unsqueeze", [c.op1("Mul", [mag, c.op1("Sin", [ang])]), axes])
    return _join(c, re, im)


@complex_op("complex")
def _complex(c):
    dt = _real_dtype(c)
    axes = c.g.i64([-1], "axes")
    return _join(c, c.op1("Unsqueeze", [c.operand(c.arg(0), dt), axes]),
                 c.op1("Unsqueeze", [c.operand(c.arg(1), dt), axes]))


@complex_op("mul", "mul_")
def _mul(c):  # (a + bi)(c + di) = (ac - bd) + (ad + bc)i; by a real value: both parts scaled
    dt = _real_dtype(c)
    a, ac = _as_complex_operand(c, c.arg(0), dt)
    b, bc = _as_complex_operand(c, c.arg(1), dt)
    if not (ac and bc):
        return c.op1("Mul", [a, b])
    ar, ai = _parts(c, a)
    br, bi = _parts(c, b)
    re = c.op1("Sub", [c.op1("Mul", [ar, br]), c.op1("Mul", [ai, bi])])
    im = c.op1("Add", [c.op1("Mul", [ar, bi]), c.op1("Mul", [ai, br])])
    return _join(c, re, im)


def _additive(onnx_type):
    def fn(c):
        dt = _real_dtype(c)
        a, ac = _as_complex_operand(c, c.arg(0), dt)
        b, bc = _as_complex_operand(c, c.arg(1), dt)
        if c.kw("alpha", 1) != 1:
            b = c.op1("Mul", [b, c.scalar(c.kw("alpha"), dt)])
        if not (ac and bc):
            raise ValueError(f"{c.where()}: a complex and a real operand added are not mapped")
        return c.op1(onnx_type, [a, b])
    return fn


complex_op("add", "add_")(_additive("Add"))
complex_op("sub", "sub_")(_additive("Sub"))


@complex_op("unsqueeze")
def _unsqueeze(c):
    return c.op1("Unsqueeze", [c.x(), c.g.i64([norm_axis(c.arg(1), c.rank())], "axes")])


@complex_op("view", "_unsafe_view", "reshape", "expand")
def _resize(c):  # the output's sizes, the trailing 2 appended
    op = "Expand" if c.node.target.__name__.startswith("expand") else "Reshape"
    return c.op1(op, [c.x(), c.sizes(list(c.meta().shape) + [2])])


@complex_op("permute")
def _permute(c):
    rank = c.rank(c.arg(0))
    return c.op1("Transpose", [c.x()], {"perm": [norm_axis(d, rank) for d in c.arg(1)] + [rank]})


@complex_op("transpose")
def _transpose(c):
    rank = c.rank(c.arg(0))
    perm = list(range(rank + 1))
    a, b = norm_axis(c.arg(1), rank), norm_axis(c.arg(2), rank)
    perm[a], perm[b] = perm[b], perm[a]
    return c.op1("Transpose", [c.x()], {"perm": perm})


@complex_op("slice")
def _slice(c):
    from .aten_ops import OPS

    return OPS["slice"](c)  # its axis is normalised against the complex rank: the same axis of the real layout


@complex_op("select")
def _select(c):
    from .aten_ops import OPS

    return OPS["select"](c)


@complex_op("_fft_c2c")
def _fft_c2c(c):
    """A discrete Fourier transform over each axis of `dim`, as real matrix products with the DFT matrix
    exp(-+2 pi i j k / n) (n concrete: a symbolic axis is refused, and export_graph plans at the example's size)."""
    dt = _real_dtype(c)
    dims, norm, forward = c.arg(1), c.arg(2, 0), c.arg(3, True)
    rank = c.rank(c.arg(0))
    shape = c.shape(c.arg(0))
    x = c.x()
    for d in [norm_axis(a, rank) for a in dims]:
        n = shape[d]
        if not isinstance(n, int):
            raise ValueError(f"{c.where()}: a Fourier transform over the symbolic axis {n} needs a concrete size")
        scale = {0: 1.0, 1: 1.0 / math.sqrt(n), 2: 1.0 / n}[int(norm)]
        sign = -1.0 if forward else 1.0
        ang = [[2.0 * math.pi * j * k / n for k in range(n)] for j in range(n)]
        fr = c.g.const([math.cos(a) * scale for row in ang for a in row], dt, [n, n], "dft_re")
        fi = c.g.const([sign * math.sin(a) * scale for row in ang for a in row], dt, [n, n], "dft_im")
        perm = [i for i in range(rank) if i != d] + [d]  # the axis last, its parts split off as [..., n]
        back = [perm.index(i) for i in range(rank)]
        sq = c.g.i64([-1], "axes")
        xr, xi = (c.op1("Transpose", [c.op1("Squeeze", [p, sq])], {"perm": perm}) for p in _parts(c, x))
        # y_k = sum_j x_j (cos - +i sin): with F symmetric, y = x F, so re = xr Fr - xi Fi, im = xr Fi + xi Fr
        yr = c.op1("Sub", [c.op1("MatMul", [xr, fr]), c.op1("MatMul", [xi, fi])])
        yi = c.op1("Add", [c.op1("MatMul", [xr, fi]), c.op1("MatMul", [xi, fr])])
        x = _join(c, *(c.op1("Unsqueeze", [c.op1("Transpose", [y], {"perm": back}), sq]) for y in (yr, yi)))
    return x


__all__ = ["COMPLEX_OPS", "touches_complex", "is_complex"]

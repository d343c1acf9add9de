"""Walks a torch.export graph and emits memplan ops through the ATen op table (aten_ops.py, aten_nn.py)."""
import torch

from ._lib import UnmappedOps
from .graph_json import FLOAT_DTYPES, dtype_name


class Context:
    """What an op converter sees: the builder, the node, its arguments as memplan tensor names, its output meta."""

    def __init__(self, conv, node):
        self.conv, self.node, self.g = conv, node, conv.g
        self.dynamic = conv.dynamic

    # --- the node's arguments
    def arg(self, i, default=None):
        a = self.node.args
        if i < len(a):
            return a[i]
        return default

    def kw(self, name, default=None):
        return self.node.kwargs.get(name, default)

    def t(self, a):
        """The tensor name of argument value `a` (an fx Node)."""
        return self.conv.tensor_of(a)

    def x(self, i=0):
        return self.t(self.node.args[i])

    def meta(self, a=None):
        a = self.node if a is None else a
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else None

    def dtype(self, a=None):
        v = self.meta(a)
        if isinstance(v, torch.SymInt):
            return "int64"
        if isinstance(v, torch.SymBool):
            return "bool"
        if isinstance(v, torch.SymFloat):
            return "float32"
        return dtype_name(v.dtype) if isinstance(v, torch.Tensor) else None

    def rank(self, a=None):
        return self.meta(a).dim()

    def shape(self, a=None):
        """The value's shape: ints, or symbol names / None for symbolic dims."""
        return [self.conv.dim_of(d) for d in self.meta(a).shape]

    def concrete_shape(self, a=None):
        s = self.shape(a)
        if not all(isinstance(d, int) for d in s):
            raise ValueError(f"{self.where()}: needs a concrete shape, got {s} (symbolic dims)")
        return s

    def is_sym(self, a):
        """An fx node of a symbolic int/float/bool (sym_size and its arithmetic)."""
        return isinstance(a, torch.fx.Node) and isinstance(self.meta(a), (torch.SymInt, torch.SymFloat, torch.SymBool))

    def sizes(self, dims, base="shape"):
        """A list of sizes (ints, symbolic-int nodes, SymInts) as a 1-D int64 tensor: a constant when all are
        ints, else a Concat of the symbolic ones' scalars (memplan folds it once --dim binds them)."""
        vals = [self.conv.dim_of(d) if isinstance(d, torch.SymInt) else d for d in dims]
        if all(isinstance(d, int) for d in vals):
            return self.g.i64(vals, base)
        parts = []
        for d, orig in zip(vals, dims):
            if isinstance(d, int):
                parts.append(self.g.i64([d], base))
            else:
                s = self.t(orig) if isinstance(orig, torch.fx.Node) else self.conv.sym_value(orig.node.expr)
                parts.append(self.op1("Reshape", [s, self.g.i64([1], "shape")]))
        return parts[0] if len(parts) == 1 else self.op1("Concat", parts, {"axis": 0})

    def out_sizes(self):
        """The node's own output shape as a 1-D int64 tensor (see sizes)."""
        return self.sizes(list(self.meta().shape))

    def i64_1d(self, v, base="c"):
        """An int or symbolic-int argument as a 1-element int64 tensor."""
        if isinstance(v, torch.fx.Node):
            return self.op1("Reshape", [self.operand(v, "int64"), self.g.i64([1], "shape")])
        if isinstance(v, torch.SymInt):
            return self.op1("Reshape", [self.conv.sym_value(v.node.expr), self.g.i64([1], "shape")])
        return self.g.i64([int(v)], base)

    def approximate(self, what):
        """Records that this node is planned at the example's sizes, not exactly (export_graph warns)."""
        self.conv.approximated[what] += 1

    def where(self):
        return f"node '{self.node.name}' ({self.node.target})"

    # --- emitting
    def op(self, type_, inputs, outputs=1, attrs=None, domain=None):
        return self.g.op(type_, inputs, outputs, attrs, domain, out_base=self.node.name)

    def op1(self, type_, inputs, attrs=None, domain=None):
        return self.op(type_, inputs, 1, attrs, domain)[0]

    def scalar(self, v, dtype=None):
        return self.g.scalar(v, dtype or self.dtype(), base="c")

    def cast(self, name, src, dst):
        return name if src == dst else self.op1("Cast", [name], {"to": onnx_dtype(dst)})

    def operand(self, a, dtype):
        """Argument `a` (tensor or Python number) as a tensor of `dtype`."""
        if isinstance(a, torch.fx.Node):
            return self.cast(self.t(a), self.dtype(a), dtype)
        if isinstance(a, bool):
            a = int(a)
        return self.scalar(a, dtype)


ONNX_DTYPE = {"float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "bool": 9,
              "float16": 10, "float64": 11, "uint32": 12, "uint64": 13, "bfloat16": 16}


def onnx_dtype(name):
    return ONNX_DTYPE[name]


def norm_axis(axis, rank):
    return axis + rank if axis < 0 else axis


__all__ = ["Context", "UnmappedOps", "FLOAT_DTYPES", "onnx_dtype", "norm_axis"]

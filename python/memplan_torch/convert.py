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

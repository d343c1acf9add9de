"""Builds memplan's JSON graph (docs/graph-format.md): tensors, ops, constants, weights written beside it."""
import json
import math
import os

# torch dtype name (str(torch.float32) without "torch.") -> memplan dtype name
DTYPES = {
    "float32": "float32", "float": "float32", "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
    "float64": "float64", "double": "float64", "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
    "int16": "int16", "short": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}
FLOAT_DTYPES = {"float32", "float16", "bfloat16", "float64"}
INLINE_LIMIT = 1 << 22  # elements of a constant written inline (the importer reads up to 2^24)


def dtype_name(torch_dtype):
    key = str(torch_dtype).replace("torch.", "")
    if key not in DTYPES:
        raise ValueError(f"dtype {torch_dtype} has no memplan equivalent")
    return DTYPES[key]


def _value(v, is_float):
    if is_float:
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    return int(v)


class GraphBuilder:
    """Collects tensors and ops; names stay unique; constants are shared by value."""

    def __init__(self, name, opset=17):
        self.name, self.opset = name, opset
        self.tensors = {}  # name -> JSON object (insertion order kept)
        self.ops = []
        self.inputs, self.outputs = [], []
        self._used_names = set()
        self._consts = {}
        self._op_names = set()

    def fresh(self, base):
        base = base or "t"
        name, k = base, 1
        while name in self._used_names:
            name = f"{base}#{k}"
            k += 1
        self._used_names.add(name)
        return name

    def tensor(self, name, dtype=None, shape=None, role=None, data=None, external=None):
        """Declares tensor `name` (already reserved with fresh()); returns it."""
        t = {"name": name}
        if dtype is not None:
            t["dtype"] = dtype
        if shape is not None:
            t["shape"] = list(shape)
        if role is not None:
            t["role"] = role
        if data is not None:
            t["data"] = data
        if external is not None:
            t["external_location"] = external
        self.tensors[name] = t
        return name

    def const(self, values, dtype, shape=None, base="const"):
        """A constant of `dtype` (memplan name) holding the flat `values`; shape [] for a scalar, [n] by default."""
        values = list(values)
        shape = [len(values)] if shape is None else list(shape)
        is_float = dtype in FLOAT_DTYPES
        data = [_value(v, is_float) for v in values]
        key = (dtype, tuple(shape), json.dumps(data))
        if key in self._consts:
            return self._consts[key]
        name = self.tensor(self.fresh(base), dtype, shape, "weight", data)
        self._consts[key] = name
        return name

    def i64(self, values, base="shape"):
        return self.const(values, "int64", None, base)

    def scalar(self, value, dtype, base="scalar"):
        return self.const([value], dtype, [], base)

    def op(self, type_, inputs, outputs=1, attrs=None, domain=None, name=None, out_base=None):
        """Adds an op; `outputs` is a count (fresh tensors) or a list of names (declared by the caller).
        Returns the output names."""
        if isinstance(outputs, int):
            base = out_base or (name or type_.lower())
            outputs = [self.tensor(self.fresh(base if k == 0 else f"{base}:{k}")) for k in range(outputs)]
        op_name = name or outputs[0] or type_
        while op_name in self._op_names:
            op_name = op_name + "'"
        self._op_names.add(op_name)
        o = {"name": op_name, "type": type_, "inputs": list(inputs), "outputs": list(outputs)}
        if domain:
            o["domain"] = domain
        if attrs:
            o["attrs"] = attrs
        self.ops.append(o)
        return outputs

    def document(self):
        return {"format": "memplan.graph", "version": 1, "name": self.name, "opset": self.opset,
                "inputs": self.inputs, "outputs": self.outputs, "tensors": list(self.tensors.values()), "ops": self.ops}

    def write(self, path):
        tmp = str(path) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.document(), f, separators=(",", ":"))
        os.replace(tmp, path)


"""How the differential tester builds one node of an op whose inputs are more than same-shaped tensors.

A recipe is recipe(b, op, schema, x) -> (inputs, attributes, number of outputs) or None (it cannot use x, or drew
nothing legal): b is the GraphBuilder (its rng, fresh() inputs, const() initializers), x the chained input (an
earlier op's output, or None for a fresh one). Attribute values stay inside their legal ranges; onnx's shape
inference and ONNX Runtime reject what slips through (the graph is then skipped). Ops without a recipe take the
generic one, driven by the schema alone.
"""
import numpy as np
from onnx import defs

# Never generated: outputs that are not defined for equal inputs (ScatterND with repeated indices is avoided by
# its recipe instead), or no tensor input at all.
EXCLUDED = {"Constant", "ConstantOfShape", "Range", "RandomUniformLike", "Dropout", "Attention"}
# Ops whose outputs are exact functions of exact inputs (no rounding that depends on the order of operations).
EXACT = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather",
         "GatherElements", "GatherND", "Expand", "Tile", "Pad", "Trilu", "Add", "Sub", "Mul", "Div", "Neg", "Abs",
         "Relu", "Max", "Min", "Where", "Clip", "Sqrt", "Floor", "Ceil", "Round", "Sign", "Not", "And", "Or", "Xor",
         "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin",
         "TopK", "MaxPool", "GlobalMaxPool", "Shape", "Size", "IsNaN", "IsInf", "BitShift", "BitwiseAnd",
         "BitwiseOr", "BitwiseXor", "BitwiseNot", "ScatterND", "ScatterElements", "Cast", "CastLike", "Hardmax",
         "Mod", "Sum"}
# Ops a one-ulp difference in their input can flip (a comparison, a rounding, an index): they read exact tensors.
DISCONTINUOUS = {"Floor", "Ceil", "Round", "Sign", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
                 "ArgMax", "ArgMin", "TopK", "Hardmax", "Cast", "CastLike", "Mod", "ThresholdedRelu", "Shrink",
                 "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "Max", "Min", "Relu", "Clip", "IsInf",
                 "HardSigmoid", "HardSwish", "Abs", "Sign", "Where", "Pow",
                 # Periodic: of a large computed argument (a product), a last-bit difference is any value.
                 "Sin", "Cos", "Tan"}
# ORT's result on NaN or infinite inputs depends on where they sit or on how it rearranges the op (Eigen's
# min/max reductions drop a NaN unless it comes first; im2col multiplies padding zeros by an infinite weight):
# these ops never read a tensor that may hold one.
NAN_UNSPECIFIED = {"ReduceMax", "ReduceMin", "MaxPool", "GlobalMaxPool", "ArgMax", "ArgMin", "TopK", "Conv", "ConvTranspose",
                   "BatchNormalization", "Gemm", "MatMul", "Einsum", "Hardmax", "AveragePool", "LpPool",
                   "InstanceNormalization", "LayerNormalization", "LRN", "MeanVarianceNormalization"}
# Inputs of these ops are kept inside the domain where the op is finite (NaN positions would agree, but say little).
POSITIVE = {"Log", "Sqrt", "Reciprocal", "Acosh"}
UNIT = {"Asin", "Acos", "Atanh"}
FLOATS = ("float32",)


def rand_shape(rng, lo=0, hi=4):
    r = rng.randint(lo, hi) if rng.random() > 0.05 else min(5, hi + 1)
    return tuple(rng.choice((1, 1, 2, 3, 4, 5)) for _ in range(r))


def broadcast_of(rng, shape):
    """A shape that broadcasts against `shape`: leading dims dropped, some dims set to 1."""
    s = list(shape[rng.randint(0, len(shape)):] if shape and rng.random() < 0.3 else shape)
    return tuple(1 if rng.random() < 0.3 else d for d in s)


def dtypes_of(b, op, schema, k=0):
    import difftest_lib as lib
    allowed = lib.allowed_dtypes(schema, schema.inputs[k].type_str) if len(schema.inputs) > k else []
    cpu = b.ops.get(op, ["float32"])
    return [d for d in allowed if d in cpu or k > 0]


def value_kind(op):
    return "positive" if op in POSITIVE else "unit" if op in UNIT else "any"


def first(b, op, schema, x, lo=0, hi=4, dtypes=None, kind=None):
    """Input 0: the chained x when its dtype and rank fit, else a fresh tensor."""
    import difftest_lib as lib
    dts = dtypes if dtypes is not None else dtypes_of(b, op, schema)
    if not dts:
        return None
    if x is not None and x.dtype in dts and lo <= len(x.shape) <= hi and kind is None and op not in POSITIVE | UNIT:
        return x
    dt = lib.pick_dtype(b.rng, dts)
    if dt is None:  # only dtypes the generator does not draw (BitShift's unsigned ones beside uint8)
        return None
    return b.fresh(rand_shape(b.rng, lo, hi), dt, kind or value_kind(op))


def has_attr(schema, name):
    return name in schema.attributes


def has_input(schema, name):
    return any(i.name == name for i in schema.inputs)


def random_attr(b, a):
    """A small value for a schema attribute of a scalar type (None: leave it at its default)."""
    t = defs.OpSchema.AttrType
    if a.type == t.FLOAT:
        return round(b.rng.uniform(0.05, 2.0), 3)
    if a.type == t.INT:
        return b.rng.choice((0, 1))
    return None


def generic(b, op, schema, x):
    import difftest_lib as lib
    dt_of = {}
    x0 = None
    ins = []
    base = None
    for k, formal in enumerate(schema.inputs):
        opt = formal.option == defs.OpSchema.FormalParameterOption.Optional
        if opt and b.rng.random() < 0.5:
            break
        count = b.rng.randint(1, 3) if formal.option == defs.OpSchema.FormalParameterOption.Variadic else 1
        for _ in range(count):
            allowed = lib.allowed_dtypes(schema, formal.type_str)
            if k == 0:
                allowed = [d for d in allowed if d in b.ops.get(op, [])]
            dt = dt_of.get(formal.type_str) or lib.pick_dtype(b.rng, allowed)
            if dt is None:
                return None
            dt_of[formal.type_str] = dt
            if k == 0 and x0 is None:
                x0 = x if x is not None and x.dtype == dt and op not in POSITIVE | UNIT else \
                    b.fresh(rand_shape(b.rng), dt, value_kind(op))
                base = x0.shape
                ins.append(x0)
            else:
                shape = broadcast_of(b.rng, base) if b.rng.random() < 0.5 else base
                ins.append(b.fresh(shape, dt, "nonzero" if op in ("Div", "Mod") else "any"))
    if not ins:
        return None
    attrs = {}
    for name, a in schema.attributes.items():
        if a.required or b.rng.random() < 0.3:
            v = random_attr(b, a)
            if v is None and a.required:
                return None
            if v is not None:
                attrs[name] = v
    return ins, attrs, len([o for o in schema.outputs if o.option != defs.OpSchema.FormalParameterOption.Optional])


def axes_arg(b, schema, axes, ins, attrs):
    """Axes as the attribute or the input, whichever this opset's schema has."""
    if has_input(schema, "axes"):
        ins.append(b.const(np.array(axes, dtype=np.int64)))
    else:
        attrs["axes"] = list(axes)


def rand_axes(rng, rank, allow_empty=True):
    n = rng.randint(0 if allow_empty else 1, rank)
    axes = rng.sample(range(rank), n)
    return [a - rank if rng.random() < 0.3 else a for a in axes]


def reduce(b, op, schema, x):
    x = first(b, op, schema, x, 0, 5)
    if x is None or (op == "ReduceMean" and 0 in x.shape):
        return None  # ONNX leaves the mean of an empty set undefined
    ins, attrs = [x], {"keepdims": b.rng.choice((0, 1))}
    r = len(x.shape)
    if r and b.rng.random() < 0.8:
        axes_arg(b, schema, rand_axes(b.rng, r, allow_empty=False), ins, attrs)
    elif has_attr(schema, "noop_with_empty_axes") and b.rng.random() < 0.3:
        attrs["noop_with_empty_axes"] = 1
    return ins, attrs, 1


def arg_reduce(b, op, schema, x):
    x = first(b, op, schema, x, 1, 5)
    if x is None:
        return None
    r = len(x.shape)
    return [x], {"axis": b.rng.randint(-r, r - 1), "keepdims": b.rng.choice((0, 1)),
                 "select_last_index": b.rng.choice((0, 0, 1))}, 1


def axis_op(b, op, schema, x):
    x = first(b, op, schema, x, 1, 5)
    if x is None:
        return None
    r = len(x.shape)
    return [x], {"axis": b.rng.randint(-r, r - 1)}, 1


def cumsum(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    r = len(x.shape)
    return [x, b.const(np.array(b.rng.randint(-r, r - 1), dtype=np.int64))], \
        {"exclusive": b.rng.choice((0, 1)), "reverse": b.rng.choice((0, 1))}, 1


def transpose(b, op, schema, x):
    x = first(b, op, schema, x, 0, 5)
    if x is None:
        return None
    perm = list(range(len(x.shape)))
    b.rng.shuffle(perm)
    return [x], ({"perm": perm} if perm and b.rng.random() < 0.85 else {}), 1


def reshape(b, op, schema, x):
    x = first(b, op, schema, x, 0, 5)
    if x is None:
        return None
    n = int(np.prod(x.shape, dtype=np.int64)) if x.shape else 1
    dims = []
    while n > 1 and len(dims) < 4:
        f = b.rng.choice([d for d in range(1, n + 1) if n % d == 0])
        dims.append(f)
        n //= f
    if n != 1:
        dims.append(n)
    if b.rng.random() < 0.3:
        dims.append(1)
    b.rng.shuffle(dims)
    if dims and b.rng.random() < 0.4:
        dims[b.rng.randrange(len(dims))] = -1
    return [x, b.const(np.array(dims, dtype=np.int64))], {}, 1


def flatten(b, op, schema, x):
    x = first(b, op, schema, x, 0, 5)
    if x is None:
        return None
    r = len(x.shape)
    return [x], {"axis": b.rng.randint(-r, r)}, 1


def squeeze(b, op, schema, x):
    x = first(b, op, schema, x, 0, 5)
    if x is None:
        return None
    ones = [k for k, d in enumerate(x.shape) if d == 1]
    ins, attrs = [x], {}
    if ones and b.rng.random() < 0.7:
        axes_arg(b, schema, b.rng.sample(ones, b.rng.randint(1, len(ones))), ins, attrs)
    return ins, attrs, 1


def unsqueeze(b, op, schema, x):
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    out_rank = len(x.shape) + b.rng.randint(1, 2)
    axes = b.rng.sample(range(out_rank), out_rank - len(x.shape))
    axes = [a - out_rank if b.rng.random() < 0.3 else a for a in axes]
    ins, attrs = [x], {}
    axes_arg(b, schema, axes, ins, attrs)
    return ins, attrs, 1


def concat(b, op, schema, x):
    x = first(b, op, schema, x, 1, 5)
    if x is None:
        return None
    r = len(x.shape)
    axis = b.rng.randint(-r, r - 1)
    ins = [x]
    for _ in range(b.rng.randint(0, 2)):
        s = list(x.shape)
        s[axis] = b.rng.randint(0, 3) if b.rng.random() < 0.1 else b.rng.randint(1, 3)
        ins.append(b.fresh(tuple(s), x.dtype))
    b.rng.shuffle(ins)
    return ins, {"axis": axis}, 1


def split(b, op, schema, x):
    x = first(b, op, schema, x, 1, 5)
    if x is None:
        return None
    r = len(x.shape)
    axis = b.rng.randint(-r, r - 1)
    d = x.shape[axis]
    ins = [x]
    if b.rng.random() < 0.5:
        parts, left = [], d
        while left > 0:
            p = b.rng.randint(1, left)
            parts.append(p)
            left -= p
        if has_input(schema, "split"):
            ins.append(b.const(np.array(parts, dtype=np.int64)))
        else:
            return [x], {"axis": axis, "split": parts}, len(parts)
        return ins, {"axis": axis}, len(parts)
    if has_attr(schema, "num_outputs"):
        n = b.rng.randint(1, max(1, d))
        return ins, {"axis": axis, "num_outputs": n}, n
    n = b.rng.choice([k for k in range(1, d + 1) if d % k == 0])
    return ins, {"axis": axis}, n


def slice_(b, op, schema, x):
    x = first(b, op, schema, x, 1, 5)
    if x is None:
        return None
    r = len(x.shape)
    axes = rand_axes(b.rng, r, allow_empty=False)
    starts, ends, steps = [], [], []
    for a in axes:
        d = x.shape[a]
        step = b.rng.choice((1, 1, 1, 2, -1, -2))
        s = b.rng.randint(-d - 1, d + 1)
        e = b.rng.choice((b.rng.randint(-d - 1, d + 1), 2**62 if step > 0 else -2**62))
        starts.append(s)
        ends.append(e)
        steps.append(step)
    ins = [x, b.const(np.array(starts, dtype=np.int64)), b.const(np.array(ends, dtype=np.int64))]
    if b.rng.random() < 0.8:
        ins.append(b.const(np.array(axes, dtype=np.int64)))
        if b.rng.random() < 0.8:
            ins.append(b.const(np.array(steps, dtype=np.int64)))
    elif axes != list(range(len(axes))):
        return None
    return ins, {}, 1


def indices(b, shape, bound, unique=False):
    nprng = np.random.default_rng(b.rng.getrandbits(32))
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if unique:
        if n > bound:
            return None
        v = nprng.permutation(bound)[:n]
    else:
        v = nprng.integers(0, bound, n)
    v = np.where(nprng.random(n) < 0.3, v - bound, v)
    return v.astype(np.int64).reshape(shape)


def gather(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    r = len(x.shape)
    axis = b.rng.randint(-r, r - 1)
    idx = indices(b, rand_shape(b.rng, 0, 2), x.shape[axis])
    return [x, b.const(idx) if b.rng.random() < 0.5 else b.fresh_indices(idx)], {"axis": axis}, 1


def gather_elements(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    r = len(x.shape)
    axis = b.rng.randint(-r, r - 1)
    s = [b.rng.randint(1, d) for d in x.shape]
    s[axis] = b.rng.randint(1, 4)
    return [x, b.fresh_indices(indices(b, tuple(s), x.shape[axis]))], {"axis": axis}, 1


def gather_nd(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    r = len(x.shape)
    k = b.rng.randint(1, r)
    lead = rand_shape(b.rng, 0, 2)
    nprng = np.random.default_rng(b.rng.getrandbits(32))
    idx = np.stack([nprng.integers(0, x.shape[j], lead or (1,)) for j in range(k)], axis=-1)
    idx = idx.reshape(tuple(lead) + (k,)).astype(np.int64)
    return [x, b.fresh_indices(idx)], {}, 1


def scatter_elements(b, op, schema, x):
    x = first(b, op, schema, x, 1, 3)
    if x is None:
        return None
    r = len(x.shape)
    axis = b.rng.randint(-r, r - 1)
    s = list(x.shape)
    s[axis] = b.rng.randint(1, x.shape[axis])
    # Unique along the axis for each position of the others: a permutation's first rows.
    nprng = np.random.default_rng(b.rng.getrandbits(32))
    perm = np.argsort(nprng.random(tuple(x.shape)), axis=axis)
    idx = np.take(perm, np.arange(s[axis]), axis=axis).astype(np.int64)
    upd = b.fresh(tuple(s), x.dtype)
    return [x, b.fresh_indices(idx), upd], {"axis": axis}, 1


def scatter_nd(b, op, schema, x):
    x = first(b, op, schema, x, 1, 3)
    if x is None:
        return None
    r = len(x.shape)
    k = b.rng.randint(1, r)
    cells = int(np.prod(x.shape[:k]))
    n = b.rng.randint(1, cells)
    nprng = np.random.default_rng(b.rng.getrandbits(32))
    flat = nprng.permutation(cells)[:n]
    idx = np.stack(np.unravel_index(flat, x.shape[:k]), axis=-1).astype(np.int64)
    upd = b.fresh((n,) + tuple(x.shape[k:]), x.dtype)
    return [x, b.fresh_indices(idx), upd], {}, 1


def expand(b, op, schema, x):
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    s = [b.rng.choice((d, d, 3)) if d == 1 else d for d in x.shape]
    if b.rng.random() < 0.4:
        s = [b.rng.randint(1, 3)] + s
    if b.rng.random() < 0.3:
        s = [1 if (d != 1 and b.rng.random() < 0.5) else d for d in s]  # a 1 in the shape keeps x's dim
    return [x, b.const(np.array(s, dtype=np.int64))], {}, 1


def tile(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    return [x, b.const(np.array([b.rng.randint(1, 3) for _ in x.shape], dtype=np.int64))], {}, 1


def pad(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    r = len(x.shape)
    mode = b.rng.choice(("constant", "constant", "reflect", "edge"))
    lo = -1 if mode == "constant" else 0
    pads = [b.rng.randint(lo, 2) for _ in range(2 * r)]
    if mode == "reflect":
        pads = [min(p, x.shape[k % r] - 1) for k, p in enumerate(pads)]
    ins = [x, b.const(np.array(pads, dtype=np.int64))]
    if mode == "constant" and b.rng.random() < 0.5:
        ins.append(b.const(np.array(1.5 if x.dtype.startswith("float") else 2).astype(x_np(x))))
    return ins, {"mode": mode}, 1


def x_np(x):
    import difftest_lib as lib
    return lib.NP_DTYPE[x.dtype]


def trilu(b, op, schema, x):
    x = first(b, op, schema, x, 2, 4)
    if x is None:
        return None
    ins = [x]
    if b.rng.random() < 0.6:
        ins.append(b.const(np.array(b.rng.randint(-3, 3), dtype=np.int64)))
    return ins, {"upper": b.rng.choice((0, 1))}, 1


def matmul(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    k = x.shape[-1]
    n = b.rng.randint(1, 5)
    if len(x.shape) == 1 or b.rng.random() < 0.2:
        shape = (k,) if b.rng.random() < 0.5 else (k, n)
    else:
        batch = broadcast_of(b.rng, x.shape[:-2])
        shape = tuple(batch) + (k, n)
    return [x, b.fresh(shape, x.dtype, as_input=b.rng.random() < 0.5)], {}, 1


def gemm(b, op, schema, x):
    x = first(b, op, schema, x, 2, 2)
    if x is None:
        return None
    ta, tb = b.rng.choice((0, 1)), b.rng.choice((0, 1))
    m, k = (x.shape[1], x.shape[0]) if ta else x.shape
    n = b.rng.randint(1, 5)
    w = b.fresh((n, k) if tb else (k, n), x.dtype)
    ins = [x, w]
    if b.rng.random() < 0.7:
        ins.append(b.fresh(b.rng.choice(((m, n), (n,), (1, n), (m, 1), ())), x.dtype))
    attrs = {"transA": ta, "transB": tb}
    if b.rng.random() < 0.5:
        attrs["alpha"] = b.rng.choice((0.5, 2.0, -1.0))
        attrs["beta"] = b.rng.choice((0.5, 2.0, 0.0))
    return ins, attrs, 1


def window(b, spatial, allow_dilation=True):
    """Kernel, strides, pads, dilations for `spatial` input dims: the output is at least one wide."""
    ks, ss, ds, pb, pe = [], [], [], [], []
    for d in spatial:
        dil = b.rng.choice((1, 1, 2)) if allow_dilation else 1
        k = b.rng.randint(1, 3)
        if (k - 1) * dil + 1 > d:
            dil, k = 1, 1
        p0, p1 = b.rng.randint(0, k - 1), b.rng.randint(0, k - 1)  # pads narrower than the kernel
        ks.append(k)
        ss.append(b.rng.choice((1, 1, 2)))
        ds.append(dil)
        pb.append(p0)
        pe.append(p1)
    return ks, ss, ds, pb + pe


def conv(b, op, schema, x):
    import difftest_lib as lib
    nsp = b.rng.choice((1, 2, 2, 3))
    group = b.rng.choice((1, 1, 2))
    cin = group * b.rng.randint(1, 2)
    shape = (b.rng.randint(1, 2), cin) + tuple(b.rng.randint(2, 5) for _ in range(nsp))
    if x is not None and len(x.shape) == 2 + nsp and x.shape[1] % group == 0 and min(x.shape[2:]) >= 1 and x.dtype == "float32":
        shape, cin = x.shape, x.shape[1]
    else:
        x = b.fresh(shape, lib.pick_dtype(b.rng, dtypes_of(b, op, schema)) or "float32")
    ks, ss, ds, pads = window(b, shape[2:])
    cout = group * b.rng.randint(1, 2)
    attrs = {"strides": ss, "dilations": ds, "group": group}
    if op == "ConvTranspose":
        w = b.fresh((cin, cout // group) + tuple(ks), x.dtype, as_input=False)
        attrs["pads"] = pads
        if b.rng.random() < 0.3:
            attrs["output_padding"] = [b.rng.randint(0, s - 1) if s > 1 else 0 for s in ss]
    else:
        w = b.fresh((cout, cin // group) + tuple(ks), x.dtype, as_input=False)
        if b.rng.random() < 0.2:
            attrs["auto_pad"] = b.rng.choice(("SAME_UPPER", "SAME_LOWER", "VALID"))
        else:
            attrs["pads"] = pads
    if b.rng.random() < 0.5:
        attrs["kernel_shape"] = ks
    ins = [x, w]
    if b.rng.random() < 0.6:
        ins.append(b.fresh((cout,), x.dtype, as_input=False))
    return ins, attrs, 1


def pool(b, op, schema, x):
    nsp = b.rng.choice((1, 2, 2, 3))
    if x is None or len(x.shape) != 2 + nsp or x.dtype != "float32":
        x = b.fresh((b.rng.randint(1, 2), b.rng.randint(1, 3)) + tuple(b.rng.randint(1, 5) for _ in range(nsp)),
                    "float32")
    ks, ss, ds, pads = window(b, x.shape[2:], allow_dilation=has_attr(schema, "dilations"))
    attrs = {"kernel_shape": ks, "strides": ss, "pads": pads}
    if has_attr(schema, "dilations") and op == "MaxPool":
        attrs["dilations"] = ds
    if has_attr(schema, "ceil_mode") and b.rng.random() < 0.3:
        attrs["ceil_mode"] = 1
    if op == "AveragePool":
        attrs["count_include_pad"] = b.rng.choice((0, 1))
    if op == "LpPool":
        attrs["p"] = b.rng.choice((1, 2, 3))
    return [x], attrs, 1


def batch_norm(b, op, schema, x):
    x = first(b, op, schema, x, 2, 4, dtypes=["float32"])
    c = x.shape[1]
    ins = [x] + [b.fresh((c,), "float32", as_input=False) for _ in range(3)] + \
        [b.fresh((c,), "float32", "positive", as_input=False)]
    return ins, {"epsilon": b.rng.choice((1e-5, 1e-3, 0.1))}, 1


def instance_norm(b, op, schema, x):
    x = first(b, op, schema, x, 3, 4, dtypes=["float32"])
    c = x.shape[1]
    return [x, b.fresh((c,), "float32"), b.fresh((c,), "float32")], {"epsilon": b.rng.choice((1e-5, 1e-2))}, 1


def layer_norm(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4, dtypes=["float32"])
    r = len(x.shape)
    axis = b.rng.randint(-r, r - 1)
    norm = x.shape[axis:]
    ins = [x, b.fresh(broadcast_of(b.rng, norm) if b.rng.random() < 0.2 else norm, "float32")]
    if b.rng.random() < 0.6:
        ins.append(b.fresh(norm, "float32"))
    return ins, {"axis": axis, "epsilon": b.rng.choice((1e-5, 1e-2))}, 1


def lrn(b, op, schema, x):
    x = first(b, op, schema, x, 3, 4, dtypes=["float32"])
    return [x], {"size": b.rng.choice((1, 3, 5)), "alpha": b.rng.choice((1e-4, 0.1)),
                 "beta": b.rng.choice((0.75, 0.5)), "bias": b.rng.choice((1.0, 2.0))}, 1


def mvn(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4, dtypes=["float32"])
    r = len(x.shape)
    return [x], ({"axes": sorted(b.rng.sample(range(r), b.rng.randint(1, r)))} if b.rng.random() < 0.7 else {}), 1


def clip(b, op, schema, x):
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    lo, hi = sorted((b.rng.uniform(-2, 1), b.rng.uniform(-1, 2)))
    if not x.dtype.startswith("float"):
        lo, hi = int(lo) - 1, int(hi) + 1
    ins = [x]
    np_t = x_np(x)
    if b.rng.random() < 0.8:
        ins.append(b.const(np.array(lo).astype(np_t)) if b.rng.random() < 0.8 else "")
        if b.rng.random() < 0.8:
            ins.append(b.const(np.array(hi).astype(np_t)))
    while ins and ins[-1] == "":
        ins.pop()
    return ins, {}, 1


def where(b, op, schema, x):
    import difftest_lib as lib
    if x is not None and x.dtype == "bool":
        cond = x
        dt = lib.pick_dtype(b.rng, dtypes_of(b, op, schema, 1) or ["float32"])
        return [cond, b.fresh(broadcast_of(b.rng, cond.shape), dt), b.fresh(broadcast_of(b.rng, cond.shape), dt)], {}, 1
    val = first(b, op, schema, x, 0, 4, dtypes=["float32", "int64"])
    cond = b.fresh(broadcast_of(b.rng, val.shape), "bool")
    other = b.fresh(broadcast_of(b.rng, val.shape), val.dtype)
    ins = [cond, val, other] if b.rng.random() < 0.5 else [cond, other, val]
    return ins, {}, 1


def cast(b, op, schema, x):
    import difftest_lib as lib
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    to = lib.pick_dtype(b.rng, ["float32", "int64", "bool", "float16", "int32", "float64"])
    if op == "CastLike":
        return [x, b.const(np.zeros((1,), dtype=lib.NP_DTYPE[to]))], {}, 1
    return [x], {"to": lib.ONNX_ELEM[to]}, 1


def topk(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    r = len(x.shape)
    axis = b.rng.randint(-r, r - 1)
    k = b.rng.randint(0 if b.rng.random() < 0.05 else 1, x.shape[axis])
    return [x, b.const(np.array([k], dtype=np.int64))], \
        {"axis": axis, "largest": b.rng.choice((0, 1)), "sorted": 1}, 2


EINSUMS = ("ij,jk->ik", "bij,bjk->bik", "ij->ji", "ii->i", "ij->", "i,i->", "ij,ij->ij", "bhqd,bhkd->bhqk",
           "ij,j->i", "ijk->kji", "i,j->ij")


def einsum(b, op, schema, x):
    eq = b.rng.choice(EINSUMS)
    lhs = eq.split("->")[0].split(",")
    size = {c: b.rng.randint(1, 4) for c in set("".join(lhs))}
    ins = [b.fresh(tuple(size[c] for c in term), "float32") for term in lhs]
    return ins, {"equation": eq}, 1


def mod(b, op, schema, x):
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    floaty = x.dtype.startswith("float")
    return [x, b.fresh(broadcast_of(b.rng, x.shape), x.dtype, "nonzero")], \
        {"fmod": 1 if floaty else b.rng.choice((0, 1))}, 1


def div(b, op, schema, x):
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    # The divisor is always fresh and away from zero: a computed one near zero turns a last-bit difference (or
    # the sign of a zero) into an infinity of either sign.
    return [x, b.fresh(broadcast_of(b.rng, x.shape), x.dtype, "nonzero")], {}, 1


def pow_(b, op, schema, x):
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    e = b.fresh(broadcast_of(b.rng, x.shape), "float32" if x.dtype.startswith("float") else x.dtype, "positive")
    return [x, e], {}, 1


def bitshift(b, op, schema, x):
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    return [x, b.fresh(broadcast_of(b.rng, x.shape), x.dtype, "positive")], \
        {"direction": b.rng.choice(("LEFT", "RIGHT"))}, 1


def shape_op(b, op, schema, x):
    x = first(b, op, schema, x, 0, 4)
    if x is None:
        return None
    attrs = {}
    if has_attr(schema, "start") and b.rng.random() < 0.5:
        r = len(x.shape)
        attrs["start"] = b.rng.randint(-r - 1, r + 1)
        if b.rng.random() < 0.5:
            attrs["end"] = b.rng.randint(-r - 1, r + 1)
    return [x], attrs, 1


def resize(b, op, schema, x):
    if op == "Upsample" or schema.since_version < 13:
        return None
    x = first(b, op, schema, x, 3, 4, dtypes=["float32"])
    r = len(x.shape)
    mode = b.rng.choice(("nearest", "linear"))
    attrs = {"mode": mode}
    if mode == "nearest":
        attrs["nearest_mode"] = b.rng.choice(("round_prefer_floor", "floor", "ceil", "round_prefer_ceil"))
    attrs["coordinate_transformation_mode"] = b.rng.choice(("half_pixel", "asymmetric", "align_corners",
                                                            "pytorch_half_pixel"))
    if b.rng.random() < 0.5:
        scales = [1.0, 1.0] + [b.rng.choice((0.5, 1.0, 2.0, 3.0)) for _ in range(r - 2)]
        return [x, "", b.const(np.array(scales, dtype=np.float32))], attrs, 1
    sizes = list(x.shape[:2]) + [b.rng.randint(1, 7) for _ in range(r - 2)]
    return [x, "", "", b.const(np.array(sizes, dtype=np.int64))], attrs, 1


def softmax_ce(b, op, schema, x):
    x = first(b, op, schema, x, 2, 4, dtypes=["float32"])
    n, c = x.shape[0], x.shape[1]
    labels = indices(b, (n,) + tuple(x.shape[2:]), c) % c
    ins = [x, b.fresh_indices(labels)]
    if b.rng.random() < 0.3:
        ins.append(b.fresh((c,), "float32", "positive"))
    return ins, {"reduction": b.rng.choice(("mean", "sum", "none"))}, 1


def prelu(b, op, schema, x):
    x = first(b, op, schema, x, 1, 4)
    if x is None:
        return None
    slope = broadcast_of(b.rng, x.shape) if b.rng.random() < 0.5 else (x.shape[1],) + (1,) * (len(x.shape) - 2) \
        if len(x.shape) >= 2 else (1,)
    return [x, b.fresh(tuple(slope), x.dtype)], {}, 1


def global_pool(b, op, schema, x):
    x = first(b, op, schema, x, 3, 5)
    return None if x is None else ([x], {}, 1)


RECIPES = {"GlobalAveragePool": global_pool, "GlobalMaxPool": global_pool, "GlobalLpPool": global_pool,
           "Transpose": transpose, "Reshape": reshape, "Flatten": flatten, "Squeeze": squeeze,
           "Unsqueeze": unsqueeze, "Concat": concat, "Split": split, "Slice": slice_, "Gather": gather,
           "GatherElements": gather_elements, "GatherND": gather_nd, "ScatterElements": scatter_elements,
           "ScatterND": scatter_nd, "Expand": expand, "Tile": tile, "Pad": pad, "Trilu": trilu, "MatMul": matmul,
           "Gemm": gemm, "Conv": conv, "ConvTranspose": conv, "MaxPool": pool, "AveragePool": pool, "LpPool": pool,
           "BatchNormalization": batch_norm, "InstanceNormalization": instance_norm,
           "LayerNormalization": layer_norm, "LRN": lrn, "MeanVarianceNormalization": mvn, "Clip": clip,
           "Where": where, "Cast": cast, "CastLike": cast, "TopK": topk, "Einsum": einsum, "Mod": mod, "Div": div,
           "Pow": pow_, "BitShift": bitshift, "Shape": shape_op, "Resize": resize, "Upsample": resize,
           "SoftmaxCrossEntropyLoss": softmax_ce, "PRelu": prelu, "ArgMax": arg_reduce, "ArgMin": arg_reduce,
           "Softmax": axis_op, "LogSoftmax": axis_op, "Hardmax": axis_op, "CumSum": cumsum}
for _r in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
           "ReduceLogSumExp", "ReduceSumSquare"):
    RECIPES[_r] = reduce

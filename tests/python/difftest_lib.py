"""Differential testing against ONNX Runtime: random small ONNX graphs from memplan's op registry.

The op list comes from `memplan ops --json` (ONNX-domain ops with a shape rule and a CPU kernel, the dtypes of
input 0 that kernel accepts); inputs, attributes and type constraints from onnx's own schemas
(onnx.defs.get_schema). A graph is a chain of 1-6 ops, each taking an earlier op's output (or a fresh input) as
its first input. Structured ops have a recipe (difftest_recipes.py) that picks legal attributes and shapes of
the other inputs; every other op gets the generic recipe (all inputs of one shape, or broadcast, attributes
from the schema's defaults or a small random value), so an op registered later is generated without an edit
here. onnx's shape inference screens each node; ONNX Runtime is the judge of validity (a graph it refuses
is skipped). Everything is drawn from random.Random(seed): a seed is a graph.
"""
import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import difftest_recipes as recipes

OPSETS = (13, 17, 18, 21)
NP_DTYPE = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
            "int32": np.int32, "bool": np.bool_, "uint8": np.uint8}
ONNX_ELEM = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "float64": TensorProto.DOUBLE,
             "int64": TensorProto.INT64, "int32": TensorProto.INT32, "bool": TensorProto.BOOL,
             "uint8": TensorProto.UINT8}
NPY_INPUT_DTYPES = {"float32", "float64", "int64", "int32", "bool", "uint8"}
ELEM_NAME = {v: k for k, v in ONNX_ELEM.items()}
TYPE_STR = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
            "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(bool)": "bool", "tensor(uint8)": "uint8"}
# Preference when an op allows several dtypes: float32 most often, then the others memplan's CPU runs.
DTYPE_WEIGHTS = {"float32": 10, "int64": 2, "bool": 1, "float16": 1, "int32": 1, "float64": 1}


def registry_ops(ops_json):
    """{op type: [dtypes of input 0 the CPU kernel accepts]} for the ONNX-domain ops memplan can run."""
    out = {}
    for o in ops_json:
        if o.get("domain") != "ai.onnx" or not o.get("cpu") or o.get("shape") != "rule" or not o.get("deterministic"):
            continue
        if o["op"] in recipes.EXCLUDED:
            continue
        dts = o.get("cpu_dtypes") or ["float32"]
        out[o["op"]] = [d for d in dts if d in NP_DTYPE]
    return out


class Tensor:
    def __init__(self, name, shape, dtype, exact, low=False, special=False):
        self.name, self.shape, self.dtype = name, tuple(shape), dtype
        self.special = special  # may hold NaN or an infinity
        self.low = low or dtype == "float16"  # computed through float16 somewhere: compared at its precision
        self.exact = exact  # its values are exactly what any correct implementation computes (no rounding order)


def schema_for(op, opset):
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


def allowed_dtypes(schema, type_str):
    """The memplan dtypes a schema's type variable (or a literal type) allows."""
    if type_str in TYPE_STR:
        return [TYPE_STR[type_str]]
    for tc in schema.type_constraints:
        if tc.type_param_str == type_str:
            return [TYPE_STR[t] for t in tc.allowed_type_strs if t in TYPE_STR]
    return []


def pick_dtype(rng, candidates):
    c = [d for d in candidates if d in DTYPE_WEIGHTS]
    if not c:
        return None
    return rng.choices(c, weights=[DTYPE_WEIGHTS[d] for d in c])[0]


def random_values(rng, shape, dtype, kind="any"):
    """Values a graph input holds: small, away from the points where rounding flips a discontinuous op."""
    nprng = np.random.default_rng(rng.getrandbits(32))
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if dtype == "bool":
        v = nprng.random(n) < 0.5
    elif dtype in ("int64", "int32", "uint8"):
        lo = 1 if kind in ("nonzero", "positive") else (0 if dtype == "uint8" else -4)
        v = nprng.integers(lo, 5, n)
        if kind == "nonzero" and dtype != "uint8":
            v = v * nprng.choice([-1, 1], n)
    else:
        if kind == "positive":
            v = nprng.uniform(0.1, 3.0, n)
        elif kind == "nonzero":
            v = nprng.uniform(0.25, 3.0, n) * nprng.choice([-1.0, 1.0], n)
        elif kind == "unit":
            v = nprng.uniform(-0.95, 0.95, n)
        else:
            v = nprng.uniform(-3.0, 3.0, n)
            # Quarter steps: no value sits next to an integer or another value by one rounding.
            if nprng.random() < 0.3:
                v = np.round(v * 4) / 4 + 0.125
            if kind == "special" and nprng.random() < 0.1:
                # A few NaNs, infinities and zeros of either sign: every op must propagate them as ORT does.
                k = nprng.integers(0, n, max(1, n // 8))
                v[k] = nprng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0], k.size)
    return np.asarray(v).astype(NP_DTYPE[dtype]).reshape(shape)


class GraphBuilder:
    """One random graph: nodes, graph inputs with their values, initializers, outputs."""

    def __init__(self, seed, ops):
        self.seed = seed
        self.rng = random.Random(seed)
        self.opset = OPSETS[seed % len(OPSETS)]
        self.ops = ops
        self.nodes, self.inputs, self.inits, self.tensors = [], [], [], []
        self.values = {}  # graph input name -> numpy value
        self.consumed = set()
        self.info = {}  # op output name -> (shape, dtype) as onnx infers it
        self.low = set()  # op outputs computed through float16
        self.counter = 0

    def fresh_name(self, what):
        self.counter += 1
        return f"{what}{self.counter}"

    def fresh(self, shape, dtype, kind="any", as_input=None):
        """A new tensor of random values: a graph input, or an initializer (memplan may fold what it feeds)."""
        name = self.fresh_name("in" if as_input is not False else "w")
        if as_input is None:
            as_input = not self.inputs or self.rng.random() < 0.7
        if dtype not in NPY_INPUT_DTYPES:
            as_input = False  # `memplan run` reads no .npy of this dtype: an initializer carries it
        # Graph inputs may hold NaN, infinities and zeros of either sign (weights stay finite: ORT folds them
        # into other forms, BatchNormalization's scale and shift, where inf - inf appears that the op never computes).
        value = random_values(self.rng, shape, dtype, "special" if kind == "any" and as_input else kind)
        special = bool(value.dtype.kind == "f" and not np.all(np.isfinite(value)))
        if as_input:
            self.inputs.append(helper.make_tensor_value_info(name, ONNX_ELEM[dtype], list(shape)))
            self.values[name] = value
        else:
            self.inits.append(numpy_helper.from_array(value, name))
        return Tensor(name, shape, dtype, True, special=special)

    def fresh_indices(self, array):
        """Given index values as a graph input or an initializer."""
        name = self.fresh_name("idx")
        array = np.asarray(array)
        if self.rng.random() < 0.5:
            self.inputs.append(helper.make_tensor_value_info(name, ONNX_ELEM[str(array.dtype)], list(array.shape)))
            self.values[name] = array
        else:
            self.inits.append(numpy_helper.from_array(array, name))
        return Tensor(name, array.shape, str(array.dtype), True)

    def const(self, array):
        """An initializer of given values (shapes, axes, pads: what shape inference reads)."""
        name = self.fresh_name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def pick_chained(self, want_exact=False):
        pool = [t for t in self.tensors if t.exact or not want_exact]
        if not pool or self.rng.random() < 0.2:
            return None
        # The newest outputs first: chains, not fans.
        return pool[-1] if self.rng.random() < 0.6 else self.rng.choice(pool)

    def add_op(self, op):
        schema = schema_for(op, self.opset)
        if schema is None or schema.deprecated:
            return False
        recipe = recipes.RECIPES.get(op, recipes.generic)
        x = self.pick_chained(want_exact=op in recipes.DISCONTINUOUS)
        try:
            node_spec = recipe(self, op, schema, x)
        except (ValueError, IndexError):
            return False  # x does not fit the recipe (an empty dim, say): draw another op
        if node_spec is None:
            return False
        ins, attrs, n_out = node_spec
        special = any(i.special for i in ins if isinstance(i, Tensor))
        if special and op in recipes.NAN_UNSPECIFIED:
            return False
        outs = [self.fresh_name("t") for _ in range(n_out)]
        node = helper.make_node(op, [i if isinstance(i, str) else i.name for i in ins], outs,
                                name=f"n{len(self.nodes)}_{op}", **attrs)
        shapes = self.infer(node, ins)
        if shapes is None:
            return False
        self.nodes.append(node)
        exact = op in recipes.EXACT and all(i.exact for i in ins if isinstance(i, Tensor))
        low = any(i.low for i in ins if isinstance(i, Tensor))
        for i in ins:
            if isinstance(i, Tensor):
                self.consumed.add(i.name)
        for name, (shape, dtype) in zip(outs, shapes):
            self.info[name] = (shape, dtype)
            if low or dtype == "float16":
                self.low.add(name)
            if dtype not in NP_DTYPE or any(d > 64 for d in shape) or int(np.prod(shape, dtype=np.int64)) > 4096:
                return True  # still a valid node; its output is not chained
            self.tensors.append(Tensor(name, shape, dtype, exact, low, special))
        return True

    def infer(self, node, ins):
        """Output (shape, dtype) of one node by onnx's shape inference; None when it refuses or cannot tell."""
        vis, inits = [], []
        known = {t.name: t for t in self.tensors}
        for i in ins:
            if isinstance(i, Tensor):
                vis.append(helper.make_tensor_value_info(i.name, ONNX_ELEM[i.dtype], list(i.shape)))
        names = {v.name for v in vis}
        for init in self.inits:
            if init.name in node.input and init.name not in names:
                inits.append(init)
        del known
        g = helper.make_graph([node], "probe", vis, [helper.make_tensor_value_info(o, 0, None) for o in node.output],
                              initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=8)
        try:
            m = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        except Exception:
            return None
        out = {}
        for vi in list(m.graph.output) + list(m.graph.value_info):
            tt = vi.type.tensor_type
            if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
                continue
            out[vi.name] = ([d.dim_value for d in tt.shape.dim], ELEM_NAME.get(tt.elem_type, str(tt.elem_type)))
        if any(o not in out for o in node.output if o):
            return None
        return [out[o] for o in node.output]

    def value_info(self, name):
        shape, dtype = self.info[name]
        return helper.make_tensor_value_info(name, ONNX_ELEM.get(dtype, 0) or onnx.helper.np_dtype_to_tensor_dtype(
            np.dtype(dtype)), list(shape))

    def build(self, n_ops=None):
        n = n_ops if n_ops is not None else self.rng.randint(1, 6)
        names = sorted(self.ops)
        tries = 0
        while len(self.nodes) < n and tries < 8 * n:
            tries += 1
            self.add_op(self.rng.choice(names))
        if not self.nodes or not self.inputs:
            return None  # `memplan run` needs one graph input at least
        return self.model()

    def output_names(self):
        """Graph outputs: every output no op reads, and some intermediate ones too."""
        produced = [o for nd in self.nodes for o in nd.output if o]
        return [o for o in produced if o not in self.consumed or self.rng.random() < 0.2]

    def model(self, outputs=None, all_outputs=False):
        produced = [o for nd in self.nodes for o in nd.output if o]
        if outputs is None:
            outputs = self.output_names()
            # `memplan run` writes no float16 .npy: such an output is compared through a Cast to float32.
            for k, o in enumerate(outputs):
                shape, dtype = self.info[o]
                if dtype == "float16":
                    name = o + "_f32"
                    self.nodes.append(helper.make_node("Cast", [o], [name], name=f"n{len(self.nodes)}_Cast",
                                                       to=TensorProto.FLOAT))
                    self.info[name] = (shape, "float32")
                    self.low.add(name)
                    outputs[k] = name
            produced = [o for nd in self.nodes for o in nd.output if o]
        outs = [self.value_info(o) for o in (produced if all_outputs else outputs)]
        g = helper.make_graph(self.nodes, f"difftest_{self.seed}", self.inputs, outs, initializer=self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=8)


def make_graph(seed, ops):
    """(model with its outputs, model with every tensor an output, {input: value}) or None."""
    b = GraphBuilder(seed, ops)
    m = b.build()
    if m is None:
        return None
    outs = [o.name for o in m.graph.output]
    return b, m, outs

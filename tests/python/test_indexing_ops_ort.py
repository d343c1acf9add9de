# N-d indexing, resampling, arg reductions and the remaining elementwise ops against ONNX Runtime: one model per seed
# and group (random shapes, indices and attributes), run by `memplan run` (planned and --unshared) and by ORT's CPU
# provider; outputs must agree (floats within rtol 1e-5 / atol 1e-5, integers and bools exactly).
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    import onnxruntime as ort
except ImportError:
    print("skip: numpy, onnx or onnxruntime is not installed")
    sys.exit(77)


class Model:
    def __init__(self, rng):
        self.rng, self.nodes, self.inputs, self.outputs, self.n, self.declared = rng, [], [], [], 0, {}

    def input(self, name, a):
        self.inputs.append((name, a))
        return name

    def const(self, a):
        self.n += 1
        name = f"c{self.n}"
        a = np.asarray(a)
        self.nodes.append(helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name + "_v", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape, a.flatten().tolist())))
        return name

    def add(self, op, ins, n_out=1, like=None, **attrs):
        """`like`: an input whose type the output has (for ops onnx's shape inference fails on)."""
        self.n += 1
        outs = [f"{op.lower()}_{self.n}_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, **attrs))
        self.outputs += outs
        if like is not None:
            a = dict(self.inputs)[like]
            self.declared[outs[0]] = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        return outs[0]


def distinct_tuples(rng, dims, count):
    """`count` distinct index tuples into `dims`, some written as negative indices."""
    flat = rng.choice(int(np.prod(dims)), size=count, replace=False)
    t = np.stack(np.unravel_index(flat, dims), axis=-1).astype(np.int64)
    neg = rng.random(t.shape) < 0.3
    return np.where(neg, t - np.array(dims, np.int64), t)


def indexing(m):
    rng = m.rng
    x = m.input("x", rng.standard_normal([4, 3, 5]).astype(np.float32))
    ids = m.input("ids", rng.integers(0, 100, size=[4, 6]).astype(np.int64))
    # ScatterND: slices and elements, int64 data (a decoder's shifted ids), every reduction.
    t = distinct_tuples(rng, [4, 3], 5)
    m.add("ScatterND", [x, m.const(t), m.const(rng.standard_normal([5, 5]).astype(np.float32))])
    t = distinct_tuples(rng, [4, 6], 7)
    m.add("ScatterND", [ids, m.const(t), m.const(rng.integers(-9, 9, size=[7]).astype(np.int64))])
    for r in ("add", "mul", "max", "min"):
        t = rng.integers(-4, 4, size=[6, 1]).astype(np.int64)  # repeated rows reduce
        m.add("ScatterND", [x, m.const(t), m.const(rng.standard_normal([6, 3, 5]).astype(np.float32))], reduction=r)
        m.add("ScatterND", [ids, m.const(rng.integers(-4, 4, size=[5, 2]).astype(np.int64)),
                            m.const(rng.integers(-9, 9, size=[5]).astype(np.int64))], reduction=r)
    # ScatterElements along each axis: no repeated target without a reduction.
    for axis in (0, -1):
        a = axis % 3
        dims = [4, 3, 5]
        upd = [2, 3, 4] if a == 0 else [4, 2, 3]
        idx = np.stack([rng.permutation(dims[a])[:upd[a]] for _ in range(int(np.prod(upd)) // upd[a])], axis=-1)
        idx = np.moveaxis(idx.reshape([upd[a]] + [u for k, u in enumerate(upd) if k != a]), 0, a).astype(np.int64)
        m.add("ScatterElements", [x, m.const(idx - (rng.random(idx.shape) < 0.3) * dims[a]), m.const(rng.standard_normal(upd).astype(np.float32))], axis=axis)
    for r in ("add", "mul", "max", "min"):
        idx = rng.integers(-5, 5, size=[4, 3, 3]).astype(np.int64)
        m.add("ScatterElements", [x, m.const(idx), m.const(rng.standard_normal([4, 3, 3]).astype(np.float32))], axis=2, reduction=r)
    m.add("ScatterElements", [ids, m.const(rng.integers(0, 6, size=[4, 1]).astype(np.int64)), m.const(np.full([4, 1], -100, np.int64))], axis=1)
    # GatherND: whole slices, elements, batch_dims 1 and 2.
    m.add("GatherND", [x, m.const(rng.integers(-4, 4, size=[2, 3, 1]).astype(np.int64))])
    m.add("GatherND", [x, m.const(rng.integers(-3, 3, size=[5, 3]).astype(np.int64))])
    m.add("GatherND", [x, m.const(rng.integers(0, 3, size=[4, 2, 1]).astype(np.int64))], batch_dims=1)
    m.add("GatherND", [x, m.const(rng.integers(0, 5, size=[4, 3, 1]).astype(np.int64))], batch_dims=2)
    m.add("GatherND", [ids, m.const(rng.integers(-6, 6, size=[4, 2, 1]).astype(np.int64))], batch_dims=1)


def resize(m):
    """Resize (opset 19) in each mode; returns the opset."""
    rng = m.rng
    x = m.input("img", rng.standard_normal([2, 3, 7, 9]).astype(np.float32))
    none = m.const(np.zeros([0], np.float32))
    up = m.const(np.array([1, 1, 2.5, 1.6], np.float32))
    # Down by 0.55 (not 0.6): 0.6 on 7 rows puts half_pixel_symmetric's first row exactly on a .5 tie, where the float
    # rounding of the coordinate decides (ONNX Runtime 1.32 picks row 0, memplan's float32/double arithmetic row 1).
    down = m.const(np.array([1, 1, 0.55, 0.45], np.float32))
    sizes = m.const(np.array([2, 3, int(rng.integers(3, 15)), int(rng.integers(3, 15))], np.int64))
    for coord in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"):
        for nearest in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            m.add("Resize", [x, none, up], coordinate_transformation_mode=coord, nearest_mode=nearest)
            m.add("Resize", [x, none, down], coordinate_transformation_mode=coord, nearest_mode=nearest)
        if coord != "tf_half_pixel_for_nn":
            for scales in (up, down):
                m.add("Resize", [x, none, scales], mode="linear", coordinate_transformation_mode=coord)
            m.add("Resize", [x, none, "", sizes], mode="linear", coordinate_transformation_mode=coord)
    m.add("Resize", [x, none, "", sizes], coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    m.add("Resize", [x, m.const(np.array([0.1, -0.2, 0.8, 1.1], np.float32)), m.const(np.array([1.5, 1.2], np.float32))],
          mode="linear", axes=[2, 3], coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0)
    m.add("Resize", [x, none, "", m.const(np.array([5, 4], np.int64))], axes=[-1, 2], mode="linear")
    v = m.input("vol", rng.standard_normal([1, 2, 3, 4, 5]).astype(np.float32))
    m.add("Resize", [v, none, m.const(np.array([1, 1, 2, 1.5, 0.8], np.float32))], mode="linear")
    u8 = m.input("u8", rng.integers(0, 255, size=[1, 1, 4, 5]).astype(np.uint8))
    m.add("Resize", [u8, none, up], nearest_mode="floor")
    return 19


def upsample(m):
    """Upsample (opset 9), nearest and linear."""
    rng = m.rng
    x = m.input("img", rng.standard_normal([2, 3, 5, 6]).astype(np.float32))
    m.add("Upsample", [x, m.const(np.array([1, 1, 2, 3], np.float32))])
    m.add("Upsample", [x, m.const(np.array([1, 1, 2.5, 1.5], np.float32))], mode="linear")
    return 9


def resize10(m):
    """Resize of opset 10: scales as input 1, asymmetric coordinates."""
    rng = m.rng
    x = m.input("img", rng.standard_normal([1, 2, 5, 6]).astype(np.float32))
    m.add("Resize", [x, m.const(np.array([1, 1, 2, 1.5], np.float32))])
    m.add("Resize", [x, m.const(np.array([1, 1, 0.5, 2], np.float32))], mode="linear")
    return 10


def select(m):
    """ArgMax/ArgMin, TopK, Mod, IsInf, Size, the trigonometric and bitwise ops, Hardmax, MVN, ReduceLogSum."""
    rng = m.rng
    x = m.input("x", rng.standard_normal([4, 5, 6]).astype(np.float32))
    ties = m.input("ties", rng.integers(-3, 3, size=[4, 5, 6]).astype(np.int64))
    for op in ("ArgMax", "ArgMin"):
        for axis in (0, -1):
            for last in (0, 1):
                m.add(op, [ties], axis=axis, keepdims=int(rng.integers(0, 2)), select_last_index=last)
        m.add(op, [x], axis=1)
    for axis in (-1, 1):
        for largest in (0, 1):
            m.add("TopK", [x, m.const(np.array([3], np.int64))], 2, axis=axis, largest=largest)
    m.add("TopK", [ties, m.const(np.array([4], np.int64))], 2, axis=0)  # ties: the lower index first
    a = m.input("a", rng.integers(-20, 20, size=[4, 6]).astype(np.int64))
    b = m.input("b", np.where(rng.random([6]) < 0.5, -1, 1) * rng.integers(1, 7, size=[6]).astype(np.int64))
    m.add("Mod", [a, b])
    m.add("Mod", [a, b], fmod=1)
    m.add("Mod", [x, m.const(np.array(1.5, np.float32))], fmod=1)
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        m.add(op, [a, b])
    m.add("BitwiseNot", [a])
    u = m.input("u", rng.integers(0, 255, size=[8]).astype(np.uint8))
    for d in ("LEFT", "RIGHT"):
        m.add("BitShift", [u, m.const(rng.integers(0, 8, size=[8]).astype(np.uint8))], direction=d)
    inf = m.input("inf", np.array([1.0, np.inf, -np.inf, np.nan, -2.0], np.float32))
    m.add("IsInf", [inf])
    m.add("IsInf", [inf], detect_positive=0)
    m.add("IsInf", [inf], detect_negative=0)
    m.add("Size", [x])
    unit = m.input("unit", (rng.random([3, 4]) * 1.8 - 0.9).astype(np.float32))
    big = m.input("big", (rng.random([3, 4]) * 3 + 1.1).astype(np.float32))
    for op in ("Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Atanh"):
        m.add(op, [unit])
    m.add("Acosh", [big])
    m.add("Hardmax", [x], axis=1)
    m.add("Hardmax", [m.input("tiesf", rng.integers(-3, 3, size=[4, 5, 6]).astype(np.float32))])
    m.add("MeanVarianceNormalization", [m.input("nchw", rng.standard_normal([2, 3, 4, 5]).astype(np.float32))], like="nchw")
    m.add("MeanVarianceNormalization", [x], like="x", axes=[1])
    m.add("ReduceLogSum", [big, m.const(np.array([0], np.int64))], keepdims=0)
    m.add("ReduceLogSum", [big])


def einsum(m):
    """Einsum equations that lower to Transpose/Reshape/Unsqueeze/MatMul/Squeeze (several contracted letters merged
    into one axis) or ReduceSum."""
    rng = m.rng
    r = lambda *d: m.input(f"e{len(m.inputs)}", rng.standard_normal(d).astype(np.float32))
    q, k = r(2, 3, 4, 5), r(2, 3, 6, 5)
    m.add("Einsum", [q, k], equation="bhqd,bhkd->bhqk")
    m.add("Einsum", [r(4), r(5)], equation="i,j->ij")
    m.add("Einsum", [r(3, 4, 5), r(3, 5, 2)], equation="bij,bjk->bik")
    m.add("Einsum", [r(2, 3, 4), r(4, 5)], equation="bnd,dk->bnk")
    m.add("Einsum", [r(2, 3, 4), r(4, 5)], equation="bnd,dk->kbn")
    m.add("Einsum", [r(3, 4), r(3, 4)], equation="ij,ij->")
    m.add("Einsum", [r(3, 4), r(3, 4)], equation="ij,ij->i")
    m.add("Einsum", [r(3, 4, 5)], equation="ijk->kij")
    m.add("Einsum", [r(3, 4, 5)], equation="ijk->j")
    m.add("Einsum", [r(3, 4)], equation="ij")
    m.add("Einsum", [r(2, 3), r(3, 4)], equation="ij,jk")
    m.add("Einsum", [r(2, 3, 4), r(3, 4, 5)], equation="aij,ijb->ab")
    m.add("Einsum", [r(2, 3), r(4, 3)], equation="bi,ci->bc")
    m.add("Einsum", [r(2, 6), r(3, 5)], equation="ai,bj->abij")
    m.add("Einsum", [r(2, 3, 4), r(3)], equation="bhd,h->bd")
    m.add("Einsum", [r(5, 2, 3, 4), r(6, 3, 4)], equation="ibnd,hnd->ibh")
    m.add("Einsum", [r(2, 3, 4), r(4, 2, 3)], equation="bkj,jbk->b")


GROUPS = {"indexing": indexing, "resize": resize, "upsample": upsample, "resize10": resize10, "select": select, "einsum": einsum}


def save_model(path, m, opset):
    g = helper.make_graph(m.nodes, "ops",
                          [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in m.inputs],
                          [helper.make_value_info(o, onnx.TypeProto()) for o in m.outputs])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    # MeanVarianceNormalization's function body fails onnx's strict inference (onnx 1.23): its output is declared.
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=not m.declared)
    types = {vi.name: vi.type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    types.update(m.declared)
    for o in model.graph.output:
        o.type.CopyFrom(types[o.name])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def run_memplan(memplan, path, m, tmp, *extra):
    cmd = [memplan, "run", path, *extra]
    for n, a in m.inputs:
        p = os.path.join(tmp, n + ".npy")
        np.save(p, a)
        cmd += ["--input", p]
    paths = [os.path.join(tmp, o + ".npy") for o in m.outputs]
    for p in paths:
        cmd += ["--output", p]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr}")
    return [np.load(p) for p in paths]


def same(g, w):
    if g.shape != w.shape or g.dtype != w.dtype:
        return False
    if np.issubdtype(w.dtype, np.floating):
        return np.allclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)
    return np.array_equal(g, w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=False)
    a = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for group, build in GROUPS.items():
            for seed in range(2):
                m = Model(np.random.default_rng(seed))
                opset = build(m) or 18
                path = os.path.join(tmp, f"{group}{seed}.onnx")
                save_model(path, m, opset)
                so = ort.SessionOptions()
                so.log_severity_level = 3  # tf_half_pixel_for_nn's deprecation warning
                want = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(m.outputs, dict(m.inputs))
                got = run_memplan(a.memplan, path, m, tmp)
                unshared = run_memplan(a.memplan, path, m, tmp, "--unshared")
                for name, g, w, us in zip(m.outputs, got, want, unshared):
                    if not (same(g, w) and g.tobytes() == us.tobytes()):
                        diff = float(np.max(np.abs(g.astype(np.float64) - w))) if g.shape == w.shape and g.size else float("nan")
                        print(f"{group} seed {seed} {name}: {g.dtype}{list(g.shape)} vs {w.dtype}{list(w.shape)}, max |diff| {diff:.3g} FAIL")
                        failures += 1
                print(f"{group} seed {seed}: {len(m.outputs)} outputs compared with ONNX Runtime")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

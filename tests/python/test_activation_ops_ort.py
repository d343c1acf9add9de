# Issue 16's activations and elementwise ops against ONNX Runtime: one model per seed holding every op (random
# attributes, random inputs, broadcasting operands), run by `memplan run` (planned and --unshared) and by ORT's CPU
# provider; outputs must agree within rtol 1e-5 / atol 1e-5. Random ops are checked for shape, range and moments.
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

F = TensorProto.FLOAT
SHAPE = [3, 4, 5]


def build(rng):
    """The graph's nodes, inputs (name, array) and outputs (name, shape or None)."""
    nodes, inputs, outputs = [], [], []
    x = (rng.standard_normal(SHAPE) * 2).astype(np.float32)
    inputs.append(("x", x))
    inputs.append(("pos", (rng.random(SHAPE) + 0.1).astype(np.float32)))
    inputs.append(("row", rng.standard_normal([5]).astype(np.float32)))
    inputs.append(("col", rng.standard_normal([4, 1]).astype(np.float32)))
    inputs.append(("slope", (rng.random([4, 1]) * 0.5).astype(np.float32)))
    u = lambda: float(rng.uniform(0.1, 2.0))

    def add(op, ins, **attrs):
        out = f"{op.lower()}_{len(outputs)}"
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        outputs.append(out)

    add("Elu", ["x"], alpha=u())
    add("Selu", ["x"], alpha=u(), gamma=u())
    add("Celu", ["x"], alpha=u())
    add("LeakyRelu", ["x"], alpha=u())
    add("ThresholdedRelu", ["x"], alpha=u())
    add("HardSigmoid", ["x"], alpha=u() / 4, beta=u() / 4)
    add("HardSwish", ["x"])
    add("Softplus", ["x"])
    add("Softsign", ["x"])
    add("Shrink", ["x"], lambd=u(), bias=u() / 2)
    add("Mish", ["x"])
    add("PRelu", ["x", "slope"])
    for op in ("Reciprocal", "Sqrt", "Log"):
        add(op, ["pos"])
    for op in ("Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Erf"):
        add(op, ["x"])
    add("Pow", ["pos", "x"])
    for op in ("Sum", "Mean", "Max", "Min"):
        add(op, ["x", "row", "col"])
    add("Max", ["x", "pos"])
    add("Min", ["x"])
    axis = int(rng.integers(-3, 3))
    nodes.append(helper.make_node("Constant", [], ["axis"], value=helper.make_tensor("axis_v", TensorProto.INT64, [], [axis])))
    add("CumSum", ["x", "axis"], exclusive=int(rng.integers(0, 2)), reverse=int(rng.integers(0, 2)))
    idx = rng.integers(-5, 5, size=[3, 4, 2]).astype(np.int64)
    nodes.append(helper.make_node("Constant", [], ["idx"], value=helper.make_tensor("idx_v", TensorProto.INT64, idx.shape, idx.flatten())))
    add("GatherElements", ["x", "idx"], axis=2)
    ids = rng.integers(-3, 3, size=[2, 2]).astype(np.int64)
    nodes.append(helper.make_node("Constant", [], ["ids"], value=helper.make_tensor("ids_v", TensorProto.INT64, ids.shape, ids.flatten())))
    add("Gather", ["x", "ids"], axis=0)
    axes = sorted(set(int(a) for a in rng.integers(-3, 3, size=2)))
    nodes.append(helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("axes_v", TensorProto.INT64, [len(axes)], axes)))
    for op in ("ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceMax"):
        add(op, ["x", "axes"], keepdims=int(rng.integers(0, 2)))
    nodes.append(helper.make_node("Constant", [], ["k"], value=helper.make_tensor("k_v", TensorProto.INT64, [], [int(rng.integers(-2, 3))])))
    add("Trilu", ["x", "k"], upper=int(rng.integers(0, 2)))
    nodes.append(helper.make_node("Shape", ["pos"], ["pos_shape"]))
    add("Expand", ["row", "pos_shape"])
    return nodes, inputs, outputs


def random_nodes():
    return [helper.make_node("RandomNormalLike", ["big"], ["normal"], mean=1.5, scale=2.0, seed=3.0),
            helper.make_node("RandomUniformLike", ["big"], ["uniform"], low=-1.0, high=3.0, seed=4.0),
            helper.make_node("Bernoulli", ["probs"], ["bern"], seed=5.0),
            helper.make_node("RandomNormal", [], ["normal2"], shape=[50, 40], seed=6.0)]


def save_model(path, nodes, inputs, outputs):
    g = helper.make_graph(nodes, "ops",
                          [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs],
                          [helper.make_tensor_value_info(o, F, None) for o in outputs])  # typed; shapes inferred below
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)  # the outputs' shapes, and a check of the model
    onnx.save(m, path)


def run_memplan(memplan, path, inputs, outputs, tmp, *extra):
    cmd = [memplan, "run", path, *extra]
    for n, a in inputs:
        p = os.path.join(tmp, n + ".npy")
        np.save(p, a)
        cmd += ["--input", p]
    paths = [os.path.join(tmp, o + ".npy") for o in outputs]
    for p in paths:
        cmd += ["--output", p]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr}")
    return [np.load(p) for p in paths]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(4):
            rng = np.random.default_rng(seed)
            nodes, inputs, outputs = build(rng)
            path = os.path.join(tmp, f"ops{seed}.onnx")
            save_model(path, nodes, inputs, outputs)
            want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(outputs, dict(inputs))
            got = run_memplan(a.memplan, path, inputs, outputs, tmp)
            unshared = run_memplan(a.memplan, path, inputs, outputs, tmp, "--unshared")
            for name, g, w, us in zip(outputs, got, want, unshared):
                ok = g.shape == w.shape and np.allclose(g, w, rtol=1e-5, atol=1e-5) and g.tobytes() == us.tobytes()
                if not ok:
                    diff = float(np.max(np.abs(g.astype(np.float64) - w))) if g.shape == w.shape else float("nan")
                    print(f"seed {seed} {name}: shape {g.shape} vs {w.shape}, max |diff| {diff:.3g} FAIL")
                    failures += 1
            print(f"seed {seed}: {len(outputs)} outputs compared with ONNX Runtime")
        # Random ops: shapes, ranges and moments (the values are memplan's own counter-based draws).
        big = np.zeros([200, 100], np.float32)
        probs = np.full([200, 100], 0.3, np.float32)
        outs = ["normal", "uniform", "bern", "normal2"]
        path = os.path.join(tmp, "random.onnx")
        save_model(path, random_nodes(), [("big", big), ("probs", probs)], outs)
        normal, uniform, bern, normal2 = run_memplan(a.memplan, path, [("big", big), ("probs", probs)], outs, tmp)
        again = run_memplan(a.memplan, path, [("big", big), ("probs", probs)], outs, tmp, "--unshared")
        checks = {
            "shapes": normal.shape == big.shape and uniform.shape == big.shape and bern.shape == big.shape and normal2.shape == (50, 40),
            "normal moments": abs(normal.mean() - 1.5) < 0.05 and abs(normal.std() - 2.0) < 0.05,
            "uniform range": uniform.min() >= -1.0 and uniform.max() < 3.0 and abs(uniform.mean() - 1.0) < 0.05,
            "bernoulli rate": set(np.unique(bern)) <= {0.0, 1.0} and abs(bern.mean() - 0.3) < 0.02,
            "reproducible": all(x.tobytes() == y.tobytes() for x, y in zip([normal, uniform, bern, normal2], again)),
        }
        for k, v in checks.items():
            print(f"random ops {k}: {'ok' if v else 'FAIL'}")
            failures += not v
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

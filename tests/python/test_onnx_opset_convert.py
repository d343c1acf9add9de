# Legacy opsets through libonnx's version converter (analysis/onnx_opset.cpp): a model below opset 7 runs after
# conversion with a warning; what the converter cannot convert is refused (exit 5) naming the op and the opsets,
# never a crash; opset 0 and opsets beyond what libonnx knows are refused before the converter runs.
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx  # noqa: F401
    from onnx import TensorProto, helper
except ImportError:
    print("skip: numpy or onnx is not installed")
    sys.exit(77)

UNSUPPORTED, INVALID = 5, 6


def model(nodes, inputs, outputs, opset, ir=3, inits=()):
    g = helper.make_graph(nodes, "legacy", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m.SerializeToString()


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def run(memplan, tmp, name, data, x=None):
    path = os.path.join(tmp, name + ".onnx")
    with open(path, "wb") as f:
        f.write(data)
    cmd = [memplan, "run", path]
    if x is not None:
        np.save(os.path.join(tmp, "x.npy"), x)
        cmd += ["--input", os.path.join(tmp, "x.npy"), "--output", os.path.join(tmp, "y.npy")]
    else:
        cmd = [memplan, "analyze", path]
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples")
    a = ap.parse_args()
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        # Converted and run: Relu at opset 1, and Add with the opset-6 broadcast attribute (its adapter needs
        # the operands' shapes: ONNX shape inference fills them).
        b = helper.make_tensor("b", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
        ok_cases = [
            ("relu opset 1", model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])], 1),
             np.maximum(x, 0)),
            ("add broadcast opset 6", model([helper.make_node("Add", ["x", "b"], ["y"], broadcast=1)],
                                            [vi("x", [2, 3])], [vi("y", [2, 3])], 6, inits=[b]), x + np.array([1, 2, 3], np.float32)),
        ]
        for name, data, want in ok_cases:
            r = run(a.memplan, tmp, "ok", data, x)
            got = np.load(os.path.join(tmp, "y.npy")) if r.returncode == 0 else None
            warned = "converted to opset 7" in r.stderr and "libonnx" in r.stderr
            good = r.returncode == 0 and warned and got is not None and np.allclose(got, want)
            print(f"{name:28s} exit {r.returncode} warned {warned} {'ok' if good else 'FAIL: ' + r.stderr.strip()}")
            if not good:
                failures.append(name)
        # Refused: (name, model, exit code, words the message must hold).
        refused = [
            ("unknown op at opset 1", model([helper.make_node("Foo", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)], 1),
             UNSUPPORTED, ["Foo", "opset 1"]),
            ("no adapter (Pad 1 -> 2)", model([helper.make_node("Pad", ["x"], ["y"], paddings=[0, 1])], [vi("x", [2])],
                                              [vi("y", None)], 1), UNSUPPORTED, ["Pad", "opset 1", "opset 7"]),
            ("node against its schema", model([helper.make_node("GRU", ["x", "x", "x"], ["y"], hidden_size=3)],
                                              [vi("x", [2])], [vi("y", None)], 1), UNSUPPORTED, ["GRU", "schema"]),
            ("wrong input count", model([helper.make_node("Add", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)], 5),
             UNSUPPORTED, ["Add", "opset 5"]),
            ("opset 0", model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)], 0),
             UNSUPPORTED, ["opset 0"]),
            ("opset 10^6", model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)], 1000000),
             UNSUPPORTED, ["1000000", "converter"]),
            ("opset 24", model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)], 24, ir=10),
             UNSUPPORTED, ["opset 24"]),
            ("dangling read at opset 1", model([helper.make_node("Relu", ["zz"], ["y"])], [vi("x", [2])], [vi("y", None)], 1),
             INVALID, ["zz"]),
            ("produced twice at opset 1", model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["y"])],
                                                [vi("x", [2])], [vi("y", None)], 1), INVALID, ["'y'"]),
            ("If at opset 1", model([helper.make_node("If", ["x"], ["y"], then_branch=helper.make_graph([], "t", [], []),
                                                      else_branch=helper.make_graph([], "e", [], []))],
                                    [vi("x", [1])], [vi("y", None)], 1), INVALID, ["graph 'e'", "no outputs"]),
        ]
        for name, data, code, words in refused:
            r = run(a.memplan, tmp, "bad", data)
            msg = r.stderr.strip()
            good = r.returncode == code and all(w in msg for w in words) and "memplan: error" in msg
            print(f"{name:28s} exit {r.returncode} {'ok' if good else 'FAIL'}: {msg[:200]}")
            if not good:
                failures.append(name)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

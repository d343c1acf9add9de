#!/usr/bin/env python3
"""Backward rules taken from an op's expression (HardSwish, HardSigmoid, Mish, Elu, Softplus, variadic Min) under
bf16 and fp16 autocast: the step plans and trains, and its first weight gradients equal the float32 step's within
16-bit tolerance (the expression computed in float32, stored in 16 bits). Exit 77 when the command, the samples or
onnx are missing."""
import os
import subprocess
import sys
import tempfile

from viz_testlib import check, cli_args, failures

A = cli_args()
if A is None:
    sys.exit(77)
try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    print("skip: onnx or numpy missing")
    sys.exit(77)


def net(act):
    rng = np.random.RandomState(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), *act, helper.make_node("MatMul", ["a", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 10])],
                          [numpy_helper.from_array((rng.randn(32, 64) * 0.3).astype(np.float32), "w"),
                           numpy_helper.from_array((rng.randn(64, 10) * 0.3).astype(np.float32), "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = {
    "HardSwish": [helper.make_node("HardSwish", ["h"], ["a"])],
    "HardSigmoid": [helper.make_node("HardSigmoid", ["h"], ["a"])],
    "Mish": [helper.make_node("Mish", ["h"], ["a"])],
    "Elu": [helper.make_node("Elu", ["h"], ["a"])],
    "Softplus": [helper.make_node("Softplus", ["h"], ["a"])],
    "Min": [helper.make_node("Neg", ["h"], ["n"]), helper.make_node("Min", ["h", "n"], ["a"])],
}


def grads(path, precision, out):
    r = subprocess.run([A.memplan, "train", path, "--loss", "mse", "--precision", precision, "--steps", "1",
                        "--save-grads", out], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"{path} {precision}: train exit {r.returncode} {r.stderr.strip()[-300:]}")
    k, gs = 0, []
    while os.path.exists(os.path.join(out, f"grad_{k}.npy")):
        gs.append(np.load(os.path.join(out, f"grad_{k}.npy")).astype(np.float64))
        k += 1
    return gs


with tempfile.TemporaryDirectory() as d:
    for name, act in CASES.items():
        path = os.path.join(d, f"{name}.onnx")
        onnx.save(net(act), path)
        ref = grads(path, "fp32", os.path.join(d, f"{name}_fp32"))
        for precision, tol in (("bf16", 0.06), ("fp16", 0.01)):
            got = grads(path, precision, os.path.join(d, f"{name}_{precision}"))
            if not check(len(got) == len(ref) == 2, f"{name} {precision}: {len(got)} gradients, fp32 {len(ref)}"):
                continue
            for k, (a, b) in enumerate(zip(ref, got)):
                rel = float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-12))
                check(rel <= tol, f"{name} {precision}: gradient {k} differs from float32's by {rel:.3g} (tolerance {tol})")
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
